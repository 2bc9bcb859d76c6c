#!/usr/bin/env bash
# tests/unit_sandbox.sh FORUM UNIT: the shipped systemd unit (dist/
# forum.service.in) lets bubblewrap make the sandbox agents' commands run
# in. No systemd runs here (nor in CI), so its restrictions are checked
# against what the sandbox really does:
# 1. the unit's lines: the namespaces bwrap makes are allowed, and no
#    option lays mounts over /proc (the kernel then refuses bwrap's
#    /proc: ProtectKernelTunables=, ProtectKernelLogs=);
# 2. `forum serve --check` (the unit's ExecStartPre, which makes a real
#    sandbox) is traced with strace, run as the unit runs it (an
#    unprivileged user, no new privileges; as root also in a mount
#    namespace with / read-only, a private /tmp and /proc with
#    hidepid=invisible, as ProtectSystem=strict, PrivateTmp= and
#    ProtectProc= make it): every system call it and bwrap make must be in
#    the unit's SystemCallFilter= (its groups expanded by
#    systemd-analyze), every socket family in RestrictAddressFamilies=;
# 3. the negative: with /proc/sys overmounted read-only (what
#    ProtectKernelTunables=yes does) the sandbox is unavailable, so the
#    check in 1 guards a real failure.
# Parts whose tools are missing (systemd-analyze, strace, root for 2's
# mount namespace and 3) are skipped, saying so.
set -euo pipefail
forum=$1
unit=$2
fail() { echo "unit_sandbox.sh: $*" >&2; exit 1; }
val() { sed -n "s/^$1=//p" "$unit" | tail -1; }

# 1. the unit's lines
ns=" $(val RestrictNamespaces) "
for n in user mnt pid net ipc uts cgroup; do
  case "$ns" in *" $n "*) ;; *) fail "RestrictNamespaces=$ns lacks $n (bwrap --unshare-all makes it)" ;; esac
done
for o in ProtectKernelTunables ProtectKernelLogs; do
  [ "$(val $o)" = yes ] && fail "$o=yes lays mounts over /proc: bwrap cannot mount /proc"
done
[ "$(val MemoryDenyWriteExecute)" = yes ] &&
  fail "MemoryDenyWriteExecute=yes stops every JIT an agent's command runs"
families=" $(val RestrictAddressFamilies) "
filter=$(val SystemCallFilter)
[ -n "$filter" ] || fail "no SystemCallFilter="
echo "unit_sandbox.sh: the unit's lines allow the sandbox" >&2

command -v bwrap >/dev/null || { echo "unit_sandbox.sh: no bwrap: skipped the rest" >&2; exit 0; }
if ! command -v systemd-analyze >/dev/null || ! command -v strace >/dev/null; then
  echo "unit_sandbox.sh: systemd-analyze or strace missing: the system calls were not checked" >&2
  exit 0
fi

# the filter's system calls, groups expanded
declare -A allowed=()
expand() {
  local item=$1
  if [ "${item#@}" != "$item" ]; then
    local m
    for m in $(systemd-analyze syscall-filter "$item" | sed -n 's/^    \([-@a-z0-9_]*\)$/\1/p'); do
      expand "$m"
    done
  else
    allowed[$item]=1
  fi
}
for f in $filter; do expand "$f"; done
[ ${#allowed[@]} -gt 100 ] || fail "systemd-analyze expanded the filter to ${#allowed[@]} calls"

# not under /tmp: a private /tmp goes over it below, and over a build
# tree that lives there (a clone in /tmp): the binary is copied in too
tmp=$(mktemp -d "/var/tmp/unit-sandbox.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp"
mkdir "$tmp/ledger"
cp "$forum" "$tmp/forum"
chmod 0755 "$tmp/forum"
# strace resolves names itself; its own setup calls come before the
# first execve and are left out below
# (LeakSanitizer cannot stop the world of a process strace traces: a
# sanitizer build's leak check is off here, the rest of ASan stays on)
run=(env -i PATH=/usr/bin:/bin ASAN_OPTIONS=detect_leaks=0
     "$tmp/forum" --ledger "$tmp/ledger" serve --check)
if [ "$(id -u)" = 0 ]; then
  chown 65534:65534 "$tmp/ledger"
  as=(setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs --)
  # ProtectSystem=strict, PrivateTmp=, ProtectProc=invisible
  # the state dir stays writable (StateDirectory=), the rest read-only
  unshare -m --propagation private sh -c '
    mount --bind "$0" "$0"
    mount -o remount,bind,ro / 2>/dev/null || mount --bind -o ro / /
    mount -t tmpfs -o mode=1777 tmpfs /tmp
    mount -t proc -o hidepid=invisible proc /proc
    exec "$@"' "$tmp" strace -f -qq -o "$tmp/trace" "${as[@]}" "${run[@]}" \
    > "$tmp/out" 2>&1 || fail "serve --check failed: $(cat "$tmp/out")"
else
  strace -f -qq -o "$tmp/trace" setpriv --no-new-privs -- "${run[@]}" \
    > "$tmp/out" 2>&1 || fail "serve --check failed: $(cat "$tmp/out")"
fi
grep -q '^sandbox: bubblewrap$' "$tmp/out" ||
  fail "no sandbox under the unit's restrictions: $(cat "$tmp/out")"
grep -q 'execve(".*bwrap"' "$tmp/trace" || fail "bwrap was not run: $(head -c 2000 "$tmp/trace")"

# every call after the first execve of each process
bad=$(sed -E 's/^[0-9]+ +//' "$tmp/trace" | grep -oE '^[a-z_0-9]+\(' | tr -d '(' |
      sort -u | while read -r c; do [ -n "${allowed[$c]:-}" ] || echo "$c"; done)
[ -z "$bad" ] || fail "calls outside SystemCallFilter=: $bad"
for fam in $(grep -oE 'socket\(AF_[A-Z0-9]+' "$tmp/trace" | sed 's/socket(//' | sort -u); do
  case "$families" in *" $fam "*) ;; *) fail "socket family $fam not in RestrictAddressFamilies=" ;; esac
done
echo "unit_sandbox.sh: forum and bwrap made $(sed -E 's/^[0-9]+ +//' "$tmp/trace" |
  grep -oE '^[a-z_0-9]+\(' | sort -u | wc -l) distinct calls, all in the filter" >&2

# 3. the negative: what ProtectKernelTunables=yes does to /proc
if [ "$(id -u)" = 0 ]; then
  out=$(unshare -m --propagation private sh -c '
    mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys
    exec "$@"' sh "${as[@]}" "${run[@]}" 2>&1) || true
  case "$out" in
    *"sandbox: unavailable"*) ;;
    *) fail "with /proc/sys overmounted the sandbox still works: the check of ProtectKernelTunables guards nothing: $out" ;;
  esac
  echo "unit_sandbox.sh: with ProtectKernelTunables' mounts the sandbox is refused, as expected" >&2
else
  echo "unit_sandbox.sh: not root: the negative (a mount over /proc/sys) was not tried" >&2
fi
