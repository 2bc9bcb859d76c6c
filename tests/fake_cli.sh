#!/bin/sh
# fake_cli.sh MODE PROMPT: a model command line for the tests of --cmd,
# which runs every role. It answers each role from the first words of the
# prompt, as a model would: the coordinator plans one task on the lane the
# router suggests, the classifier picks backend, the validator passes, the
# synthesizer writes a line. A task's answer depends on MODE: "ok" prints
# done, "slow" waits 2 s first ("slower" 4 s), "fail" exits 1.
mode=$1
shift
for p; do :; done # the prompt is the last argument
case "$p" in
"You are the coordinator"*)
    lane=$(printf '%s\n' "$p" | sed -n 's/^The router suggests the agent "\([^"]*\)".*/\1/p')
    printf '{"tasks":[{"id":"T1","agent":"%s","instruction":"do the work"}]}\n' "${lane:-backend}"
    ;;
"You are the classifier"*) echo '{"lane": "backend"}' ;;
"You are the validator"*) echo '{"pass": true, "reason": "ok"}' ;;
"You are the synthesizer"*) echo "done: the answer, from the command" ;;
*)
    case "$mode" in
    slow) sleep 2; echo done ;;
    slower) sleep 4; echo done ;;
    fail) echo "it failed" >&2; exit 1 ;;
    *) echo done ;;
    esac
    ;;
esac
