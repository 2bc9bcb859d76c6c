#!/bin/sh
# run.sh: checks that Go's golang.org/x/mod/sumdb/note accepts a note forum
# signed, and has Go sign the same text for forum to open.
#
#   tests/interop/run.sh -n NOTE -v VKEY [-s SKEY] [-o OUTDIR]
#
# Builds verify_note.go into a temporary directory (GOPATH mode, against the
# Debian package golang-golang-x-mod-dev), then runs it: it opens NOTE with
# VKEY; with SKEY it re-signs the text and requires identical bytes; with
# OUTDIR it writes go.note, go.vkey (and go-cosigned.note with SKEY) there.
# Exit status: 0 verified, 1 Go rejected something, 2 usage, 3 cannot build.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
note='' vkey='' skey='' out=''
while getopts n:v:s:o: opt; do
    case $opt in
    n) note=$OPTARG ;;
    v) vkey=$OPTARG ;;
    s) skey=$OPTARG ;;
    o) out=$OPTARG ;;
    *) echo "usage: $0 -n NOTE -v VKEY [-s SKEY] [-o OUTDIR]" >&2; exit 2 ;;
    esac
done
if [ -z "$note" ] || [ -z "$vkey" ]; then
    echo "usage: $0 -n NOTE -v VKEY [-s SKEY] [-o OUTDIR]" >&2
    exit 2
fi
if ! command -v go >/dev/null 2>&1; then
    echo "run.sh: go is not on PATH" >&2
    exit 3
fi

tmp=$(mktemp -d /tmp/forum-interop-XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
# go needs a build cache; without HOME it has none, so give it one.
if [ -z "${GOCACHE:-}" ] && [ -z "${HOME:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ]; then
    GOCACHE=$tmp/cache
    export GOCACHE
fi
if ! (cd "$here" && GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS='' \
        go build -o "$tmp/verify_note" verify_note.go); then
    echo "run.sh: cannot build verify_note.go (need golang-go and" \
         "golang-golang-x-mod-dev)" >&2
    exit 3
fi

set -- -vkey "$vkey" -note "$note"
[ -n "$skey" ] && set -- "$@" -skey "$skey"
[ -n "$out" ] && set -- "$@" -out "$out"
if ! "$tmp/verify_note" "$@"; then
    exit 1
fi
