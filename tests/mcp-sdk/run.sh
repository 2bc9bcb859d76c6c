#!/usr/bin/env bash
# run.sh: drives `forum mcp` with the official MCP client SDK (npm
# @modelcontextprotocol/sdk 1.x): installs it into a scratch dir, then runs
# client.mjs against FORUM_BIN on a temporary ledger. A required check: a
# failed install fails the test, it is never skipped.
# Usage: tests/mcp-sdk/run.sh FORUM_BIN
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -ne 1 ]; then
  echo "usage: $0 FORUM_BIN" >&2
  exit 2
fi
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
if [ ! -x "$bin" ]; then
  echo "run.sh: $bin: not an executable" >&2
  exit 1
fi
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "run.sh: $tool is not on PATH (install nodejs npm)" >&2
    exit 1
  fi
done
work=$(mktemp -d /tmp/forum-mcp-sdk-XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$here/client.mjs" "$work/"
(
  cd "$work"
  echo '{"name":"forum-mcp-sdk-test","private":true,"type":"module"}' \
    > package.json
  if ! npm install --no-audit --no-fund --loglevel=error \
      '@modelcontextprotocol/sdk@1' >npm.log 2>&1; then
    cat npm.log >&2
    echo "run.sh: npm install @modelcontextprotocol/sdk@1 failed" >&2
    exit 1
  fi
)
echo "sdk $(node -p "require('$work/node_modules/@modelcontextprotocol/sdk/package.json').version")"
FORUM_BIN=$bin FORUM_LEDGER=$work/ledger node "$work/client.mjs"
