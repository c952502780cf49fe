#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: a pinned Python venv, pinned npm tools,
# and the offline solc facade where py-solc-x looks. Each step is skipped when
# its inputs have not changed, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
stamps=.setup-stamps
mkdir -p "$stamps"
# The pins (bpy and the ape stack among them) are for CPython 3.11.
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "setup: Python 3.11 is required (found $("$PYTHON" --version 2>&1)); set PYTHON=..." >&2
  exit 1
fi

fresh() {  # fresh NAME FILE... : true when the stamp matches the files' hash
  local sum
  sum=$(cat "${@:2}" | sha256sum | cut -d' ' -f1)
  [ -f "$stamps/$1" ] && [ "$(cat "$stamps/$1")" = "$sum" ] && return 0
  echo "$sum" > "$stamps/$1.next"
  return 1
}
stamp() { mv "$stamps/$1.next" "$stamps/$1"; }

if ! fresh python requirements.lock pyproject.toml; then
  echo "setup: Python environment (.venv)"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.lock
  .venv/bin/python -m pip install -q --no-deps -e .
  stamp python
fi

if ! fresh npm package.json package-lock.json; then
  echo "setup: npm tools (solc-js, anvil, forge, OpenZeppelin)"
  command -v npm >/dev/null || { echo "setup: npm is required (apt-get install nodejs npm)" >&2; exit 1; }
  npm ci --no-audit --no-fund --loglevel=error
  stamp npm
fi

# Slither in a venv of its own (its pins clash with the ape stack), from its own lock.
if ! fresh slither tools/slither-requirements.txt; then
  echo "setup: slither (.venv-slither)"
  [ -x .venv-slither/bin/python ] || "$PYTHON" -m venv .venv-slither
  .venv-slither/bin/python -m pip install -q -r tools/slither-requirements.txt
  stamp slither
fi

# py-solc-x and ape-solidity look for `solc-v<version>` in SOLCX_BINARY_PATH.
# A native solc of the pinned version is used when present; otherwise the facade.
solc_version=$(node -p "require('./node_modules/solc/package.json').version")
solc_target=.solcx/solc-v$solc_version
mkdir -p .solcx
if command -v solc >/dev/null && solc --version 2>/dev/null | grep -q "Version: $solc_version"; then
  ln -sf "$(command -v solc)" "$solc_target"
else
  printf '#!/bin/sh\nexec node "%s/tools/solc-facade.js" "$@"\n' "$root" > "$solc_target.tmp"
  chmod +x "$solc_target.tmp"
  mv "$solc_target.tmp" "$solc_target"
fi

# Debian packages: bubblewrap, the provider agent's sandbox (without it a root agent runs
# tasks as nobody under rlimits only, and nobody cannot run a Python under /root); with
# SETUP_TEST=1 (`make test`) also chromium, for the dashboard's browser test. Installed when
# this runs as root with apt-get; otherwise it says what to install.
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
if [ "${SETUP_TEST:-}" = 1 ] && ! command -v chromium >/dev/null; then need+=(chromium); fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need[*]} from Debian's packages"
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; } ||
      echo "setup: could not install ${need[*]} (apt-get failed): install them by hand" >&2
  else
    echo "setup: ${need[*]} not installed: without bubblewrap the provider agent runs tasks" \
         "under rlimits only, with no filesystem or network isolation (Debian: sudo apt-get" \
         "install ${need[*]})" >&2
  fi
fi
