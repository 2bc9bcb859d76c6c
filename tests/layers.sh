#!/usr/bin/env bash
# The layers hold (CMakeLists.txt, "Layers"): compiled against a layer's
# include root, a header of its own or a lower layer is found and one of a
# higher layer is not. Also checks the sources: no file includes a higher
# layer's header (what the build would refuse anyway, said by name).
# Usage: tests/layers.sh CC LAYERS_DIR SOURCE_DIR
set -euo pipefail
cc=$1 layers=$2 src=$3
fail=0
probe() { # root header want(ok|fail)
  if printf '#include "%s"\n' "$2" | "$cc" -fsyntax-only -I "$layers/$1" \
      -x c - >/dev/null 2>&1; then got=ok; else got=fail; fi
  if [ "$got" != "$3" ]; then
    echo "layers: $1 including $2: $got, want $3"
    fail=1
  fi
}
probe ledger ledger/fo_err.h ok
probe ledger daemon/orch_sandbox.h fail
probe daemon ledger/fo_err.h ok
probe daemon surfaces/surf.h fail
probe surfaces ledger/fo_err.h ok
probe surfaces cli/cli.h fail
probe cli ledger/fo_err.h ok
# by name, for a readable message: layer -> the directories above it
above() {
  case $1 in
    ledger) echo "daemon surfaces cli" ;;
    daemon) echo "surfaces cli" ;;
    surfaces) echo "cli" ;;
  esac
}
for layer in ledger daemon surfaces; do
  for up in $(above "$layer"); do
    # daemon/service.c is the serve layer: it wires the daemon to surfaces
    hits=$(grep -ln "#include \"$up/" "$src/$layer"/*.c "$src/$layer"/*.h \
           2>/dev/null | grep -v "daemon/service.c" || true)
    if [ -n "$hits" ]; then
      echo "layers: $layer includes $up: $hits"
      fail=1
    fi
  done
done
[ $fail = 0 ] && echo "layers ok: ledger < daemon < surfaces < serve < cli"
exit $fail
