"""The RL-shaped loop as trainers write it today with Debian's
python3-kubernetes: per rollout create a SandboxClaim on the image's warm
pool, watch it until Ready, delete it. The pools are warmed beforehand by
the benchmark, the same as the other clients'. Prints "start", then one JSON
line with time-to-sandbox, wall and CPU time and the API requests made."""

import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, config, watch

kubeconfig, namespace, run_id, pools_json, steps, problems, group = sys.argv[1:8]
steps, problems, group = int(steps), int(problems), int(group)
pools = json.loads(pools_json)  # image -> warm pool name
config.load_kube_config(kubeconfig)
api = client.CustomObjectsApi(client.ApiClient(pool_threads=1))
G, V, P = "extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims"
requests = 0


def ready(claim):
    for c in (claim.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "True":
            return True
    return False


def rollout(image):
    global requests
    name = "bare-" + uuid.uuid4().hex[:10]
    asked = time.monotonic()
    api.create_namespaced_custom_object(G, V, namespace, P, {
        "apiVersion": f"{G}/{V}", "kind": "SandboxClaim",
        "metadata": {"name": name, "labels": {"sandbox-fleet.io/run-id": run_id, "app.kubernetes.io/managed-by": "sandbox-fleet"}},
        "spec": {"warmPoolRef": {"name": pools[image]}}})
    w = watch.Watch()
    for ev in w.stream(api.list_namespaced_custom_object, G, V, namespace, P, field_selector=f"metadata.name={name}", timeout_seconds=600):
        if ready(ev["object"]):
            w.stop()
            break
    took = time.monotonic() - asked
    api.delete_namespaced_custom_object(G, V, namespace, P, name)
    requests += 2  # create and delete; the watch is counted apart
    return took


images = [[f"bench.example/problem-{s}-{p}:v1" for p in range(problems) for _ in range(group)] for s in range(steps)]
print("start", flush=True)
cpu, wall = time.process_time(), time.monotonic()
latencies = []
with ThreadPoolExecutor(max_workers=problems * group) as pool:
    for batch in images:
        latencies += list(pool.map(rollout, batch))
print(json.dumps({"latencies": latencies, "wall": time.monotonic() - wall, "cpu": time.process_time() - cpu,
                  "tasks": len(latencies), "requests": requests, "watches": len(latencies)}), flush=True)
