#!/usr/bin/env bash
# A profile-guided (PGO) release build of pgcorral. See bench/README.md.
#
#   bench/pgo.sh                              # trains against PostgreSQL on 127.0.0.1:5432
#   PGPORT=55432 PGO_T=5 bench/pgo.sh
#
# Builds pgcorral with LLVM's instrumentation (-Cprofile-generate), runs it under a pgbench
# workload like the benchmark's (SCRAM clients, transaction and session mode, the simple, extended
# and prepared protocols at 1, 16 and 64 clients, tpcb-like writes, connection storms, TLS), merges
# the counts with the llvm-profdata of rustc's own LLVM, and builds again with them
# (-Cprofile-use): LLVM then lays out the hot code together and the rare branches out of line.
# The binary is $PGO_TARGET_DIR/release/pgcorral (default target/pgo, or $CARGO_TARGET_DIR/pgo),
# printed at the end; the instrumented build goes to target/pgo-gen beside it.
#
# Needs a running PostgreSQL that lets $PGUSER (default postgres) in from $PGHOST without a
# password (trust), and pgbench. Creates role and database corral_pgo there (pgbench -i -s 1)
# if missing. llvm-profdata comes from rustup's llvm-tools component (added if absent) or from
# Debian's llvm-N package of the same LLVM major version as rustc's.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
PGO_T=${PGO_T:-3}
# Beside cargo's own target directory (CARGO_TARGET_DIR is honoured, as bench/run.sh does).
TARGET_BASE=${CARGO_TARGET_DIR:-$ROOT/target}
GEN_DIR=$TARGET_BASE/pgo-gen
PGO_TARGET_DIR=${PGO_TARGET_DIR:-$TARGET_BASE/pgo}
# The trained pgcorral listens here (default: a free port of 127.0.0.1).
PGO_PORT=${PGO_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
DB=corral_pgo
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PGBENCH=$PG_BIN/pgbench
PSQL=$PG_BIN/psql
export PGSSLMODE=disable

log() { printf '[pgo %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}
[[ $PGO_T =~ ^[1-9][0-9]*$ ]] || die "PGO_T must be a whole number of seconds, not '$PGO_T'"

# ---- llvm-profdata of rustc's LLVM ----------------------------------------------------------------
llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
[ -n "$llvm_major" ] || die "cannot tell rustc's LLVM version (rustc -vV)"
host=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$PROFDATA" ] && command -v rustup >/dev/null; then
  log "rustup component add llvm-tools"
  rustup component add llvm-tools >&2 || true
fi
if [ ! -x "$PROFDATA" ]; then
  PROFDATA=$(command -v "llvm-profdata-$llvm_major" || true)
  if [ -z "$PROFDATA" ] && command -v apt-get >/dev/null; then
    log "apt-get install llvm-$llvm_major"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "llvm-$llvm_major" >&2 ||
      { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "llvm-$llvm_major" >&2; } || true
    PROFDATA=$(command -v "llvm-profdata-$llvm_major" || true)
  fi
fi
[ -n "$PROFDATA" ] && [ -x "$PROFDATA" ] || die "no llvm-profdata for LLVM $llvm_major (rustup component add llvm-tools, or Debian's llvm-$llvm_major)"

WORK=$(mktemp -d)
CORRAL_PID=
cleanup() {
  [ -z "$CORRAL_PID" ] || kill "$CORRAL_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- the instrumented build -----------------------------------------------------------------------
# A target directory of its own (other RUSTFLAGS would rebuild everything in the usual one), and
# a fixed place for the counts (another path in RUSTFLAGS would rebuild everything each time).
log "instrumented build ($GEN_DIR)"
RAW=$GEN_DIR/raw
rm -rf "$RAW"
(cd "$ROOT" && RUSTFLAGS="-Cprofile-generate=$RAW" CARGO_TARGET_DIR="$GEN_DIR" \
  cargo build --release -q -p pgcorral) || die "the instrumented build failed"

# ---- the training database ------------------------------------------------------------------------
PW=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export PGPASSWORD=$PW
psql_admin() { "$PSQL" -X -q -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d postgres "$@"; }
psql_admin >/dev/null <<EOF || die "cannot reach PostgreSQL at $PGHOST:$PGPORT as $PGUSER without a password"
SELECT 'CREATE ROLE $DB LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$DB') \gexec
ALTER ROLE $DB PASSWORD '$PW';
SELECT 'CREATE DATABASE $DB OWNER $DB' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DB') \gexec
EOF
"$PGBENCH" -i -q -s 1 -h "$PGHOST" -p "$PGPORT" -U "$DB" "$DB" >"$WORK/init.log" 2>&1 ||
  die "pgbench -i failed: $(tail -3 "$WORK/init.log")"

# ---- training -------------------------------------------------------------------------------------
# Clients may ask for TLS (a self-signed ECDSA certificate), so that the handshake and the
# encrypted relay are trained too. Without openssl they are not.
TLS_LINES=
if command -v openssl >/dev/null; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -sha256 -nodes -days 1 \
    -subj "/CN=localhost" -keyout "$WORK/tls.key" -out "$WORK/tls.crt" >"$WORK/openssl.log" 2>&1 ||
    die "openssl req failed: $(tail -3 "$WORK/openssl.log")"
  TLS_LINES="client_tls_sslmode = \"prefer\"
client_tls_cert_file = \"$WORK/tls.crt\"
client_tls_key_file = \"$WORK/tls.key\""
else
  log "no openssl: TLS is not trained"
fi
cat >"$WORK/corral.toml" <<EOF
[general]
listen_addr = "127.0.0.1"
listen_port = $PGO_PORT
unix_socket_dir = ""
pool_mode = "transaction"
default_pool_size = 20
auth_type = "scram-sha-256"
workers = 0
server_reset_query = "DISCARD ALL"
server_tls_sslmode = "disable"
shutdown_timeout = 5000
log_level = "warn"
$TLS_LINES

[users.$DB]
password = "$PW"

[databases.$DB]
host = "$PGHOST"
port = $PGPORT
dbname = "$DB"

[databases.${DB}_session]
host = "$PGHOST"
port = $PGPORT
dbname = "$DB"
pool_mode = "session"
EOF
chmod 600 "$WORK/corral.toml"
# Its own session, as bench/run.sh starts the poolers.
setsid "$GEN_DIR/release/pgcorral" --config "$WORK/corral.toml" >"$WORK/corral.log" 2>&1 &
CORRAL_PID=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PGO_PORT") 2>/dev/null && break; sleep 0.1; done
kill -0 "$CORRAL_PID" 2>/dev/null || die "pgcorral did not start: $(tail -3 "$WORK/corral.log")"

bench() { # database clients pgbench-arguments...
  local db=$1 c=$2
  shift 2
  local tls=
  [ "$PGSSLMODE" = require ] && tls=", TLS"
  log "pgbench $* -c $c ($db$tls)"
  "$PGBENCH" -n -T "$PGO_T" -c "$c" -j $((c < 2 ? 1 : 2)) -h 127.0.0.1 -p "$PGO_PORT" -U "$DB" "$@" "$db" \
    >>"$WORK/pgbench.log" 2>&1 || die "pgbench $* -c $c failed: $(tail -3 "$WORK/pgbench.log")"
}
for proto in simple extended prepared; do
  for c in 1 16 64; do bench "$DB" "$c" -S -M "$proto"; done
done
bench "${DB}_session" 16 -S -M prepared
bench "$DB" 16 -M simple
bench "$DB" 16 -M extended
bench "$DB" 16 -S -C
if [ -n "$TLS_LINES" ]; then
  PGSSLMODE=require bench "$DB" 16 -S -M extended
  PGSSLMODE=require bench "$DB" 16 -S -C
fi

# The counts are written when the process exits.
kill -TERM "$CORRAL_PID"
wait "$CORRAL_PID" || true
CORRAL_PID=
ls "$RAW"/*.profraw >/dev/null 2>&1 || die "pgcorral wrote no profile: $(tail -3 "$WORK/corral.log")"
mkdir -p "$PGO_TARGET_DIR"
PROFILE=$PGO_TARGET_DIR/pgcorral.profdata
"$PROFDATA" merge -o "$PROFILE" "$RAW"/*.profraw || die "llvm-profdata merge failed"

# ---- the optimised build --------------------------------------------------------------------------
log "optimised build ($PGO_TARGET_DIR)"
(cd "$ROOT" && RUSTFLAGS="-Cprofile-use=$PROFILE" \
  CARGO_TARGET_DIR="$PGO_TARGET_DIR" cargo build --release -q -p pgcorral) || die "the optimised build failed"
echo "$PGO_TARGET_DIR/release/pgcorral"
