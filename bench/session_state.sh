#!/usr/bin/env bash
# Session state under load: 200 pgbench clients, each with its own TimeZone and search_path,
# share 10 server connections through pgcorral in transaction mode, and check on every
# transaction that they see their own settings and nobody else's (bench/session_state.sql).
#
#   bench/session_state.sh                 # 60 s
#   DURATION=15 bench/session_state.sh     # a quicker check
#
# Knobs (environment): DURATION (seconds, default 60), CLIENTS (200), JOBS (pgbench threads, 2),
# POOL_SIZE (10), PG_BINDIR (PostgreSQL's server binaries; found under /usr/lib/postgresql
# otherwise), KEEP=1 (keep the work directory with its logs), SCRIPT (another pgbench script),
# SETUP (SQL run once before pgbench), DIRECT=1 (then run the same pgbench straight against
# PostgreSQL too, for comparison). bench/restore_cost.sh uses the last three.
#
# What it does: builds pgcorral (cargo build --release -p pgcorral) and copies the binary aside;
# initdb's a PostgreSQL of its own in a temporary directory (as the `postgres` OS user when run
# as root, trusting 127.0.0.1 only) and starts it and pgcorral on free ports of 127.0.0.1; runs
#
#   pgbench -n --protocol simple -c $CLIENTS -j $JOBS -T $DURATION -f bench/session_state.sql
#
# against pgcorral and prints pgbench's summary. Exits 0 only if pgbench succeeded, processed
# transactions, reported 0 failed transactions and aborted no client (a client that sees a
# wrong setting fails a transaction with division_by_zero, which aborts it). Everything it
# started is stopped on exit, whatever the reason; the temporary directory is removed unless
# KEEP=1 or the run failed (its logs are then kept and their place printed).
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
SCRIPT=${SCRIPT:-$BENCH_DIR/session_state.sql}
SETUP=${SETUP:-}
DIRECT=${DIRECT:-0}

DURATION=${DURATION:-60}
CLIENTS=${CLIENTS:-200}
JOBS=${JOBS:-2}
POOL_SIZE=${POOL_SIZE:-10}
KEEP=${KEEP:-0}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}
for v in DURATION CLIENTS JOBS POOL_SIZE; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, not '${!v}'"
done
[ -f "$SCRIPT" ] || die "$SCRIPT not found"

# ---- tools ----------------------------------------------------------------------------------------
if [ -n "${PG_BINDIR:-}" ]; then
  PG_BIN=$PG_BINDIR
else
  PG_BIN=$(find /usr/lib/postgresql -maxdepth 3 -name initdb -path '*/bin/*' 2>/dev/null | sort -V | tail -n1 | xargs -r dirname)
fi
[ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] || die "PostgreSQL server binaries not found (set PG_BINDIR)"
PGBENCH=$PG_BIN/pgbench
[ -x "$PGBENCH" ] || PGBENCH=$(command -v pgbench) || die "pgbench not found"
PSQL=$PG_BIN/psql
[ -x "$PSQL" ] || PSQL=$(command -v psql) || die "psql not found"
command -v python3 >/dev/null || die "python3 is needed to find free ports"

# PostgreSQL refuses to run as root.
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' OS user to run PostgreSQL"
  AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
else
  AS_PG=()
fi
as_pg() { "${AS_PG[@]}" "$@"; }

# 200 clients on each side of pgcorral, plus its servers.
ulimit -n $((CLIENTS * 2 + 1024)) 2>/dev/null || true

# ---- cleanup ----------------------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pgcorral-session-state.XXXXXX")
chmod 755 "$WORK"
PGDATA=$WORK/pgdata
CORRAL_PID="" PGBENCH_PID="" PG_STARTED=0

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  set +e
  stop_pid "$PGBENCH_PID" pgbench
  stop_pid "$CORRAL_PID" pgcorral
  if [ "$PG_STARTED" -eq 1 ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 30 stop >/dev/null 2>&1 ||
      as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m immediate -w -t 30 stop >/dev/null 2>&1
  fi
  if [ "$rc" -ne 0 ] || [ "$KEEP" = 1 ]; then
    rm -rf "$PGDATA"
    log "logs kept in $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
cleanup_on_exit

# ---- build ----------------------------------------------------------------------------------------
log "cargo build --release -p pgcorral"
(cd "$ROOT" && cargo build --release -p pgcorral) || die "cargo build failed"
TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
# A private copy: another cargo build in the tree must not swap the binary mid-run.
cp "$TARGET_DIR/release/pgcorral" "$WORK/pgcorral"

read -r PG_PORT CORRAL_PORT < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
')

wait_port() { # port name pid
  local i
  for ((i = 0; i < 300; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    if [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null; then die "$2 exited at start; see $WORK/$2.log"; fi
    sleep 0.1
  done
  die "$2 is not listening on port $1 after 30 s"
}

# ---- PostgreSQL -----------------------------------------------------------------------------------
log "PostgreSQL ($PG_BIN): initdb, port $PG_PORT"
pg_initdb "$PGDATA" "$WORK/initdb.log"
cat >>"$PGDATA/postgresql.conf" <<EOF

# bench/session_state.sh
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = ''
max_connections = $(((DIRECT == 1 ? CLIENTS : 0) + POOL_SIZE + 20))
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
cat >"$PGDATA/pg_hba.conf" <<EOF
# bench/session_state.sh: a throw-away server on 127.0.0.1 only.
host all all 127.0.0.1/32 trust
EOF
[ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$PGDATA"
touch "$WORK/postgresql.log"
[ "$(id -u)" -eq 0 ] && chown postgres:postgres "$WORK/postgresql.log"
as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$WORK/postgresql.log" -w -t 60 start >/dev/null ||
  die "PostgreSQL did not start; see $WORK/postgresql.log"
PG_STARTED=1

# ---- pgcorral -------------------------------------------------------------------------------------
{ corral_general "$CORRAL_PORT" "$POOL_SIZE" $((CLIENTS + 100)); cat <<EOF; } >"$WORK/pgcorral.toml"

[databases.postgres]
host = "127.0.0.1"
port = $PG_PORT
EOF
"$WORK/pgcorral" --config "$WORK/pgcorral.toml" --check >/dev/null || die "pgcorral refuses $WORK/pgcorral.toml"
log "pgcorral: port $CORRAL_PORT, transaction mode, pool size $POOL_SIZE"
env -u RUST_LOG "$WORK/pgcorral" --config "$WORK/pgcorral.toml" >"$WORK/pgcorral.log" 2>&1 &
CORRAL_PID=$!
wait_port "$CORRAL_PORT" pgcorral "$CORRAL_PID"
got=$("$PSQL" -X -At -h 127.0.0.1 -p "$CORRAL_PORT" -U postgres -d postgres -c "SELECT 1" 2>&1) ||
  die "pgcorral does not answer: $got"

if [ -n "$SETUP" ]; then
  "$PSQL" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -c "$SETUP" >/dev/null ||
    die "SETUP failed"
fi

# ---- the run --------------------------------------------------------------------------------------
run_pgbench() { # port output
  timeout --kill-after=10 $((DURATION * 2 + 120)) \
    "$PGBENCH" -n --protocol simple -c "$CLIENTS" -j "$JOBS" -T "$DURATION" -f "$SCRIPT" \
    -h 127.0.0.1 -p "$1" -U postgres postgres >"$2" 2>&1 &
  PGBENCH_PID=$!
  wait "$PGBENCH_PID"
}
log "pgbench -c $CLIENTS -j $JOBS -T $DURATION --protocol simple -f $(basename "$SCRIPT")"
rc=0
cpu_before=$(awk '{print $14 + $15}' "/proc/$CORRAL_PID/stat")
run_pgbench "$CORRAL_PORT" "$WORK/pgbench.out" || rc=$?
PGBENCH_PID=""
# pgcorral's CPU time over the run, in clock ticks.
cpu_ticks=$(($(awk '{print $14 + $15}' "/proc/$CORRAL_PID/stat") - cpu_before))
# The summary, and at most a few of the errors (one per aborted client).
grep -v '^pgbench: error: client' "$WORK/pgbench.out" || true
grep '^pgbench: error: client' "$WORK/pgbench.out" | head -n 5 || true

processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$WORK/pgbench.out")
failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$WORK/pgbench.out")
aborted=$(grep -c 'aborted' "$WORK/pgbench.out" || true)
alive=yes
kill -0 "$CORRAL_PID" 2>/dev/null || alive=no

problems=()
[ "$rc" -eq 0 ] || problems+=("pgbench exited with status $rc")
[ -n "$processed" ] && [ "$processed" -gt 0 ] || problems+=("no transactions processed")
[ "${failed:-x}" = 0 ] || problems+=("failed transactions: ${failed:-unknown}")
[ "$aborted" -eq 0 ] || problems+=("$(grep -c '^pgbench: error: client .* aborted' "$WORK/pgbench.out" || true) clients aborted")
[ "$alive" = yes ] || problems+=("pgcorral died")
if [ "${#problems[@]}" -gt 0 ]; then
  log "FAIL: $(printf '%s; ' "${problems[@]}")"
  tail -n 20 "$WORK/pgcorral.log" >&2 || true
  exit 1
fi
log "OK: $processed transactions, 0 failed, no client aborted"
tps() { sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$1"; }
lat() { sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$1"; }
echo "through pgcorral: tps $(tps "$WORK/pgbench.out"), latency $(lat "$WORK/pgbench.out") ms, pgcorral CPU $(python3 -c "print(round($cpu_ticks / $(getconf CLK_TCK) * 1e6 / $processed, 1))") us/transaction"
if [ "$DIRECT" = 1 ]; then
  log "the same pgbench straight against PostgreSQL"
  run_pgbench "$PG_PORT" "$WORK/direct.out" || die "pgbench against PostgreSQL failed; see $WORK/direct.out"
  PGBENCH_PID=""
  echo "direct: tps $(tps "$WORK/direct.out"), latency $(lat "$WORK/direct.out") ms"
fi
