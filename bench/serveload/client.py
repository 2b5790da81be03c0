"""One client process of bench/serveload: its own image's tasks, warmed,
then `concurrency` rollouts at once (acquire, release), each task once.
Prints "ready" once its pool is warm, waits for a line on stdin, then one
JSON line: the rollouts done, the failures (and the first few), their
time-to-sandbox."""

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from sandbox_fleet import SandboxFleet  # noqa: E402

address, k, concurrency, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
image = f"bench.example/load-{k}:v1"
fleet = SandboxFleet(address, client_id=f"load-{k}")
tasks = [f"c{k}-{i}" for i in range(concurrency * rounds)]
fleet.add_tasks([{"id": t, "image": image} for t in tasks])
fleet.lookahead([image])
if not fleet.wait_pools_ready(timeout=900, images=[image]).ready:
    sys.exit(f"client {k}: the pool of {image} did not become ready")
print("ready", flush=True)
sys.stdin.readline()


def rollout(task):
    asked = time.monotonic()
    try:
        h = fleet.acquire(task)
        ready = time.monotonic() - asked
        fleet.release(h)
        return ready
    except Exception as e:  # noqa: BLE001 — every failure is counted and shown
        return e


start = time.monotonic()
with ThreadPoolExecutor(max_workers=concurrency) as pool:
    results = list(pool.map(rollout, tasks))
failed = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, Exception)]
print(json.dumps({"rollouts": len(results), "failed": len(failed), "errors": failed[:5],
                  "latencies": [r for r in results if not isinstance(r, Exception)],
                  "wall": time.monotonic() - start}), flush=True)
