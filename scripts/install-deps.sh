#!/usr/bin/env bash
# Installs the Debian packages forum builds and tests with, when missing.
# Idempotent and quick when everything is there. Needs root (or sudo).
set -euo pipefail

# Usage: scripts/install-deps.sh [--serve]
#   --serve   only what building and serving need (./run.sh); without it
#             also the test toolchain (./test.sh).
serve_only=0
[ "${1:-}" = --serve ] && serve_only=1

# bubblewrap: the sandbox agents' commands run in (docs/AGENTS.md)
# libpq-dev: configure needs it (the PostgreSQL store is always built)
# libprotobuf-c-dev, protobuf-c-compiler: POST /v1/traces decodes OTLP
# protobuf with code protoc-c generates at build time; zlib1g-dev inflates
# its gzip bodies
pkgs=(build-essential cmake pkg-config ca-certificates
      libevent-dev libsqlite3-dev libssl-dev libcjson-dev libpq-dev bubblewrap
      libprotobuf-c-dev protobuf-c-compiler zlib1g-dev)
if [ $serve_only = 0 ]; then
  # strace: tests/unit_sandbox.sh traces the sandbox under the unit's
  # system-call filter
  pkgs+=(libcriterion-dev clang-format golang-go golang-golang-x-mod-dev
         clang libclang-rt-14-dev chromium postgresql strace)
  [ "${FORUM_DEPS_BENCH:-0}" = 1 ] && pkgs+=(wrk)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
# node and npm drive the MCP client test; the machine's nodejs may already
# bundle npm (nodesource), in which case Debian's npm package conflicts.
if [ $serve_only = 0 ]; then
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# The dashboard's browser test checks accessibility with axe-core (npm),
# pinned in tests/dashboard/package-lock.json and installed here into
# tests/dashboard/node_modules, so the test itself fetches nothing.
if [ $serve_only = 0 ]; then
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  dash=$root/tests/dashboard
  want=$(node -p "require('$dash/package-lock.json').packages['node_modules/axe-core'].version")
  have=$(node -p "try { require('$dash/node_modules/axe-core/package.json').version } catch (e) { '' }")
  if [ "$want" != "$have" ]; then
    echo "install-deps: npm ci in tests/dashboard (axe-core $want)" >&2
    (cd "$dash" && npm ci --no-audit --no-fund --loglevel=error >&2)
  fi
  # The gateway's test against the official openai and @anthropic-ai/sdk
  # clients, and the trace receiver's against the OpenTelemetry exporters
  # (@opentelemetry/exporter-trace-otlp-proto and -http), pinned in
  # tests/gateway/package-lock.json, the same way.
  gw=$root/tests/gateway
  gwpkgs="openai @anthropic-ai/sdk @opentelemetry/exporter-trace-otlp-proto @opentelemetry/exporter-trace-otlp-http @opentelemetry/sdk-trace-base"
  want=$(node -p "const l = require('$gw/package-lock.json').packages; '$gwpkgs'.split(' ').map((p) => l['node_modules/' + p].version).join(' ')")
  have=$(node -p "try { '$gwpkgs'.split(' ').map((p) => require('$gw/node_modules/' + p + '/package.json').version).join(' ') } catch (e) { '' }")
  if [ "$want" != "$have" ]; then
    echo "install-deps: npm ci in tests/gateway ($gwpkgs: $want)" >&2
    (cd "$gw" && npm ci --no-audit --no-fund --loglevel=error >&2)
  fi
fi
