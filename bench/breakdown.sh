#!/usr/bin/env bash
# Where a pooler's CPU goes per transaction in steady state (logins excluded), pgcorral beside
# PgBouncer, with the floor: a one-thread epoll relay (bench/floor/relay.c) that pairs each client
# with a server connection and only moves bytes, the least kernel work any proxy does to carry
# one request and one answer each way on this machine; and beside it the same relay with all its
# socket I/O on one io_uring (bench/floor/uring.c: one io_uring_enter per loop turn, no recv, send
# or epoll_wait), the floor of a proxy that does its I/O through a ring. Direct PostgreSQL is run
# for its tps.
#
#   bench/breakdown.sh                                   # ~18 minutes after the build
#   CLIENTS="16" PROTOCOLS="simple" T=5 bench/breakdown.sh
#   BENCH_CORRAL_BIN=/tmp/pgcorral-x BENCH_CORRAL_REV=x bench/breakdown.sh
#
# Knobs (environment): CLIENTS ("1 16 64 256"), PROTOCOLS ("simple extended prepared"), T (10 s
# measured per cell), WARMUP (3 s before it), REPS (1), POOL_SIZE (20), SCALE (pgbench -s, 1),
# TARGETS ("direct relay uring pgbouncer pgcorral"; uring is skipped without liburing's header,
# apt-get install liburing-dev; two more, not run by default, for a study of where uring's saving
# comes from, also need it: relay-batch, relay.c built with -DBATCH_SENDS, pgcorral's pattern of
# epoll and recv with each turn's sends in one io_uring submission; uring-nodefer, uring.c built
# with -DNO_DEFER, without SINGLE_ISSUER | DEFER_TASKRUN), SERVER_HOP (how the relays and the
# poolers reach PostgreSQL: unix, its socket, as bench/run.sh; or tcp, 127.0.0.1; clients always
# come over TCP), CORRAL_WORKERS (pgcorral's `workers`, 0: one per core), BENCH_CORRAL_BIN /
# BENCH_CORRAL_REV, PG_BINDIR, BENCH_RESULTS_DIR (bench/results), KEEP=1 (keep the logs).
#
# Each cell: `pgbench -n -S -M PROTOCOL -c CLIENTS -j 2` runs WARMUP + T + 2 seconds with
# per-second aggregate logging (-l --aggregate-interval 1); after WARMUP, at a whole second,
# the target's counters are read for exactly T seconds and divided by the transactions pgbench
# logged in those seconds:
#   user, sys      µs of the pooler process's CPU (/proc/PID/stat utime, stime; all threads)
#   sysc           system calls the pooler made (perf stat, tracepoint raw_syscalls:sys_enter),
#                  and of them recv (recvfrom, recvmsg, read), send (sendto, sendmsg, write,
#                  writev), wait (epoll_wait, epoll_pwait), uring (io_uring_enter), futex
#   csw            the pooler's context switches (perf: context-switches)
#   wake           times a pooler thread was woken (sched:sched_wakeup of its threads, by anyone)
#   hand           of those, by another pooler thread (a cross-thread hand-off)
# PgBouncer 1.18 cannot run prepared statements in transaction mode: its prepared cells use a
# session-mode database with a pool as large as the clients ("pgbouncer-s"); pgcorral runs them in
# transaction mode ("pgcorral") and in the same session mode ("pgcorral-s") for a like-for-like.
# Needs perf with tracepoints (linux-perf), pgbouncer, cc. Report: BENCH_RESULTS_DIR/
# YYYY-MM-DD-HHMM-breakdown.md.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLIENTS=${CLIENTS:-"1 16 64 256"}
PROTOCOLS=${PROTOCOLS:-"simple extended prepared"}
T=${T:-10}
WARMUP=${WARMUP:-3}
REPS=${REPS:-1}
POOL_SIZE=${POOL_SIZE:-20}
SCALE=${SCALE:-1}
TARGETS=${TARGETS:-"direct relay uring pgbouncer pgcorral"}
SERVER_HOP=${SERVER_HOP:-unix}
CORRAL_WORKERS=${CORRAL_WORKERS:-0}
KEEP=${KEEP:-0}
RESULTS=${BENCH_RESULTS_DIR:-$BENCH_DIR/results}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
for v in T WARMUP REPS POOL_SIZE SCALE; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number"; done
MAX_CLIENTS=0
for c in $CLIENTS; do
  [[ $c =~ ^[1-9][0-9]*$ ]] || die "CLIENTS: '$c' is not a positive whole number"
  [ "$c" -le "$MAX_CLIENTS" ] || MAX_CLIENTS=$c
done
for p in $PROTOCOLS; do case $p in simple | extended | prepared) ;; *) die "PROTOCOLS: unknown '$p'" ;; esac; done
case $SERVER_HOP in unix | tcp) ;; *) die "SERVER_HOP must be unix or tcp" ;; esac
for t in $TARGETS; do case $t in direct | relay | relay-batch | uring | uring-nodefer | pgbouncer | pgcorral) ;; *) die "TARGETS: unknown '$t'" ;; esac; done

# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
find_pg_bin
find_psql_and_bouncer
command -v perf >/dev/null || die "perf not found (apt-get install linux-perf)"
perf stat -e raw_syscalls:sys_enter -- true >/dev/null 2>&1 || die "perf cannot count tracepoints here (perf_event_paranoid, tracefs)"
command -v cc >/dev/null || die "cc not found"
if [ "$(id -u)" -eq 0 ]; then AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --); else AS_PG=(); fi
as_pg() { "${AS_PG[@]}" "$@"; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pgcorral-breakdown.XXXXXX")
chmod 755 "$WORK"
CORRAL_PID="" BOUNCER_PID="" PG_DATA=""
# The yardsticks, NAME SOURCE [FLAGS] (relay is always run; the others only when TARGETS names
# them, and need liburing), and each one's port and pid once started.
YARDSTICKS=("relay relay.c" "uring uring.c" "relay-batch relay.c -DBATCH_SENDS" "uring-nodefer uring.c -DNO_DEFER")
declare -A YPORT=() YPID=()
cleanup() {
  local rc=$? n stops=()
  trap - EXIT INT TERM HUP
  set +e
  for n in "${!YPID[@]}"; do stops+=("${YPID[$n]} $n"); done
  stop_and_clean "$CORRAL_PID pgcorral" "$BOUNCER_PID pgbouncer" "${stops[@]}"
}
cleanup_on_exit
corral_binary "$WORK/pgcorral"
has_target() { [[ " $TARGETS " == *" $1 "* ]]; }
BUILT=()
for y in "${YARDSTICKS[@]}"; do
  read -r name src flags <<<"$y"
  if [ "$name" = relay ]; then
    cc -O2 -o "$WORK/relay" "$BENCH_DIR/floor/relay.c" || die "the relay did not build"
  elif ! has_target "$name"; then
    continue
  elif echo '#include <liburing.h>' | cc -E -x c - >/dev/null 2>&1; then
    # shellcheck disable=SC2086 # flags: none or one word
    cc -O2 $flags -o "$WORK/$name" "$BENCH_DIR/floor/$src" -luring || die "$name did not build"
  else
    log "$name skipped: no liburing.h (apt-get install liburing-dev)"
    TARGETS=$(echo " $TARGETS " | sed "s/ $name / /; s/^ *//; s/ *\$//")
    continue
  fi
  BUILT+=("$name")
done

read -r -a PORTS <<<"$(free_tcp_ports $((3 + ${#BUILT[@]})))"
PG_PORT=${PORTS[0]} CORRAL_PORT=${PORTS[1]} BOUNCER_PORT=${PORTS[2]}
for i in "${!BUILT[@]}"; do YPORT[${BUILT[$i]}]=${PORTS[$((3 + i))]}; done
export PGSSLMODE=disable

# ---- PostgreSQL ---------------------------------------------------------------------------------
PG_DATA=$WORK/data
mkdir -p "$WORK/sock"
[ "$(id -u)" -ne 0 ] || chown postgres:postgres "$WORK/sock"
pg_initdb "$PG_DATA" "$WORK/initdb.log"
cat >>"$PG_DATA/postgresql.conf" <<EOF

# bench/breakdown.sh
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$WORK/sock'
max_connections = $((MAX_CLIENTS * 2 + 3 * POOL_SIZE + 20))
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' >"$PG_DATA/pg_hba.conf"
touch "$WORK/postgresql.log"
[ "$(id -u)" -ne 0 ] || chown postgres:postgres "$WORK/postgresql.log"
as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$WORK/postgresql.log" -w -t 60 start >/dev/null ||
  die "PostgreSQL did not start; see $WORK/postgresql.log"
log "PostgreSQL: port $PG_PORT, pgbench -i -s $SCALE"
"$PG_BIN/pgbench" -i -q -s "$SCALE" -h 127.0.0.1 -p "$PG_PORT" -U postgres postgres >"$WORK/init.log" 2>&1 ||
  die "pgbench -i failed; see $WORK/init.log"

# ---- the relay and the poolers -------------------------------------------------------------------
if [ "$SERVER_HOP" = unix ]; then SERVER_HOST=$WORK/sock RELAY_TO=$WORK/sock/.s.PGSQL.$PG_PORT
else SERVER_HOST=127.0.0.1 RELAY_TO=$PG_PORT; fi
for name in "${BUILT[@]}"; do
  setsid "$WORK/$name" "${YPORT[$name]}" "$RELAY_TO" >"$WORK/$name.log" 2>&1 &
  YPID[$name]=$!
  wait_listening "${YPORT[$name]}" "$name" "${YPID[$name]}" "$WORK/$name.log"
  require_own_session "${YPID[$name]}" "$name"
done

{ corral_general "$CORRAL_PORT" "$POOL_SIZE" $((MAX_CLIENTS + 100)); cat <<EOF; } >"$WORK/pgcorral.toml"
workers = $CORRAL_WORKERS

[databases.plain]
host = "$SERVER_HOST"
port = $PG_PORT
dbname = "postgres"

[databases.sess]
host = "$SERVER_HOST"
port = $PG_PORT
dbname = "postgres"
pool_mode = "session"
pool_size = $MAX_CLIENTS
EOF
setsid env -u RUST_LOG "$WORK/pgcorral" --config "$WORK/pgcorral.toml" >"$WORK/pgcorral.log" 2>&1 &
CORRAL_PID=$!
wait_listening "$CORRAL_PORT" pgcorral "$CORRAL_PID" "$WORK/pgcorral.log"
require_own_session "$CORRAL_PID" pgcorral

start_plain_bouncer "$PG_PORT" "$BOUNCER_PORT" "$POOL_SIZE" "$((MAX_CLIENTS + 100))"
# The session-mode database for prepared statements (PgBouncer 1.18 has none in transaction
# mode), added to the file start_plain_bouncer wrote, and reloaded.
sed -i -e "/^plain = /a sess = host=$SERVER_HOST port=$PG_PORT dbname=postgres pool_mode=session pool_size=$MAX_CLIENTS" \
  -e "s|^plain = host=127.0.0.1 |plain = host=$SERVER_HOST |" "$WORK/pgbouncer/pgbouncer.ini"
kill -HUP "$BOUNCER_PID"
sleep 0.5

threads_of() { ls "/proc/$1/task"; }
ticks() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
EVENTS=raw_syscalls:sys_enter
for s in recvfrom recvmsg read sendto sendmsg write writev epoll_wait epoll_pwait io_uring_enter futex; do
  EVENTS+=",syscalls:sys_enter_$s"
done
EVENTS+=",context-switches"

# cell NAME PORT DB PID PROTOCOL CLIENTS REP: one line of results (to stdout).
cell() {
  local name=$1 port=$2 db=$3 pid=$4 proto=$5 clients=$6 rep=$7 dir start filter tids u0 s0 u1 s1 bench perf_own
  dir=$WORK/runs/$name-$proto-$clients-$rep
  mkdir -p "$dir"
  (cd "$dir" && exec "$PG_BIN/pgbench" -n -S -M "$proto" -c "$clients" -j 2 -T $((WARMUP + T + 2)) \
    -l --aggregate-interval 1 -h 127.0.0.1 -p "$port" -U postgres "$db" >"$dir/pgbench.out" 2>&1) &
  bench=$!
  sleep "$WARMUP"
  # Start at a whole second, so that the window is T of pgbench's one-second intervals.
  sleep "$(python3 -c 'import time; print(f"{1 - time.time() % 1:.3f}")')"
  start=$(date +%s)
  if [ "$pid" != - ]; then
    tids=$(threads_of "$pid")
    filter=$(for t in $tids; do printf 'pid == %s || ' "$t"; done)
    filter=${filter% || }
    read -r u0 s0 <<<"$(ticks "$pid")"
    perf stat -x, -o "$dir/own.perf" -p "$pid" -e "$EVENTS" \
      -e sched:sched_wakeup --filter "$filter" -- sleep "$T" 2>/dev/null &
    perf_own=$!
    perf stat -x, -o "$dir/all.perf" -a -e sched:sched_wakeup --filter "$filter" -- sleep "$T" 2>/dev/null
    wait "$perf_own" || true
    read -r u1 s1 <<<"$(ticks "$pid")"
  else
    sleep "$T"
    u0=0 s0=0 u1=0 s1=0
  fi
  wait "$bench" || { cat "$dir/pgbench.out" >&2; die "$name: pgbench failed"; }
  python3 - "$dir" "$name" "$proto" "$clients" "$start" "$T" "$((u1 - u0))" "$((s1 - s0))" "$HZ" <<'PY'
import glob, sys
d, name, proto, clients, start, t, du, ds, hz = sys.argv[1:]
start, t, hz = int(start), int(t), int(hz)
tx = 0
for f in glob.glob(d + "/pgbench_log.*"):
    for line in open(f):
        f0 = line.split()
        if start <= int(f0[0]) < start + t:
            tx += int(f0[1])
def counts(path):
    c = {}
    try:
        for line in open(path):
            p = line.strip().split(",")
            if len(p) > 2 and p[0].replace(".", "").isdigit():
                c[p[2]] = c.get(p[2], 0) + float(p[0])
    except FileNotFoundError:
        pass
    return c
own, every = counts(d + "/own.perf"), counts(d + "/all.perf")
g = lambda k: own.get(k, 0.0)
per = lambda v: v / tx if tx else float("nan")
sc = lambda *n: per(sum(g("syscalls:sys_enter_" + x) for x in n))
us = lambda ticks: int(ticks) * 1e6 / hz / tx if tx else float("nan")
print(name, proto, clients, f"{tx / t:.0f}", f"{us(du):.2f}", f"{us(ds):.2f}",
      f"{us(int(du) + int(ds)):.2f}", f"{per(g('raw_syscalls:sys_enter')):.2f}",
      f"{sc('recvfrom', 'recvmsg', 'read'):.2f}", f"{sc('sendto', 'sendmsg', 'write', 'writev'):.2f}",
      f"{sc('epoll_wait', 'epoll_pwait'):.2f}", f"{sc('io_uring_enter'):.2f}", f"{sc('futex'):.2f}",
      f"{per(g('context-switches')):.2f}", f"{per(every.get('sched:sched_wakeup', 0)):.2f}",
      f"{per(g('sched:sched_wakeup')):.2f}")
PY
}

ROWS=$WORK/rows
: >"$ROWS"
for rep in $(seq "$REPS"); do
  for proto in $PROTOCOLS; do
    for c in $CLIENTS; do
      for t in $TARGETS; do
        case $t in
          direct) cell direct "$PG_PORT" postgres - "$proto" "$c" "$rep" ;;
          relay | uring | relay-batch | uring-nodefer)
            cell "$t" "${YPORT[$t]}" postgres "${YPID[$t]}" "$proto" "$c" "$rep" ;;
          pgbouncer)
            if [ "$proto" = prepared ]; then cell pgbouncer-s "$BOUNCER_PORT" sess "$BOUNCER_PID" "$proto" "$c" "$rep"
            else cell pgbouncer "$BOUNCER_PORT" plain "$BOUNCER_PID" "$proto" "$c" "$rep"; fi ;;
          pgcorral)
            cell pgcorral "$CORRAL_PORT" plain "$CORRAL_PID" "$proto" "$c" "$rep"
            [ "$proto" != prepared ] || cell pgcorral-s "$CORRAL_PORT" sess "$CORRAL_PID" "$proto" "$c" "$rep" ;;
        esac | tee -a "$ROWS" >&2
      done
    done
  done
done

mkdir -p "$RESULTS"
OUT=$RESULTS/$(date +%Y-%m-%d-%H%M)-breakdown.md
python3 "$BENCH_DIR/breakdown_report.py" "$ROWS" "$CORRAL_REV" "$BOUNCER_VERSION" "$T" "$REPS" "$POOL_SIZE" "$SERVER_HOP" "$CORRAL_WORKERS" >"$OUT"
log "report: $OUT"
cat "$OUT"
