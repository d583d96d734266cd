#!/usr/bin/env bash
# What pgcorral's result cache saves (docs/architecture/cache.md): a repeated read of a hot set,
# pgbench's select-only query over HOT keys, against PostgreSQL directly, PgBouncer, pgcorral
# without the cache and pgcorral with it, in the same run. The figures that matter: tps, the
# server's CPU per query (PostgreSQL's every process) and the pooler's, with the cache ÷ without.
#
#   bench/cache.sh                                       # ~5 minutes after the build
#   T=3 REPS=1 BENCH_RESULTS_DIR=/tmp/c bench/cache.sh   # a quick check of the harness
#   BENCH_CORRAL_BIN=target/release/pgcorral BENCH_CORRAL_REV=abc123 bench/cache.sh
#
# Knobs (environment): CLIENTS (16), HOT (keys read, 1000), SCALE (pgbench -s, 10), REPS (3),
# T (seconds per run, 10), POOL_SIZE (10), JOBS (2), WARMUP (untimed seconds per target, 3),
# BENCH_CORRAL_BIN / BENCH_CORRAL_REV, PG_BINDIR, BENCH_RESULTS_DIR (bench/results), KEEP=1.
#
# What it does: initdb's one PostgreSQL (wal_level = logical, fsync off, trust on 127.0.0.1, a
# publication for all tables), pgbench -i -s SCALE; pgcorral (transaction mode) with databases
# `plain` and `cached` (query_cache = true) on it, PgBouncer with `plain`; checks that the hot
# read answers the same through every target; then REPS rounds of
#
#   pgbench -n -M simple -c CLIENTS -j JOBS -T T -f hot.sql
#       \set aid random(1, HOT)
#       SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
#
# against each target, the order rotating each round. CPU: the pooler's utime + stime
# (/proc/PID/stat), PostgreSQL's as its postmaster's own and reaped children's plus its live
# children's, before and after each run (backends pgbench opened directly are waited out first).
# The report (medians, ratios, all runs) goes to $BENCH_RESULTS_DIR/YYYY-MM-DD-HHMM-cache.md.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLIENTS=${CLIENTS:-16}
HOT=${HOT:-1000}
SCALE=${SCALE:-10}
REPS=${REPS:-3}
T=${T:-10}
POOL_SIZE=${POOL_SIZE:-10}
JOBS=${JOBS:-2}
WARMUP=${WARMUP:-3}
KEEP=${KEEP:-0}
RESULTS=${BENCH_RESULTS_DIR:-$BENCH_DIR/results}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
for v in CLIENTS HOT SCALE REPS T POOL_SIZE JOBS; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number"; done
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be a whole number"

# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
find_pg_bin
find_psql_and_bouncer
# setpriv execs (runuser would stay as the parent, and its pid be measured instead).
if [ "$(id -u)" -eq 0 ]; then AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --); else AS_PG=(); fi
as_pg() { "${AS_PG[@]}" "$@"; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pgcorral-cache.XXXXXX")
chmod 755 "$WORK"
CORRAL_PID="" BOUNCER_PID="" PG_DATA=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  set +e
  stop_and_clean "$CORRAL_PID pgcorral" "$BOUNCER_PID pgbouncer"
}
cleanup_on_exit
corral_binary "$WORK/pgcorral"

read -r PG_PORT CORRAL_PORT BOUNCER_PORT <<<"$(free_tcp_ports 3)"
export PGSSLMODE=disable

# ---- PostgreSQL ---------------------------------------------------------------------------------
PG_DATA=$WORK/data
pg_initdb "$PG_DATA" "$WORK/initdb.log"
cat >>"$PG_DATA/postgresql.conf" <<EOF

# bench/cache.sh
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = ''
max_connections = $((CLIENTS + 3 * POOL_SIZE + 20))
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
EOF
printf 'host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n' >"$PG_DATA/pg_hba.conf"
touch "$WORK/postgresql.log"
[ "$(id -u)" -ne 0 ] || chown postgres:postgres "$WORK/postgresql.log"
as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$WORK/postgresql.log" -w -t 60 start >/dev/null ||
  die "PostgreSQL did not start; see $WORK/postgresql.log"
PG_PID=$(head -n1 "$PG_DATA/postmaster.pid")
log "PostgreSQL: port $PG_PORT, pgbench -i -s $SCALE"
"$PG_BIN/pgbench" -i -q -s "$SCALE" -h 127.0.0.1 -p "$PG_PORT" -U postgres postgres >"$WORK/init.log" 2>&1 ||
  die "pgbench -i failed; see $WORK/init.log"
"$PSQL" -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -c "CREATE PUBLICATION pgcorral_cache FOR ALL TABLES" ||
  die "CREATE PUBLICATION failed"

# ---- the poolers ----------------------------------------------------------------------------------
{ corral_general "$CORRAL_PORT" "$POOL_SIZE" $((CLIENTS + 100)); cat <<EOF; } >"$WORK/pgcorral.toml"
admin_users = ["postgres"]

[databases.plain]
port = $PG_PORT
dbname = "postgres"

[databases.cached]
port = $PG_PORT
dbname = "postgres"
query_cache = true
EOF
setsid env -u RUST_LOG "$WORK/pgcorral" --config "$WORK/pgcorral.toml" >"$WORK/pgcorral.log" 2>&1 &
CORRAL_PID=$!
wait_listening "$CORRAL_PORT" pgcorral "$CORRAL_PID" "$WORK/pgcorral.log"
require_own_session "$CORRAL_PID" pgcorral

start_plain_bouncer "$PG_PORT" "$BOUNCER_PORT" "$POOL_SIZE" "$((CLIENTS + 100))"

TARGETS=(direct pgbouncer corral-plain corral-cached)
port_of() { case $1 in direct) echo "$PG_PORT" ;; pgbouncer) echo "$BOUNCER_PORT" ;; *) echo "$CORRAL_PORT" ;; esac; }
db_of() { case $1 in direct) echo postgres ;; corral-cached) echo cached ;; *) echo plain ;; esac; }
pid_of() { case $1 in direct) echo "" ;; pgbouncer) echo "$BOUNCER_PID" ;; *) echo "$CORRAL_PID" ;; esac; }

# ---- checks -----------------------------------------------------------------------------------------
for k in 1 7 $HOT; do
  want=""
  for t in "${TARGETS[@]}"; do
    for _ in 1 2; do
      got=$("$PSQL" -X -q -At -h 127.0.0.1 -p "$(port_of "$t")" -U postgres -d "$(db_of "$t")" \
        -c "SELECT abalance FROM pgbench_accounts WHERE aid = $k") || die "$t: key $k: $got"
      [ -n "$want" ] || want=$got
      [ "$got" = "$want" ] || die "$t answers '$got' for key $k, direct '$want'"
    done
  done
done

# ---- runs -------------------------------------------------------------------------------------------
printf '\\set aid random(1, %s)\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n' "$HOT" >"$WORK/hot.sql"
TICK=$(getconf CLK_TCK)
pg_ticks() { # the cluster's CPU: the postmaster's own and reaped children's, and its live children's
  local own kids
  own=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$PG_PID/stat")
  kids=$(for p in $(pgrep -P "$PG_PID"); do awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null; done | awk '{ s += $1 } END { print s + 0 }')
  echo $((own + kids))
}
bench() { # target seconds → "tps queries pooler_ticks server_ticks"
  local t=$1 pid p0=0 p1=0 s0 s1 out tps n
  pid=$(pid_of "$t")
  [ -z "$pid" ] || p0=$(proc_cpu_ticks "$pid")
  s0=$(pg_ticks)
  out=$("$PG_BIN/pgbench" -n -M simple -c "$CLIENTS" -j "$JOBS" -T "$2" -f "$WORK/hot.sql" \
    -h 127.0.0.1 -p "$(port_of "$t")" -U postgres "$(db_of "$t")" 2>&1) || die "$t: pgbench failed: $out"
  grep -q "number of failed transactions: 0 " <<<"$out" || die "$t: failed transactions: $out"
  sleep 0.5 # direct: pgbench's backends exit and are reaped
  [ -z "$pid" ] || p1=$(proc_cpu_ticks "$pid")
  s1=$(pg_ticks)
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -n1)
  n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
  echo "$tps $n $((p1 - p0)) $((s1 - s0))"
}
: >"$WORK/runs.txt"
for ((r = 0; r < REPS; r++)); do
  for ((i = 0; i < ${#TARGETS[@]}; i++)); do
    t=${TARGETS[$(((i + r) % ${#TARGETS[@]}))]}
    [ "$WARMUP" -eq 0 ] || bench "$t" "$WARMUP" >/dev/null
    res=$(bench "$t" "$T")
    log "round $((r + 1)) $t: $res (tps queries pooler_ticks server_ticks)"
    echo "$t $res" >>"$WORK/runs.txt"
  done
done
CACHE=$("$PSQL" -X -q -At -F ' ' -h 127.0.0.1 -p "$CORRAL_PORT" -U postgres -d pgbouncer -c "SHOW CACHE" 2>&1 | head -n1 || true)

# ---- report -----------------------------------------------------------------------------------------
mkdir -p "$RESULTS"
REPORT=$RESULTS/$(date +%Y-%m-%d-%H%M)-cache.md
python3 - "$WORK/runs.txt" "$TICK" "$CACHE" >"$REPORT" <<PY
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    t, tps, n, p, s = line.split()
    runs.setdefault(t, []).append((float(tps), int(n), int(p), int(s)))
tick_us = 1e6 / int(sys.argv[2])
print("# Result cache: a hot read through pgcorral with the cache and without\n")
print("pgcorral $CORRAL_REV; PgBouncer $BOUNCER_VERSION; PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}');"
      " $(nproc) cores; $CLIENTS clients, pgbench -j $JOBS, $T s per run, $REPS rounds, pool $POOL_SIZE;"
      " pgbench -i -s $SCALE; hot set $HOT keys; \`SELECT abalance FROM pgbench_accounts WHERE aid = :aid\` (simple protocol).\n")
print("| target | tps | server CPU µs/query | pooler CPU µs/query |")
print("|---|---:|---:|---:|")
med = {}
for t in ["direct", "pgbouncer", "corral-plain", "corral-cached"]:
    r = runs.get(t, [])
    if not r:
        continue
    tps = statistics.median(x[0] for x in r)
    srv = statistics.median(x[3] * tick_us / x[1] for x in r)
    pol = statistics.median(x[2] * tick_us / x[1] for x in r)
    med[t] = (tps, srv, pol)
    print(f"| {t} | {tps:.0f} | {srv:.1f} | {'' if t == 'direct' else f'{pol:.1f}'} |")
c, p, b = med.get("corral-cached"), med.get("corral-plain"), med.get("pgbouncer")
if c and p and b:
    print()
    print(f"With the cache ÷ without: tps {c[0] / p[0]:.2f}×, server CPU per query {c[1] / p[1]:.2f}×, pooler CPU per query {c[2] / p[2]:.2f}×.")
    print(f"With the cache ÷ PgBouncer: tps {c[0] / b[0]:.2f}×, server CPU per query {c[1] / b[1]:.2f}×, pooler CPU per query {c[2] / b[2]:.2f}×.")
print("\nSHOW CACHE after the runs (totals: database table entries bytes hits misses invalidations): \`" + sys.argv[3] + "\`\n")
print("## All runs\n\n| target | tps | queries | pooler ticks | server ticks |\n|---|---:|---:|---:|---:|")
for t, r in runs.items():
    for x in r:
        print(f"| {t} | {x[0]:.0f} | {x[1]} | {x[2]} | {x[3]} |")
PY
cat "$REPORT"
log "report: $REPORT"
