#!/usr/bin/env bash
# What routing by a sharding key costs pgcorral: key-routed `pgbench -S` through a 2-shard
# database against the same query on one unsharded database through the same pgcorral, in the
# same run, with direct PostgreSQL and PgBouncer alongside. The figure that matters is pgcorral's
# CPU per transaction, sharded ÷ plain (target: ≤ 1.10).
#
#   bench/sharding.sh                               # ~10 minutes after the build
#   T=3 REPS=1 CLIENTS=16 bench/sharding.sh         # a quick check of the harness
#   SHARD_LAYOUT=databases bench/sharding.sh        # both shards on one server: routing alone
#
# Knobs (environment): PROTOCOLS (simple extended prepared), CLIENTS (16 64), REPS (3), T (seconds
# per run, 10), SCALE (pgbench -i -s, 10), POOL_SIZE (20; `plain`'s and PgBouncer's pool),
# SHARD_POOL_SIZE (each shard's pool of `sharded`, default POOL_SIZE / 2, so that both databases
# may hold the same number of server connections in all and PostgreSQL runs as many backends
# for either: more backends on the same cores make every pooler system call dearer), JOBS (pgbench -j, 2, capped at the
# clients), SHARD_LAYOUT (`servers`: shard 1 is a second PostgreSQL server; `databases`: shard 1
# is a copy of the database on the first server, so PostgreSQL's side is the same for `plain`
# and `sharded` and the difference is pgcorral's routing alone, not a second server's
# backends competing for the same cores), BENCH_CORRAL_BIN (a pgcorral binary to run instead of
# building this checkout's; BENCH_CORRAL_REV names it in the report), WARMUP (untimed seconds per target and protocol first, 3; 0 skips), PG_BINDIR
# (PostgreSQL's binaries), WORKERS (pgcorral's `workers`, default 0: one per core; 1 keeps every
# client and server on one thread, so that the comparison is not of where the runtime's
# balancing happened to put clients in each run, see docs/performance.md), BENCH_RESULTS_DIR (default bench/results), KEEP=1 (keep the work
# directory and its logs, as a failed run does). CARGO_TARGET_DIR and CARGO_BUILD_JOBS are honoured.
#
# What it does: builds pgcorral (cargo build --release -p pgcorral) and copies the binary aside;
# initdb's two PostgreSQL servers in a temporary directory (as the `postgres` OS user when root;
# fsync off; trust on 127.0.0.1), each loaded by `pgbench -i -s $SCALE`. Every shard holds all
# the rows: routing sends each key to one shard, and the answer is the same whichever it is (the
# routing is measured, not the placement). pgcorral gets `plain` (the first server) and `sharded`
# (both servers as shards, pgbench_accounts by aid int4, default shard 0); PgBouncer (Debian's)
# gets `plain`. Both poolers: transaction mode, pool size $POOL_SIZE, a session of their own
# (setsid, see bench/README.md), TCP and trust to PostgreSQL, as pgbench (PGSSLMODE=disable).
# After a check that keys 1..20 through `sharded` reach both servers, for each protocol and client
# count, REPS repetitions of
#
#   pgbench -n -M $PROTOCOL -c $CLIENTS -j $JOBS -T $T -D scale=$SCALE -f <script>
#
# (`\set aid random(1, 100000 * :scale)`, `SELECT abalance FROM pgbench_accounts WHERE aid = :aid;`)
# against direct PostgreSQL, PgBouncer, pgcorral `plain` and `sharded`, one after the other, the
# order rotating each repetition. A pooler's CPU: utime + stime of its pid (/proc/PID/stat, all
# threads) before and after pgbench, per transaction (trust logins included), and its utime alone. A run with a
# non-zero exit, failed transactions or an aborted client fails the script. PgBouncer < 1.21 has
# no prepared statements in transaction mode: its prepared runs are n/a. The report (medians,
# ratios) goes to $BENCH_RESULTS_DIR/YYYY-MM-DD-HHMM-sharding.md and is printed. Everything
# started is stopped on exit, whatever the reason.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
PROTOCOLS=${PROTOCOLS:-simple extended prepared}
CLIENTS=${CLIENTS:-16 64}
REPS=${REPS:-3}
T=${T:-10}
SCALE=${SCALE:-10}
POOL_SIZE=${POOL_SIZE:-20}
SHARD_POOL_SIZE=${SHARD_POOL_SIZE:-$(( (POOL_SIZE + 1) / 2 ))}
JOBS=${JOBS:-2}
WARMUP=${WARMUP:-3}
WORKERS=${WORKERS:-0}
KEEP=${KEEP:-0}
SHARD_LAYOUT=${SHARD_LAYOUT:-servers}
RESULTS=${BENCH_RESULTS_DIR:-$BENCH_DIR/results}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[[ $WORKERS =~ ^[0-9]+$ ]] || die "WORKERS must be a whole number"
for v in REPS T SCALE POOL_SIZE SHARD_POOL_SIZE JOBS; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number"; done
for c in $CLIENTS; do [[ $c =~ ^[1-9][0-9]*$ ]] || die "CLIENTS must be positive whole numbers, not '$c'"; done
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be a whole number"
max_c=$(printf '%s\n' $CLIENTS | sort -n | tail -n1)
for p in $PROTOCOLS; do [[ $p =~ ^(simple|extended|prepared)$ ]] || die "unknown protocol '$p'"; done
[[ $SHARD_LAYOUT =~ ^(servers|databases)$ ]] || die "SHARD_LAYOUT is servers or databases, not '$SHARD_LAYOUT'"

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---- tools ----------------------------------------------------------------------------------------
PG_BIN=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
if [ -z "${PG_BINDIR:-}" ] && [ ! -x "$PG_BIN/initdb" ]; then
  PG_BIN=$(find /usr/lib/postgresql -maxdepth 3 -name initdb -path '*/bin/*' 2>/dev/null | sort -V | tail -n1 | xargs -r dirname)
fi
[ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pgbench" ] || die "PostgreSQL binaries not found (set PG_BINDIR)"
PGBENCH=$PG_BIN/pgbench
find_psql_and_bouncer
command -v python3 >/dev/null || die "python3 is needed (free ports, the report)"
CLK_TCK=$(getconf CLK_TCK)

AS_PG=() # PostgreSQL and PgBouncer refuse to run as root
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' OS user for PostgreSQL and PgBouncer"
  AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
fi
as_pg() { "${AS_PG[@]}" "$@"; }
ulimit -n $((max_c * 4 + 1024)) 2>/dev/null || true

# ---- cleanup --------------------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pgcorral-sharding.XXXXXX")
chmod 755 "$WORK"
PGBENCH_PID="" CORRAL_PID="" BOUNCER_PID="" PG_STARTED=()

cleanup() {
  local rc=$? d
  trap - EXIT INT TERM HUP
  set +e
  stop_pid "$PGBENCH_PID" pgbench
  stop_pid "$CORRAL_PID" pgcorral
  stop_pid "$BOUNCER_PID" pgbouncer
  for d in "${PG_STARTED[@]}"; do
    as_pg "$PG_BIN/pg_ctl" -D "$d" -m fast -w -t 30 stop >/dev/null 2>&1 ||
      as_pg "$PG_BIN/pg_ctl" -D "$d" -m immediate -w -t 30 stop >/dev/null 2>&1
  done
  rm -rf "$WORK"/pg?/data
  if [ "$rc" -ne 0 ] || [ "$KEEP" = 1 ]; then log "logs kept in $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
cleanup_on_exit

# ---- build ----------------------------------------------------------------------------------------
if [ -n "${BENCH_CORRAL_BIN:-}" ]; then
  # A binary built elsewhere (another commit's, for a before/after on the same machine).
  [ -x "$BENCH_CORRAL_BIN" ] || die "BENCH_CORRAL_BIN: $BENCH_CORRAL_BIN is not an executable"
  cp "$BENCH_CORRAL_BIN" "$WORK/pgcorral"
  GIT_REV="${BENCH_CORRAL_REV:-binary $BENCH_CORRAL_BIN}"
else
  log "cargo build --release -p pgcorral"
  (cd "$ROOT" && cargo build --release -p pgcorral) || die "cargo build failed"
  TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  cp "$TARGET_DIR/release/pgcorral" "$WORK/pgcorral" # another build must not swap it mid-run
  GIT_REV=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
  [ -z "$(cd "$ROOT" && git status --porcelain -- crates 2>/dev/null)" ] || GIT_REV="$GIT_REV (sources modified)"
fi

read -r PG1 PG2 CORRAL_PORT BOUNCER_PORT < <(python3 -c 'import socket
socks = [socket.socket() for _ in range(4)]
print(*[s.bind(("127.0.0.1", 0)) or s.getsockname()[1] for s in socks])')

wait_port() { # port name pid
  local i
  for ((i = 0; i < 300; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || die "$2 exited at start; see $WORK/$2.log"
    sleep 0.1
  done
  die "$2 is not listening on port $1 after 30 s"
}
own_session() { # pid name: the pooler must lead its own session (see bench/README.md)
  [ "$(ps -o sid= -p "$1" | tr -d ' ')" = "$1" ] || die "$2 (pid $1) does not lead its own session"
}

# ---- two PostgreSQL servers -----------------------------------------------------------------------
start_pg() { # name port
  local dir=$WORK/$1
  mkdir -p "$dir/data"
  [ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$dir"
  chmod 700 "$dir/data"
  as_pg "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 ||
    die "initdb failed; see $dir/initdb.log"
  cat >>"$dir/data/postgresql.conf" <<EOF

# bench/sharding.sh
listen_addresses = '127.0.0.1'
port = $2
unix_socket_directories = ''
max_connections = $((max_c + 3 * POOL_SIZE + 20))
shared_buffers = 256MB
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  echo "host all all 127.0.0.1/32 trust" >"$dir/data/pg_hba.conf"
  log "PostgreSQL $1: port $2"
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgresql.log" -w -t 60 start >/dev/null ||
    die "PostgreSQL $1 did not start; see $dir/postgresql.log"
  PG_STARTED+=("$dir/data")
  log "pgbench -i -s $SCALE on $1"
  "$PGBENCH" -i -q -s "$SCALE" -h 127.0.0.1 -p "$2" -U postgres postgres >"$dir/init.log" 2>&1 ||
    die "pgbench -i failed; see $dir/init.log"
}
start_pg pg1 "$PG1"
if [ "$SHARD_LAYOUT" = servers ]; then
  start_pg pg2 "$PG2"
  SHARD1="{ host = \"127.0.0.1\", port = $PG2 }"
  SHARD1_IS=$PG2
else
  "$PSQL" -X -q -h 127.0.0.1 -p "$PG1" -U postgres -d postgres -c "CREATE DATABASE shard1 TEMPLATE postgres" ||
    die "could not copy the database for shard 1"
  SHARD1="{ host = \"127.0.0.1\", port = $PG1, dbname = \"shard1\" }"
  SHARD1_IS=shard1
fi

# ---- pgcorral -------------------------------------------------------------------------------------
cat >"$WORK/pgcorral.toml" <<EOF
[general]
listen_addr = "127.0.0.1"
listen_port = $CORRAL_PORT
pool_mode = "transaction"
workers = $WORKERS
default_pool_size = $POOL_SIZE
max_client_conn = $((max_c + 100))
auth_type = "trust"
server_tls_sslmode = "disable"
log_level = "warn"

[databases.plain]
host = "127.0.0.1"
port = $PG1
dbname = "postgres"

[databases.sharded]
dbname = "postgres"
shards = [{ host = "127.0.0.1", port = $PG1 }, $SHARD1]
sharded_tables = [{ name = "pgbench_accounts", columns = ["aid"], types = ["int4"] }]
default_shard = 0
pool_size = $SHARD_POOL_SIZE
EOF
"$WORK/pgcorral" --config "$WORK/pgcorral.toml" --check >/dev/null || die "pgcorral refuses $WORK/pgcorral.toml"
log "pgcorral: port $CORRAL_PORT, databases plain (pool size $POOL_SIZE) and sharded (pool size $SHARD_POOL_SIZE per shard)"
setsid env -u RUST_LOG "$WORK/pgcorral" --config "$WORK/pgcorral.toml" >"$WORK/pgcorral.log" 2>&1 &
CORRAL_PID=$!
wait_port "$CORRAL_PORT" pgcorral "$CORRAL_PID"
own_session "$CORRAL_PID" pgcorral

# ---- PgBouncer ------------------------------------------------------------------------------------
BOUNCER_PREPARED=0
[ "$(printf '%s\n1.21\n' "$BOUNCER_VERSION" | sort -V | head -n1)" = 1.21 ] && BOUNCER_PREPARED=1
mkdir -p "$WORK/pgbouncer"
echo '"postgres" ""' >"$WORK/pgbouncer/userlist.txt"
cat >"$WORK/pgbouncer/pgbouncer.ini" <<EOF
[databases]
plain = host=127.0.0.1 port=$PG1 dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $WORK/pgbouncer/userlist.txt
pool_mode = transaction
default_pool_size = $POOL_SIZE
max_client_conn = $((max_c + 100))
server_tls_sslmode = disable
logfile = $WORK/pgbouncer.log
pidfile = $WORK/pgbouncer/pgbouncer.pid
log_connections = 0
log_disconnections = 0
log_stats = 0
$([ "$BOUNCER_PREPARED" = 1 ] && echo "max_prepared_statements = 100")
EOF
[ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$WORK/pgbouncer" && touch "$WORK/pgbouncer.log" && chown postgres "$WORK/pgbouncer.log"
log "PgBouncer $BOUNCER_VERSION: port $BOUNCER_PORT"
setsid "${AS_PG[@]}" "$PGBOUNCER" "$WORK/pgbouncer/pgbouncer.ini" >"$WORK/pgbouncer.stdout" 2>&1 &
BOUNCER_PID=$!
wait_port "$BOUNCER_PORT" pgbouncer "$BOUNCER_PID"
own_session "$BOUNCER_PID" pgbouncer

# ---- checks: every target answers, and the sharded database really routes by the key ------------
export PGSSLMODE=disable
port_of() { case $1 in direct) echo "$PG1" ;; pgbouncer) echo "$BOUNCER_PORT" ;; *) echo "$CORRAL_PORT" ;; esac; }
db_of() { case $1 in direct) echo postgres ;; corral-sharded) echo sharded ;; *) echo plain ;; esac; }
pid_of() { case $1 in direct) echo "" ;; pgbouncer) echo "$BOUNCER_PID" ;; *) echo "$CORRAL_PID" ;; esac; }
for t in direct pgbouncer corral-plain corral-sharded; do
  got=$("$PSQL" -X -At -h 127.0.0.1 -p "$(port_of $t)" -U postgres -d "$(db_of $t)" \
    -c "SELECT abalance FROM pgbench_accounts WHERE aid = 1" 2>&1) && [ "$got" = 0 ] || die "$t does not answer: $got"
done
# Keys 1..20 through `sharded`: each answer names its shard (the server's port, or with both
# shards on one server the database); both shards must appear.
SHARD0_IS=$PG1
where="inet_server_port()"
[ "$SHARD_LAYOUT" = databases ] && where="current_database()" && SHARD0_IS=postgres
args=()
for k in $(seq 1 20); do args+=(-c "SELECT $where FROM pgbench_accounts WHERE aid = $k"); done
ports=$("$PSQL" -X -At -h 127.0.0.1 -p "$CORRAL_PORT" -U postgres -d sharded "${args[@]}" 2>&1) || die "sharded: $ports"
shard_hits="shard 0: $(grep -cx "$SHARD0_IS" <<<"$ports" || true), shard 1: $(grep -cx "$SHARD1_IS" <<<"$ports" || true) of keys 1-20"
grep -qx "$SHARD0_IS" <<<"$ports" && grep -qx "$SHARD1_IS" <<<"$ports" || die "sharded does not route by key ($shard_hits)"
log "routing check: $shard_hits"

# ---- the runs -------------------------------------------------------------------------------------
printf '%s\n' '\set aid random(1, 100000 * :scale)' \
  'SELECT abalance FROM pgbench_accounts WHERE aid = :aid;' >"$WORK/select.sql"
RUNS=$WORK/runs.tsv # protocol clients target rep tps transactions cpu_ticks user_ticks
: >"$RUNS"
mkdir -p "$WORK/runs"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
user_ticks() { awk '{print $14}' "/proc/$1/stat"; }

run_pgbench() { # protocol clients target rep (rep 0: warm-up, T=WARMUP, not recorded)
  local proto=$1 c=$2 t=$3 rep=$4 secs=$T pid before="" after="" user_before="" user_after="" rc=0 out j
  [ "$rep" -eq 0 ] && secs=$WARMUP
  pid=$(pid_of "$t")
  j=$((JOBS < c ? JOBS : c))
  out=$WORK/runs/$proto-c$c-$t-r$rep.out
  # A second for the pooler to finish the previous run's logouts, then its CPU time so far.
  [ -n "$pid" ] && sleep 1 && before=$(cpu_ticks "$pid") && user_before=$(user_ticks "$pid")
  timeout --kill-after=10 $((secs * 3 + 120)) "$PGBENCH" -n -M "$proto" -c "$c" -j "$j" -T "$secs" \
    -D scale="$SCALE" -f "$WORK/select.sql" -h 127.0.0.1 -p "$(port_of "$t")" -U postgres "$(db_of "$t")" >"$out" 2>&1 &
  PGBENCH_PID=$!
  wait "$PGBENCH_PID" || rc=$?
  PGBENCH_PID=""
  [ -n "$pid" ] && { after=$(cpu_ticks "$pid") && user_after=$(user_ticks "$pid") || die "$t died; see $WORK"; }
  local tps tx failed
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$out")
  tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
  failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$out")
  if [ "$rc" -ne 0 ] || [ -z "$tx" ] || [ "$tx" -eq 0 ] || [ "${failed:-x}" != 0 ] || grep -q 'aborted' "$out"; then
    grep -i 'error\|abort\|fail' "$out" | head -n 5 >&2 || true
    die "pgbench $proto c=$c against $t: exit $rc, ${tx:-no} transactions, ${failed:-unknown} failed; see $out"
  fi
  [ "$rep" -eq 0 ] && return 0
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$proto" "$c" "$t" "$rep" "$tps" "$tx" \
    "${before:+$((after - before))}" "${user_before:+$((user_after - user_before))}" >>"$RUNS"
  log "  $proto c=$c $t: tps $tps${before:+, pooler $((after - before)) ticks}"
}
targets_for() { # protocol
  [ "$1" = prepared ] && [ "$BOUNCER_PREPARED" = 0 ] && echo direct corral-plain corral-sharded ||
    echo direct pgbouncer corral-plain corral-sharded
}

START_EPOCH=$(date +%s)
RUN_DATE=$(date +%Y-%m-%d-%H%M)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$WARMUP" -gt 0 ]; then
  log "warm-up: ${WARMUP}s per target and protocol, $max_c clients"
  for p in $PROTOCOLS; do for t in $(targets_for "$p"); do run_pgbench "$p" "$max_c" "$t" 0; done; done
fi
for ((rep = 1; rep <= REPS; rep++)); do
  log "repetition $rep of $REPS"
  for p in $PROTOCOLS; do
    for c in $CLIENTS; do
      read -r -a ts <<<"$(targets_for "$p")"
      off=$(((rep - 1) % ${#ts[@]})) # rotate the order, so none always runs first
      for t in "${ts[@]:off}" "${ts[@]:0:off}"; do run_pgbench "$p" "$c" "$t" "$rep"; done
    done
  done
done
elapsed=$(($(date +%s) - START_EPOCH))

# ---- report ---------------------------------------------------------------------------------------
mkdir -p "$RESULTS"
REPORT=$RESULTS/$RUN_DATE-sharding$([ "$SHARD_LAYOUT" = databases ] && echo -one-server || true).md
pg_version=$("$PG_BIN/postgres" --version)
export WORKERS SHARD_LAYOUT RUNS CLK_TCK PROTOCOLS CLIENTS REPS T SCALE POOL_SIZE SHARD_POOL_SIZE JOBS GIT_REV pg_version BOUNCER_VERSION shard_hits
export LOAD_START LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg)" ELAPSED="$((elapsed / 60))m$((elapsed % 60))s"
export RUN_DATE MACHINE="$(nproc) cores, $(uname -sr)"
python3 - >"$REPORT" <<'EOF'
import os, statistics as st
from collections import defaultdict
E = os.environ
runs = defaultdict(list)  # (protocol, clients, target) -> [(tps, µs/tx or None, user µs/tx or None)]
for line in open(E["RUNS"]):
    p, c, t, rep, tps, tx, ticks, *user = line.rstrip("\n").split("\t")
    per_tx = lambda n: int(n) / int(E["CLK_TCK"]) * 1e6 / int(tx) if n else None
    runs[(p, int(c), t)].append((float(tps), per_tx(ticks), per_tx(user[0] if user else "")))
def med(p, c, t, i):
    v = [r[i] for r in runs.get((p, c, t), []) if r[i] is not None]
    return st.median(v) if v else None
def f(x, fmt="{:,.0f}"):
    return "n/a" if x is None else fmt.format(x)
def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b
names = {"direct": "PostgreSQL direct", "pgbouncer": "PgBouncer " + E["BOUNCER_VERSION"],
         "corral-plain": "pgcorral `plain`", "corral-sharded": "pgcorral `sharded` (2 shards)"}
print(f"# Sharding: routing cost, {E['RUN_DATE']}\n")
print("`bench/sharding.sh`: key-routed `SELECT abalance FROM pgbench_accounts WHERE aid = :aid` "
      "(`\\set aid random(1, 100000 * :scale)`) through pgcorral's 2-shard database `sharded` "
      "against the same query on its unsharded database `plain`, with direct PostgreSQL and "
      "PgBouncer (`plain`, transaction mode) in the same run. Both shards hold every row. "
      + ("Shard 1 is a second PostgreSQL server.\n" if E["SHARD_LAYOUT"] == "servers" else
         "Both shards are on the first server (shard 1 a copy of its database): PostgreSQL's side "
         "is the same for `plain` and `sharded`, so the difference is pgcorral's routing.\n"))
print(f"git {E['GIT_REV']}; {E['MACHINE']}; {E['pg_version']}; {E['REPS']} × {E['T']} s per target, "
      f"interleaved, pgbench -j {E['JOBS']}; scale {E['SCALE']}, pool size {E['POOL_SIZE']} (`sharded`: {E['SHARD_POOL_SIZE']} per shard), transaction mode, "
      f"pgcorral workers: {E['WORKERS'] if E['WORKERS'] != '0' else 'one per core (the default)'}; "
      f"routing check: {E['shard_hits']}; load average {E['LOAD_START']} → {E['LOAD_END']}; took {E['ELAPSED']}.\n")
print("Medians over the repetitions. Pooler CPU: utime + stime of the pooler's process over the "
      "pgbench run ÷ transactions (logins included).\n")
summary = []
for p in E["PROTOCOLS"].split():
    for c in map(int, E["CLIENTS"].split()):
        print(f"## {p}, {c} clients\n")
        print("| target | tps | tps ÷ direct | pooler CPU µs/tx |\n|---|---:|---:|---:|")
        d = med(p, c, "direct", 0)
        for t in names:
            if (p, c, t) not in runs:
                why = " (PgBouncer < 1.21: no prepared statements in transaction mode)" if t == "pgbouncer" else ""
                print(f"| {names[t]}{why} | n/a | | |")
                continue
            print(f"| {names[t]} | {f(med(p, c, t, 0))} | {f(ratio(med(p, c, t, 0), d), '{:.2f}')} | "
                  f"{'–' if t == 'direct' else f(med(p, c, t, 1), '{:.1f}')} |")
        pl, sh, bo = (med(p, c, t, 1) for t in ("corral-plain", "corral-sharded", "pgbouncer"))
        rc = ratio(sh, pl)
        print(f"\n* routing cost: sharded ÷ plain pgcorral CPU = **{f(rc, '{:.2f}')}** "
              f"({f(None if rc is None else sh - pl, '{:+.1f}')} µs/tx; target ≤ 1.10)")
        print(f"* pgcorral sharded ÷ PgBouncer CPU = {f(ratio(sh, bo), '{:.2f}')}; "
              f"tps sharded ÷ plain = {f(ratio(med(p, c, 'corral-sharded', 0), med(p, c, 'corral-plain', 0)), '{:.2f}')}\n")
        summary.append((p, c, pl, sh, rc, ratio(sh, bo), med(p, c, "corral-plain", 2), med(p, c, "corral-sharded", 2)))
print("## Summary: pgcorral CPU per transaction\n")
print("User µs/tx: the user-space part of the pooler's CPU (routing is user-space work; the rest is the "
      "kernel's, for the same system calls).\n")
print("| protocol | clients | plain µs/tx | sharded µs/tx | routing µs/tx | sharded ÷ plain | ≤ 1.10 | user µs/tx plain → sharded | sharded ÷ PgBouncer |")
print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
for p, c, pl, sh, rc, rb, upl, ush in summary:
    ok = "n/a" if rc is None else ("yes" if rc <= 1.10 else "**no**")
    print(f"| {p} | {c} | {f(pl, '{:.1f}')} | {f(sh, '{:.1f}')} | "
          f"{f(None if rc is None else sh - pl, '{:+.1f}')} | {f(rc, '{:.2f}')} | {ok} | "
          f"{f(upl, '{:.1f}')} → {f(ush, '{:.1f}')} | {f(rb, '{:.2f}')} |")
print("\n## All runs\n\n| protocol | clients | target | tps per repetition | pooler µs/tx per repetition |\n|---|---:|---|---|---|")
for (p, c, t), rs in runs.items():
    print(f"| {p} | {c} | {t} | {', '.join(f(r[0]) for r in rs)} | "
          f"{', '.join(f(r[1], '{:.1f}') for r in rs) if t != 'direct' else '–'} |")
EOF
cat "$REPORT"
log "report: $REPORT (in ${elapsed}s)"
