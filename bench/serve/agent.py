"""The agent-loop shape through `serve`: R rollouts at once, each running N
small commands in its own sandbox one after another, as an agent's turns
do — over a shell that keeps its state (``h.shell().run``) and over an exec
each (``h.exec``), alternating per round. Prints "start" once every sandbox
is held, then per mode and round one JSON line: each command's latency and
the trainer's CPU over the loop; it reads a line on stdin before each, so
the parent can probe serve's CPU around it."""

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from sandbox_fleet import SandboxFleet  # noqa: E402

address, image, rollouts, commands, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
ARGV = [["cat", "/etc/passwd"], ["ls", "-la", "/"], ["grep", "-n", "root", "/etc/passwd"], ["echo", "turn"]]
SCRIPTS = [" ".join(a) for a in ARGV]

fleet = SandboxFleet(address)
fleet.add_tasks([{"id": f"r{i}", "image": image} for i in range(rollouts)])
fleet.lookahead(["r0"])
if not fleet.wait_pools_ready(timeout=600).ready:
    sys.exit("the pool did not become ready")
with ThreadPoolExecutor(max_workers=rollouts) as pool:
    handles = list(pool.map(fleet.acquire, [f"r{i}" for i in range(rollouts)]))
    shells = list(pool.map(lambda h: h.shell(), handles))


def by_shell(i):
    out = []
    for n in range(commands):
        t = time.monotonic()
        if shells[i].run(SCRIPTS[n % len(SCRIPTS)]).exit_code != 0:
            sys.exit("a shell command failed")
        out.append(time.monotonic() - t)
    return out


def by_exec(i):
    out = []
    for n in range(commands):
        t = time.monotonic()
        if handles[i].exec(ARGV[n % len(ARGV)]).exit_code != 0:
            sys.exit("an exec failed")
        out.append(time.monotonic() - t)
    return out


print("start", flush=True)
with ThreadPoolExecutor(max_workers=rollouts) as pool:
    for r in range(rounds):
        for mode in (["shell", "exec"] if r % 2 == 0 else ["exec", "shell"]):
            sys.stdin.readline()
            cpu, wall = time.process_time(), time.monotonic()
            lat = [x for per in pool.map(by_shell if mode == "shell" else by_exec, range(rollouts)) for x in per]
            print(json.dumps({"mode": mode, "latencies": lat, "wall": time.monotonic() - wall,
                              "cpu": time.process_time() - cpu, "tasks": len(lat)}), flush=True)
for h in handles:
    fleet.release(h)
