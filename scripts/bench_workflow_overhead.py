#!/usr/bin/env python3
"""Per-step overhead of the workflow runner (issue #4 benchmark).

Runs `loops workflows run` on a workflow of 100 independent `true` steps
(maxParallel 8) and on a 100-step chain, and subtracts process start and the bare
cost of spawning `/bin/true` 100 times. Usage (after `cargo build --release -p loops`):

    python3 scripts/bench_workflow_overhead.py [path/to/loops]
"""
import json, os, statistics, subprocess, sys, tempfile, time

loops = sys.argv[1] if len(sys.argv) > 1 else "target/release/loops"
root = tempfile.mkdtemp(prefix="loops-wf-bench-")
env = dict(os.environ, LOOPS_DATA_DIR=os.path.join(root, "data"))
specs = {
    "par100": {"name": "par100", "maxParallel": 8,
               "steps": [{"id": f"s{i}", "target": {"type": "command", "command": "true"}} for i in range(100)]},
    "chain100": {"name": "chain100",
                 "steps": [{"id": f"s{i}", "target": {"type": "command", "command": "true"},
                            "dependsOn": [f"s{i-1}"] if i else []} for i in range(100)]},
}
for name, spec in specs.items():
    path = os.path.join(root, f"{name}.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    subprocess.run([loops, "workflows", "create", path], env=env, check=True, stdout=subprocess.DEVNULL)

def median_secs(args, n=7):
    xs = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL)
        xs.append(time.perf_counter() - start)
    return statistics.median(xs)

spawn = []
for _ in range(5):
    start = time.perf_counter()
    for _ in range(100):
        subprocess.run(["/bin/true"])
    spawn.append((time.perf_counter() - start) / 100)
spawn = statistics.median(spawn)
startup = median_secs([loops, "--version"])
print(f"bare spawn of /bin/true: {spawn * 1000:.2f} ms; loops process start: {startup * 1000:.1f} ms")
print("| workflow | wall ms (median of 7) | ms per step | overhead above bare spawn, ms per step |")
print("|---|---:|---:|---:|")
for name in specs:
    wall = median_secs([loops, "workflows", "run", name])
    per_step = (wall - startup) / 100
    print(f"| {name} | {wall * 1000:.1f} | {per_step * 1000:.2f} | {(per_step - spawn) * 1000:.2f} |")
