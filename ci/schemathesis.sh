#!/usr/bin/env bash
# Schemathesis (from PyPI) against the OpenAPI document a real `loops serve` serves:
# every operation gets a bounded number of generated requests, and every response
# must be no server error and match the document (status, content type, schema,
# headers). The server runs on a free loopback port over a throwaway data dir, with a
# few loops, runs and a workflow to find.
#
# Usage: ci/schemathesis.sh [MAX_EXAMPLES]   (default 25 per operation)
# Under CI (CI set) schemathesis is installed into .ci-venv from PyPI when missing;
# elsewhere a missing schemathesis is a skip with a message.
#
# Left out: the operations that execute things (run-now, workflow run: generated
# requests would start processes) and the endless event stream (/v1/events).
set -euo pipefail
cd "$(dirname "$0")/.."
max_examples="${1:-25}"
version="4.32.5"

st=""
if [ -x .ci-venv/bin/st ]; then
  st=.ci-venv/bin/st
elif command -v st >/dev/null 2>&1 && st --help 2>/dev/null | grep -q "API testing for OpenAPI"; then
  st=st
fi
if [ -z "$st" ]; then
  if [ -n "${CI:-}" ]; then
    python3 -m venv .ci-venv
    .ci-venv/bin/pip install --quiet "schemathesis==${version}"
    st=.ci-venv/bin/st
  else
    echo "schemathesis: not installed (python3 -m venv .ci-venv && .ci-venv/bin/pip install schemathesis==${version}); skipped"
    exit 0
  fi
fi

cargo build --locked -q -p loops
bin="${CARGO_TARGET_DIR:-$PWD/target}/debug/loops"
work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
export LOOPS_DATA_DIR="$work/data" TZ=UTC NO_COLOR=1
"$bin" create command nightly --every 1h --cmd "echo hi" --label team-a >/dev/null
"$bin" create command weekly --cron "0 9 * * MON" --tz UTC --cmd "true" >/dev/null
"$bin" run-now nightly >/dev/null
cat >"$work/wf.json" <<'JSON'
{"name": "diamond", "steps": [
  {"id": "a", "target": {"type": "command", "command": "true"}},
  {"id": "b", "dependsOn": ["a"], "target": {"type": "command", "command": "true"}}]}
JSON
"$bin" workflows create "$work/wf.json" >/dev/null
"$bin" workflows run diamond >/dev/null

"$bin" serve --addr 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
server=$!
url=""
for _ in $(seq 1 200); do
  url="$(grep -o 'http://[0-9.:]*' "$work/serve.out" || true)"
  [ -n "$url" ] && break
  sleep 0.05
done
if [ -z "$url" ]; then
  echo "schemathesis: loops serve did not start:"; cat "$work/serve.err"; exit 1
fi
token="$("$bin" serve --print-token)"

"$st" run "$url/v1/openapi.json" \
  --header "Authorization: Bearer $token" \
  --max-examples "$max_examples" \
  --phases examples,coverage,fuzzing \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
  --exclude-path-regex '(run-now|/run$|^/v1/events$)' \
  --request-timeout 10 \
  --seed 1 \
  --workers 1
