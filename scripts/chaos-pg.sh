#!/usr/bin/env bash
# Chaos run of several runners on one PostgreSQL store (issue #12; documented in
# BENCHMARKS.md §11, not run in CI).
#
#   scripts/chaos-pg.sh [SECONDS=300] [LOOPS=300] [RUNNERS=3]
#
# Starts a throwaway PostgreSQL cluster (initdb/pg_ctl; as the postgres user when run
# as root), creates LOOPS loops every 1 s whose command appends
# "loop scheduledFor attempt" to a journal, starts RUNNERS daemons (`--lease-ttl 5s`),
# and every 20 s picks a random runner and either kills it (SIGKILL) or stops it
# (SIGSTOP past its lease TTL, then SIGCONT), restarting a killed one at once. At the
# end it stops everything and checks:
#   - zero duplicate executions: no (loop, scheduledFor, attempt) twice in the journal;
#   - zero lost slots outside the failover window: every 1-second slot of every loop
#     has a run row, except slots from 1 s before a chaos event to TTL + 2 s after it
#     ended (a kill ends at once; a stop when the runner is continued, since a runner
#     stopped inside a transaction holds its loops' rows until then).
# Exits 0 when both hold. Needs a release build (`cargo build --release -p loops`, or
# LOOPS_BIN=path) and PostgreSQL's server binaries (LOOPS_TEST_PG_BIN, pg_config, or
# /usr/lib/postgresql/*/bin).
set -euo pipefail
secs="${1:-300}"
loops="${2:-300}"
runners="${3:-3}"
ttl_s=5
root_dir="$(cd "$(dirname "$0")/.." && pwd)"
bin="${LOOPS_BIN:-$root_dir/target/release/loops}"
[ -x "$bin" ] || { echo "chaos: no loops binary at $bin (cargo build --release -p loops)" >&2; exit 2; }
pg_bin="${LOOPS_TEST_PG_BIN:-$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}"
[ -x "$pg_bin/initdb" ] || { echo "chaos: PostgreSQL server binaries not found" >&2; exit 2; }

work="$(mktemp -d /tmp/loops-chaos-XXXXXX)"
chmod 755 "$work"
as_pg=()
if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); chown postgres "$work"; fi
port=$(( 20000 + RANDOM % 30000 ))
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null || true; done
  "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
"${as_pg[@]}" "$pg_bin/initdb" -D "$work/pg" -A trust -U loops --no-sync -E UTF8 >/dev/null
"${as_pg[@]}" "$pg_bin/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w \
  -o "-p $port -k $work -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=200" start >/dev/null
psql() { "$pg_bin/psql" -X -q -t -A -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U loops "$@"; }
psql -d postgres -c "CREATE DATABASE chaos"
export LOOPS_STORE="postgres://loops@127.0.0.1:$port/chaos"
journal="$work/journal"
touch "$journal"; chmod 666 "$journal"
echo "chaos: $loops loops every 1 s, $runners runners, ${secs} s, store $LOOPS_STORE, work dir $work"
for i in $(seq 1 "$loops"); do
  LOOPS_DATA_DIR="$work/cli" "$bin" create command "chaos-$i" --every 1s \
    --cmd "echo \"\$LOOPS_LOOP_NAME \$LOOPS_SCHEDULED_FOR \$LOOPS_ATTEMPT\" >> $journal" >/dev/null
done
start_runner() {
  LOOPS_DATA_DIR="$work/r$1" LOOPS_LOG=info "$bin" daemon run --lease-ttl "${ttl_s}s" \
    --kill-grace 500ms --max-concurrent 256 >>"$work/r$1.log" 2>&1 &
  pids[$1]=$!
}
for r in $(seq 0 $((runners - 1))); do start_runner "$r"; done
began=$(date +%s%3N)
events="$work/events"
: >"$events"
while [ $(( $(date +%s%3N) - began )) -lt $(( secs * 1000 )) ]; do
  sleep 20
  [ $(( $(date +%s%3N) - began )) -lt $(( secs * 1000 )) ] || break
  r=$(( RANDOM % runners ))
  now=$(date +%s%3N)
  if [ $(( RANDOM % 2 )) = 0 ]; then
    echo "chaos: $(date +%T) kill -9 runner $r (pid ${pids[$r]})"
    kill -9 "${pids[$r]}"; wait "${pids[$r]}" 2>/dev/null || true
    echo "$now $now" >>"$events"
    start_runner "$r"
  else
    echo "chaos: $(date +%T) SIGSTOP runner $r (pid ${pids[$r]}) for $((ttl_s + 3)) s"
    kill -STOP "${pids[$r]}"
    sleep $((ttl_s + 3))
    kill -CONT "${pids[$r]}"
    # A runner stopped inside a transaction holds its loops' rows until it goes on:
    # the whole stop is part of this event's window.
    echo "$now $(date +%s%3N)" >>"$events"
  fi
done
ended=$(date +%s%3N)
for r in $(seq 0 $((runners - 1))); do kill -TERM "${pids[$r]}" 2>/dev/null || true; done
for r in $(seq 0 $((runners - 1))); do wait "${pids[$r]}" 2>/dev/null || true; done
pids=()

dups=$(awk '{print $1, $2, $3}' "$journal" | sort | uniq -d | wc -l)
# Slots of every loop between 5 s after the start and 5 s before the end; a slot is
# excused when it lies within an event's window (see the top).
psql -d chaos -c "CREATE TABLE chaos_events (at BIGINT, until BIGINT)"
while read -r at until; do psql -d chaos -c "INSERT INTO chaos_events VALUES ($at, $until)"; done <"$events"
lost=$(psql -d chaos -c "
  WITH grid AS (
    SELECT l.id, g AS slot FROM loops l,
      LATERAL (SELECT MIN(scheduled_for) AS first FROM runs WHERE loop_id = l.id) f,
      LATERAL generate_series(f.first, $ended - 5000, 1000) g
    WHERE g >= $began + 5000)
  SELECT COUNT(*) FROM grid
  WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.loop_id = grid.id AND r.scheduled_for = grid.slot)
    AND NOT EXISTS (SELECT 1 FROM chaos_events e
                    WHERE grid.slot BETWEEN e.at - 1000 AND e.until + $(( (ttl_s + 2) * 1000 )))")
window=$(psql -d chaos -c "
  WITH grid AS (
    SELECT l.id, g AS slot FROM loops l,
      LATERAL (SELECT MIN(scheduled_for) AS first FROM runs WHERE loop_id = l.id) f,
      LATERAL generate_series(f.first, $ended - 5000, 1000) g
    WHERE g >= $began + 5000)
  SELECT COUNT(*) FROM grid
  WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.loop_id = grid.id AND r.scheduled_for = grid.slot)")
runs=$(psql -d chaos -c "SELECT COUNT(*) FROM runs")
abandoned=$(psql -d chaos -c "SELECT COUNT(*) FROM runs WHERE status = 'abandoned'")
echo "chaos: $(wc -l <"$journal") executions, $runs run rows ($abandoned abandoned), $(wc -l <"$events") events"
echo "chaos: duplicate executions: $dups; lost slots outside the failover window: $lost (inside it: $((window - lost)))"
[ "$dups" = 0 ] && [ "$lost" = 0 ]
