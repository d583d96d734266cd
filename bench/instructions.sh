#!/usr/bin/env bash
# Instructions per transaction of pgcorral and PgBouncer, counted by valgrind's callgrind: exact
# and repeatable whatever else the machine is doing, unlike CPU time. See bench/README.md.
#
#   bench/instructions.sh                     # against PostgreSQL on 127.0.0.1:5432
#   PGPORT=55432 BENCH_TX=5000 bench/instructions.sh
#
# Needs a running PostgreSQL that lets user $PGUSER (default postgres) in without a password
# from 127.0.0.1 (trust), valgrind, pgbench and pgbouncer. Creates database `corral_instr`
# (pgbench -i -s 1) if missing. Both poolers run under callgrind with one worker/thread,
# transaction mode (BENCH_POOL_MODE), pool 20, trust auth, plaintext to PostgreSQL; pgbench -S with
# 8 clients (BENCH_CLIENTS)
# runs a warm-up, the counters are zeroed, then BENCH_TX transactions per client run, and the
# count is divided by them. BENCH_PROTOCOLS (default "simple extended"); KEEP=1 keeps the
# callgrind files (in a temporary directory, printed on failure). BENCH_FOOTPRINT=1 also prints
# each pooler's hot code footprint: the distinct 64-byte lines of the instructions it runs at
# least once per transaction (bench/footprint.py; callgrind then records every instruction).
# BENCH_CORRAL_BIN: a pgcorral binary to count instead of building the release one (e.g. the
# PGO build of bench/pgo.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PGHOST=127.0.0.1
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
DB=corral_instr
TX=${BENCH_TX:-2500}
CLIENTS=${BENCH_CLIENTS:-8}
POOL_MODE=${BENCH_POOL_MODE:-transaction}
JOBS=$((CLIENTS < 2 ? 1 : 2))
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PGBENCH=$PG_BIN/pgbench
PSQL=$PG_BIN/psql
CORRAL_PORT=${CORRAL_PORT:-7460}
BOUNCER_PORT=${BOUNCER_PORT:-6460}
FOOTPRINT=${BENCH_FOOTPRINT:-}
[ "$FOOTPRINT" = 0 ] && FOOTPRINT=
VG_ARGS=()
[ -n "$FOOTPRINT" ] && VG_ARGS=(--dump-instr=yes)

die() { echo "instructions.sh: $*" >&2; exit 1; }
for c in valgrind callgrind_control callgrind_annotate "$PGBENCH" /usr/sbin/pgbouncer; do
  command -v "$c" >/dev/null || die "$c is missing"
done

WORK=$(mktemp -d)
chmod 755 "$WORK"
cleanup() {
  pkill -f "$WORK/" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
if [ -n "${KEEP:-}" ]; then
  trap 'pkill -f "$WORK/" 2>/dev/null || true; echo "kept $WORK"' EXIT
fi

"$PSQL" -X -q -h $PGHOST -p "$PGPORT" -U "$PGUSER" -d postgres -tAc \
  "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 || {
  "$PSQL" -X -q -h $PGHOST -p "$PGPORT" -U "$PGUSER" -d postgres -c "CREATE DATABASE $DB"
  "$PGBENCH" -i -q -s 1 -h $PGHOST -p "$PGPORT" -U "$PGUSER" "$DB" >/dev/null 2>&1
}

if [ -n "${BENCH_CORRAL_BIN:-}" ]; then
  CORRAL=$BENCH_CORRAL_BIN
  [ -x "$CORRAL" ] || die "BENCH_CORRAL_BIN: $CORRAL is not an executable"
else
  echo "building pgcorral (release)"
  (cd "$ROOT" && cargo build --release -q -p pgcorral)
  CORRAL=${CARGO_TARGET_DIR:-$ROOT/target}/release/pgcorral
fi

cat >"$WORK/corral.toml" <<EOF
[general]
listen_addr = "127.0.0.1"
listen_port = $CORRAL_PORT
pool_mode = "$POOL_MODE"
default_pool_size = 20
auth_type = "trust"
workers = 1
log_level = "warn"
server_tls_sslmode = "disable"
[databases.$DB]
host = "$PGHOST"
port = $PGPORT
dbname = "$DB"
user = "$PGUSER"
EOF
printf '"%s" ""\n' "$PGUSER" >"$WORK/userlist.txt"
cat >"$WORK/pgbouncer.ini" <<EOF
[databases]
$DB = host=$PGHOST port=$PGPORT dbname=$DB user=$PGUSER pool_size=20
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $WORK/userlist.txt
pool_mode = $POOL_MODE
default_pool_size = 20
logfile = $WORK/pgbouncer.log
log_connections = 0
log_disconnections = 0
server_tls_sslmode = disable
EOF

# PgBouncer refuses to run as root (pgcorral runs as the invoking user).
AS=()
if [ "$(id -u)" -eq 0 ]; then
  AS=(setpriv --reuid=postgres --regid=postgres --init-groups --)
  chown -R postgres "$WORK"
fi

count() { # name port protocol as-postgres(0/1) command... → instructions per transaction
  local name=$1 port=$2 proto=$3 as=()
  [ "$4" -eq 1 ] && as=("${AS[@]}")
  shift 4
  local out=$WORK/$name-$proto.cg
  "${as[@]}" valgrind --tool=callgrind "${VG_ARGS[@]}" --callgrind-out-file="$out" "$@" >"$WORK/$name.out" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.2; done
  "$PGBENCH" -n -S -M "$proto" -c $CLIENTS -j $JOBS -t 300 -h 127.0.0.1 -p "$port" -U "$PGUSER" "$DB" >/dev/null 2>&1 ||
    die "$name: the warm-up failed; see $WORK/$name.out (run with KEEP=1 to keep it)"
  "${as[@]}" callgrind_control -z "$pid" >/dev/null 2>&1
  "$PGBENCH" -n -S -M "$proto" -c $CLIENTS -j $JOBS -t "$TX" -h 127.0.0.1 -p "$port" -U "$PGUSER" "$DB" >/dev/null 2>&1 ||
    die "$name: pgbench failed"
  "${as[@]}" callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  local ir
  ir=$(callgrind_annotate --inclusive=yes "$out.1" 2>/dev/null | awk -v tx=$((TX * CLIENTS)) \
    '/PROGRAM TOTALS/ { gsub(",", "", $1); printf "%d\n", $1 / tx }')
  if [ -n "$FOOTPRINT" ]; then
    echo "$ir $(python3 "$ROOT/bench/footprint.py" "$out.1" $((TX * CLIENTS)) | awk '{ print $2 }')"
  else
    echo "$ir"
  fi
}

if [ -n "$FOOTPRINT" ]; then
  printf '%-10s %10s %10s %12s %12s\n' "protocol" "pgcorral" "PgBouncer" "pgcorral hot" "PgBouncer hot"
else
  printf '%-10s %10s %10s\n' "protocol" "pgcorral" "PgBouncer"
fi
for proto in ${BENCH_PROTOCOLS:-simple extended}; do
  c=$(count pgcorral "$CORRAL_PORT" "$proto" 0 "$CORRAL" --config "$WORK/corral.toml")
  b=$(count pgbouncer "$BOUNCER_PORT" "$proto" 1 /usr/sbin/pgbouncer "$WORK/pgbouncer.ini")
  read -r c c_lines <<<"$c"
  read -r b b_lines <<<"$b"
  if [ -n "$FOOTPRINT" ]; then
    printf '%-10s %10s %10s %12s %12s\n' "$proto" "$c" "$b" "$c_lines" "$b_lines"
  else
    printf '%-10s %10s %10s\n' "$proto" "$c" "$b"
  fi
done
echo "(instructions per pgbench -S transaction, $POOL_MODE mode, $CLIENTS clients x $TX, git $(cd "$ROOT" && git rev-parse --short HEAD))"
[ -z "$FOOTPRINT" ] || echo "(hot: 64-byte lines of code run at least once per transaction)"
