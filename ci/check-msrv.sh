#!/usr/bin/env bash
# Keeps the workspace's `rust-version` true: fails when any locked dependency declares
# a newer `rust-version` than ours (so `cargo install --locked` / `cargo test --locked`
# would need a newer toolchain than the README promises).
#
# Usage: ci/check-msrv.sh
#
# Works offline from the local registry cache (`cargo metadata --offline`), falling
# back to a normal `cargo metadata` when the cache lacks a manifest (e.g. a crate only
# used on another platform). Needs jq or python3 to read the metadata.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

metadata="$(mktemp)"
trap 'rm -f "$metadata"' EXIT
if ! cargo metadata --format-version 1 --locked --offline >"$metadata" 2>/dev/null; then
  cargo metadata --format-version 1 --locked >"$metadata"
fi

# One line per package: "<rust_version or -> <name> <version> <member: yes|no>".
if command -v jq >/dev/null 2>&1; then
  rows="$(jq -r '.workspace_members as $ws | .packages[]
      | "\(.rust_version // "-") \(.name) \(.version) \(if (.id as $i | $ws | index($i)) then "yes" else "no" end)"' "$metadata")"
elif command -v python3 >/dev/null 2>&1; then
  rows="$(python3 - "$metadata" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
ws = set(m["workspace_members"])
for p in m["packages"]:
    print(p.get("rust_version") or "-", p["name"], p["version"], "yes" if p["id"] in ws else "no")
PY
)"
else
  echo "check-msrv: needs jq or python3 to read cargo metadata" >&2
  exit 1
fi

# Our rust-version: every workspace member inherits the same one.
ours="$(awk '$4 == "yes" && $1 != "-" {print $1}' <<<"$rows" | sort -u)"
if [ "$(wc -l <<<"$ours")" -ne 1 ] || [ -z "$ours" ]; then
  echo "check-msrv: workspace members must share one rust-version, found: ${ours:-none}" >&2
  exit 1
fi

# `a <= b` for dotted versions (1.88 == 1.88.0).
version_le() {
  local a b
  IFS=. read -r -a a <<<"$1"
  IFS=. read -r -a b <<<"$2"
  for i in 0 1 2; do
    local x="${a[i]:-0}" y="${b[i]:-0}"
    if ((10#$x < 10#$y)); then return 0; fi
    if ((10#$x > 10#$y)); then return 1; fi
  done
  return 0
}

newer=()
checked=0
while read -r rv name version member; do
  [ "$member" = "no" ] || continue
  checked=$((checked + 1))
  [ "$rv" = "-" ] && continue
  if ! version_le "$rv" "$ours"; then
    newer+=("$name $version needs $rv")
  fi
done <<<"$rows"

if [ "${#newer[@]}" -gt 0 ]; then
  echo "check-msrv: rust-version $ours is too old for the locked dependencies:" >&2
  printf '  %s\n' "${newer[@]}" >&2
  echo "raise rust-version in Cargo.toml and the README's \"Rust toolchain (X+)\" together" >&2
  exit 1
fi
echo "check-msrv: rust-version $ours covers all $checked locked dependencies"
