"""The RL-shaped loop through `serve`, as a trainer drives it with
sandbox_fleet: S steps of P problems x G rollouts at once, each rollout
acquire -> release. Prints "start" once the pools are warm, then one JSON
line: time-to-sandbox of every rollout, the loop's wall and CPU time."""

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from sandbox_fleet import SandboxFleet  # noqa: E402

address, steps, problems, group = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fleet = SandboxFleet(address)
batches = [[{"id": f"s{s}-p{p}-g{g}", "image": f"bench.example/problem-{s}-{p}:v1"}
            for p in range(problems) for g in range(group)] for s in range(steps)]
fleet.add_tasks([t for b in batches for t in b])
fleet.lookahead([t["id"] for b in batches for t in b])
if not fleet.wait_pools_ready(timeout=600).ready:
    sys.exit("the pools did not become ready")


def rollout(task):
    asked = time.monotonic()
    h = fleet.acquire(task["id"])
    ready = time.monotonic() - asked
    fleet.release(h)
    return ready


print("start", flush=True)
cpu, wall = time.process_time(), time.monotonic()
latencies = []
with ThreadPoolExecutor(max_workers=problems * group) as pool:
    for batch in batches:
        latencies += list(pool.map(rollout, batch))
print(json.dumps({"latencies": latencies, "wall": time.monotonic() - wall, "cpu": time.process_time() - cpu,
                  "tasks": len(latencies)}), flush=True)
