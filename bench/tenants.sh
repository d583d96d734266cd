#!/usr/bin/env bash
# Tenant scale: idle clients spread over many tenants on one pgcorral node (bytes per idle client,
# goal at most 1 KiB), and logins per second for a storm of first clients of new tenants. See
# bench/README.md (*Tenant scale*).
#
#   bench/tenants.sh                                          # ~2 minutes after the build here
#   TENANTS_OUT=1 bench/tenants.sh                            # report to bench/results/DATE-tenants-scale.md
#   TENANTS_IDLE=2000 TENANTS_STORM=50 TENANTS_STORM_ROUNDS=1 bench/tenants.sh   # a quick check
#
# What it does, in one run with one pgcorral binary and its own PostgreSQL:
#
#  1. initdb's a PostgreSQL in a temporary directory (as the `postgres` OS user when root; fsync
#     off; max_connections for every pool it may hold) with database `bench` and role `bench`
#     (a random password, SCRAM-SHA-256), and database `corral_registry` for the tenant registry.
#  2. starts pgcorral with `tenant_registry`, `api_listen` and `api_jwt_secret`, plus a file
#     database `bench` (`[databases.bench]`, `[users.bench]`) on the same server, and creates
#     through the REST API (PUT /api/tenants/tI, a HS256 bearer token made here) tenants t0 to
#     t(N + STORM × ROUNDS − 1), each with user `bench` (its password, TENANTS_POOL_SIZE servers,
#     transaction mode) on database `bench`. Clients log in as `bench.tI`.
#  3. memory, tenants: on a fresh pgcorral (no tenant loaded), VmRSS before; with one client per
#     tenant (N); with TENANTS_IDLE idle clients spread evenly over the N tenants, logged in by
#     as many `examples/idle_clients` processes as the open-files limit needs. Bytes per idle
#     client = (with all − before) ÷ clients.
#  4. memory, file database: the same on another fresh pgcorral, every client to database `bench`
#     of the file as user `bench`.
#  5. login storm, on another fresh pgcorral: for each of TENANTS_STORM_ROUNDS sets of
#     TENANTS_STORM tenants never loaded, one client per tenant, TENANTS_CONCURRENCY logins in
#     flight (first logins: each loads its tenant from the registry, derives its password's
#     SCRAM secret and opens its pool's first server); then TENANTS_STORM_REPEAT batches of the
#     same logins again (tenants loaded), then as many batches of as many logins to the file
#     database. Logins per second = clients ÷ the time idle_clients reports from its start to
#     the last login's ReadyForQuery (summed over the batches).
#  6. writes a markdown report to stdout, and to a file when TENANTS_OUT is set.
#
# Knobs (environment):
#   TENANTS_N               tenants of the memory part (100)
#   TENANTS_IDLE            idle clients (default: 100,000, or fewer when the open-files limit
#                           leaves pgcorral less room, rounded down to a multiple of TENANTS_N)
#   TENANTS_STORM           new tenants per storm round (200)
#   TENANTS_STORM_ROUNDS    storm rounds, each with its own new tenants (3)
#   TENANTS_STORM_REPEAT    batches of TENANTS_STORM logins to the loaded tenants, and to the
#                           file database, per round (5): a batch takes a tenth of a second, and
#                           idle_clients reports hundredths
#   TENANTS_POOL_SIZE       pool size of each tenant user and of the file database (2)
#   TENANTS_CONCURRENCY     logins in flight per idle_clients process (64)
#   TENANTS_IDLE_PER_PROC   most idle clients per idle_clients process (default: what its
#                           open-files limit and, with TENANTS_LISTEN=all, the ephemeral port
#                           range allow)
#   TENANTS_LISTEN          auto (default): pgcorral listens on 127.0.0.1, or on all addresses
#                           ("*") when the clients need more source ports than one destination
#                           has, each idle_clients process then connecting to its own loopback
#                           address 127.0.0.K; loopback: never "*" (the run stops instead);
#                           all: always "*"
#   TENANTS_SETTLE          seconds between the last login and reading VmRSS (3)
#   TENANTS_OUT             1: write the report to $BENCH_RESULTS_DIR/YYYY-MM-DD-tenants-scale.md
#                           (-HHMM added if it exists); any other value: that file
#   BENCH_RESULTS_DIR       bench/results
#   TENANTS_NOTE            a line quoted at the top of the report
#   BENCH_CORRAL_BIN, BENCH_IDLE_BIN   prebuilt pgcorral and idle_clients binaries, instead of
#                           `cargo build --release -p pgcorral --bin pgcorral --example idle_clients`
#                           (CARGO_TARGET_DIR honoured); BENCH_CORRAL_REV names them in the report
#   PG_BINDIR               PostgreSQL's binaries (/usr/lib/postgresql/15/bin, else the newest)
#   KEEP=1                  keep the work directory (logs, configs) after a successful run
#
# Open files: pgcorral holds one descriptor per client, and the idle_clients processes one per
# connection each. The script raises the soft limit to the hard one; it raises the hard limit
# only if it may (CAP_SYS_RESOURCE), and otherwise lowers the default TENANTS_IDLE to fit, and
# says so in the report. Everything it starts is stopped on exit, whatever the reason.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
RESULTS=${BENCH_RESULTS_DIR:-$BENCH_DIR/results}

TENANTS_N=${TENANTS_N:-100}
TENANTS_IDLE=${TENANTS_IDLE:-}
TENANTS_STORM=${TENANTS_STORM:-200}
TENANTS_STORM_ROUNDS=${TENANTS_STORM_ROUNDS:-3}
TENANTS_STORM_REPEAT=${TENANTS_STORM_REPEAT:-5}
TENANTS_POOL_SIZE=${TENANTS_POOL_SIZE:-2}
TENANTS_CONCURRENCY=${TENANTS_CONCURRENCY:-64}
TENANTS_IDLE_PER_PROC=${TENANTS_IDLE_PER_PROC:-}
TENANTS_LISTEN=${TENANTS_LISTEN:-auto}
TENANTS_SETTLE=${TENANTS_SETTLE:-3}
TENANTS_OUT=${TENANTS_OUT:-}
TENANTS_NOTE=${TENANTS_NOTE:-}
KEEP=${KEEP:-0}
GOAL_IDLE=100000 # the issue's figure: 100,000 idle clients across 100 tenants
GOAL_BYTES=1024  # at most 1 KiB per idle client

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}
is_pos() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
fmt() { # a whole number with thousands separators
  awk -v v="$1" 'BEGIN { s = sprintf("%d", v < 0 ? -v : v); n = length(s); o = ""
    for (i = 1; i <= n; i++) { o = o substr(s, i, 1); if ((n - i) % 3 == 0 && i < n) o = o "," }
    print (v < 0 ? "-" : "") o }'
}

for v in TENANTS_N TENANTS_STORM TENANTS_STORM_ROUNDS TENANTS_STORM_REPEAT TENANTS_POOL_SIZE TENANTS_CONCURRENCY; do
  is_pos "${!v}" || die "$v must be a positive whole number, not '${!v}'"
done
[[ $TENANTS_SETTLE =~ ^[0-9]+$ ]] || die "TENANTS_SETTLE must be a whole number of seconds"
for v in TENANTS_IDLE TENANTS_IDLE_PER_PROC; do
  [ -z "${!v}" ] || is_pos "${!v}" || die "$v must be a positive whole number, not '${!v}'"
done
case $TENANTS_LISTEN in auto | loopback | all) ;; *) die "TENANTS_LISTEN must be auto, loopback or all, not '$TENANTS_LISTEN'" ;; esac
[ -z "$TENANTS_IDLE" ] || [ $((TENANTS_IDLE % TENANTS_N)) -eq 0 ] ||
  die "TENANTS_IDLE ($TENANTS_IDLE) must be a multiple of TENANTS_N ($TENANTS_N): each tenant gets as many clients"
[ -z "$TENANTS_IDLE" ] || [ "$TENANTS_IDLE" -ge "$TENANTS_N" ] || die "TENANTS_IDLE must be at least TENANTS_N"

# One benchmark at a time: two on the same cores make both sets of rates wrong (a run of this
# script beside another one, on 2026-11-28, halved both runs' login rates). The lock is bench/run.sh's,
# on the bench/ directory itself, and goes away with this process.
exec {LOCK_FD}<"$BENCH_DIR"
flock -n "$LOCK_FD" || die "another benchmark (bench/run.sh or bench/tenants.sh) is running: it holds a lock on $BENCH_DIR"

# ---- tools ----------------------------------------------------------------------------------------
PG_BIN=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
if [ -z "${PG_BINDIR:-}" ] && [ ! -x "$PG_BIN/initdb" ]; then
  PG_BIN=$(find /usr/lib/postgresql -maxdepth 3 -name initdb -path '*/bin/*' 2>/dev/null | sort -V | tail -n1 | xargs -r dirname)
fi
if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/pg_ctl" ]; then die "PostgreSQL binaries not found (set PG_BINDIR)"; fi
PSQL=$PG_BIN/psql
[ -x "$PSQL" ] || PSQL=$(command -v psql) || die "psql not found"
PYTHON=$(command -v python3) || die "python3 is needed (free ports, the API's token, the JSON answers)"
command -v curl >/dev/null || die "curl is needed (the tenant API)"
CLK_TCK=$(getconf CLK_TCK)

AS_PG=() # PostgreSQL refuses to run as root
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' OS user to run PostgreSQL"
  # setpriv execs (no fork, no PAM): rlimits are kept.
  AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
fi
as_pg() { "${AS_PG[@]}" "$@"; }
chown_pg() { if [ "$(id -u)" -eq 0 ]; then chown -R postgres:postgres "$@"; fi; }

# ---- limits: open files, source ports ------------------------------------------------------------
# pgcorral holds, besides its clients, its servers (one or two per pool in use: the memory part
# has TENANTS_N pools, the storm STORM × ROUNDS tenant pools) and a few dozen of its own
# (listeners, event loops, registry, log).
STORM_TENANTS=$((TENANTS_STORM * TENANTS_STORM_ROUNDS))
MEM_SERVERS=$(((TENANTS_N + 1) * TENANTS_POOL_SIZE))
CORRAL_FD_EXTRA=$((MEM_SERVERS + 250))
HARD_BEFORE=$(ulimit -Hn)
[ "$HARD_BEFORE" = unlimited ] && HARD_BEFORE=$(cat /proc/sys/fs/nr_open)
want_idle=${TENANTS_IDLE:-$GOAL_IDLE}
need=$((want_idle + CORRAL_FD_EXTRA))
if [ "$HARD_BEFORE" -lt "$need" ]; then
  # Only with CAP_SYS_RESOURCE (root in most containers has it; this may fail).
  if ulimit -Hn "$need" 2>/dev/null; then log "open files: hard limit raised from $HARD_BEFORE to $need"; fi
fi
HARD=$(ulimit -Hn)
[ "$HARD" = unlimited ] && HARD=$(cat /proc/sys/fs/nr_open)
ulimit -n "$HARD" # soft = hard, for pgcorral and the idle_clients processes started below
FD_NOTE=""
if [ -z "$TENANTS_IDLE" ]; then
  fit=$(((HARD - CORRAL_FD_EXTRA) / TENANTS_N * TENANTS_N))
  TENANTS_IDLE=$((fit < GOAL_IDLE ? fit : GOAL_IDLE))
  [ "$TENANTS_IDLE" -ge "$TENANTS_N" ] || die "the open-files limit ($HARD) leaves no room for $TENANTS_N tenants' clients"
  if [ "$TENANTS_IDLE" -lt "$GOAL_IDLE" ]; then
    FD_NOTE="The open-files hard limit here is $(fmt "$HARD") (\`ulimit -Hn\`) and could not be raised (no CAP_SYS_RESOURCE), so no process can hold more than about $(fmt "$HARD") sockets: $(fmt "$GOAL_IDLE") idle clients on one pgcorral process cannot be opened on this machine. The run used TENANTS_IDLE = $(fmt "$TENANTS_IDLE") (the hard limit less $CORRAL_FD_EXTRA descriptors for pgcorral's servers and its own, rounded down to a multiple of $TENANTS_N tenants). With a hard limit of $(fmt $((GOAL_IDLE + CORRAL_FD_EXTRA))) or more the same script runs $(fmt "$GOAL_IDLE")."
    log "open files: hard limit $HARD, so TENANTS_IDLE = $TENANTS_IDLE instead of $GOAL_IDLE (see the report's note)"
  fi
elif [ $((TENANTS_IDLE + CORRAL_FD_EXTRA)) -gt "$HARD" ]; then
  die "TENANTS_IDLE=$TENANTS_IDLE needs an open-files limit of $((TENANTS_IDLE + CORRAL_FD_EXTRA)) for pgcorral; the hard limit is $HARD and cannot be raised here (lower TENANTS_IDLE or raise the limit)"
fi
IDLE_PER_TENANT=$((TENANTS_IDLE / TENANTS_N))

# Loopback connections to one address and port each need a source port of their own from
# ip_local_port_range (the kernel shares a port between different destinations only). Beyond
# that, connect() fails with EADDRNOTAVAIL; each idle_clients process can instead connect to an
# address of its own (127.0.0.2, 127.0.0.3, ...: all of 127/8 is loopback) when pgcorral
# listens on all addresses.
read -r PORT_LO PORT_HI </proc/sys/net/ipv4/ip_local_port_range
PORTS=$((PORT_HI - PORT_LO + 1))
PORTS_USABLE=$((PORTS - 1000)) # room for other connections from this host meanwhile
[ "$PORTS_USABLE" -gt "$TENANTS_N" ] || die "ip_local_port_range $PORT_LO-$PORT_HI is too small"
LISTEN_ALL=0
case $TENANTS_LISTEN in
  all) LISTEN_ALL=1 ;;
  auto) [ "$TENANTS_IDLE" -le "$PORTS_USABLE" ] || LISTEN_ALL=1 ;;
  loopback)
    [ "$TENANTS_IDLE" -le "$PORTS_USABLE" ] ||
      die "$TENANTS_IDLE clients to one address and port need more source ports than ip_local_port_range ($PORT_LO-$PORT_HI: $PORTS ports, $PORTS_USABLE usable) has: set TENANTS_LISTEN=auto or all (pgcorral listens on all addresses, each idle_clients process connects to its own 127.0.0.K) or widen net.ipv4.ip_local_port_range"
    ;;
esac
# One idle_clients process holds at most its open-files limit (less its own ~100), and, connecting
# to an address of its own, at most the usable ports.
per_proc_max=$((HARD - 100))
[ "$LISTEN_ALL" -eq 0 ] || per_proc_max=$((per_proc_max < PORTS_USABLE ? per_proc_max : PORTS_USABLE))
if [ -n "$TENANTS_IDLE_PER_PROC" ]; then
  [ "$TENANTS_IDLE_PER_PROC" -le "$per_proc_max" ] || die "TENANTS_IDLE_PER_PROC=$TENANTS_IDLE_PER_PROC is more than one idle_clients process can hold here ($per_proc_max)"
  per_proc_max=$TENANTS_IDLE_PER_PROC
fi
PER_PROC=$((per_proc_max / TENANTS_N * TENANTS_N)) # a multiple of N: each process spreads evenly
[ "$PER_PROC" -ge "$TENANTS_N" ] || die "one idle_clients process can hold $per_proc_max clients, fewer than the $TENANTS_N tenants"
[ "$LISTEN_ALL" -eq 0 ] || [ $(((TENANTS_IDLE + PER_PROC - 1) / PER_PROC + 1)) -le 254 ] || die "more than 254 idle_clients processes would be needed"
if [ -r /proc/sys/net/netfilter/nf_conntrack_max ]; then
  ct_max=$(cat /proc/sys/net/netfilter/nf_conntrack_max)
  [ "$TENANTS_IDLE" -lt $((ct_max - 1000)) ] ||
    log "WARNING: nf_conntrack_max is $ct_max: if connection tracking sees loopback traffic, $TENANTS_IDLE connections may be dropped"
fi

# ---- work directory, cleanup ----------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pgcorral-tenants.XXXXXX")
chmod 755 "$WORK"
mkdir -p "$WORK/logs" "$WORK/runs"
chown_pg "$WORK/logs"
PGDATA=$WORK/pgdata
PG_STARTED=0 CORRAL_PID="" IDLE_FD=""
IDLE_PIDS=() IDLE_OUTS=()

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cleanup() {
  local rc=$? p
  trap - EXIT INT TERM HUP
  set +e
  [ -n "$IDLE_FD" ] && eval "exec $IDLE_FD>&-"
  for p in "${IDLE_PIDS[@]}"; do stop_pid "$p" idle_clients; done
  stop_pid "$CORRAL_PID" pgcorral 150
  if [ "$PG_STARTED" -eq 1 ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 30 stop >/dev/null 2>&1 ||
      as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m immediate -w -t 30 stop >/dev/null 2>&1
  fi
  rm -rf "$PGDATA"
  if [ "$rc" -ne 0 ] || [ "$KEEP" = 1 ]; then log "logs kept in $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
cleanup_on_exit

# ---- other work on the machine --------------------------------------------------------------------
# Builds and tests running beside the run take CPU from its logins. Just before each timed login
# step nothing of the run is working (its clients are idle or gone, pgcorral waits), so how busy
# the machine is then says what else runs: the script reads it (/proc/stat, user + nice + system,
# all CPUs) and reports it beside the figures. (Subtracting the run's own processes' CPU time from
# the machine's during the logins does not work: during a storm of new PostgreSQL backends the
# machine's busy time exceeded the sum of every process's, live and reaped, by nearly half of
# both cores' time.)
machine_ticks() { # → "busy total": user + nice + system, and all but guest (clock ticks, all CPUs)
  awk 'NR == 1 { for (i = 2; i <= 9; i++) t += $i; print $2 + $3 + $4, t; exit }' /proc/stat
}
QUIET=0
quiet_sample() { # seconds → QUIET: the machine's busy share over them, in % of all CPUs
  local a b
  a=$(machine_ticks)
  sleep "$1"
  b=$(machine_ticks)
  QUIET=$(awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); d = y[2] - x[2]
    printf "%.0f", d ? 100 * (y[1] - x[1]) / d : 0 }')
}
START_EPOCH=$(date +%s)
RUN_DATE=$(date +%Y-%m-%d)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
quiet_sample 1 # before anything of the run: what else keeps the machine busy
BUSY_START=$QUIET

# ---- binaries -------------------------------------------------------------------------------------
if [ -n "${BENCH_CORRAL_BIN:-}" ] || [ -n "${BENCH_IDLE_BIN:-}" ]; then
  [ -x "${BENCH_CORRAL_BIN:-}" ] || die "BENCH_CORRAL_BIN ('${BENCH_CORRAL_BIN:-}') is not an executable (give both it and BENCH_IDLE_BIN)"
  [ -x "${BENCH_IDLE_BIN:-}" ] || die "BENCH_IDLE_BIN ('${BENCH_IDLE_BIN:-}') is not an executable (give both it and BENCH_CORRAL_BIN)"
  cp "$BENCH_CORRAL_BIN" "$WORK/pgcorral"
  cp "$BENCH_IDLE_BIN" "$WORK/idle_clients"
  GIT_REV=${BENCH_CORRAL_REV:-"binary $BENCH_CORRAL_BIN"}
else
  log "cargo build --release -p pgcorral --bin pgcorral --example idle_clients"
  (cd "$ROOT" && cargo build --release -p pgcorral --bin pgcorral --example idle_clients) || die "cargo build failed"
  TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  # Private copies: another cargo build in the tree must not swap them during the run.
  cp "$TARGET_DIR/release/pgcorral" "$WORK/pgcorral"
  cp "$TARGET_DIR/release/examples/idle_clients" "$WORK/idle_clients"
  GIT_REV=$(cd "$ROOT" && git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  if [ -n "$(cd "$ROOT" && GIT_OPTIONAL_LOCKS=0 git status --porcelain --untracked-files=no -- crates 2>/dev/null)" ]; then
    GIT_REV="$GIT_REV + uncommitted changes"
  fi
fi
CORRAL=$WORK/pgcorral
IDLE=$WORK/idle_clients

free_ports() { # n → n free TCP ports of 127.0.0.1
  "$PYTHON" -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])' "$1"
}
read -r PG_PORT < <(free_ports 1)
PW=$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')
JWT_SECRET=$("$PYTHON" -c 'import secrets; print(secrets.token_hex(24))')
export PGPASSWORD=$PW # for psql and idle_clients; never on a command line
export PGSSLMODE=disable

# ---- PostgreSQL -----------------------------------------------------------------------------------
# Pools: the memory part's N tenants (and the file database), or the storm's STORM × ROUNDS
# tenants, each up to TENANTS_POOL_SIZE servers, in one pgcorral at a time; plus the registry's
# connections, and room.
PG_MAX_CONNECTIONS=$(((TENANTS_N > STORM_TENANTS ? TENANTS_N : STORM_TENANTS) * TENANTS_POOL_SIZE + TENANTS_POOL_SIZE + 50))
log "PostgreSQL: initdb, port $PG_PORT, max_connections $PG_MAX_CONNECTIONS"
pg_initdb "$PGDATA" "$WORK/logs/initdb.log"
cat >>"$PGDATA/postgresql.conf" <<EOF

# bench/tenants.sh
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = ''
max_connections = $PG_MAX_CONNECTIONS
superuser_reserved_connections = 3
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
password_encryption = 'scram-sha-256'
log_connections = off
log_disconnections = off
EOF
cat >"$PGDATA/pg_hba.conf" <<EOF
# bench/tenants.sh: the harness's superuser (and pgcorral's registry connection) is trusted;
# the tenants' user logs in with SCRAM.
host all postgres 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
EOF
chown_pg "$PGDATA"
as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$WORK/logs/postgresql.log" -w -t 60 start >/dev/null ||
  die "PostgreSQL did not start; see $WORK/logs/postgresql.log"
PG_STARTED=1
# On stdin, so the password is not on a command line.
"$PSQL" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres >/dev/null <<EOF
CREATE ROLE bench LOGIN PASSWORD '$PW';
CREATE DATABASE bench OWNER bench;
CREATE DATABASE corral_registry;
EOF

# ---- pgcorral -------------------------------------------------------------------------------------
MAX_CLIENT_CONN=$((TENANTS_IDLE + 1000))
LISTEN_ADDR=127.0.0.1
[ "$LISTEN_ALL" -eq 1 ] && LISTEN_ADDR="*"
write_corral_toml() { # file port
  cat >"$1" <<EOF
[general]
listen_addr = "$LISTEN_ADDR"
listen_port = $2
unix_socket_dir = ""
pool_mode = "transaction"
default_pool_size = $TENANTS_POOL_SIZE
max_client_conn = $MAX_CLIENT_CONN
auth_type = "scram-sha-256"
workers = 0
server_tls_sslmode = "disable"
log_level = "warn"
stats_users = ["bench"]
tenant_registry = "host=127.0.0.1 port=$PG_PORT user=postgres dbname=corral_registry"
api_listen = "127.0.0.1:$API_PORT"
api_jwt_secret = "$JWT_SECRET"

[users.bench]
password = "$PW"

[databases.bench]
host = "127.0.0.1"
port = $PG_PORT
dbname = "bench"
pool_size = $TENANTS_POOL_SIZE
pool_mode = "transaction"
EOF
  chmod 600 "$1"
}
wait_port() { # port name pid
  local i
  for ((i = 0; i < 300; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$3" 2>/dev/null || die "$2 exited at start; see $WORK/logs/$2.log"
    sleep 0.1
  done
  die "$2 is not listening on port $1 after 30 s"
}
check_corral() { # name: still running, and the pid is pgcorral itself (RSS and CPU are read from /proc/PID)
  kill -0 "$CORRAL_PID" 2>/dev/null || {
    tail -n 20 "$WORK/logs/$1.log" >&2
    die "pgcorral ($1) died; see $WORK/logs/$1.log"
  }
  [ "$(cat "/proc/$CORRAL_PID/comm")" = pgcorral ] || die "pid $CORRAL_PID is not pgcorral"
}
CORRAL_PORT="" API_PORT=""
start_corral() { # name: a fresh pgcorral on ports of its own (no TIME_WAIT left by an earlier phase)
  read -r CORRAL_PORT API_PORT < <(free_ports 2)
  write_corral_toml "$WORK/$1.toml" "$CORRAL_PORT"
  "$CORRAL" --config "$WORK/$1.toml" --check >"$WORK/logs/$1-check.log" 2>&1 || die "pgcorral refuses $WORK/$1.toml: $(tail -n 3 "$WORK/logs/$1-check.log")"
  log "pgcorral ($1): port $CORRAL_PORT, API 127.0.0.1:$API_PORT"
  # A session of its own, as a service would run (see bench/README.md); setsid execs in place,
  # so $! is pgcorral's pid.
  setsid env -u RUST_LOG "$CORRAL" --config "$WORK/$1.toml" >"$WORK/logs/$1.log" 2>&1 &
  CORRAL_PID=$!
  wait_port "$CORRAL_PORT" "$1" "$CORRAL_PID"
  wait_port "$API_PORT" "$1" "$CORRAL_PID"
  check_corral "$1"
}
stop_corral() {
  stop_pid "$CORRAL_PID" pgcorral 150
  CORRAL_PID=""
}
vmrss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$CORRAL_PID/status"; }
cpu_ticks() { # utime + stime of pgcorral, all threads, in clock ticks
  local line rest
  read -r line <"/proc/$CORRAL_PID/stat"
  rest=${line##*) }
  # shellcheck disable=SC2086
  set -- $rest
  echo $((${12} + ${13}))
}
# console_sum sql where-column where-value columns → CONSOLE_SUM "rows sum...": a console SHOW
# (as stats user bench) over the rows whose where-column is where-value (all rows when the column
# is ""); the columns (comma-separated) are found by name in the header.
CONSOLE_SUM=""
console_sum() {
  local out
  out=$("$PSQL" -X -A -F'|' -P footer=off -h 127.0.0.1 -p "$CORRAL_PORT" -U bench -d pgbouncer -c "$1" 2>&1) ||
    die "console: $1: $out"
  CONSOLE_SUM=$(awk -F'|' -v wc="$2" -v wv="$3" -v cols="$4" '
    NR == 1 {
      for (i = 1; i <= NF; i++) idx[$i] = i
      n = split(cols, want, ",")
      for (j = 1; j <= n; j++) if (!(want[j] in idx)) { print "no column " want[j]; exit 1 }
      if (wc != "" && !(wc in idx)) { print "no column " wc; exit 1 }
      next
    }
    wc == "" || $idx[wc] == wv { rows++; for (j = 1; j <= n; j++) s[j] += $idx[want[j]] }
    END { printf "%d", rows; for (j = 1; j <= n; j++) printf " %d", s[j]; print "" }' <<<"$out") ||
    die "console: $1: $CONSOLE_SUM"
}
TL_N="" TL_C="" TL_S=""
tenants_loaded() { # SHOW TENANTS → TL_N tenants loaded, TL_C their clients, TL_S their servers
  console_sum "SHOW TENANTS" "" "" cl_active,cl_waiting,sv_open
  local w
  read -r TL_N TL_C w TL_S <<<"$CONSOLE_SUM"
  TL_C=$((TL_C + w))
}

# ---- the tenants, through the API -----------------------------------------------------------------
# HS256 JWT; the secret is passed in the environment, the token kept in a file for curl (-H @file),
# so neither appears on a command line.
AUTH_HEADER=$WORK/api-auth-header
JWT_SECRET=$JWT_SECRET "$PYTHON" -c '
import base64, hashlib, hmac, json, os, time
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
claims = b64(json.dumps({"role": "bench", "exp": int(time.time()) + 86400}).encode())
sig = b64(hmac.new(os.environ["JWT_SECRET"].encode(), f"{head}.{claims}".encode(), hashlib.sha256).digest())
print(f"Authorization: Bearer {head}.{claims}.{sig}")' >"$AUTH_HEADER"
chmod 600 "$AUTH_HEADER"
API_ANSWER=$WORK/runs/api-answer
API_STATUS=""
api() { # method path [body: the request's body is stdin] → API_STATUS; the answer's body in $API_ANSWER
  local data=()
  [ "${3:-}" = body ] && data=(--data-binary @-)
  API_STATUS=$(curl -sS -o "$API_ANSWER" -w '%{http_code}' -X "$1" -H @"$AUTH_HEADER" -H 'Content-Type: application/json' \
    --max-time 30 "${data[@]}" "http://127.0.0.1:$API_PORT$2" 2>"$WORK/runs/api-curl.err") || API_STATUS="000 ($(cat "$WORK/runs/api-curl.err"))"
}
tenant_body() {
  printf '{"tenant": {"db_host": "127.0.0.1", "db_port": %d, "db_database": "bench", "default_pool_size": %d, "require_user": true, "users": [{"db_user": "bench", "db_password": "%s", "pool_size": %d, "mode_type": "transaction", "max_clients": %d}]}}' \
    "$PG_PORT" "$TENANTS_POOL_SIZE" "$PW" "$TENANTS_POOL_SIZE" $((IDLE_PER_TENANT + 100))
}

start_corral setup
TOTAL_TENANTS=$((TENANTS_N + STORM_TENANTS))
log "creating $TOTAL_TENANTS tenants (t0 to t$((TOTAL_TENANTS - 1))) through PUT /api/tenants/ID"
t0=$(date +%s.%N)
for ((i = 0; i < TOTAL_TENANTS; i++)); do
  api PUT "/api/tenants/t$i" body < <(tenant_body)
  [ "$API_STATUS" = 201 ] || die "PUT /api/tenants/t$i answered $API_STATUS: $(head -c 600 "$API_ANSWER")"
done
t1=$(date +%s.%N)
CREATE_RATE=$(awk -v n="$TOTAL_TENANTS" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }')
last=t$((TOTAL_TENANTS - 1))
api GET "/api/tenants/$last"
[ "$API_STATUS" = 200 ] || die "GET /api/tenants/$last answered $API_STATUS: $(head -c 600 "$API_ANSWER")"
grep -q "\"external_id\": *\"$last\"" "$API_ANSWER" || die "GET /api/tenants/$last: unexpected answer: $(head -c 600 "$API_ANSWER")"
if grep -qF "$PW" "$API_ANSWER"; then die "the API returned a tenant's password"; fi
log "  $TOTAL_TENANTS tenants created, $CREATE_RATE per second (one curl per request)"
# A tenant's client and a file client each reach database bench as role bench.
got=$("$PSQL" -X -At -h 127.0.0.1 -p "$CORRAL_PORT" -U bench.t0 -d bench -c "SELECT current_user || '@' || current_database()" 2>&1) ||
  die "login as bench.t0 failed: $got"
[ "$got" = bench@bench ] || die "bench.t0: unexpected answer: $got"
got=$("$PSQL" -X -At -h 127.0.0.1 -p "$CORRAL_PORT" -U bench -d bench -c "SELECT current_user || '@' || current_database()" 2>&1) ||
  die "login to the file database failed: $got"
[ "$got" = bench@bench ] || die "file database: unexpected answer: $got"
got=$("$PSQL" -X -At -h 127.0.0.1 -p "$CORRAL_PORT" -U bench.nosuch -d bench -c "SELECT 1" 2>&1) && die "a tenant that does not exist was let in"
case $got in *'tenant "nosuch" does not exist'*) ;; *) die "unknown tenant: unexpected answer: $got" ;; esac
tenants_loaded
[ "$TL_N" = 1 ] || die "after one tenant login, SHOW TENANTS lists $TL_N tenants (expected 1: tenants load at their first client)"
stop_corral

# ---- idle clients ---------------------------------------------------------------------------------
# One fifo for all idle_clients processes of a phase: each reads its stdin from it, and the
# script holds its only write end; closing it is every process's end of file.
open_idle_fifo() {
  rm -f "$WORK/idle.stdin"
  mkfifo "$WORK/idle.stdin"
  exec {IDLE_FD}<>"$WORK/idle.stdin"
}
IDLE_SEQ=0 IDLE_LOGIN_S="" IDLE_OUT=""
start_idle() { # name count host [idle_clients args...] → waits for its `ready`; IDLE_LOGIN_S
  local name=$1 count=$2 host=$3 pid i limit
  shift 3
  IDLE_SEQ=$((IDLE_SEQ + 1))
  IDLE_OUT=$WORK/runs/$IDLE_SEQ-$name.out
  "$IDLE" --host "$host" --port "$CORRAL_PORT" --db bench --count "$count" --concurrency "$TENANTS_CONCURRENCY" "$@" \
    <"$WORK/idle.stdin" >"$IDLE_OUT" 2>&1 {IDLE_FD}>&- &
  pid=$!
  IDLE_PIDS+=("$pid")
  IDLE_OUTS+=("$IDLE_OUT")
  limit=$((600 + count / 20)) # tenths of a second: 60 s, plus 5 ms per client
  for ((i = 0; i < limit; i++)); do
    grep -q '^ready' "$IDLE_OUT" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -q '^ready' "$IDLE_OUT"; then
    check_corral "$name"
    die "idle_clients ($name, $count clients to $host:$CORRAL_PORT $*) did not log in all its clients: $(head -c 600 "$IDLE_OUT")"
  fi
  IDLE_LOGIN_S=$(sed -n 's/^ready [0-9]* in \([0-9.]*\)s$/\1/p' "$IDLE_OUT")
}
IDLE_LOST=0
end_idle() { # closes the fifo: every process of the phase ends; IDLE_LOST: connections lost meanwhile
  local k p i rc lost
  [ -n "$IDLE_FD" ] && eval "exec $IDLE_FD>&-"
  IDLE_FD=""
  IDLE_LOST=0
  for k in "${!IDLE_PIDS[@]}"; do
    p=${IDLE_PIDS[k]}
    for ((i = 0; i < 600; i++)); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$p" 2>/dev/null; then
      log "  idle_clients (pid $p) did not exit at end of input; killing it"
      kill -KILL "$p" 2>/dev/null || true
    fi
    rc=0
    wait "$p" 2>/dev/null || rc=$?
    if [ "$rc" -eq 3 ]; then
      lost=$(sed -n 's/^lost \([0-9]*\)$/\1/p' "${IDLE_OUTS[k]}")
      IDLE_LOST=$((IDLE_LOST + ${lost:-0}))
    elif [ "$rc" -ne 0 ] && [ "$rc" -ne 137 ]; then
      log "  idle_clients (pid $p) exited with status $rc"
    fi
  done
  IDLE_PIDS=() IDLE_OUTS=()
  rm -f "$WORK/idle.stdin"
}
SETTLED_RSS=0
settle() { # → SETTLED_RSS, pgcorral's VmRSS in kB TENANTS_SETTLE seconds from now; QUIET meanwhile
  quiet_sample "$TENANTS_SETTLE"
  SETTLED_RSS=$(vmrss_kb)
}

# memory_phase name kind: RSS before, with one client per tenant (or N file clients), with all.
# Sets M_BEFORE M_FIRST M_ALL (kB), M_LOGIN_S (login seconds, all processes), M_PROCS, M_LOADED,
# M_CLIENTS_SEEN, M_SERVERS (SHOW TENANTS; file: SHOW POOLS), M_LOST.
memory_phase() {
  local name=$1 kind=$2 left count k=0 host args=() q0 q1
  start_corral "$name"
  tenants_loaded
  M_LOADED=$TL_N
  [ "$M_LOADED" = 0 ] || die "$name: a fresh pgcorral has $M_LOADED tenants loaded already"
  settle
  M_BEFORE=$SETTLED_RSS q0=$QUIET
  [ "$kind" = tenants ] && args=(--user bench --tenants "$TENANTS_N" --tenant-offset 0)
  [ "$kind" = file ] && args=(--user bench)
  open_idle_fifo
  log "memory ($kind): VmRSS ${M_BEFORE} kB; $TENANTS_N clients (one per tenant) ..."
  start_idle "$name" "$TENANTS_N" 127.0.0.1 "${args[@]}"
  M_LOGIN_S=$IDLE_LOGIN_S
  settle
  M_FIRST=$SETTLED_RSS q1=$QUIET
  left=$((TENANTS_IDLE - TENANTS_N))
  M_PROCS=1
  while [ "$left" -gt 0 ]; do
    count=$((left < PER_PROC ? left : PER_PROC))
    # With pgcorral on all addresses, each process has a destination (and so a port space) of
    # its own; the first one, of N clients, shares 127.0.0.1.
    host=127.0.0.1
    [ "$LISTEN_ALL" -eq 1 ] && host=127.0.0.$((k + 2))
    log "memory ($kind): $count clients more, idle_clients process $((M_PROCS + 1)) → $host ..."
    start_idle "$name" "$count" "$host" "${args[@]}"
    M_LOGIN_S=$(awk -v a="$M_LOGIN_S" -v b="$IDLE_LOGIN_S" 'BEGIN { printf "%.2f", a + b }')
    left=$((left - count))
    k=$((k + 1))
    M_PROCS=$((M_PROCS + 1))
  done
  settle
  M_ALL=$SETTLED_RSS
  M_OTHER="$q0 / $q1 / $QUIET"
  check_corral "$name"
  if [ "$kind" = tenants ]; then
    tenants_loaded
    M_LOADED=$TL_N M_CLIENTS_SEEN=$TL_C M_SERVERS=$TL_S
  else
    # SHOW POOLS, the file's pool (user bench): its clients and servers.
    console_sum "SHOW POOLS" user bench cl_active,cl_waiting,sv_active,sv_idle,sv_used,sv_tested,sv_login
    local _rows ca cw sa si su st sl
    read -r _rows ca cw sa si su st sl <<<"$CONSOLE_SUM"
    M_CLIENTS_SEEN=$((ca + cw)) M_SERVERS=$((sa + si + su + st + sl))
    tenants_loaded
    M_LOADED=$TL_N
    [ "$M_LOADED" = 0 ] || log "  WARNING: $M_LOADED tenants loaded in the file database's run"
  fi
  [ "$M_CLIENTS_SEEN" = "$TENANTS_IDLE" ] || log "  WARNING: pgcorral counts $M_CLIENTS_SEEN clients, $TENANTS_IDLE expected"
  end_idle
  M_LOST=$IDLE_LOST
  [ "$M_LOST" = 0 ] || log "  WARNING: $M_LOST idle connections were closed by pgcorral while held"
  log "memory ($kind): VmRSS $M_BEFORE → $M_FIRST ($TENANTS_N clients) → $M_ALL kB ($TENANTS_IDLE clients, $M_PROCS processes, logins ${M_LOGIN_S}s; CPU busy at rest before, between, after: ${M_OTHER} %); $M_SERVERS servers"
  stop_corral
}

bytes_per() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { printf "%.0f", (b - a) * 1024 / n }'; }

memory_phase mem-tenants tenants
T_BEFORE=$M_BEFORE T_FIRST=$M_FIRST T_ALL=$M_ALL T_LOGIN=$M_LOGIN_S T_PROCS=$M_PROCS T_LOADED=$M_LOADED
T_SEEN=$M_CLIENTS_SEEN T_SERVERS=$M_SERVERS T_LOST=$M_LOST T_OTHER=$M_OTHER
memory_phase mem-file file
F_BEFORE=$M_BEFORE F_FIRST=$M_FIRST F_ALL=$M_ALL F_LOGIN=$M_LOGIN_S
F_SEEN=$M_CLIENTS_SEEN F_SERVERS=$M_SERVERS F_LOST=$M_LOST F_OTHER=$M_OTHER

# ---- the login storm ------------------------------------------------------------------------------
# storm_round name count batches args... → STORM_S (login seconds, all batches), STORM_RATE
# (logins/s), STORM_CPU_US (pgcorral CPU µs per login, clock-tick resolution), STORM_OTHER (the
# machine's busy share in the second at rest before, %). Each batch is one
# idle_clients process logging in `count` clients at once, held until the last is in, then closed;
# its time and pgcorral's CPU are counted from its start to its `ready`.
storm_round() {
  local name=$1 count=$2 batches=$3 before after b ticks=0
  shift 3
  STORM_S=0
  quiet_sample 1
  STORM_OTHER=$QUIET
  for ((b = 0; b < batches; b++)); do
    open_idle_fifo
    before=$(cpu_ticks)
    start_idle storm "$count" 127.0.0.1 "$@"
    after=$(cpu_ticks)
    end_idle
    [ "$IDLE_LOST" = 0 ] || log "  WARNING: $IDLE_LOST connections of the storm round $name were closed while held"
    ticks=$((ticks + after - before))
    STORM_S=$(awk -v a="$STORM_S" -v b="$IDLE_LOGIN_S" 'BEGIN { printf "%.2f", a + b }')
  done
  STORM_RATE=$(awk -v n="$((count * batches))" -v s="$STORM_S" 'BEGIN { printf "%.0f", n / s }')
  STORM_CPU_US=$(awk -v t="$ticks" -v hz="$CLK_TCK" -v n="$((count * batches))" 'BEGIN { printf "%.0f", t * 1e6 / hz / n }')
  log "  $name: $((count * batches)) logins ($batches × $count) in ${STORM_S}s: $STORM_RATE/s, pgcorral CPU ${STORM_CPU_US} µs per login; CPU busy at rest before: ${STORM_OTHER} %"
  check_corral storm
}
start_corral storm
tenants_loaded
[ "$TL_N" = 0 ] || die "storm: a fresh pgcorral has $TL_N tenants loaded already"
# The file database's pool gets its server, and pgcorral its first login, before any round.
"$PSQL" -X -At -h 127.0.0.1 -p "$CORRAL_PORT" -U bench -d bench -c "SELECT 1" >/dev/null || die "storm: the file database does not answer"
STORM_ROWS=()
for ((r = 0; r < TENANTS_STORM_ROUNDS; r++)); do
  off=$((TENANTS_N + r * TENANTS_STORM))
  log "storm round $((r + 1)) of $TENANTS_STORM_ROUNDS: tenants t$off to t$((off + TENANTS_STORM - 1))"
  tenants_loaded
  before_loaded=$TL_N
  storm_round first "$TENANTS_STORM" 1 --user bench --tenants "$TENANTS_STORM" --tenant-offset "$off"
  row="$((r + 1)) $STORM_S $STORM_RATE $STORM_CPU_US"
  others=$STORM_OTHER
  tenants_loaded
  after_loaded=$TL_N
  [ $((after_loaded - before_loaded)) -eq "$TENANTS_STORM" ] ||
    log "  WARNING: $((after_loaded - before_loaded)) tenants loaded by the round, $TENANTS_STORM expected"
  storm_round loaded "$TENANTS_STORM" "$TENANTS_STORM_REPEAT" --user bench --tenants "$TENANTS_STORM" --tenant-offset "$off"
  row="$row $STORM_S $STORM_RATE $STORM_CPU_US"
  others="$others $STORM_OTHER"
  storm_round file "$TENANTS_STORM" "$TENANTS_STORM_REPEAT" --user bench
  row="$row $STORM_S $STORM_RATE $STORM_CPU_US $others $STORM_OTHER"
  STORM_ROWS+=("$row")
done
tenants_loaded
S_LOADED=$TL_N S_SERVERS=$TL_S
stop_corral

# ---- report ---------------------------------------------------------------------------------------
# PostgreSQL is done too: stopped now, so that the reading below shows what else runs here, not
# the run's own backends leaving.
as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 30 stop >/dev/null 2>&1 || log "PostgreSQL did not stop cleanly (the cleanup tries again)"
[ -e "$PGDATA/postmaster.pid" ] || PG_STARTED=0
sleep 2
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
quiet_sample 1 # everything of the run stopped
BUSY_END=$QUIET
elapsed=$(($(date +%s) - START_EPOCH))
DURATION=$(printf '%dm%02ds' $((elapsed / 60)) $((elapsed % 60)))
# The setup's login to a tenant that does not exist is refused on purpose, with a warning.
WARN_LINES=$WORK/runs/warnings
cat "$WORK"/logs/{setup,mem-tenants,mem-file,storm}.log 2>/dev/null | grep -E 'WARN|ERROR' |
  grep -v 'tenant "nosuch" does not exist' >"$WARN_LINES" || true
WARNINGS=$(wc -l <"$WARN_LINES")

mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
median_col() { # column of STORM_ROWS (1-based) → median
  local c=$1
  printf '%s\n' "${STORM_ROWS[@]}" | awk -v c="$c" '{ print $c }' | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

T_PER=$(bytes_per "$T_BEFORE" "$T_ALL" "$TENANTS_IDLE")
F_PER=$(bytes_per "$F_BEFORE" "$F_ALL" "$TENANTS_IDLE")
T_TENANT=$(bytes_per "$T_BEFORE" "$T_FIRST" "$TENANTS_N")
F_TENANT=$(bytes_per "$F_BEFORE" "$F_FIRST" "$TENANTS_N")
T_REST=$(bytes_per "$T_FIRST" "$T_ALL" $((TENANTS_IDLE - TENANTS_N)))
F_REST=$(bytes_per "$F_FIRST" "$F_ALL" $((TENANTS_IDLE - TENANTS_N)))
GOAL_MET=no
[ "$T_PER" -le "$GOAL_BYTES" ] && GOAL_MET=yes
# Below the issue's count, a projection to it from this run's two slopes (each tenant's first
# client, each further client), assuming both stay as they are: arithmetic, not a measurement.
PROJECTION=""
if [ "$TENANTS_IDLE" -lt "$GOAL_IDLE" ]; then
  projected=$(awk -v n="$TENANTS_N" -v t="$T_TENANT" -v r="$T_REST" -v c="$GOAL_IDLE" 'BEGIN { printf "%.0f", (n * t + (c - n) * r) / c }')
  PROJECTION=" Not measured at $(fmt "$GOAL_IDLE") clients (see the note on open files); projected from this run's two slopes, $TENANTS_N tenants' first clients at $(fmt "$T_TENANT") bytes and $(fmt $((GOAL_IDLE - TENANTS_N))) further clients at $(fmt "$T_REST") bytes, assuming both stay as they are: about $(fmt "$projected") bytes per idle client (arithmetic, not a measurement)."
fi
T_RATE=$(awk -v n="$TENANTS_IDLE" -v s="$T_LOGIN" 'BEGIN { printf "%.0f", n / s }')
F_RATE=$(awk -v n="$TENANTS_IDLE" -v s="$F_LOGIN" 'BEGIN { printf "%.0f", n / s }')
MED_FIRST=$(median_col 3) MED_LOADED=$(median_col 6) MED_FILE=$(median_col 9)
MED_FIRST_CPU=$(median_col 4) MED_LOADED_CPU=$(median_col 7) MED_FILE_CPU=$(median_col 10)

os_name=$(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null || uname -s)
cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
mem_total=$(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1024 / 1024 }' /proc/meminfo)
listen_desc="127.0.0.1 (all idle clients from 127.0.0.1 to 127.0.0.1:port)"
[ "$LISTEN_ALL" -eq 1 ] && listen_desc="all addresses (\`*\`); the first idle_clients process connects to 127.0.0.1, each other one to its own 127.0.0.K, so each has a source-port space of its own"

report() {
  cat <<EOF
# Tenant scale: idle clients across tenants and first-login storms, $RUN_DATE

Made by \`bench/tenants.sh\` (see [bench/README.md](../README.md#tenant-scale-benchtenantssh)) in $DURATION. Settings: \`TENANTS_N=$TENANTS_N\`, \`TENANTS_IDLE=$TENANTS_IDLE\` ($IDLE_PER_TENANT per tenant), \`TENANTS_STORM=$TENANTS_STORM\`, \`TENANTS_STORM_ROUNDS=$TENANTS_STORM_ROUNDS\`, \`TENANTS_STORM_REPEAT=$TENANTS_STORM_REPEAT\`, \`TENANTS_POOL_SIZE=$TENANTS_POOL_SIZE\`, \`TENANTS_CONCURRENCY=$TENANTS_CONCURRENCY\`, at most $(fmt "$PER_PROC") clients per idle_clients process, \`TENANTS_SETTLE=$TENANTS_SETTLE\` s.
EOF
  [ -n "$TENANTS_NOTE" ] && printf '\n> %s\n' "$TENANTS_NOTE"
  [ -n "$FD_NOTE" ] && printf '\n> **Not 100,000 clients.** %s\n' "$FD_NOTE"
  cat <<EOF

## Machine

| | |
|---|---|
| CPUs (nproc) | $(nproc) |
| CPU model | ${cpu_model:-unknown} |
| Memory | $mem_total |
| OS | $os_name |
| Kernel | $(uname -r) |
| PostgreSQL | $("$PG_BIN/postgres" --version) |
| pgcorral | $("$CORRAL" --version 2>&1 | head -n1), git $GIT_REV, build: release |
| rustc | $(rustc --version 2>/dev/null || echo unknown) |
| Open files (soft / hard, this run) | $(ulimit -Sn) / $HARD$([ "$HARD" != "$HARD_BEFORE" ] && echo " (raised from $HARD_BEFORE)") |
| Ephemeral ports (ip_local_port_range) | $PORT_LO–$PORT_HI ($(fmt "$PORTS")) |
| Load average (1/5/15 min) at start → end | $LOAD_START → $LOAD_END |
| CPU busy without the run (1 s of /proc/stat, all CPUs) before → after | $BUSY_START % → $BUSY_END % |

## Setup

One PostgreSQL started for the run (initdb in a temporary directory, fsync off, max_connections $PG_MAX_CONNECTIONS), with database \`bench\` owned by role \`bench\` (SCRAM-SHA-256) and database \`corral_registry\`, the tenant registry. pgcorral: \`tenant_registry\` on that database, \`api_listen\`, \`api_jwt_secret\`, \`auth_type = "scram-sha-256"\`, \`workers = 0\` (one per core), \`log_level = "warn"\`, \`max_client_conn = $MAX_CLIENT_CONN\`, \`server_tls_sslmode = "disable"\`, listening on $listen_desc; plus a file database \`bench\` (\`[databases.bench]\`, transaction mode, pool size $TENANTS_POOL_SIZE) with \`[users.bench]\` (the plaintext password). $TOTAL_TENANTS tenants t0 … t$((TOTAL_TENANTS - 1)) created through \`PUT /api/tenants/tI\` (HS256 bearer token; $CREATE_RATE tenants per second, one curl each), each with \`require_user: true\` and one user, \`bench\` (its plaintext password, \`pool_size: $TENANTS_POOL_SIZE\`, \`mode_type: "transaction"\`, \`max_clients: $((IDLE_PER_TENANT + 100))\`), server 127.0.0.1 database \`bench\`. Tenants' clients log in as \`bench.tI\`, the file's as \`bench\`; pgcorral reaches PostgreSQL over TCP (127.0.0.1), as role \`bench\` with SCRAM. Clients: \`examples/idle_clients.rs\` (tokio-postgres, SCRAM, plaintext), $TENANTS_CONCURRENCY logins in flight per process, on the same cores as pgcorral and PostgreSQL. Each part runs on a freshly started pgcorral (same configuration), and a fresh pgcorral loads no tenant until its first client comes (checked with \`SHOW TENANTS\`).

## Memory: idle clients

VmRSS of pgcorral (\`/proc/PID/status\`), $TENANTS_SETTLE s after the last login of each step: freshly started (*before*), with one client per tenant (for the file database: $TENANTS_N clients), and with all $(fmt "$TENANTS_IDLE") clients ($IDLE_PER_TENANT per tenant), logged in by $T_PROCS idle_clients processes one after the other and held idle (logged in, no query). Bytes per idle client = (with all − before) ÷ clients; it includes what loading the tenants and opening their pools cost. *CPU busy at rest*: how busy the machine was (both cores, %) during the settle time before the first clients, between the two steps and after the last, when no logins run (see the notes). The two columns on the right split it: (with one per tenant − before) ÷ $TENANTS_N, and (with all − with one per tenant) ÷ the other clients.

| Clients to | Idle clients | Tenants loaded | Servers open | RSS before (MiB) | RSS, one per tenant (MiB) | RSS with all (MiB) | **Bytes per idle client** | Logins (s, all) | Logins/s | CPU busy at rest before / between / after (%) | Bytes per first client (tenant loaded) | Bytes per further client |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| $TENANTS_N tenants | $(fmt "$TENANTS_IDLE") | $T_LOADED | $T_SERVERS | $(mib "$T_BEFORE") | $(mib "$T_FIRST") | $(mib "$T_ALL") | **$(fmt "$T_PER")** | $T_LOGIN | $(fmt "$T_RATE") | $T_OTHER | $(fmt "$T_TENANT") | $(fmt "$T_REST") |
| the file database | $(fmt "$TENANTS_IDLE") | – | $F_SERVERS | $(mib "$F_BEFORE") | $(mib "$F_FIRST") | $(mib "$F_ALL") | **$(fmt "$F_PER")** | $F_LOGIN | $(fmt "$F_RATE") | $F_OTHER | $(fmt "$F_TENANT") | $(fmt "$F_REST") |

Goal (issue): at most $GOAL_BYTES bytes per idle client across $TENANTS_N tenants: **$GOAL_MET** ($(fmt "$T_PER") bytes at $(fmt "$TENANTS_IDLE") clients).$PROJECTION Tenants over the file database: $(awk -v a="$T_PER" -v b="$F_PER" 'BEGIN { printf "%+d bytes per idle client", a - b }'). pgcorral counted $(fmt "$T_SEEN") tenant clients and $(fmt "$F_SEEN") file clients while they were held; connections closed by pgcorral while held: $T_LOST (tenants), $F_LOST (file).

## Login storm: first clients of new tenants

On a fresh pgcorral, $TENANTS_STORM_ROUNDS round$([ "$TENANTS_STORM_ROUNDS" -eq 1 ] || echo s); in each, one idle_clients process logs in one client to each of $TENANTS_STORM tenants never loaded (\`--tenants $TENANTS_STORM --tenant-offset K --count $TENANTS_STORM --concurrency $TENANTS_CONCURRENCY\`) and holds them until all are in, then leaves (*first*: each login reads its tenant from the registry, makes its configuration and pool, verifies SCRAM against the tenant's plaintext password and opens the pool's first server connection); then $TENANTS_STORM_REPEAT batches of the same $TENANTS_STORM logins (*loaded*: the tenants and their idle servers are there; each batch held until all are in, then closed); then $TENANTS_STORM_REPEAT batches of $TENANTS_STORM logins to the file database (its pool warm). Logins/s = clients ÷ the time idle_clients reports from its start to the last ReadyForQuery, summed over a kind's batches (the *s* columns). pgcorral CPU per login: its utime + stime over the round ÷ logins (clock ticks of $((1000 / CLK_TCK)) ms, so coarse). Each login costs the client side a SCRAM proof too (PBKDF2, 4096 iterations), on the same 2 cores: the rates are the machine's, client included, not pgcorral's alone.

| Round | First logins of new tenants: s | logins/s | pgcorral CPU µs/login | Logins to loaded tenants: s | logins/s | CPU µs/login | Logins to the file database: s | logins/s | CPU µs/login | CPU busy at rest before, % (first / loaded / file) |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|
EOF
  local row
  for row in "${STORM_ROWS[@]}"; do
    # shellcheck disable=SC2086
    set -- $row
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s |\n' "$1" "$2" "$(fmt "$3")" "$(fmt "$4")" "$5" "$(fmt "$6")" "$(fmt "$7")" "$8" "$(fmt "$9")" "$(fmt "${10}")" "${11}" "${12}" "${13}"
  done
  cat <<EOF
| **median** | | **$(fmt "$MED_FIRST")** | $(fmt "$MED_FIRST_CPU") | | **$(fmt "$MED_LOADED")** | $(fmt "$MED_LOADED_CPU") | | **$(fmt "$MED_FILE")** | $(fmt "$MED_FILE_CPU") | |

First logins of new tenants: $(fmt "$MED_FIRST") per second (median), against $(fmt "$MED_LOADED") for the same tenants loaded and $(fmt "$MED_FILE") for the file database. After the rounds pgcorral had $S_LOADED tenants loaded with $S_SERVERS server connections open.

## Notes

- Open files: pgcorral needs one descriptor per client plus its servers and a few dozen of its own; each idle_clients process one per connection. The script sets the soft limit to the hard one ($(fmt "$HARD") here) and lowers the default TENANTS_IDLE to what that leaves pgcorral (at most $(fmt "$GOAL_IDLE")), and splits the clients over idle_clients processes of at most $(fmt "$PER_PROC") each.
- Source ports: clients to one address and port need one ephemeral port each ($(fmt "$PORTS") here, $PORT_LO–$PORT_HI). With more clients than that, the script (\`TENANTS_LISTEN=auto\`) has pgcorral listen on all addresses and gives each idle_clients process a loopback address of its own (127.0.0.2, 127.0.0.3, …), or stops with a message (\`TENANTS_LISTEN=loopback\`). This run: $([ "$LISTEN_ALL" -eq 1 ] && echo "all addresses" || echo "one address, $(fmt "$TENANTS_IDLE") clients, within the range").
- CPU busy at rest: the machine's user and system time (\`/proc/stat\`, both cores) over a second (the memory part: the settle time) just before each timed step, when the run's logins are not running: other processes' work, plus the run's own background work (pgcorral reads every loaded tenant again every 30 s, and PostgreSQL answers). Builds and tests running beside the run take CPU from the logins; a figure above a few percent means the rates beside it were measured on a shared machine (a sample before the step, not a measurement during it).
- Warnings and errors in pgcorral's logs (log_level warn), all four instances, besides the setup's refused login of a tenant that does not exist: $WARNINGS.
EOF
  if [ "$WARNINGS" -gt 0 ]; then
    printf '\nThe first of them, with their times, pids and addresses taken out:\n\n```\n'
    sed -E 's/^[0-9T:.Z-]+ +//; s/ (conn|addr)=[^ ]*//g' "$WARN_LINES" | sort | uniq -c | sort -rn | head -n 10
    printf '```\n'
  fi
}

REPORT_TEXT=$(report)
printf '%s\n' "$REPORT_TEXT"
if [ -n "$TENANTS_OUT" ]; then
  if [ "$TENANTS_OUT" = 1 ]; then
    mkdir -p "$RESULTS"
    out=$RESULTS/$RUN_DATE-tenants-scale.md
    [ -e "$out" ] && out=$RESULTS/$RUN_DATE-$(date +%H%M)-tenants-scale.md
  else
    out=$TENANTS_OUT
    mkdir -p "$(dirname "$out")"
  fi
  printf '%s\n' "$REPORT_TEXT" >"$out"
  log "report: $out"
fi
[ "$WARNINGS" = 0 ] || log "pgcorral logged $WARNINGS warning or error lines; see the report, and $WORK/logs (kept with KEEP=1)"
log "done in $DURATION"
