#!/usr/bin/env bash
# What pgcorral's reads across shards cost: a keyless read of a sharded table, which pgcorral asks
# of every shard and merges (docs/sharding.md, "Reads across shards"), against the same read of
# the same rows on one PostgreSQL server, straight and through pgcorral's unsharded database, in
# the same run. The figures that matter: the sharded read's latency ÷ the direct one's, and
# pgcorral's CPU per transaction, sharded ÷ plain.
#
#   bench/gather.sh                                        # ~15 minutes after the build
#   T=3 REPS=1 CLIENTS=1 BENCH_RESULTS_DIR=/tmp/g bench/gather.sh   # a quick check of the harness
#   BENCH_CORRAL_BIN=target/release/pgcorral BENCH_CORRAL_REV=abc123 bench/gather.sh
#
# Knobs (environment): CLIENTS (1 16), REPS (3), T (seconds per run, 10), QUERIES (which of
# count top group, all three by default), ROWS (100000, at most 1000000), SHARDS (3), POOL_SIZE
# (20: `plain`'s and PgBouncer's pool, and each shard's pool of `sharded`: a read holds a server of
# every shard at once), JOBS (pgbench -j, 2, capped at the clients), WARMUP (untimed seconds per
# target and query first, 3; 0 skips), WORKERS (pgcorral's `workers`, 0: one per core), BOUNCER
# (1: PgBouncer in front of `one` as a reference line; 0 leaves it out), BENCH_CORRAL_BIN (a
# pgcorral binary to run instead of building this checkout's; BENCH_CORRAL_REV names it),
# BENCH_NOTE (a sentence for the report's header, e.g. what else ran on the machine), PG_BINDIR,
# BENCH_RESULTS_DIR (default bench/results), KEEP=1 (keep the work directory and its logs, as a
# failed run does). CARGO_TARGET_DIR is honoured.
#
# What it does: builds pgcorral (or copies BENCH_CORRAL_BIN aside); initdb's SHARDS + 1 PostgreSQL
# servers in a temporary directory (as the `postgres` OS user when root; fsync off; trust on
# 127.0.0.1; max_parallel_workers_per_gather = 0 everywhere, so that each server does its rows'
# work in its own backend and `one` does not start parallel workers the smaller shards would
# not): `one` holds all ROWS rows of
#
#   t (id int8 PRIMARY KEY, k int4, v numeric, t text, ts timestamptz), index on v,
#   row g: (g, g % 10, ((g * 7919) % 1000003) / 100 rounded to 2 places, md5(g), 2026-01-01 + g s)
#
# (v is distinct for every row), and shard i the rows PostgreSQL's own hash partitioning puts in
# remainder i of modulus SHARDS (filtered with satisfies_hash_partition against a
# hash-partitioned twin of the key, as docs/sharding.md's "Verifying placement" does; the twin is
# dropped after). pgcorral gets `plain` (`one`) and `sharded` (the shards, t sharded by id int8,
# no default_shard, so a read with no key is gathered); PgBouncer (Debian's) gets `one` as
# `plain`. Poolers: transaction mode, a session of their own (setsid, see bench/README.md), TCP and
# trust to PostgreSQL, as pgbench (PGSSLMODE=disable). Checks before measuring: keys 1..30 through
# `sharded` each find their row (pgcorral routes a key where PostgreSQL's hash put it) on every
# shard between them, and every query answers through every target exactly as `one` answers
# directly (rows sorted for the GROUP BY, which has no ORDER BY). A query pgcorral refuses
# through `sharded` is reported with its error and not measured there; a wrong answer fails the
# script. Then for each query and client count, REPS repetitions of
#
#   pgbench -n -M $PROTOCOL -c $CLIENTS -j $JOBS -T $T -f <query>
#
# against `direct` (`one`), `pgbouncer`, `corral-plain` and `corral-sharded`, one after the other,
# the order rotating each repetition (PROTOCOL: simple, the default, or extended or prepared:
# pgbench's -M; prepared parses each query once per connection and binds it after, which
# pgcorral prepares once on each shard's server). The queries:
#
#   count  select count(*) from t
#   top    select id, v from t order by v desc limit 10     (each server: 10 rows off the index)
#   group  select k, count(*), sum(v) from t group by k     (10 groups)
#
# A pooler's CPU: utime + stime of its pid (/proc/PID/stat) before and after pgbench, per
# transaction, and the same from its threads' /proc/PID/task/*/schedstat (nanoseconds: a run of a
# few thousand slow transactions is a handful of clock ticks). A run with a non-zero exit, a failed
# transaction or an aborted client fails the script. The report (medians, ratios, all runs, what
# pgcorral logged) goes to $BENCH_RESULTS_DIR/YYYY-MM-DD-HHMM-gather.md and is printed.
# Everything started is stopped on exit, whatever the reason.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLIENTS=${CLIENTS:-1 16}
REPS=${REPS:-3}
T=${T:-10}
QUERIES=${QUERIES:-count top group}
PROTOCOL=${PROTOCOL:-simple}
[[ $PROTOCOL =~ ^(simple|extended|prepared)$ ]] || { echo "PROTOCOL must be simple, extended or prepared" >&2; exit 2; }
ROWS=${ROWS:-100000}
SHARDS=${SHARDS:-3}
POOL_SIZE=${POOL_SIZE:-20}
JOBS=${JOBS:-2}
WARMUP=${WARMUP:-3}
WORKERS=${WORKERS:-0}
# PgBouncer before 1.21 has no protocol-level prepared statements in transaction mode (and
# Debian's is 1.18): with PROTOCOL=prepared it is left out unless BOUNCER=1 is given.
if [ "$PROTOCOL" = prepared ]; then BOUNCER=${BOUNCER:-0}; else BOUNCER=${BOUNCER:-1}; fi
KEEP=${KEEP:-0}
RESULTS=${BENCH_RESULTS_DIR:-$BENCH_DIR/results}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
for v in REPS T ROWS SHARDS POOL_SIZE JOBS; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number"; done
for v in WARMUP WORKERS; do [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number"; done
[ "$ROWS" -le 1000000 ] || die "ROWS is at most 1000000 (v must stay distinct)"
[ "$SHARDS" -ge 2 ] || die "SHARDS must be at least 2"
[[ $BOUNCER =~ ^[01]$ ]] || die "BOUNCER is 1 or 0"
max_c=0
for c in $CLIENTS; do
  [[ $c =~ ^[1-9][0-9]*$ ]] || die "CLIENTS must be positive whole numbers, not '$c'"
  [ "$c" -le "$max_c" ] || max_c=$c
done
[ "$max_c" -gt 0 ] || die "CLIENTS names no client count"
[ -n "$QUERIES" ] || die "QUERIES names no query"
for q in $QUERIES; do [[ $q =~ ^(count|top|group)$ ]] || die "unknown query '$q' (count, top, group)"; done

query_sql() {
  case $1 in
    count) echo 'select count(*) from t' ;;
    top) echo 'select id, v from t order by v desc limit 10' ;;
    group) echo 'select k, count(*), sum(v) from t group by k' ;;
  esac
}

# ---- tools ----------------------------------------------------------------------------------------
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
find_pg_bin
PGBENCH=$PG_BIN/pgbench
PSQL=$PG_BIN/psql
[ -x "$PSQL" ] || PSQL=$(command -v psql) || die "psql not found"
command -v python3 >/dev/null || die "python3 is needed (free ports, the report)"
PGBOUNCER="" BOUNCER_VERSION=""
if [ "$BOUNCER" = 1 ]; then
  PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
  [ -x "$PGBOUNCER" ] || die "pgbouncer not found (apt-get install pgbouncer, or BOUNCER=0)"
  BOUNCER_VERSION=$("$PGBOUNCER" --version | sed -n '1s/^PgBouncer \([0-9.]*\).*/\1/p')
fi
CLK_TCK=$(getconf CLK_TCK)

AS_PG=() # PostgreSQL and PgBouncer refuse to run as root
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' OS user for PostgreSQL and PgBouncer"
  AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
fi
as_pg() { "${AS_PG[@]}" "$@"; }
ulimit -n $((max_c * (SHARDS + 2) * 2 + 1024)) 2>/dev/null || true

# ---- cleanup --------------------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pgcorral-gather.XXXXXX")
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
  rm -rf "$WORK"/pg-*/data
  if [ "$rc" -ne 0 ] || [ "$KEEP" = 1 ]; then log "logs kept in $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
cleanup_on_exit

corral_binary "$WORK/pgcorral"

# ---- PostgreSQL: `one` and the shards -------------------------------------------------------------
read -r -a PORTS <<<"$(free_tcp_ports $((SHARDS + 3)))"
ONE_PORT=${PORTS[0]} CORRAL_PORT=${PORTS[1]} BOUNCER_PORT=${PORTS[2]}
SHARD_PORTS=("${PORTS[@]:3}")
export PGSSLMODE=disable
sql() { # port sql...: runs as postgres on database postgres, stops at the first error
  local port=$1
  shift
  "$PSQL" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres "$@"
}

start_pg() { # name port
  local dir=$WORK/pg-$1
  mkdir -p "$dir"
  [ "$(id -u)" -ne 0 ] || chown postgres:postgres "$dir" # its log is written by the server
  pg_initdb "$dir/data" "$dir/initdb.log"
  cat >>"$dir/data/postgresql.conf" <<EOF

# bench/gather.sh
listen_addresses = '127.0.0.1'
port = $2
unix_socket_directories = ''
max_connections = $((max_c + 2 * POOL_SIZE + 20))
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
max_parallel_workers_per_gather = 0
EOF
  echo "host all all 127.0.0.1/32 trust" >"$dir/data/pg_hba.conf"
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgresql.log" -w -t 60 start >/dev/null ||
    die "PostgreSQL $1 did not start; see $dir/postgresql.log"
  PG_STARTED+=("$dir/data")
}

TABLE="CREATE TABLE t (id int8 PRIMARY KEY, k int4 NOT NULL, v numeric NOT NULL, t text NOT NULL, ts timestamptz NOT NULL)"
ROW_SELECT="SELECT g, (g % 10)::int4, round(((g * 7919) % 1000003) / 100.0, 2), md5(g::text),
  timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second' FROM generate_series(1::int8, $ROWS) g"
FINISH=(-c "CREATE INDEX t_v ON t (v)" -c "VACUUM ANALYZE t")

log "PostgreSQL one: port $ONE_PORT, $ROWS rows"
start_pg one "$ONE_PORT"
sql "$ONE_PORT" -c "$TABLE" -c "INSERT INTO t $ROW_SELECT" "${FINISH[@]}" || die "could not load one"
for ((i = 0; i < SHARDS; i++)); do
  log "PostgreSQL shard $i: port ${SHARD_PORTS[i]}, the rows of remainder $i of $SHARDS"
  start_pg "shard$i" "${SHARD_PORTS[i]}"
  args=(-c "CREATE TABLE placement_twin (id int8) PARTITION BY HASH (id)")
  for ((r = 0; r < SHARDS; r++)); do
    args+=(-c "CREATE TABLE placement_twin_$r PARTITION OF placement_twin FOR VALUES WITH (MODULUS $SHARDS, REMAINDER $r)")
  done
  sql "${SHARD_PORTS[i]}" "${args[@]}" -c "$TABLE" \
    -c "INSERT INTO t $ROW_SELECT WHERE satisfies_hash_partition('placement_twin'::regclass, $SHARDS, $i, g)" \
    -c "DROP TABLE placement_twin" "${FINISH[@]}" || die "could not load shard $i"
done
held=()
total=0
for ((i = 0; i < SHARDS; i++)); do
  n=$(sql "${SHARD_PORTS[i]}" -c "SELECT count(*) FROM t") || die "shard $i: $n"
  [ "$n" -gt 0 ] || die "shard $i holds no rows"
  held+=("$n")
  total=$((total + n))
done
[ "$total" -eq "$ROWS" ] || die "the shards hold $total rows, not $ROWS"
SHARD_ROWS=$(IFS=/; echo "${held[*]}")
log "rows per shard: $SHARD_ROWS"

# ---- pgcorral -------------------------------------------------------------------------------------
shard_list=""
for ((i = 0; i < SHARDS; i++)); do
  shard_list+="${shard_list:+, }{ host = \"127.0.0.1\", port = ${SHARD_PORTS[i]} }"
done
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
port = $ONE_PORT
dbname = "postgres"

# No default_shard: a read that names no shard is asked of every shard and merged.
[databases.sharded]
dbname = "postgres"
shards = [$shard_list]
sharded_tables = [{ name = "t", columns = ["id"], types = ["int8"] }]
EOF
"$WORK/pgcorral" --config "$WORK/pgcorral.toml" --check >/dev/null || die "pgcorral refuses $WORK/pgcorral.toml"
log "pgcorral: port $CORRAL_PORT, databases plain and sharded ($SHARDS shards), pool size $POOL_SIZE each"
setsid env -u RUST_LOG "$WORK/pgcorral" --config "$WORK/pgcorral.toml" >"$WORK/pgcorral.log" 2>&1 &
CORRAL_PID=$!
wait_listening "$CORRAL_PORT" pgcorral "$CORRAL_PID" "$WORK/pgcorral.log"
require_own_session "$CORRAL_PID" pgcorral

# ---- PgBouncer (a reference line: in front of `one`; it cannot read across shards) --------------
if [ "$BOUNCER" = 1 ]; then
  log "PgBouncer $BOUNCER_VERSION: port $BOUNCER_PORT"
  start_plain_bouncer "$ONE_PORT" "$BOUNCER_PORT" "$POOL_SIZE" "$((max_c + 100))"
fi

TARGETS=(direct)
[ "$BOUNCER" = 1 ] && TARGETS+=(pgbouncer)
TARGETS+=(corral-plain corral-sharded)
port_of() { case $1 in direct) echo "$ONE_PORT" ;; pgbouncer) echo "$BOUNCER_PORT" ;; *) echo "$CORRAL_PORT" ;; esac; }
db_of() { case $1 in direct) echo postgres ;; corral-sharded) echo sharded ;; *) echo plain ;; esac; }
pid_of() { case $1 in direct) echo "" ;; pgbouncer) echo "$BOUNCER_PID" ;; *) echo "$CORRAL_PID" ;; esac; }
ask() { # target sql → the answer's rows (psql -At), or psql's error on stderr and a non-zero exit
  "$PSQL" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(port_of "$1")" -U postgres -d "$(db_of "$1")" -c "$2"
}

# ---- checks: keys are where pgcorral looks for them; every answer is `one`'s ---------------------
found=""
for k in $(seq 1 30); do
  got=$(ask corral-sharded "SELECT inet_server_port() FROM t WHERE id = $k" 2>&1) || die "sharded, key $k: $got"
  [ -n "$got" ] || die "sharded: key $k is not on the shard pgcorral routes it to"
  found+="$got"$'\n'
done
for ((i = 0; i < SHARDS; i++)); do
  grep -qx "${SHARD_PORTS[i]}" <<<"$found" || die "keys 1-30 through sharded never reached shard $i"
done
log "routing check: keys 1-30 each found on the shard pgcorral routes them to, every shard among them"

REFUSED=$WORK/refused.tsv # query, error
: >"$REFUSED"
MEASURED_QUERIES=()
for q in $QUERIES; do
  sqltext=$(query_sql "$q")
  want=$(ask direct "$sqltext" 2>&1) || die "direct does not answer $q: $want"
  [ "$q" = group ] && want=$(sort <<<"$want")
  for t in "${TARGETS[@]:1}"; do
    if ! got=$(ask "$t" "$sqltext" 2>&1); then
      [ "$t" = corral-sharded ] || die "$t does not answer $q: $got"
      log "pgcorral refuses $q through sharded: $got"
      printf '%s\t%s\n' "$q" "$(tr '\n' ' ' <<<"$got" | sed 's/ *$//')" >>"$REFUSED"
      continue
    fi
    [ "$q" = group ] && got=$(sort <<<"$got")
    [ "$got" = "$want" ] || die "$t answers $q ($sqltext) differently from one:"$'\n'"$got"$'\n'"one:"$'\n'"$want"
  done
  MEASURED_QUERIES+=("$q")
done
if [ -s "$REFUSED" ]; then
  log "answer check: every other answer is one's; refused through sharded: $(cut -f1 "$REFUSED" | xargs echo)"
else
  log "answer check: every target answers every query as one does"
fi

# ---- the runs -------------------------------------------------------------------------------------
mkdir -p "$WORK/runs"
QUERY_TEXTS=$WORK/queries.tsv # query, its text (for the report)
: >"$QUERY_TEXTS"
for q in $QUERIES; do
  # With each server's plan (EXPLAIN's nodes, one line), `one`'s and shard 0's.
  plans=()
  for port in "$ONE_PORT" "${SHARD_PORTS[0]}"; do
    plans+=("$(sql "$port" -c "EXPLAIN (COSTS OFF) $(query_sql "$q")" | sed 's/^ *\(-> *\)\?//' | paste -sd'/' | sed 's|/| ← |g')")
  done
  printf '%s\t%s\t%s\t%s\n' "$q" "$(query_sql "$q")" "${plans[@]}" >>"$QUERY_TEXTS"
done
for q in "${MEASURED_QUERIES[@]}"; do echo "$(query_sql "$q");" >"$WORK/$q.sql"; done
RUNS=$WORK/runs.tsv # query clients target rep tps latency_ms transactions cpu_ticks cpu_ns
: >"$RUNS"

targets_for() { # query
  local t
  for t in "${TARGETS[@]}"; do
    [ "$t" = corral-sharded ] && grep -q "^$1"$'\t' "$REFUSED" && continue
    echo "$t"
  done
}

run_pgbench() { # query clients target rep (rep 0: the warm-up, T=WARMUP, not recorded)
  local q=$1 c=$2 t=$3 rep=$4 secs=$T pid ticks0="" ticks1="" ns0="" ns1="" rc=0 out j
  [ "$rep" -eq 0 ] && secs=$WARMUP
  pid=$(pid_of "$t")
  j=$((JOBS < c ? JOBS : c))
  out=$WORK/runs/$q-c$c-$t-r$rep.out
  # A second for the pooler to finish the previous run's logouts, then its CPU time so far.
  if [ -n "$pid" ]; then
    sleep 1
    ticks0=$(proc_cpu_ticks "$pid") || die "$t died; see $WORK"
    ns0=$(proc_cpu_ns "$pid")
  fi
  timeout --kill-after=10 $((secs * 3 + 120)) "$PGBENCH" -n -M "$PROTOCOL" -c "$c" -j "$j" -T "$secs" \
    -f "$WORK/$q.sql" -h 127.0.0.1 -p "$(port_of "$t")" -U postgres "$(db_of "$t")" >"$out" 2>&1 &
  PGBENCH_PID=$!
  wait "$PGBENCH_PID" || rc=$?
  PGBENCH_PID=""
  if [ -n "$pid" ]; then
    ticks1=$(proc_cpu_ticks "$pid") || die "$t died; see $WORK"
    ns1=$(proc_cpu_ns "$pid")
  fi
  local tps lat tx failed
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$out")
  lat=$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' "$out")
  tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
  failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$out")
  if [ "$rc" -ne 0 ] || [ -z "$tx" ] || [ "$tx" -eq 0 ] || [ "${failed:-x}" != 0 ] || grep -q 'aborted' "$out"; then
    grep -i 'error\|abort\|fail' "$out" | head -n 5 >&2 || true
    die "pgbench $q c=$c against $t: exit $rc, ${tx:-no} transactions, ${failed:-unknown} failed; see $out"
  fi
  [ "$rep" -eq 0 ] && return 0
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$q" "$c" "$t" "$rep" "$tps" "$lat" "$tx" \
    "${ticks0:+$((ticks1 - ticks0))}" "$([ -n "$ns0" ] && [ -n "$ns1" ] && echo $((ns1 - ns0)))" >>"$RUNS"
  log "  $q c=$c $t: tps $tps, latency $lat ms${ticks0:+, pooler $((ticks1 - ticks0)) ticks}"
}

START_EPOCH=$(date +%s)
RUN_DATE=$(date +%Y-%m-%d-%H%M)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$WARMUP" -gt 0 ]; then
  log "warm-up: ${WARMUP}s per target and query, $max_c clients"
  for q in "${MEASURED_QUERIES[@]}"; do
    for t in $(targets_for "$q"); do run_pgbench "$q" "$max_c" "$t" 0; done
  done
fi
for ((rep = 1; rep <= REPS; rep++)); do
  log "repetition $rep of $REPS"
  for q in "${MEASURED_QUERIES[@]}"; do
    read -r -a ts <<<"$(targets_for "$q" | xargs echo)"
    for c in $CLIENTS; do
      off=$(((rep - 1) % ${#ts[@]})) # rotate the order, so that none always runs first
      for t in "${ts[@]:off}" "${ts[@]:0:off}"; do run_pgbench "$q" "$c" "$t" "$rep"; done
    done
  done
done
elapsed=$(($(date +%s) - START_EPOCH))
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
kill -0 "$CORRAL_PID" 2>/dev/null || die "pgcorral is gone; see $WORK/pgcorral.log"

# ---- report ---------------------------------------------------------------------------------------
mkdir -p "$RESULTS"
REPORT=$RESULTS/$RUN_DATE-gather$([ "$PROTOCOL" = simple ] || echo "-$PROTOCOL").md
CPU_MODEL=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
MACHINE="$(nproc) cores (${CPU_MODEL:-unknown CPU}), $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -sr)"
PG_VERSION=$("$PG_BIN/postgres" --version)
export RUNS REFUSED QUERY_TEXTS CLK_TCK CLIENTS REPS T ROWS SHARDS SHARD_ROWS POOL_SIZE JOBS WORKERS BOUNCER BOUNCER_VERSION
export CORRAL_REV PG_VERSION MACHINE RUN_DATE LOAD_START LOAD_END QUERIES PROTOCOL
export ELAPSED="$((elapsed / 60))m$((elapsed % 60))s" BENCH_NOTE=${BENCH_NOTE:-} CORRAL_LOG=$WORK/pgcorral.log
python3 - >"$REPORT" <<'EOF'
import os, statistics as st
from collections import defaultdict
E = os.environ
SQL, PLANS = {}, {}
for l in open(E["QUERY_TEXTS"]):
    if l.strip():
        q, text, *plans = l.rstrip("\n").split("\t")
        SQL[q], PLANS[q] = text, plans
runs = defaultdict(list)  # (query, clients, target) -> [(tps, latency ms, µs/tx stat, µs/tx schedstat)]
for line in open(E["RUNS"]):
    q, c, t, rep, tps, lat, tx, ticks, ns = line.rstrip("\n").split("\t")
    tx = int(tx)
    runs[(q, int(c), t)].append((float(tps), float(lat),
                                 int(ticks) / int(E["CLK_TCK"]) * 1e6 / tx if ticks else None,
                                 int(ns) / 1e3 / tx if ns else None))
refused = dict(l.rstrip("\n").split("\t", 1) for l in open(E["REFUSED"]) if l.strip())
def med(q, c, t, i):
    v = [r[i] for r in runs.get((q, c, t), []) if r[i] is not None]
    return st.median(v) if v else None
def f(x, fmt="{:,.0f}"):
    return "n/a" if x is None else fmt.format(x)
def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b
clients = [int(c) for c in E["CLIENTS"].split()]
queries = E["QUERIES"].split()
names = {"direct": "PostgreSQL `one` direct", "pgbouncer": f"PgBouncer {E['BOUNCER_VERSION']} → `one`",
         "corral-plain": "pgcorral `plain` → `one`", "corral-sharded": f"pgcorral `sharded` ({E['SHARDS']} shards)"}
targets = [t for t in names if t != "pgbouncer" or E["BOUNCER"] == "1"]
print(f"# Reads across shards: what gathering costs, {E['RUN_DATE']}\n")
if E["BENCH_NOTE"]:
    print(f"**Note:** {E['BENCH_NOTE']}\n")
print(f"`bench/gather.sh`: keyless reads of a table of {int(E['ROWS']):,} rows through pgcorral's "
      f"database `sharded`, which asks each of {E['SHARDS']} shard servers (holding the rows "
      f"PostgreSQL's hash partitioning puts in their remainder: {E['SHARD_ROWS']}) and merges the "
      "answers, against the same reads of all the rows on one server `one`: direct, through "
      "pgcorral's unsharded database `plain`"
      + (", and through PgBouncer (a reference line: PgBouncer cannot read across shards, so it "
         "is in front of `one`)" if E["BOUNCER"] == "1" else "") + ".\n")
print(f"git {E['CORRAL_REV']}; {E['MACHINE']}; {E['PG_VERSION']}; "
      f"{E['REPS']} × {E['T']} s per cell, targets interleaved, order rotating; pgbench -n -M {E['PROTOCOL']}, "
      f"-j {E['JOBS']} (capped at the clients); transaction mode, pool size {E['POOL_SIZE']} "
      "(each shard's too); pgcorral workers: "
      f"{E['WORKERS'] if E['WORKERS'] != '0' else 'one per core (the default)'}; every server "
      "fsync off, max_parallel_workers_per_gather = 0; "
      f"load average {E['LOAD_START']} → {E['LOAD_END']}; took {E['ELAPSED']}.\n")
print("Queries:\n")
for q in queries:
    print(f"* `{q}`: `{SQL[q]}`" + (f" — **refused by pgcorral through `sharded`**: {refused[q]}" if q in refused else ""))
    print(f"  (plan on `one`: {PLANS[q][0]}; on shard 0: {PLANS[q][1]})")
print("\nMedians over the repetitions. Latency: pgbench's average. Pooler CPU: the pooler's "
      "process over the pgbench run ÷ transactions (its logins included), from utime + stime "
      "(/proc/PID/stat, clock ticks of 10 ms) and from its threads' schedstat (ns).\n")
summary = []
for q in queries:
    for c in clients:
        print(f"## {q}, {c} client{'s' if c != 1 else ''}\n")
        print("| target | tps | latency ms | pooler CPU µs/tx (stat) | pooler CPU µs/tx (schedstat) |")
        print("|---|---:|---:|---:|---:|")
        for t in targets:
            if (q, c, t) not in runs:
                print(f"| {names[t]} | {'refused' if t == 'corral-sharded' and q in refused else 'n/a'} | | | |")
                continue
            cpu = (lambda i: "–" if t == "direct" else f(med(q, c, t, i), "{:.1f}"))
            print(f"| {names[t]} | {f(med(q, c, t, 0))} | {f(med(q, c, t, 1), '{:.3f}')} | {cpu(2)} | {cpu(3)} |")
        ld, lp, ls = (med(q, c, t, 1) for t in ("direct", "corral-plain", "corral-sharded"))
        cp, cs = med(q, c, "corral-plain", 2), med(q, c, "corral-sharded", 2)
        np_, ns_ = med(q, c, "corral-plain", 3), med(q, c, "corral-sharded", 3)
        print(f"\n* sharded latency ÷ direct = **{f(ratio(ls, ld), '{:.2f}')}** "
              f"(÷ plain pgcorral: {f(ratio(ls, lp), '{:.2f}')})")
        print(f"* sharded ÷ plain pgcorral CPU per transaction = **{f(ratio(cs, cp), '{:.2f}')}** (stat), "
              f"**{f(ratio(ns_, np_), '{:.2f}')}** (schedstat; {f(None if ns_ is None or np_ is None else ns_ - np_, '{:+.1f}')} µs/tx)\n")
        summary.append((q, c, ld, lp, ls, ratio(ls, ld), cp, cs, ratio(cs, cp), np_, ns_, ratio(ns_, np_)))
print("## Summary\n")
print("| query | clients | latency ms direct / plain / sharded | sharded ÷ direct latency | "
      "pgcorral µs/tx plain → sharded (stat) | sharded ÷ plain CPU (stat) | "
      "pgcorral µs/tx plain → sharded (schedstat) | sharded ÷ plain CPU (schedstat) |")
print("|---|---:|---|---:|---|---:|---|---:|")
for q, c, ld, lp, ls, rl, cp, cs, rc, np_, ns_, rn in summary:
    print(f"| {q} | {c} | {f(ld, '{:.3f}')} / {f(lp, '{:.3f}')} / {f(ls, '{:.3f}')} | {f(rl, '{:.2f}')} | "
          f"{f(cp, '{:.1f}')} → {f(cs, '{:.1f}')} | {f(rc, '{:.2f}')} | "
          f"{f(np_, '{:.1f}')} → {f(ns_, '{:.1f}')} | {f(rn, '{:.2f}')} |")
print("\n## All runs\n\n| query | clients | target | tps per repetition | latency ms | pooler µs/tx (stat) | pooler µs/tx (schedstat) |")
print("|---|---:|---|---|---|---|---|")
for (q, c, t), rs in runs.items():
    cpu = lambda i: "–" if t == "direct" else ", ".join(f(r[i], "{:.1f}") for r in rs)
    print(f"| {q} | {c} | {t} | {', '.join(f(r[0]) for r in rs)} | "
          f"{', '.join(f(r[1], '{:.3f}') for r in rs)} | {cpu(2)} | {cpu(3)} |")
logged = [l.rstrip() for l in open(E["CORRAL_LOG"], errors="replace") if l.strip()]
print(f"\n## pgcorral's log (log_level warn)\n")
if logged:
    print(f"{len(logged)} lines; the first {min(len(logged), 20)}:\n\n```")
    print("\n".join(logged[:20]))
    print("```")
else:
    print("Nothing.")
EOF
cat "$REPORT"
log "report: $REPORT (runs took ${elapsed}s)"
