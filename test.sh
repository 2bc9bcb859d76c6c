#!/usr/bin/env bash
# Runs every test: installs what is missing, builds the daemon as ./run.sh
# serves it (no tests, no test seams) with -Werror, then builds and runs the
# suite twice (a -Werror build, and an AddressSanitizer + UBSan build), runs each
# libFuzzer target briefly (fuzz/run.sh), and checks
# the formatting. Usage: ./test.sh
set -euo pipefail
cd "$(dirname "$0")"

./scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)

# run_suite DIR TESTS_AT_ONCE CMAKE_ARGS...
run_suite() {
  local dir=$1 at_once=$2; shift 2
  echo "== build $dir ($*)"
  cmake -S . -B "$dir" -DFORUM_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j"$jobs"
  echo "== test $dir"
  (cd "$dir" && ctest --output-on-failure -j"$at_once")
}

# what ./run.sh serves compiles and links without the tests' seams
echo "== build build-served (as ./run.sh builds it, -Werror)"
cmake -S . -B build-served -DFORUM_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFORUM_TESTS=OFF >/dev/null
cmake --build build-served -j"$jobs" --target forum

# Every test takes its own port, data dir and servers: the optimized build
# runs them side by side, as many at once as there are cores. The
# sanitized one runs them one at a time for now (docs/ARCHITECTURE.md,
# "Tests and benchmarks").
run_suite build "$jobs" -DCMAKE_BUILD_TYPE=RelWithDebInfo
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_suite build-asan 1 -DCMAKE_BUILD_TYPE=Debug -DFORUM_SANITIZE=ON

echo "== fuzz smoke (each target 15 s; fuzz/run.sh SECONDS runs them long)"
fuzz/run.sh "${FORUM_FUZZ_SECONDS:-15}"

echo "== format check"
git ls-files '*.c' '*.h' | xargs -r clang-format --dry-run --Werror
echo "format ok"
