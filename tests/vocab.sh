#!/usr/bin/env bash
# Inside the daemon, the vocabulary sits below the run engine
# (docs/ARCHITECTURE.md, "The orchestrator"): the files that implement the
# roster, the router, the planner, the executors, the model client and the
# tools take their limits and types from daemon/orch_types.h (and their
# helpers from daemon/orch_types_int.h), never from the orchestrator's
# handle and run API (daemon/orch.h, daemon/orch_int.h) or the engine's
# (daemon/orch_engine.h, daemon/orch_engine_int.h). Checked through every
# quoted #include they reach, so a header that pulls one in is named too.
# Usage: tests/vocab.sh SOURCE_DIR
set -euo pipefail
src=$1
# the files below the engine
below="orch_types.h orch_types_int.h
  orch_roster.c orch_route.c orch_plan.c orch_exec.c
  orch_model.h orch_model.c orch_json_lenient.c orch_template.c orch_assert.c
  orch_toolname.c orch_tools.h orch_tools.c orch_toolres.h orch_toolres.c
  orch_sandbox.h orch_sandbox.c orch_guard.h orch_guard.c orch_rescue.h
  orch_rescue.c orch_mcpc.h orch_mcpc.c orch_mcph.h orch_mcph.c
  orch_work.h orch_work.c httpc.h httpc.c"
# the headers above them
above="daemon/orch.h daemon/orch_int.h daemon/orch_engine.h
  daemon/orch_engine_int.h"
fail=0
# the quoted includes of a file, as paths from the source root
includes() { sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$src/$1"; }
for f in $below; do
  if [ ! -f "$src/daemon/$f" ]; then
    echo "vocab: daemon/$f is missing (update tests/vocab.sh)"
    fail=1
    continue
  fi
  # every header daemon/$f reaches, breadth first: "path<-includer"
  seen=" daemon/$f "
  queue="daemon/$f"
  while [ -n "$queue" ]; do
    next=""
    for q in $queue; do
      for h in $(includes "$q"); do
        case "$seen" in *" $h "*) continue ;; esac
        seen="$seen$h "
        for a in $above; do
          if [ "$h" = "$a" ]; then
            echo "vocab: daemon/$f reaches $a (included by $q)"
            fail=1
          fi
        done
        [ -f "$src/$h" ] && next="$next $h"
      done
    done
    queue=$next
  done
done
[ $fail = 0 ] && echo "vocab ok: the roster, router, planner, executors," \
  "model client and tools include neither orch.h nor the engine's headers"
exit $fail
