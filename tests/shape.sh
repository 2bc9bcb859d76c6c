#!/usr/bin/env bash
# The code's shape stays one a newcomer can read (docs/ARCHITECTURE.md,
# "Where things are"): no .c file in daemon/ or surfaces/ over 2,000
# lines, and no function in ledger/, daemon/, surfaces/ or cli/ over 150
# lines (from the line that opens its body, a lone "{", to the one that
# closes it, a lone "}", as clang-format lays out every function here).
# Usage: tests/shape.sh SOURCE_DIR
set -euo pipefail
src=$1
fail=0
for f in "$src"/daemon/*.c "$src"/surfaces/*.c; do
  n=$(wc -l < "$f")
  if [ "$n" -gt 2000 ]; then
    echo "shape: ${f#"$src"/} has $n lines (at most 2000: split it by concern)"
    fail=1
  fi
done
long=$(awk '
  FNR == 1 { open_at = 0; name = "" }
  /^[A-Za-z_].*\(/ { if (!open_at) { s = $0; sub(/\(.*/, "", s); n = split(s, w, /[ *]+/); name = w[n] } }
  /^\{$/ { open_at = FNR }
  /^\}/ { if (open_at && FNR - open_at + 1 > 150)
            printf "%s:%d %s: %d lines\n", FILENAME, open_at, name, FNR - open_at + 1;
          open_at = 0 }
' "$src"/ledger/*.c "$src"/daemon/*.c "$src"/surfaces/*.c "$src"/cli/*.c)
if [ -n "$long" ]; then
  echo "shape: functions over 150 lines (split them):"
  echo "${long//$src\//}"
  fail=1
fi
if [ "$fail" = 0 ]; then
  echo "shape: ok"
fi
exit "$fail"
