#!/usr/bin/env bash
# Benchmark: PostgreSQL direct vs PgBouncer vs pgcorral. See bench/README.md.
#
#   bench/run.sh                                   # the full matrix (~50 min)
#   BENCH_T=3 BENCH_REPS=1 BENCH_CLIENTS="1 16" BENCH_IDLE=1000 bench/run.sh   # a quick check
#   BENCH_PARTS="storm tls-storm" BENCH_T=5 BENCH_REPS=1 bench/run.sh           # the storms only
#
# Starts its own PostgreSQL (bench/work/), PgBouncer and pgcorral on free ports of 127.0.0.1,
# runs pgbench against the three interleaved, measures idle-client memory of the two poolers,
# and writes bench/results/YYYY-MM-DD[-HHMM].md plus a .png chart. For the tls-storm part it
# makes a self-signed certificate, turns on ssl in PostgreSQL and starts a second, TLS-only
# instance of each pooler with it. Everything it starts is stopped on exit, whatever the reason.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
WORK=$BENCH_DIR/work
RESULTS=${BENCH_RESULTS_DIR:-$BENCH_DIR/results}

# ---- knobs (see README) -----------------------------------------------------------------------
BENCH_T=${BENCH_T:-15}
BENCH_CLIENTS=${BENCH_CLIENTS:-"1 16 64 256 1024"}
BENCH_REPS=${BENCH_REPS:-3}
BENCH_PREPARED_CLIENTS=${BENCH_PREPARED_CLIENTS:-"1 16"}
BENCH_STORM_CLIENTS=${BENCH_STORM_CLIENTS:-16}
BENCH_TLS_CLIENTS=${BENCH_TLS_CLIENTS:-$BENCH_STORM_CLIENTS}
BENCH_TLS_KEY=${BENCH_TLS_KEY:-ecdsa}
BENCH_IDLE=${BENCH_IDLE:-10000}
BENCH_JOBS=${BENCH_JOBS:-2}
BENCH_SCALE=${BENCH_SCALE:-10}
BENCH_POOL_SIZE=${BENCH_POOL_SIZE:-20}
BENCH_PARTS=${BENCH_PARTS:-"simple extended prepared storm tls-storm memory"}
BENCH_WARMUP=${BENCH_WARMUP:-3}
BENCH_LOGIN_MS=${BENCH_LOGIN_MS:-20}
BENCH_KEEP=${BENCH_KEEP:-0}
BENCH_NOTE=${BENCH_NOTE:-}
BENCH_SERVER_HOP=${BENCH_SERVER_HOP:-unix}
BENCH_CLIENT_HOP=${BENCH_CLIENT_HOP:-tcp}
BENCH_PGO=${BENCH_PGO:-0}

PG_MAX_CONNECTIONS=500
PG_RESERVED=3 # superuser_reserved_connections

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
has_part() { [[ " $BENCH_PARTS " == *" $1 "* ]]; }

for v in BENCH_T BENCH_REPS BENCH_IDLE BENCH_JOBS BENCH_SCALE BENCH_POOL_SIZE BENCH_WARMUP BENCH_LOGIN_MS; do
  is_uint "${!v}" || die "$v must be a whole number, not '${!v}'"
done
for v in BENCH_CLIENTS BENCH_PREPARED_CLIENTS BENCH_STORM_CLIENTS BENCH_TLS_CLIENTS; do
  for c in ${!v}; do
    if ! is_uint "$c" || [ "$c" -lt 1 ]; then die "$v: '$c' is not a client count"; fi
  done
done
for p in $BENCH_PARTS; do
  case $p in simple | extended | prepared | storm | tls-storm | memory) ;; *) die "BENCH_PARTS: unknown part '$p'" ;; esac
done
case $BENCH_TLS_KEY in ecdsa | rsa) ;; *) die "BENCH_TLS_KEY must be ecdsa or rsa, not '$BENCH_TLS_KEY'" ;; esac
case $BENCH_SERVER_HOP in tcp | unix) ;; *) die "BENCH_SERVER_HOP must be tcp or unix, not '$BENCH_SERVER_HOP'" ;; esac
case $BENCH_CLIENT_HOP in tcp | unix) ;; *) die "BENCH_CLIENT_HOP must be tcp or unix, not '$BENCH_CLIENT_HOP'" ;; esac
case $BENCH_PGO in 0 | 1) ;; *) die "BENCH_PGO must be 0 or 1, not '$BENCH_PGO'" ;; esac
TLS=0
has_part tls-storm && TLS=1
if [ "$BENCH_T" -lt 1 ] || [ "$BENCH_REPS" -lt 1 ] || [ "$BENCH_JOBS" -lt 1 ]; then
  die "BENCH_T, BENCH_REPS and BENCH_JOBS must be at least 1"
fi
# Session mode with pool size P: more than P clients would queue for a server, not run.
prepared_clients=()
for c in $BENCH_PREPARED_CLIENTS; do
  if [ "$c" -le "$BENCH_POOL_SIZE" ]; then prepared_clients+=("$c"); else log "prepared, session mode: skipping $c clients (> pool size $BENCH_POOL_SIZE)"; fi
done

# One run at a time: runs share bench/work/. The lock is on the bench/ directory itself and goes
# away with this process.
exec {LOCK_FD}<"$BENCH_DIR"
flock -n "$LOCK_FD" || die "another bench/run.sh is running (it holds a lock on $BENCH_DIR)"

# ---- privileges: PostgreSQL and PgBouncer refuse to run as root ---------------------------------
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' OS user to run PostgreSQL and PgBouncer"
  # setpriv execs (no fork, no PAM): rlimits are kept, and a simple command "${AS_PG[@]}" cmd &
  # gives the server's own pid in $! (a shell function run with & would be a subshell's).
  AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
  chown_pg() { chown -R postgres:postgres "$@"; }
else
  AS_PG=()
  chown_pg() { :; }
fi
as_pg() { "${AS_PG[@]}" "$@"; }
# Each pooler runs in a session of its own, as a service would (pg_ctl does the same for
# PostgreSQL). With the kernel's autogroup scheduling (sched_autogroup_enabled = 1, the default
# on most distributions) CPU time is shared first between sessions, so a pooler left in this
# script's session would compete with pgbench inside one share instead of having its own.
# setsid execs in place here (a background job is no process-group leader): $! stays the pid.
OWN_SESSION=(setsid)

apt_install() {
  [ "$(id -u)" -eq 0 ] || die "missing $*: install it (apt-get install $*) or run as root"
  log "installing $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$@" >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q "$@" >/dev/null; }
}

# ---- tools ----------------------------------------------------------------------------------------
if [ -n "${BENCH_PG_BINDIR:-}" ]; then
  PG_BIN=$BENCH_PG_BINDIR
elif [ -x /usr/lib/postgresql/15/bin/initdb ]; then
  PG_BIN=/usr/lib/postgresql/15/bin
else
  PG_BIN=$(find /usr/lib/postgresql -maxdepth 3 -name initdb -path '*/bin/*' 2>/dev/null | sort -V | tail -n1 | xargs -r dirname)
fi
if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/pgbench" ]; then
  die "PostgreSQL server binaries not found (set BENCH_PG_BINDIR)"
fi
PGBENCH=$PG_BIN/pgbench
PSQL=$PG_BIN/psql
[ -x "$PSQL" ] || PSQL=$(command -v psql) || die "psql not found"

PGBOUNCER=$(command -v pgbouncer || true)
if [ -z "$PGBOUNCER" ] && [ -x /usr/sbin/pgbouncer ]; then PGBOUNCER=/usr/sbin/pgbouncer; fi
if [ -z "$PGBOUNCER" ]; then
  apt_install pgbouncer
  # The Debian package may start its own service; we use our own instance only.
  PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
fi

if [ "$TLS" -eq 1 ] && ! command -v openssl >/dev/null; then apt_install openssl; fi

# report.py draws with matplotlib: use a python3 that has it (pyenv shims often don't).
PYTHON=${BENCH_PYTHON:-}
if [ -z "$PYTHON" ]; then
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import matplotlib' 2>/dev/null; then PYTHON=$py && break; fi
  done
fi
if [ -z "$PYTHON" ]; then
  apt_install python3-matplotlib
  PYTHON=/usr/bin/python3
fi
"$PYTHON" -c 'import matplotlib' || die "$PYTHON cannot import matplotlib"
CLK_TCK=$(getconf CLK_TCK)

# ---- open files: 10k idle clients, and 1024 pgbench clients ---------------------------------------
max_clients=1
for c in $BENCH_CLIENTS $BENCH_STORM_CLIENTS $BENCH_TLS_CLIENTS; do [ "$c" -gt "$max_clients" ] && max_clients=$c; done
MAX_CLIENT_CONN=$((BENCH_IDLE + 1000 > 11000 ? BENCH_IDLE + 1000 : 11000))
# The poolers may need max_client_conn plus their server connections; clients need their own.
need_fds=$((max_clients > MAX_CLIENT_CONN ? max_clients : MAX_CLIENT_CONN))
need_fds=$((need_fds + 1024))
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need_fds" ]; then
  ulimit -Hn "$need_fds" 2>/dev/null || die "open files hard limit is $hard, need $need_fds (lower BENCH_IDLE or raise the limit)"
fi
ulimit -n "$need_fds"

# ---- cleanup: stop everything we started, whatever happens ----------------------------------------
PGDATA=$WORK/pgdata
PGBENCH_PID="" SAMPLER_PID="" IDLE_PID="" IDLE_FD="" BOUNCER_PID="" CORRAL_PID="" PG_STARTED=0
BOUNCER_TLS_PID="" CORRAL_TLS_PID="" TLS_HOLD_PID=""

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stop_postgres() {
  [ "$PG_STARTED" -eq 1 ] || return 0
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 30 stop >/dev/null 2>&1 ||
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m immediate -w -t 30 stop >/dev/null 2>&1
  PG_STARTED=0
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  set +e
  stop_pid "$PGBENCH_PID" pgbench
  stop_pid "$SAMPLER_PID" sampler
  [ -n "$IDLE_FD" ] && exec {IDLE_FD}>&-
  stop_pid "$IDLE_PID" idle_clients
  stop_pid "$TLS_HOLD_PID" psql
  stop_pid "$CORRAL_PID" pgcorral
  stop_pid "$BOUNCER_PID" pgbouncer
  stop_pid "$CORRAL_TLS_PID" pgcorral-tls
  stop_pid "$BOUNCER_TLS_PID" pgbouncer-tls
  stop_postgres
  rm -f "$WORK/idle.stdin"
  if [ "$BENCH_KEEP" != 1 ]; then rm -rf "$PGDATA" "$WORK/runs"/*.txlog; fi
  [ "$rc" -eq 0 ] || log "exited with status $rc; logs in $WORK/logs and $WORK/runs"
  exit "$rc"
}
cleanup_on_exit

# A server of a previous run that was killed without its cleanup: stop it before wiping its files.
if [ -f "$PGDATA/postmaster.pid" ]; then
  log "stopping a PostgreSQL left in $PGDATA"
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1 || true
fi
rm -rf "$WORK"
mkdir -p "$WORK/logs" "$WORK/runs" "$WORK/bin" "$WORK/pgbouncer" "$WORK/tls" "$RESULTS"
chown_pg "$WORK/logs" "$WORK/pgbouncer"
chmod 755 "$WORK"

START_EPOCH=$(date +%s)
RUN_DATE=$(date +%Y-%m-%d)
REPORT=$RESULTS/$RUN_DATE.md
[ -e "$REPORT" ] && REPORT=$RESULTS/$RUN_DATE-$(date +%H%M).md
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- build ----------------------------------------------------------------------------------------
log "cargo build --release"
(cd "$ROOT" && cargo build --release) || die "cargo build --release failed"
(cd "$ROOT" && cargo build --release -p pgcorral --example idle_clients) || die "building examples/idle_clients failed"
TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
# Private copies: other cargo builds in this tree must not swap the binary during the run.
cp "$TARGET_DIR/release/pgcorral" "$WORK/bin/pgcorral"
cp "$TARGET_DIR/release/examples/idle_clients" "$WORK/bin/idle_clients"
GIT_REV=$(cd "$ROOT" && git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# GIT_OPTIONAL_LOCKS=0: read-only, git status must not refresh the index.
if [ -n "$(cd "$ROOT" && GIT_OPTIONAL_LOCKS=0 git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  GIT_REV="$GIT_REV + uncommitted changes"
fi

# ---- ports ----------------------------------------------------------------------------------------
# The last two: the TLS instances of PgBouncer and pgcorral (part tls-storm).
read -r PG_PORT BOUNCER_PORT CORRAL_PORT BOUNCER_TLS_PORT CORRAL_TLS_PORT < <("$PYTHON" -c '
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
')
PW=$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')
export PGPASSWORD=$PW # for every client below; never on a command line
# Plaintext unless a run asks for TLS (the tls-storm part sets PGSSLMODE=require for its own
# commands). With libpq's default (prefer) a client would send an SSLRequest first, and would use
# TLS with PostgreSQL, which has ssl = on when the tls-storm part runs.
export PGSSLMODE=disable

check_own_session() { # pid name: the pid is the pooler itself, leading its own session
  local sid
  sid=$(ps -o sid= -p "$1" | tr -d ' ')
  [ "$sid" = "$1" ] || die "$2 (pid $1) is not in a session of its own (session $sid)"
}
wait_port() { # port name pid
  local i
  for ((i = 0; i < 300; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    if [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null; then die "$2 exited at start; see $WORK/logs/$2.log"; fi
    sleep 0.1
  done
  die "$2 is not listening on port $1 after 30 s"
}

# ---- TLS certificate (part tls-storm) ---------------------------------------------------------------
# One self-signed server certificate and key (no CA), used alike by PostgreSQL, PgBouncer and
# pgcorral. Clients use sslmode=require, which does not verify it.
TLS_CERT=$WORK/tls/server.crt
TLS_KEY=$WORK/tls/server.key
TLS_KEY_DESC=""
if [ "$TLS" -eq 1 ]; then
  case $BENCH_TLS_KEY in
    ecdsa) keyopts=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1) TLS_KEY_DESC="ECDSA P-256" ;;
    rsa) keyopts=(-newkey rsa:2048) TLS_KEY_DESC="RSA 2048" ;;
  esac
  openssl req -x509 "${keyopts[@]}" -sha256 -nodes -days 7 -subj "/CN=localhost" \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$TLS_KEY" -out "$TLS_CERT" \
    >"$WORK/logs/openssl.log" 2>&1 || die "openssl req failed; see $WORK/logs/openssl.log"
  TLS_KEY_DESC="$TLS_KEY_DESC, $(openssl x509 -in "$TLS_CERT" -noout -text | sed -n 's/^ *Signature Algorithm: *//p' | head -n1)"
  # PostgreSQL refuses a key that others can read; it and PgBouncer (both as the postgres OS
  # user) and pgcorral (as the invoking user: root, or the same user) share the file.
  chmod 600 "$TLS_KEY"
  chmod 644 "$TLS_CERT"
  chown_pg "$WORK/tls"
  log "TLS: self-signed $TLS_KEY_DESC certificate in $WORK/tls"
fi

# ---- PostgreSQL -----------------------------------------------------------------------------------
# The poolers reach PostgreSQL over its Unix socket in $WORK/sock (BENCH_SERVER_HOP=unix, the
# default: PgBouncer's own default when a database has no host, and what a pooler on the database
# host uses), or with BENCH_SERVER_HOP=tcp over 127.0.0.1 (both poolers alike). pgbench reaches each target over TCP, or with
# BENCH_CLIENT_HOP=unix over its Unix socket: PostgreSQL's in $WORK/sock, the poolers' in
# $WORK/csock (the storm and memory parts and the harness's checks stay on TCP).
PG_SOCKET_DIR=
POOLER_PG_HOST=127.0.0.1
CLIENT_SOCKET_DIR=
if [ "$BENCH_SERVER_HOP" = unix ] || [ "$BENCH_CLIENT_HOP" = unix ]; then
  PG_SOCKET_DIR=$WORK/sock
  mkdir -p "$PG_SOCKET_DIR"
  chown_pg "$PG_SOCKET_DIR"
fi
if [ "$BENCH_SERVER_HOP" = unix ]; then
  POOLER_PG_HOST=$PG_SOCKET_DIR
  BENCH_NOTE="${BENCH_NOTE:+$BENCH_NOTE; }BENCH_SERVER_HOP=unix: both poolers reach PostgreSQL through its Unix socket."
else
  BENCH_NOTE="${BENCH_NOTE:+$BENCH_NOTE; }BENCH_SERVER_HOP=tcp: both poolers reach PostgreSQL over TCP (127.0.0.1)."
fi
if [ "$BENCH_CLIENT_HOP" = unix ]; then
  CLIENT_SOCKET_DIR=$WORK/csock
  mkdir -p "$CLIENT_SOCKET_DIR"
  chown_pg "$CLIENT_SOCKET_DIR"
  BENCH_NOTE="${BENCH_NOTE:+$BENCH_NOTE; }BENCH_CLIENT_HOP=unix: pgbench reaches PostgreSQL and both poolers through their Unix sockets (the storm and memory parts stay on TCP)."
fi
log "PostgreSQL: initdb, port $PG_PORT"
pg_initdb "$PGDATA" "$WORK/logs/initdb.log"
cat >>"$PGDATA/postgresql.conf" <<EOF

# bench/run.sh
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_SOCKET_DIR'
max_connections = $PG_MAX_CONNECTIONS
superuser_reserved_connections = $PG_RESERVED
shared_buffers = 256MB
fsync = off
synchronous_commit = off
full_page_writes = off
password_encryption = 'scram-sha-256'
log_connections = off
log_disconnections = off
EOF
if [ "$TLS" -eq 1 ]; then
  cat >>"$PGDATA/postgresql.conf" <<EOF
ssl = on
ssl_cert_file = '$TLS_CERT'
ssl_key_file = '$TLS_KEY'
EOF
fi
cat >"$PGDATA/pg_hba.conf" <<EOF
# bench/run.sh: the harness's superuser is trusted; the benchmark user logs in with SCRAM.
host all postgres 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
local all all scram-sha-256
EOF
chown_pg "$PGDATA"
as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$WORK/logs/postgresql.log" -w -t 60 start >/dev/null ||
  die "PostgreSQL did not start; see $WORK/logs/postgresql.log"
PG_STARTED=1
psql_admin() { "$PSQL" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres "$@"; }
# On stdin, so the password is not on a command line.
psql_admin >/dev/null <<EOF
CREATE ROLE bench LOGIN PASSWORD '$PW';
CREATE DATABASE bench OWNER bench;
EOF
log "pgbench -i -s $BENCH_SCALE"
"$PGBENCH" -i -q -s "$BENCH_SCALE" -h 127.0.0.1 -p "$PG_PORT" -U bench bench >"$WORK/logs/pgbench-init.log" 2>&1 ||
  die "pgbench -i failed; see $WORK/logs/pgbench-init.log"
psql_admin -d bench -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null

# ---- the PGO build (BENCH_PGO=1) -----------------------------------------------------------------
# Trained against this PostgreSQL (its own database, corral_pgo), before the poolers start.
CORRAL_BUILD=release
if [ "$BENCH_PGO" = 1 ]; then
  log "bench/pgo.sh: a profile-guided build of pgcorral (log: $WORK/logs/pgo.log)"
  pgo_bin=$(PGHOST=127.0.0.1 PGPORT=$PG_PORT PGUSER=postgres "$BENCH_DIR/pgo.sh" 2>"$WORK/logs/pgo.log") ||
    die "bench/pgo.sh failed; see $WORK/logs/pgo.log"
  cp "$pgo_bin" "$WORK/bin/pgcorral"
  CORRAL_BUILD="release, profile-guided (bench/pgo.sh)"
  psql_admin -c "CHECKPOINT" >/dev/null
fi

# ---- PgBouncer ------------------------------------------------------------------------------------
printf '"bench" "%s"\n' "$PW" >"$WORK/pgbouncer/userlist.txt"
write_bouncer_ini() { # name port [extra lines for [pgbouncer]]
  cat >"$WORK/pgbouncer/$1.ini" <<EOF
[databases]
bench = host=$POOLER_PG_HOST port=$PG_PORT dbname=bench pool_size=$BENCH_POOL_SIZE pool_mode=transaction
bench_session = host=$POOLER_PG_HOST port=$PG_PORT dbname=bench pool_size=$BENCH_POOL_SIZE pool_mode=session

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $2
unix_socket_dir = $CLIENT_SOCKET_DIR
auth_type = scram-sha-256
auth_file = $WORK/pgbouncer/userlist.txt
pool_mode = transaction
default_pool_size = $BENCH_POOL_SIZE
max_client_conn = $MAX_CLIENT_CONN
server_reset_query = DISCARD ALL
server_tls_sslmode = disable
logfile = $WORK/logs/$1.log
pidfile = $WORK/pgbouncer/$1.pid
log_connections = 0
log_disconnections = 0
log_stats = 0
${3:-}
EOF
}
start_bouncer() { # name port → BOUNCER_STARTED_PID
  chown_pg "$WORK/pgbouncer"
  chmod 600 "$WORK/pgbouncer/userlist.txt"
  log "PgBouncer ($1): port $2"
  "${OWN_SESSION[@]}" "${AS_PG[@]}" "$PGBOUNCER" "$WORK/pgbouncer/$1.ini" >>"$WORK/logs/$1.stdout" 2>&1 &
  BOUNCER_STARTED_PID=$!
  wait_port "$2" "$1" "$BOUNCER_STARTED_PID"
  check_own_session "$BOUNCER_STARTED_PID" "$1"
}
write_bouncer_ini pgbouncer "$BOUNCER_PORT"
start_bouncer pgbouncer "$BOUNCER_PORT"
BOUNCER_PID=$BOUNCER_STARTED_PID
if [ "$TLS" -eq 1 ]; then
  # Its own instance, as client_tls_sslmode = require refuses the plaintext clients of the other
  # parts. TLS protocols and ciphers stay PgBouncer's defaults. stats_users: for the TLS check's
  # SHOW CLIENTS only.
  write_bouncer_ini pgbouncer-tls "$BOUNCER_TLS_PORT" "client_tls_sslmode = require
client_tls_cert_file = $TLS_CERT
client_tls_key_file = $TLS_KEY
stats_users = bench"
  start_bouncer pgbouncer-tls "$BOUNCER_TLS_PORT"
  BOUNCER_TLS_PID=$BOUNCER_STARTED_PID
fi

# ---- pgcorral -------------------------------------------------------------------------------------
write_corral_toml() { # name port [extra lines for [general]]
  cat >"$WORK/$1.toml" <<EOF
[general]
listen_addr = "127.0.0.1"
listen_port = $2
unix_socket_dir = "$CLIENT_SOCKET_DIR"
pool_mode = "transaction"
default_pool_size = $BENCH_POOL_SIZE
max_client_conn = $MAX_CLIENT_CONN
auth_type = "scram-sha-256"
workers = 0
server_reset_query = "DISCARD ALL"
server_tls_sslmode = "disable"
shutdown_timeout = 5000
log_level = "warn"
${3:-}

[users.bench]
password = "$PW"

[databases.bench]
host = "$POOLER_PG_HOST"
port = $PG_PORT
dbname = "bench"
pool_size = $BENCH_POOL_SIZE
pool_mode = "transaction"

[databases.bench_session]
host = "$POOLER_PG_HOST"
port = $PG_PORT
dbname = "bench"
pool_size = $BENCH_POOL_SIZE
pool_mode = "session"
EOF
  chmod 600 "$WORK/$1.toml"
}
start_corral() { # name port → CORRAL_STARTED_PID
  "$WORK/bin/pgcorral" --config "$WORK/$1.toml" --check >/dev/null || die "pgcorral refuses $WORK/$1.toml"
  log "pgcorral ($1): port $2"
  "${OWN_SESSION[@]}" env -u RUST_LOG "$WORK/bin/pgcorral" --config "$WORK/$1.toml" >"$WORK/logs/$1.log" 2>&1 &
  CORRAL_STARTED_PID=$!
  wait_port "$2" "$1" "$CORRAL_STARTED_PID"
  check_own_session "$CORRAL_STARTED_PID" "$1"
}
write_corral_toml pgcorral "$CORRAL_PORT"
start_corral pgcorral "$CORRAL_PORT"
CORRAL_PID=$CORRAL_STARTED_PID
if [ "$TLS" -eq 1 ]; then
  # As PgBouncer's: its own instance, the same certificate and key, default protocols (TLS 1.2
  # and 1.3) and ciphers.
  write_corral_toml pgcorral-tls "$CORRAL_TLS_PORT" "client_tls_sslmode = \"require\"
client_tls_cert_file = \"$TLS_CERT\"
client_tls_key_file = \"$TLS_KEY\"
stats_users = [\"bench\"]"
  start_corral pgcorral-tls "$CORRAL_TLS_PORT"
  CORRAL_TLS_PID=$CORRAL_STARTED_PID
fi

# Where a part's clients go: the tls-storm part has the TLS instances of the poolers (direct
# PostgreSQL is the same server, with TLS because its clients ask for it).
target_port() { # target [part]
  if [ "${2:-}" = tls-storm ]; then
    case $1 in direct) echo "$PG_PORT" ;; pgbouncer) echo "$BOUNCER_TLS_PORT" ;; pgcorral) echo "$CORRAL_TLS_PORT" ;; esac
  else
    case $1 in direct) echo "$PG_PORT" ;; pgbouncer) echo "$BOUNCER_PORT" ;; pgcorral) echo "$CORRAL_PORT" ;; esac
  fi
}
target_pid() { # target [part]
  if [ "${2:-}" = tls-storm ]; then
    case $1 in direct) echo "" ;; pgbouncer) echo "$BOUNCER_TLS_PID" ;; pgcorral) echo "$CORRAL_TLS_PID" ;; esac
  else
    case $1 in direct) echo "" ;; pgbouncer) echo "$BOUNCER_PID" ;; pgcorral) echo "$CORRAL_PID" ;; esac
  fi
}
check_one() { # pid name comm
  kill -0 "$1" 2>/dev/null || {
    tail -n 20 "$WORK/logs/$2.log" >&2
    die "$2 died; see $WORK/logs/$2.log"
  }
  # The pids must be the servers themselves: CPU and RSS are read from /proc/PID.
  [ "$(cat "/proc/$1/comm")" = "$3" ] || die "pid $1 is not $2"
}
check_poolers() {
  check_one "$BOUNCER_PID" pgbouncer pgbouncer
  check_one "$CORRAL_PID" pgcorral pgcorral
  if [ "$TLS" -eq 1 ]; then
    check_one "$BOUNCER_TLS_PID" pgbouncer-tls pgbouncer
    check_one "$CORRAL_TLS_PID" pgcorral-tls pgcorral
  fi
}

# Every target answers, in both pool modes, with SCRAM.
for t in direct pgbouncer pgcorral; do
  for db in bench bench_session; do
    [ "$t" = direct ] && [ "$db" = bench_session ] && continue
    got=$("$PSQL" -X -At -h 127.0.0.1 -p "$(target_port "$t")" -U bench -d "$db" -c "SELECT count(*) FROM pgbench_branches" 2>&1) ||
      die "$t ($db) does not answer: $got"
    [ "$got" = "$BENCH_SCALE" ] || die "$t ($db): unexpected answer: $got"
  done
done

check_poolers

# ---- TLS check (part tls-storm) -------------------------------------------------------------------
# That PGSSLMODE=require makes libpq refuse a server without TLS (else the TLS cells would prove
# nothing), that each TLS target answers, what libpq negotiated with it (PostgreSQL's pg_stat_ssl;
# the poolers' SHOW CLIENTS `tls` of a client held in a transaction meanwhile, as console sessions
# are not listed by pgcorral), and whether it offers SCRAM-SHA-256-PLUS (channel binding).
TLS_INFO=$WORK/tls/negotiated.tsv
: >"$TLS_INFO"
tls_psql() { PGSSLMODE=require "$PSQL" -X -At -h 127.0.0.1 -U bench "$@"; }
if [ "$TLS" -eq 1 ]; then
  if got=$(tls_psql -p "$BOUNCER_PORT" -d bench -c "SELECT 1" 2>&1); then
    die "PGSSLMODE=require logged in to the plaintext PgBouncer ($got): libpq does not enforce TLS"
  fi
  for t in direct pgbouncer pgcorral; do
    port=$(target_port "$t" tls-storm)
    got=$(tls_psql -p "$port" -d bench -c "SELECT count(*) FROM pgbench_branches" 2>&1) ||
      die "$t (TLS, port $port) does not answer with PGSSLMODE=require: $got"
    [ "$got" = "$BENCH_SCALE" ] || die "$t (TLS): unexpected answer: $got"
    if [ "$t" = direct ]; then
      negotiated=$(tls_psql -p "$port" -d bench -c \
        "SELECT version || '/' || cipher FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl" 2>&1) || negotiated="? ($negotiated)"
    else
      tls_psql -p "$port" -d bench -c "SELECT pg_sleep(2)" >/dev/null 2>&1 &
      TLS_HOLD_PID=$!
      negotiated=""
      for ((i = 0; i < 40; i++)); do
        negotiated=$(PGSSLMODE=require "$PSQL" -X -q --csv -h 127.0.0.1 -p "$port" -U bench -d pgbouncer \
          -c "SHOW CLIENTS" 2>/dev/null | "$PYTHON" -c '
import csv, sys
for row in csv.DictReader(sys.stdin):
    if row.get("database") == "bench":
        print(row.get("tls") or "(empty)")
        break' || true)
        [ -n "$negotiated" ] && break
        sleep 0.1
      done
      wait "$TLS_HOLD_PID" || true # let its transaction end, rather than leave the pooler a cancel
      TLS_HOLD_PID=""
      [ -n "$negotiated" ] || negotiated="? (no client in SHOW CLIENTS)"
    fi
    if PGCHANNELBINDING=require tls_psql -p "$port" -d bench -c "SELECT 1" >/dev/null 2>&1; then cb=yes; else cb=no; fi
    printf '%s\t%s\t%s\n' "$t" "$negotiated" "$cb" >>"$TLS_INFO"
    log "TLS $t: $negotiated, SCRAM-SHA-256-PLUS: $cb"
  done
fi

# Total pool size the poolers may hold open, so direct runs never exceed max_connections: two
# databases in each plain instance, and (tls-storm) one used in each TLS instance.
DIRECT_MAX=$((PG_MAX_CONNECTIONS - PG_RESERVED - (4 + 2 * TLS) * BENCH_POOL_SIZE))
CELLS=$WORK/cells.jsonl
MEMORY=$WORK/memory.jsonl
: >"$CELLS"
: >"$MEMORY"

cpu_ticks() { # pid → utime+stime of the whole process (all threads), in clock ticks
  local line rest
  read -r line <"/proc/$1/stat"
  rest=${line##*) } # field 2 (comm) may contain spaces; fields after it start with field 3
  # shellcheck disable=SC2086
  set -- $rest
  echo $((${12} + ${13})) # fields 14 and 15
}
vmrss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# ---- memory: RSS per idle client ------------------------------------------------------------------
mem_run() { # target
  local t=$1 port pid before after rc=0 i login="" lost=0 err="" out
  port=$(target_port "$t")
  pid=$(target_pid "$t")
  out=$WORK/runs/idle-$t.out
  log "memory: $BENCH_IDLE idle clients → $t"
  sleep 1
  before=$(vmrss_kb "$pid")
  rm -f "$WORK/idle.stdin"
  mkfifo "$WORK/idle.stdin"
  exec {IDLE_FD}<>"$WORK/idle.stdin" # we hold the write end: closing it is the client's EOF
  "$WORK/bin/idle_clients" --port "$port" --user bench --db bench --count "$BENCH_IDLE" --concurrency 64 \
    <"$WORK/idle.stdin" >"$out" 2>&1 {IDLE_FD}>&- &
  IDLE_PID=$!
  for ((i = 0; i < 9000; i++)); do # up to 15 minutes
    grep -q '^ready' "$out" 2>/dev/null && break
    kill -0 "$IDLE_PID" 2>/dev/null || break
    sleep 0.1
  done
  after=""
  if grep -q '^ready' "$out"; then
    sleep 2 # let the pooler settle
    kill -0 "$pid" 2>/dev/null && after=$(vmrss_kb "$pid")
    login=$(sed -n 's/^ready [0-9]* in \([0-9.]*\)s$/\1/p' "$out")
  fi
  exec {IDLE_FD}>&-
  IDLE_FD=""
  for ((i = 0; i < 300; i++)); do
    kill -0 "$IDLE_PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$IDLE_PID" 2>/dev/null; then
    log "  idle_clients did not exit at end of input; killing it"
    kill -KILL "$IDLE_PID" 2>/dev/null || true
  fi
  wait "$IDLE_PID" 2>/dev/null || rc=$?
  IDLE_PID=""
  rm -f "$WORK/idle.stdin"
  if [ -z "$after" ]; then
    err="idle clients did not all connect (exit $rc): $(grep -v '^ready' "$out" | head -n 3 | tr '\n' ' ')"
  elif [ "$rc" -eq 3 ]; then
    lost=$(sed -n 's/^lost \([0-9]*\)$/\1/p' "$out")
  elif [ "$rc" -ne 0 ]; then
    err="idle_clients exited with status $rc: $(head -n 3 "$out" | tr '\n' ' ')"
  fi
  "$PYTHON" -c 'import json,sys
a = sys.argv[1:]
num = lambda v, f: f(v) if v else None
print(json.dumps({"target": a[0], "count": int(a[1]), "rss_before_kb": num(a[2], int),
    "rss_after_kb": num(a[3], int), "login_seconds": num(a[4], float), "lost": int(a[5] or 0),
    "error": a[6] or None}))' "$t" "$BENCH_IDLE" "$before" "$after" "$login" "${lost:-0}" "$err" >>"$MEMORY"
  log "  $t: VmRSS ${before} kB → ${after:-?} kB${login:+, logins took ${login}s}${err:+; $err}"
  check_poolers
}

if has_part memory && [ "$BENCH_IDLE" -gt 0 ]; then
  mem_run pgbouncer
  mem_run pgcorral
fi

# ---- pgbench cells --------------------------------------------------------------------------------
run_pgbench() { # part clients target rep; also used for the warm-up (rep 0)
  local part=$1 c=$2 t=$3 rep=$4 port pid db mode_args id out logdir j duration before="" after="" rc=0
  local sslmode=disable host=127.0.0.1
  port=$(target_port "$t" "$part")
  pid=$(target_pid "$t" "$part")
  db=bench
  if [ -n "$CLIENT_SOCKET_DIR" ] && [ "$part" != storm ] && [ "$part" != tls-storm ]; then
    host=$CLIENT_SOCKET_DIR
    [ "$t" = direct ] && host=$PG_SOCKET_DIR
  fi
  case $part in
    simple | extended) mode_args=(-M "$part") ;;
    prepared_tx) mode_args=(-M prepared) ;; # transaction mode: database bench
    prepared)
      mode_args=(-M prepared)
      [ "$t" = direct ] || db=bench_session
      ;;
    storm) mode_args=(-M simple -C) ;;
    tls-storm)
      mode_args=(-M simple -C)
      sslmode=require # TLS on every connection, or no connection
      ;;
  esac
  j=$((BENCH_JOBS < c ? BENCH_JOBS : c))
  # pgbench's -T clock starts before its clients log in (its tps does not count that time), so
  # the run gets BENCH_LOGIN_MS per client on top: ~BENCH_T seconds are left to measure. Not for
  # the storm, whose logins are the workload, nor for the warm-up.
  duration=$BENCH_T
  if [ "$part" != storm ] && [ "$part" != tls-storm ] && [ "$rep" -gt 0 ]; then duration=$((BENCH_T + (c * BENCH_LOGIN_MS + 999) / 1000)); fi
  id=$part-c$c-$t-r$rep
  out=$WORK/runs/$id.out
  logdir=$WORK/runs/$id.txlog
  mkdir -p "$logdir"
  if [ -n "$pid" ] && [ "$rep" -gt 0 ]; then
    # Every 0.1 s, for the CPU per transaction without logins and logouts ("steady").
    "$PYTHON" "$BENCH_DIR/report.py" sample --pid "$pid" --out "$logdir/cpu" &
    SAMPLER_PID=$!
  fi
  [ -n "$pid" ] && before=$(cpu_ticks "$pid")
  # A time limit, so a stuck target cannot hang the harness (exit 124 = killed).
  PGSSLMODE=$sslmode timeout --kill-after=10 $((duration * 3 + 120)) \
    "$PGBENCH" -n -S "${mode_args[@]}" -c "$c" -j "$j" -T "$duration" \
    -l --log-prefix="$logdir/tx" -h "$host" -p "$port" -U bench "$db" >"$out" 2>&1 &
  PGBENCH_PID=$!
  wait "$PGBENCH_PID" || rc=$?
  PGBENCH_PID=""
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && after=$(cpu_ticks "$pid")
  stop_pid "$SAMPLER_PID" sampler
  SAMPLER_PID=""
  if [ "$rep" -gt 0 ]; then
    "$PYTHON" "$BENCH_DIR/report.py" cell --out "$out" --logs "$logdir" --part "$part" --clients "$c" \
      --target "$t" --rep "$rep" --rc "$rc" ${before:+--cpu-before "$before"} ${after:+--cpu-after "$after"} \
      --clk-tck "$CLK_TCK" --cpu-samples "$logdir/cpu" --duration "$duration" --bench-t "$BENCH_T" >>"$CELLS"
  elif [ "$rc" -ne 0 ]; then
    log "  warm-up against $t: pgbench exit $rc: $(grep -i error "$out" | head -n 2 | tr '\n' ' ')"
  fi
  rm -rf "$logdir"
  check_poolers
}

cells=()
for part in simple extended; do
  if has_part "$part"; then for c in $BENCH_CLIENTS; do cells+=("$part $c"); done; fi
done
# The prepared part: transaction mode at the clients of the simple and extended parts, then
# session mode (database bench_session) at the clients that fit in the pool.
if has_part prepared; then
  for c in $BENCH_CLIENTS; do cells+=("prepared_tx $c"); done
  for c in "${prepared_clients[@]}"; do cells+=("prepared $c"); done
fi
if has_part storm; then for c in $BENCH_STORM_CLIENTS; do cells+=("storm $c"); done; fi
if has_part tls-storm; then for c in $BENCH_TLS_CLIENTS; do cells+=("tls-storm $c"); done; fi

if [ "${#cells[@]}" -gt 0 ] && [ "$BENCH_WARMUP" -gt 0 ]; then
  log "warm-up: ${BENCH_WARMUP}s of pgbench -S, 16 clients, per target"
  [ "$TLS" -eq 1 ] && log "  and ${BENCH_WARMUP}s of pgbench -S -C with TLS, 16 clients, per TLS pooler instance"
  saved_t=$BENCH_T
  BENCH_T=$BENCH_WARMUP
  for t in direct pgbouncer pgcorral; do run_pgbench simple 16 "$t" 0; done
  # The TLS instances of the poolers: their pools fill, and TLS is warm, before the first run.
  if has_part tls-storm; then for t in pgbouncer pgcorral; do run_pgbench tls-storm 16 "$t" 0; done; fi
  BENCH_T=$saved_t
fi

targets=(direct pgbouncer pgcorral)
reps_to_run=$BENCH_REPS
[ "${#cells[@]}" -gt 0 ] || reps_to_run=0 # nothing for pgbench to do
for ((rep = 1; rep <= reps_to_run; rep++)); do
  # Rotate the order of the targets every repetition, so none always runs first or last.
  off=$(((rep - 1) % 3))
  order=("${targets[@]:off}" "${targets[@]:0:off}")
  log "repetition $rep of $BENCH_REPS (order: ${order[*]})"
  for cell in "${cells[@]}"; do
    read -r part c <<<"$cell"
    for t in "${order[@]}"; do
      if [ "$t" = direct ] && [ "$c" -gt "$DIRECT_MAX" ]; then
        [ "$rep" -eq 1 ] && log "  $part c=$c direct: n/a (> max_connections $PG_MAX_CONNECTIONS less pools and reserved)"
        printf '{"part": "%s", "clients": %d, "target": "direct", "rep": %d, "rc": 0, "skipped": "exceeds max_connections"}\n' \
          "$part" "$c" "$rep" >>"$CELLS"
        continue
      fi
      run_pgbench "$part" "$c" "$t" "$rep"
    done
  done
done

# ---- report ---------------------------------------------------------------------------------------
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
elapsed=$(($(date +%s) - START_EPOCH))
duration=$(printf '%dm%02ds' $((elapsed / 60)) $((elapsed % 60)))
stop_pid "$CORRAL_PID" pgcorral
stop_pid "$BOUNCER_PID" pgbouncer
stop_pid "$CORRAL_TLS_PID" pgcorral-tls
stop_pid "$BOUNCER_TLS_PID" pgbouncer-tls
CORRAL_PID="" BOUNCER_PID="" CORRAL_TLS_PID="" BOUNCER_TLS_PID=""
"$PYTHON" "$BENCH_DIR/report.py" report --cells "$CELLS" --memory "$MEMORY" --out "$REPORT" \
  --date "$RUN_DATE" --duration "$duration" --parts "$BENCH_PARTS" --t "$BENCH_T" --reps "$BENCH_REPS" --clients "$BENCH_CLIENTS" \
  --prepared-clients "${prepared_clients[*]:-none}" --storm-clients "$BENCH_STORM_CLIENTS" \
  --tls-clients "$BENCH_TLS_CLIENTS" --tls-key "$TLS_KEY_DESC" --tls-info "$TLS_INFO" --jobs "$BENCH_JOBS" \
  --scale "$BENCH_SCALE" --pool-size "$BENCH_POOL_SIZE" --idle "$BENCH_IDLE" --max-connections "$PG_MAX_CONNECTIONS" \
  --pg-bindir "$PG_BIN" --pgbouncer "$PGBOUNCER" --pgcorral "$WORK/bin/pgcorral" --pgcorral-build "$CORRAL_BUILD" --git-rev "$GIT_REV" \
  --load-start "$LOAD_START" --load-end "$LOAD_END" --note "$BENCH_NOTE" >/dev/null
log "report: ${REPORT#"$ROOT"/} (+ .png), in $duration"
