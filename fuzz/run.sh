#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/fuzz_*.c, clang with ASan and UBSan)
# and runs each for SECONDS (default 600) from its seed corpus in
# fuzz/corpus/<name>, printing libFuzzer's figures. A crash stops with
# exit 1 and leaves the input as fuzz-out/crash-* (make it a regression
# test). ./test.sh runs it with 15 seconds as a smoke.
# Usage: fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
shift || true
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DFORUM_FUZZ=ON \
  -DFORUM_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/fuzz_*.c; do
    t=$(basename "$f" .c)
    targets+=("${t#fuzz_}")
  done
fi
mkdir -p fuzz-out
for t in "${targets[@]}"; do
  work=$(mktemp -d)  # new inputs found go here, the seeds stay as they are
  echo "== fuzz_$t: ${secs}s"
  if ! (cd fuzz-out && TMPDIR="$work" "../build-fuzz/fuzz_$t" \
        -max_total_time="$secs" -max_len=4096 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 \
        "$work" "../fuzz/corpus/$t") > "fuzz-out/$t.log" 2>&1; then
    tail -40 "fuzz-out/$t.log"
    echo "fuzz_$t: FAILED (input in fuzz-out/)"
    rm -rf "$work"
    exit 1
  fi
  grep -E "^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added)|cov:.*DONE|^#[0-9]+.*DONE" \
    "fuzz-out/$t.log" | tail -4
  rm -rf "$work"
done
echo "fuzz ok"
