#!/usr/bin/env python3
"""A step-wise RL-shaped training loop against `kubectl sandbox-fleet serve`.

Every step takes a batch of problems (SWE-bench-like images with a
repository in /testbed) and runs G rollouts of each: a "policy" writes a
patch into the sandbox, the problem's tests grade it, the test log comes
back out, and the sandbox is handed back. While step N runs, the images of
step N+1 warm (LookaheadWarmer). A rollout whose sandbox failed (it could not
start, was lost, timed out) is masked out of the step's loss instead of
scored as a zero reward.

    pip install ./clients/python                       # the client, from the checkout
    kubectl sandbox-fleet serve -f fleet.yaml &        # prints its address
    python3 trainer.py --address unix:///tmp/sandbox-fleet-.../serve.sock \\
        --images IMAGE1,IMAGE2 --steps 2 --group 4
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from concurrent.futures import ThreadPoolExecutor

from sandbox_fleet import InfraError, LookaheadWarmer, SandboxFleet

# The policy's two answers to the test problem: the fix, or a no-op.
FIX = "s/a - b/a + b/"
NO_OP = "s/^$//"


def rollout(fleet: SandboxFleet, task: dict, rng: random.Random) -> dict:
    """One rollout: patch in, tests run, log out. Returns its reward, or
    None when the infrastructure failed."""
    patch = FIX if rng.random() < 0.5 else NO_OP
    try:
        with fleet.acquire(task["id"]) as sandbox:
            sandbox.write_file("/tmp/policy.sed", patch)
            sandbox.exec(["sed", "-i", "-f", "/tmp/policy.sed", "calc.py"], cwd="/testbed", check=True)
            result = sandbox.exec(["sh", "-c", "python3 -m unittest -q > /tmp/test.log 2>&1"], cwd="/testbed", timeout=120)
            log = sandbox.read_file("/tmp/test.log").decode(errors="replace")
            return {"task": task["id"], "reward": 1.0 if result.exit_code == 0 else 0.0,
                    "patched": patch == FIX, "log_tail": log.strip().splitlines()[-1:], "node": sandbox.node}
    except InfraError as e:
        return {"task": task["id"], "reward": None, "infra": e.reason, "error": str(e)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", required=True, help="the address serve printed")
    p.add_argument("--images", required=True, help="comma-separated problem images")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--group", type=int, default=4, help="rollouts per problem per step (G)")
    p.add_argument("--problems-per-step", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run", default="trainer", help="prefix of the task ids this trainer adds")
    args = p.parse_args()

    rng = random.Random(args.seed)
    images = args.images.split(",")
    fleet = SandboxFleet(args.address)
    steps = []
    for step in range(args.steps):
        batch = [images[(step * args.problems_per_step + i) % len(images)] for i in range(args.problems_per_step)]
        steps.append([{"id": f"{args.run}-s{step}-p{i}-g{g}", "image": img, "step": step}
                      for i, img in enumerate(batch) for g in range(args.group)])
    fleet.add_tasks([t for s in steps for t in s])

    summary = []
    with ThreadPoolExecutor(max_workers=args.group * args.problems_per_step) as pool:
        for n, step in enumerate(LookaheadWarmer(fleet, steps)):
            results = list(pool.map(lambda t: rollout(fleet, t, rng), step))
            scored = [r["reward"] for r in results if r["reward"] is not None]
            summary.append({"step": n, "rollouts": len(results), "scored": len(scored),
                            "masked": len(results) - len(scored),
                            "mean_reward": sum(scored) / len(scored) if scored else None,
                            "results": results})
            print(json.dumps({k: v for k, v in summary[-1].items() if k != "results"}), flush=True)
    json.dump(summary, sys.stderr, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
