#!/usr/bin/env bash
# Instructions per round trip of a 64-byte ping-pong over loopback TCP between two parts of one
# thread, four ways: two tokio tasks on a current-thread runtime (tokio_pp); the same two tasks
# on an executor with an edge-triggered epoll reactor of its own that other threads may wake
# (sync_pp: Arc wakers, a shared queue and an eventfd, atomic readiness); the same on a minimal
# single-thread-only version of it (mini_pp); and a plain epoll loop with no tasks (epoll_pp).
# Counted by callgrind at two lengths and differenced, so start-up costs cancel. Needs valgrind.
# See docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release -q
T=${CARGO_TARGET_DIR:-target}/release
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'; }
for b in tokio_pp sync_pp mini_pp epoll_pp; do
  for n in 20000 40000; do
    valgrind --tool=callgrind --callgrind-out-file="$WORK/$b-$n.cg" "$T/$b" "$n" >/dev/null 2>&1
  done
  echo "$b: $((($(total "$WORK/$b-40000.cg") - $(total "$WORK/$b-20000.cg")) / 20000)) instructions per round trip"
done
