#!/usr/bin/env bash
# What a session restore costs: pgbench runs one-statement transactions through pgcorral
# (transaction mode, fewer servers than clients) and straight against PostgreSQL, once with a
# statement pgcorral proves clean (`SELECT abs(n)`) and once with the same work behind a
# function of the database's own, which pgcorral cannot see through: after each such
# transaction the server is restored (RESET SESSION AUTHORIZATION; RESET ROLE; RESET ALL, and
# the next client's settings) before another client gets it. The direct runs show what the
# function itself costs PostgreSQL; the rest of the difference through pgcorral is the restore.
#
#   bench/restore_cost.sh                      # 15 s each, 16 clients over 4 servers
#   DURATION=30 CLIENTS=32 POOL_SIZE=8 bench/restore_cost.sh
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export DURATION=${DURATION:-15} CLIENTS=${CLIENTS:-16} POOL_SIZE=${POOL_SIZE:-4} DIRECT=1
export SETUP="CREATE FUNCTION bench_abs(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT abs(\$1)'"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo 'SELECT abs(:client_id);' >"$work/clean.sql"
echo 'SELECT bench_abs(:client_id);' >"$work/restored.sql"
for kind in clean restored; do
  echo "== $kind: $(cat "$work/$kind.sql")"
  SCRIPT=$work/$kind.sql "$BENCH_DIR/session_state.sh" 2>&1 | grep -E '^(through pgcorral|direct|\[.*(FAIL|ERROR))'
done
