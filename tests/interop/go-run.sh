#!/bin/sh
# go-run.sh: builds one Go program of this directory offline, in GOPATH mode
# against the Debian package golang-golang-x-mod-dev, and runs it.
#
#   tests/interop/go-run.sh PROGRAM.go [ARGS...]
#
# Exit status: the program's; 3 when go is missing or the build fails.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
prog=${1:?usage: go-run.sh PROGRAM.go [ARGS...]}
shift
if ! command -v go >/dev/null 2>&1; then
    echo "go-run.sh: go is not on PATH" >&2
    exit 3
fi
tmp=$(mktemp -d /tmp/forum-gorun-XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
if [ -z "${GOCACHE:-}" ] && [ -z "${HOME:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ]; then
    GOCACHE=$tmp/cache
    export GOCACHE
fi
if ! (cd "$here" && GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS='' \
        go build -o "$tmp/prog" "$prog"); then
    echo "go-run.sh: cannot build $prog (need golang-go and" \
         "golang-golang-x-mod-dev)" >&2
    exit 3
fi
"$tmp/prog" "$@"
