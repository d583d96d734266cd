# shellcheck shell=bash
# Shell functions the benchmark scripts share (sourced; each script defines `log` first).

# stop_pid PID NAME [TENTHS]: SIGTERM, up to TENTHS tenths of a second (default 100) for the
# process to go, then SIGKILL; reaped either way (its exit status is not the caller's).
stop_pid() {
  local pid=$1 i
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < ${3:-100}; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$2 (pid $pid) did not stop on SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
  return 0
}

# cleanup_on_exit: the script's `cleanup` runs when it exits, on an error or a signal too.
cleanup_on_exit() {
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
}

# pg_initdb DIR LOG: a new cluster in DIR (made and owned by the user `as_pg` runs as), trust
# authentication, no fsync at initdb; initdb's output to LOG.
pg_initdb() {
  mkdir -p "$1"
  if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$1"; fi
  chmod 700 "$1"
  as_pg "$PG_BIN/initdb" -D "$1" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >"$2" 2>&1 ||
    die "initdb failed; see $2"
}

# ---- added for bench/gather.sh; nothing above uses these ------------------------------------------

# find_pg_bin: PG_BIN, the directory of PostgreSQL's server binaries: $PG_BINDIR when set, else
# the newest /usr/lib/postgresql/*/bin holding initdb.
find_pg_bin() {
  PG_BIN=${PG_BINDIR:-}
  [ -n "$PG_BIN" ] ||
    PG_BIN=$(find /usr/lib/postgresql -maxdepth 3 -name initdb -path '*/bin/*' 2>/dev/null | sort -V | tail -n1 | xargs -r dirname)
  if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/pg_ctl" ] || [ ! -x "$PG_BIN/pgbench" ]; then
    die "PostgreSQL's binaries (initdb, pg_ctl, pgbench) not found (set PG_BINDIR)"
  fi
}

# free_tcp_ports N: N distinct TCP ports of 127.0.0.1 free now, on one line.
free_tcp_ports() {
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
print(*[s.bind(("127.0.0.1", 0)) or s.getsockname()[1] for s in socks])' "$1"
}

# wait_listening PORT NAME PID LOG: returns once 127.0.0.1:PORT accepts; dies when PID exits
# first (pointing at LOG) or after 30 s.
wait_listening() {
  local i
  for ((i = 0; i < 300; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || die "$2 exited at start; see $4"
    sleep 0.1
  done
  die "$2 is not listening on port $1 after 30 s"
}

# require_own_session PID NAME: dies unless PID leads its own session (a pooler started with
# setsid; why it matters: bench/README.md).
require_own_session() {
  [ "$(ps -o sid= -p "$1" | tr -d ' ')" = "$1" ] || die "$2 (pid $1) does not lead its own session"
}

# proc_cpu_ticks PID: utime + stime of the whole process (all its threads, those gone too), in
# clock ticks (getconf CLK_TCK).
proc_cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# proc_cpu_ns PID: the time the process's live threads have spent on a CPU
# (/proc/PID/task/*/schedstat, nanoseconds); empty when the kernel does not keep it.
proc_cpu_ns() {
  { cat /proc/"$1"/task/*/schedstat 2>/dev/null || true; } | awk '{ s += $1; n++ } END { if (n) printf "%.0f\n", s }'
}

# corral_binary DEST: the pgcorral binary to measure, copied to DEST (so that another build in the
# tree cannot swap it mid-run): $BENCH_CORRAL_BIN when set, else this checkout's
# `cargo build --release -p pgcorral` (CARGO_TARGET_DIR honoured). CORRAL_REV names it:
# $BENCH_CORRAL_REV, else the path, or the checkout's commit (marked when crates/ is modified).
corral_binary() {
  local root target
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [ -n "${BENCH_CORRAL_BIN:-}" ]; then
    [ -x "$BENCH_CORRAL_BIN" ] || die "BENCH_CORRAL_BIN: $BENCH_CORRAL_BIN is not an executable"
    cp "$BENCH_CORRAL_BIN" "$1"
    CORRAL_REV=${BENCH_CORRAL_REV:-binary $BENCH_CORRAL_BIN}
  else
    log "cargo build --release -p pgcorral"
    (cd "$root" && cargo build --release -p pgcorral) || die "cargo build failed"
    target=$(cd "$root" && cargo metadata --format-version 1 --no-deps |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
    cp "$target/release/pgcorral" "$1"
    CORRAL_REV=$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
    [ -z "$(cd "$root" && git status --porcelain -- crates 2>/dev/null)" ] || CORRAL_REV="$CORRAL_REV (sources modified)"
  fi
}

# ---- added for bench/cache.sh (bench/gather.sh uses it too) ---------------------------------------

# start_plain_bouncer PG_PORT BOUNCER_PORT POOL_SIZE MAX_CLIENTS: PgBouncer ($PGBOUNCER, run as
# `as_pg` would, in a session of its own) in transaction mode with trust, one database `plain`
# (PostgreSQL's `postgres` on 127.0.0.1:PG_PORT), its files in $WORK/pgbouncer and its log in
# $WORK/pgbouncer.log; sets BOUNCER_PID once it listens.
start_plain_bouncer() {
  mkdir -p "$WORK/pgbouncer"
  echo '"postgres" ""' >"$WORK/pgbouncer/userlist.txt"
  cat >"$WORK/pgbouncer/pgbouncer.ini" <<EOF
[databases]
plain = host=127.0.0.1 port=$1 dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $2
unix_socket_dir =
auth_type = trust
auth_file = $WORK/pgbouncer/userlist.txt
pool_mode = transaction
default_pool_size = $3
max_client_conn = $4
server_tls_sslmode = disable
logfile = $WORK/pgbouncer.log
pidfile = $WORK/pgbouncer/pgbouncer.pid
log_connections = 0
log_disconnections = 0
log_stats = 0
EOF
  touch "$WORK/pgbouncer.log"
  [ "$(id -u)" -ne 0 ] || chown -R postgres:postgres "$WORK/pgbouncer" "$WORK/pgbouncer.log"
  setsid "${AS_PG[@]}" "$PGBOUNCER" "$WORK/pgbouncer/pgbouncer.ini" >"$WORK/pgbouncer.stdout" 2>&1 &
  BOUNCER_PID=$!
  wait_listening "$2" pgbouncer "$BOUNCER_PID" "$WORK/pgbouncer.log"
  require_own_session "$BOUNCER_PID" pgbouncer
}

# ---- added for bench/breakdown.sh (bench/cache.sh and bench/sharding.sh use them too) -------------

# find_psql_and_bouncer: PSQL (beside PG_BIN's server binaries, else on the PATH), PGBOUNCER and
# BOUNCER_VERSION; dies when either is missing.
find_psql_and_bouncer() {
  PSQL=$PG_BIN/psql
  [ -x "$PSQL" ] || PSQL=$(command -v psql) || die "psql not found"
  PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
  [ -x "$PGBOUNCER" ] || die "pgbouncer not found (apt-get install pgbouncer)"
  BOUNCER_VERSION=$("$PGBOUNCER" --version | sed -n '1s/^PgBouncer \([0-9.]*\).*/\1/p')
}

# stop_and_clean PIDS...: the end of a script's `cleanup` (called with its exit status in $rc):
# stops each "pid name" pair given (`stop_pid`), stops the PostgreSQL in $PG_DATA if set, removes
# its data, and keeps $WORK on a failure or with KEEP=1; then exits with $rc.
stop_and_clean() {
  local p
  for p in "$@"; do
    stop_pid "${p% *}" "${p##* }"
  done
  [ -z "$PG_DATA" ] || as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w -t 30 stop >/dev/null 2>&1
  rm -rf "$WORK/data"
  if [ "$rc" -ne 0 ] || [ "$KEEP" = 1 ]; then log "logs kept in $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}

# corral_general PORT POOL_SIZE MAX_CLIENTS: the [general] lines of a benchmark's pgcorral
# (127.0.0.1:PORT, transaction mode, trust, log level warn), for the script to go on from.
corral_general() {
  cat <<TOML
[general]
listen_addr = "127.0.0.1"
listen_port = $1
pool_mode = "transaction"
default_pool_size = $2
max_client_conn = $3
auth_type = "trust"
log_level = "warn"
TOML
}
