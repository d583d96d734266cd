#!/usr/bin/env bash
# Long differential runs: generated interleavings run straight against PostgreSQL and through
# pgcorral in each pool mode (docs/testing.md, "Differential tests").
#
#   scripts/differential.sh [cases per mode] [first seed]
#
# Environment: DIFF_CASES (default 10000), DIFF_SEED (default 1), DIFF_MODES (default all:
# session,transaction,statement), DIFF_PROFILE (release or debug; default release).
set -euo pipefail
cd "$(dirname "$0")/.."
export DIFF_CASES="${1:-${DIFF_CASES:-10000}}"
export DIFF_SEED="${2:-${DIFF_SEED:-1}}"
profile="${DIFF_PROFILE:-release}"
flags=()
[ "$profile" = release ] && flags=(--release)
mkdir -p target
log="target/differential-seed${DIFF_SEED}-n${DIFF_CASES}.log"
echo "differential: $DIFF_CASES cases per mode from seed $DIFF_SEED ($profile build); log: $log"
set +e
cargo test "${flags[@]}" -p pgcorral --test differential random_interleavings -- --nocapture >"$log" 2>&1
status=$?
set -e
grep -E '^(seed |differential random|progress)' "$log" || true
echo "exit status $status; minimal reproductions, if any, are in $log"
exit "$status"
