#!/usr/bin/env bash
# Builds every fuzz target and runs each for a few seconds over its checked-in corpus (CI's
# smoke run; see docs/fuzzing.md). Exits non-zero on a crash, a failed check or a build error.
# FUZZ_SECONDS sets the time per target (default 5). Needs the nightly toolchain; installs
# cargo-fuzz when it is missing. The corpus is copied first, so what a run finds stays out of
# the work tree.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${FUZZ_SECONDS:-5}"

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing: cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

start=$(date +%s)
cargo +nightly fuzz build
echo "fuzz: built in $(($(date +%s) - start)) s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for target in $(cargo +nightly fuzz list); do
  mkdir -p "$work/$target"
  rm -rf "artifacts/$target"
  [ -d "corpus/$target" ] && cp -r "corpus/$target/." "$work/$target/"
  if ! cargo +nightly fuzz run "$target" "$work/$target" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 \
      >"$work/$target.log" 2>&1; then
    failed+=("$target")
    echo "fuzz: $target FAILED"
    tail -n 40 "$work/$target.log"
    for f in artifacts/"$target"/*; do
      if [ -f "$f" ]; then
        echo "input $f (hex): $(od -An -tx1 -v "$f" | tr -d ' \n' | head -c 2000)"
      fi
    done
  else
    echo "fuzz: $target ok ($(grep -o 'Done [0-9]* runs' "$work/$target.log" | tail -1))"
  fi
done
echo "fuzz: smoke run took $(($(date +%s) - start)) s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
