"""The Python examples of agent-sandbox-rl's README and of the v1.0.9 release
notes' RL section, as they have them; only the import lines differ (the
README's `from agent_sandbox_rl import ...` reads `from sandbox_fleet.rl
import ...`). An example that reads a dataset from the network reads the
same rows from a local file (SweBenchSource(path=ROWS)). Snippets that
continue an earlier one start from CONTEXT: a fleet, its config, tasks and
a process_fn, as the README's text around them has them.

Each test imports these and runs them on the compatible FakeFleet
(test_rl.py) and, on the real node, on a serve the client started
(test_real_node_rl.py)."""

# Defined before a snippet that uses them without defining them.
CONTEXT = '''
from sandbox_fleet.rl import SandboxFleet, FleetConfig, ClusterConfig, AsyncSandboxFleet, TemplateSpec
cfg = FleetConfig(clusters=[ClusterConfig(name="rl", namespace=NAMESPACE)], max_concurrent=4)
src = [{"id": f"t{i}", "image": IMAGE} for i in range(4)]
def process_fn(task, h):
    return h.exec("cat /etc/hostname >/dev/null; echo " + task.id).strip()
probe = process_fn
eval_fn = rollout_fn = process_fn
def async_or_sync_process_fn(task, h):
    return task.id
task = None
'''

QUICKSTART = '''
from sandbox_fleet.rl import SandboxFleet, FleetConfig, ClusterConfig, SweBenchSource, swebench_probe

fleet = SandboxFleet(FleetConfig(
    clusters=[ClusterConfig(name="rl", namespace="rl-tunix-swebench")],
    max_concurrent=8, max_warmpool_size=32, placement="image-affinity"))
fleet.load_tasks(SweBenchSource(limit=8, path=ROWS))

# strategy: none | naive | sliding | pipelined   (concurrency defaults to max_concurrent)
results = fleet.run(swebench_probe, strategy="sliding", concurrency=8)
'''

PRIMITIVES = '''
fleet = SandboxFleet(cfg)
fleet.load_tasks([{"id": "t1", "image": "busybox:1.36"}])
fleet.setup()                         # preflight → plan → warm pools
for task in fleet.tasks:
    h = fleet.acquire(task)           # claim a pre-warmed sandbox
    try:
        print(h.hostname, h.endpoint())
        print(h.exec(["sh", "-c", "echo hi $(hostname)"]))   # router-free
    finally:
        fleet.release(h)
fleet.teardown()
# or: `with fleet: ...`  (setup on enter, teardown on exit)
'''

ASYNC = '''
from sandbox_fleet.rl import AsyncSandboxFleet
fleet = AsyncSandboxFleet(cfg); fleet.load_tasks(src)
results = await fleet.run(async_or_sync_process_fn, strategy="naive", concurrency=64)
# or: async with fleet: h = await fleet.acquire(task); ...
'''

EPOCHS = '''
fleet = SandboxFleet(cfg); fleet.load_tasks(src)
# 3 epochs over all tasks, pools reused between them, torn down once at the end
results = fleet.run(process_fn, strategy="pipelined", epochs=3)   # -> list[list]

# or keep pools warm for your own training loop, then clean up explicitly
fleet.run(process_fn, strategy="naive", keep_warm=True)
# ... reuse warm pools across your own iterations ...
fleet.teardown()
'''

INSTANT_CLAIM = '''
fleet = SandboxFleet(FleetConfig(
    clusters=[ClusterConfig(name="rl", namespace="rl")],
    max_concurrent=50, max_warmpool_size=16,
    warm_per_task=True,                          # 1 warm replica per task
    template=TemplateSpec(colocate_replicas=True)))  # pack a pool's replicas on one node
fleet.load_tasks(src)
fleet.run(process_fn, strategy="naive")          # warm everything, full depth, packed
'''

RECYCLING = '''
from sandbox_fleet.rl import determinism_canary

fleet = SandboxFleet(cfg); fleet.load_tasks(src)
# reuse one sandbox per image; reset between same-image tasks, quarantine if dirty.
# strategy warms the pools; run() manages setup / RunReport / teardown.
results = fleet.run(process_fn, strategy="naive", concurrency=40,
                    recycle=True, max_reuses=32, reset_timeout=5.0)
task = fleet.tasks[0]
out = determinism_canary(fleet, task, process_fn)
assert out["identical"] and out["reset_clean"]
fleet.teardown()
'''

RECIPES = '''
# Eval: 1:1 sweep, pull-bound — overlap pulls, reuse cache
fleet = SandboxFleet(FleetConfig(clusters=[cfg.clusters[0]], max_concurrent=40))
fleet.load_tasks(src)
fleet.run(eval_fn, strategy="pipelined", epochs=1)

# RL: G rollouts/problem — instant claims, no window shrinkage
fleet = SandboxFleet(FleetConfig(
    clusters=[cfg.clusters[0]], max_concurrent=40, max_warmpool_size=8,   # >= rollouts/problem
    warm_per_task=True, template=TemplateSpec(colocate_replicas=True)))
fleet.load_tasks(src)
fleet.run(rollout_fn, strategy="naive", keep_warm=True)       # reuse across steps
fleet.teardown()
'''

REWRITE = '''
from sandbox_fleet.rl import make_rewriter
fleet = SandboxFleet(cfg)
source = [{"id": "django-1", "image": "docker.io/swebench/sweb.eval.x86_64.django__django-11099:latest"}]
fleet.load_tasks(source, image_rewrite=make_rewriter(
    registry="us-docker.pkg.dev", project="my-proj", repo="swebench-mirror"))
# docker.io/... -> us-docker.pkg.dev/my-proj/swebench-mirror/...
# (original preserved in metadata['original_image'])
'''

REPORT = '''
fleet = SandboxFleet(cfg); fleet.load_tasks(src)
results = fleet.run(probe, strategy="naive")
print(fleet.report.summary())     # benchmark table (also logged at INFO)
data = fleet.report.to_dict()     # JSON-friendly
'''

OBSERVABILITY_CONFIG = '''
from sandbox_fleet.rl import ObservabilityConfig
config = FleetConfig(clusters=cfg.clusters, observability=ObservabilityConfig(
    enable_metrics=True, enable_tracing=True))
'''

VERIFY = '''
from sandbox_fleet.rl import SandboxFleet, FleetConfig, ClusterConfig; \\
SandboxFleet(FleetConfig(clusters=[ClusterConfig(name='c', namespace='default')])).preflight()
'''

# Capacity-aware planning, the importable API (it reads a cluster: the
# real node's test labels its node with the pool and names its context).
CAPACITY = '''
from sandbox_fleet.rl import (Cluster, ClusterConfig, probe_capacity,
                              plan_benchmark, render_plan)
core = Cluster(ClusterConfig(context="my-ctx")).core_api
cap  = probe_capacity(core, "cloud.google.com/gke-nodepool=my-pool")
plan = plan_benchmark(cap, n_images=500, tasks_per_image=1, avg_image_gb=10)
print(render_plan(cap, plan))      # capacity + recommended strategy/concurrency/replicas
# -> plan.strategy, plan.max_concurrent, plan.replicas_per_image, plan.bottleneck ...
'''

# The v1.0.9 release notes' RL section.
FAIL_FAST_OFF = '''
from sandbox_fleet.rl import FailFastPolicy
config = FleetConfig(clusters=cfg.clusters, fail_fast=FailFastPolicy(enabled=False))
'''

TEARDOWN_VERIFY = '''
fleet = SandboxFleet(cfg); fleet.load_tasks(src)
fleet.setup()
left = fleet.teardown(verify=True)
again = fleet.verify_teardown()
'''

LOOKAHEAD = '''
from sandbox_fleet.rl import LookaheadWarmer
fleet = SandboxFleet(cfg); fleet.load_tasks(src[:2])
fleet.add_tasks(src[2:])
ready = None
for step in LookaheadWarmer(fleet, [fleet.tasks[:2], fleet.tasks[2:]]):
    ready = fleet.wait_pools_ready(timeout=60)
    handles = [fleet.acquire(t) for t in step]
    for h in handles:
        fleet.release(h)
fleet.teardown()
'''
