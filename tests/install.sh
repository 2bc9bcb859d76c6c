#!/usr/bin/env bash
# tests/install.sh BUILD_DIR: `cmake --install` into a fresh prefix, then
# checks what a user gets: the binary runs, the man page renders, the
# completions load, the systemd unit names the installed binary (and
# passes `systemd-analyze verify` where that exists), the docs are there.
set -euo pipefail
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "install.sh: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
bin=$prefix/bin/forum
[ -x "$bin" ] || fail "no $bin"
"$bin" version | grep -q '^forum ' || fail "the installed forum does not run"

man1=$prefix/share/man/man1/forum.1
[ -s "$man1" ] || fail "no man page"
head -1 "$man1" | grep -q '^\.TH FORUM 1' || fail "the man page has no .TH"
for cmd in ledger serve submit gate run; do
  grep -q "^\.SS $cmd" "$man1" || fail "the man page lacks $cmd"
done
if command -v groff >/dev/null; then
  warn=$(groff -man -ww -z "$man1" 2>&1 || true)
  [ -z "$warn" ] || fail "groff warns: $warn"
fi

bashc=$prefix/share/bash-completion/completions/forum
[ -s "$bashc" ] || fail "no bash completion"
out=$(bash -c "source '$bashc'; COMP_WORDS=(forum led); COMP_CWORD=1;
               _forum; echo \${COMPREPLY[*]}")
[ "$out" = ledger ] || fail "bash completion of 'led': '$out'"
out=$(bash -c "source '$bashc'; COMP_WORDS=(forum gate ap); COMP_CWORD=2;
               _forum; echo \${COMPREPLY[*]}")
[ "$out" = approve ] || fail "bash completion of 'gate ap': '$out'"
[ -s "$prefix/share/zsh/site-functions/_forum" ] || fail "no zsh completion"
head -1 "$prefix/share/zsh/site-functions/_forum" | grep -q '^#compdef forum' ||
  fail "the zsh completion has no #compdef"

unit=$prefix/lib/systemd/system/forum.service
[ -s "$unit" ] || fail "no systemd unit"
grep -q "^ExecStart=$bin " "$unit" || fail "the unit does not run $bin"
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify "$unit" || fail "systemd-analyze verify failed"
else
  echo "install.sh: systemd-analyze not installed: the unit's syntax was not verified" >&2
fi

for d in OPERATIONS.md HTTP.md MCP.md LEDGER.md README.md; do
  [ -s "$prefix/share/doc/forum/$d" ] || fail "no doc $d"
done
echo "install: ok ($prefix)"
