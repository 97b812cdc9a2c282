#!/usr/bin/env bash
# Installs the pinned real agent CLIs (claude, codex, opencode) from the npm registry
# into a local prefix, for the real-CLI end-to-end tests (crates/loops/tests/e2e/agents.rs,
# `real_*`). Those tests look in $LOOPS_TEST_AGENT_BIN, else in the default prefix's
# node_modules/.bin.
#
# Usage: ci/install-agent-clis.sh [PREFIX]   (default PREFIX: <repo>/.ci-npm)
#
# Idempotent: does nothing when the pinned versions are already there. Quiet on
# success; on failure prints npm's log and exits non-zero.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${1:-$repo/.ci-npm}"

# Pinned to the versions the adapters were checked against (issue #5 names
# claude-code 2.1.x, codex 0.171, opencode 1.18). Bump together with the fixtures in
# crates/loops-runtime/tests/fixtures (see its README).
packages=(
  "@anthropic-ai/claude-code@2.1.332"
  "@openai/codex@0.171.0"
  "opencode-ai@1.18.33"
)
bins=(claude codex opencode)

for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install-agent-clis: $tool not found" >&2; exit 1; }
done

installed() {
  local spec name version manifest
  for spec in "${packages[@]}"; do
    name="${spec%@*}"
    version="${spec##*@}"
    manifest="$prefix/node_modules/$name/package.json"
    [ -f "$manifest" ] || return 1
    [ "$(node -p "require(process.argv[1]).version" "$manifest" 2>/dev/null)" = "$version" ] || return 1
  done
  for bin in "${bins[@]}"; do
    [ -x "$prefix/node_modules/.bin/$bin" ] || return 1
  done
}

if ! installed; then
  mkdir -p "$prefix"
  log="$(mktemp)"
  trap 'rm -f "$log"' EXIT
  # The native binaries come from the registry as optional dependencies; the
  # packages' postinstall steps (which must run) only copy them into place, offline.
  if ! npm install --prefix "$prefix" --no-audit --no-fund \
      --loglevel=error "${packages[@]}" >"$log" 2>&1; then
    echo "install-agent-clis: npm install failed:" >&2
    cat "$log" >&2
    exit 1
  fi
  installed || { echo "install-agent-clis: pinned versions missing after install in $prefix" >&2; exit 1; }
fi

# Each CLI must actually start (a broken native package would only show up later).
for bin in "${bins[@]}"; do
  if ! "$prefix/node_modules/.bin/$bin" --version >/dev/null 2>&1; then
    echo "install-agent-clis: $prefix/node_modules/.bin/$bin --version failed" >&2
    exit 1
  fi
done
