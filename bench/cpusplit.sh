#!/usr/bin/env bash
# Where the machine's time goes per transaction, direct PostgreSQL against PgBouncer and pgcorral:
# busy and idle CPU of the whole machine, and the parts of pgbench, the pooler and the rest
# (PostgreSQL). Explains a pooler's tps beside direct PostgreSQL's. See bench/README.md.
#
#   bench/cpusplit.sh                                   # pgbench -S simple, 16 clients
#   BENCH_PROTOCOL=extended BENCH_ROUNDS=5 bench/cpusplit.sh
#   BENCH_CORRAL_BIN_B=/tmp/pgcorral-x BENCH_CORRAL_ENV_B="X=1" bench/cpusplit.sh   # A/B
#
# Needs a running PostgreSQL that lets $PGUSER (default postgres) in without a password from
# 127.0.0.1 (trust), pgbench and pgbouncer; creates database `corral_instr` (pgbench -i -s 1) if
# missing, as bench/instructions.sh. Both poolers: transaction mode, pool 20, trust auth,
# plaintext, pgcorral with `workers = 0`. Every round runs each target for BENCH_T seconds
# (`pgbench -S -c BENCH_CLIENTS -j 2`), in an order rotated every round. Per transaction, in
# µs of CPU: busy and idle from /proc/stat (all CPUs; idle includes iowait), pgbench's own
# user + system time, the pooler's (its process, all threads), and the rest: busy − pgbench −
# pooler, which is PostgreSQL and the kernel's work outside those processes. Also context
# switches per transaction (/proc/stat ctxt), and the machine's softirq time per transaction (within
# busy, and within the time of whichever process it interrupted: on loopback TCP mostly the
# receiving side's network stack, run within each send). Run it on a quiet machine: everything
# else counts as "rest". BENCH_CORRAL_BIN: the pgcorral binary (default: build the release one);
# BENCH_CORRAL_BIN_B (+ BENCH_CORRAL_ENV_B, environment assignments) adds a second one, "pgcorral-b";
# BENCH_CORRAL_GENERAL_B: extra [general] lines for it (e.g. "io_uring = false" with the same binary).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
DB=corral_instr
PROTO=${BENCH_PROTOCOL:-simple}
# Where both poolers reach PostgreSQL: its TCP address, or the directory of its Unix socket
# (e.g. /var/run/postgresql); direct pgbench stays on TCP.
SERVER_HOST=${BENCH_SERVER_HOST:-127.0.0.1}
CLIENTS=${BENCH_CLIENTS:-16}
T=${BENCH_T:-8}
ROUNDS=${BENCH_ROUNDS:-3}
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PGBENCH=$PG_BIN/pgbench
PSQL=$PG_BIN/psql
PORT_A=${CORRAL_PORT:-7480}
PORT_B=$((PORT_A + 1))
BOUNCER_PORT=${BOUNCER_PORT:-6480}

die() { echo "cpusplit.sh: $*" >&2; exit 1; }
for c in "$PGBENCH" /usr/sbin/pgbouncer /usr/bin/time; do
  command -v "$c" >/dev/null || die "$c is missing"
done

WORK=$(mktemp -d)
chmod 755 "$WORK"
trap 'pkill -f "$WORK/" 2>/dev/null || true; rm -rf "$WORK"' EXIT

"$PSQL" -X -q -h 127.0.0.1 -p "$PGPORT" -U "$PGUSER" -d postgres -tAc \
  "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 || {
  "$PSQL" -X -q -h 127.0.0.1 -p "$PGPORT" -U "$PGUSER" -d postgres -c "CREATE DATABASE $DB"
  "$PGBENCH" -i -q -s 1 -h 127.0.0.1 -p "$PGPORT" -U "$PGUSER" "$DB" >/dev/null 2>&1
}

if [ -n "${BENCH_CORRAL_BIN:-}" ]; then
  CORRAL=$BENCH_CORRAL_BIN
else
  echo "building pgcorral (release)" >&2
  (cd "$ROOT" && cargo build --release -q -p pgcorral)
  CORRAL=${CARGO_TARGET_DIR:-$ROOT/target}/release/pgcorral
fi
[ -x "$CORRAL" ] || die "$CORRAL is not an executable"

corral_toml() { # port [extra general lines]
  cat <<EOF
[general]
listen_addr = "127.0.0.1"
listen_port = $1
pool_mode = "transaction"
default_pool_size = 20
auth_type = "trust"
workers = 0
log_level = "warn"
server_tls_sslmode = "disable"
${2:-}
[databases.$DB]
host = "$SERVER_HOST"
port = $PGPORT
dbname = "$DB"
user = "$PGUSER"
EOF
}
corral_toml "$PORT_A" >"$WORK/corral-a.toml"
corral_toml "$PORT_B" "${BENCH_CORRAL_GENERAL_B:-}" >"$WORK/corral-b.toml"
printf '"%s" ""\n' "$PGUSER" >"$WORK/userlist.txt"
cat >"$WORK/pgbouncer.ini" <<EOF
[databases]
$DB = host=$SERVER_HOST port=$PGPORT dbname=$DB user=$PGUSER pool_size=20
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $WORK/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = $((CLIENTS + 100))
logfile = $WORK/pgbouncer.log
log_connections = 0
log_disconnections = 0
server_tls_sslmode = disable
EOF
AS=() # PgBouncer refuses to run as root
if [ "$(id -u)" -eq 0 ]; then
  AS=(setpriv --reuid=postgres --regid=postgres --init-groups --)
  chown -R postgres "$WORK"
fi

wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; die "nothing listens on $1"; }
setsid "$CORRAL" --config "$WORK/corral-a.toml" >"$WORK/corral-a.log" 2>&1 </dev/null &
PID_A=$!
setsid "${AS[@]}" /usr/sbin/pgbouncer "$WORK/pgbouncer.ini" >/dev/null 2>&1 </dev/null &
PID_BOUNCER=$!
TARGETS=("direct $PGPORT -" "pgbouncer $BOUNCER_PORT $PID_BOUNCER" "pgcorral $PORT_A $PID_A")
if [ -n "${BENCH_CORRAL_BIN_B:-}" ]; then
  # shellcheck disable=SC2086 # BENCH_CORRAL_ENV_B is a list of assignments
  setsid env ${BENCH_CORRAL_ENV_B:-} "$BENCH_CORRAL_BIN_B" --config "$WORK/corral-b.toml" \
    >"$WORK/corral-b.log" 2>&1 </dev/null &
  TARGETS+=("pgcorral-b $PORT_B $!")
  wait_port "$PORT_B"
fi
wait_port "$PORT_A"
wait_port "$BOUNCER_PORT"

proc_cpu() { [ "$1" = - ] && echo 0 || awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# busy (user nice system irq softirq steal), idle (idle iowait), context switches, softirq
machine() { awk '/^cpu / { b = $2 + $3 + $4 + $7 + $8 + $9; i = $5 + $6; s = $8 } /^ctxt/ { c = $2 } END { print b, i, c, s }' /proc/stat; }
HZ=$(getconf CLK_TCK)

run() { # name port pid → one line
  local name=$1 port=$2 pid=$3 p0 p1 b0 i0 c0 s0 b1 i1 c1 s1 out
  p0=$(proc_cpu "$pid")
  read -r b0 i0 c0 s0 <<<"$(machine)"
  out=$({ /usr/bin/time -f "TIME %U %S" "$PGBENCH" -n -S -M "$PROTO" -c "$CLIENTS" -j 2 -T "$T" \
    -h 127.0.0.1 -p "$port" -U "$PGUSER" "$DB"; } 2>&1) || die "$name: pgbench failed: $out"
  read -r b1 i1 c1 s1 <<<"$(machine)"
  p1=$(proc_cpu "$pid")
  echo "$out" | awk -v n="$name" -v b=$((b1 - b0)) -v i=$((i1 - i0)) -v c=$((c1 - c0)) \
    -v p=$((p1 - p0)) -v s=$((s1 - s0)) -v hz="$HZ" '
    /^tps/ { tps = $3 } /processed:/ { split($NF, a, "/"); tx = a[1] } /^TIME/ { pb = $2 + $3 }
    END { u = 1e6 / hz / tx; pb = pb * 1e6 / tx
      printf "%-11s %8.0f %7.1f %6.1f %8.1f %7.1f %6.1f %6.2f %7.1f\n", n, tps, b * u, i * u, pb, p * u, b * u - pb - p * u, c / tx, s * u }'
}

echo "pgbench -S --protocol $PROTO, $CLIENTS clients, ${T} s x $ROUNDS rounds; µs of CPU per transaction"
printf '%-11s %8s %7s %6s %8s %7s %6s %6s %7s\n' target tps busy idle pgbench pooler rest ctxsw softirq
n=${#TARGETS[@]}
for r in $(seq "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    # shellcheck disable=SC2086 # "name port pid"
    run ${TARGETS[$(((k + r) % n))]}
  done
done | tee "$WORK/rows"
echo "medians:"
sort -k1,1 -s "$WORK/rows" | awk '
  function flush() { if (name == "") return; printf "%-11s", name
    for (f = 2; f <= 9; f++) { m = med(f); printf(f == 2 ? " %8.0f" : (f == 8 ? " %6.2f" : " %7.1f"), m) }
    printf "\n" }
  function med(f,   i, j, t, a) { for (i = 1; i <= k; i++) a[i] = v[i, f]
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
  $1 != name { flush(); name = $1; k = 0 }
  { k++; for (f = 2; f <= 9; f++) v[k, f] = $f }
  END { flush() }'
echo "(git $(cd "$ROOT" && git rev-parse --short HEAD); $(nproc) CPUs; busy + idle = the machine's time per transaction)"
