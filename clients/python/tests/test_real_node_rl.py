"""sandbox_fleet.rl on the real node, through a serve the client starts
itself: the README's quickstart as written (only its import line and its
dataset's source differ), and a fleet used as a context manager leaving
nothing behind. e2e/python_test.go runs it."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import reference_examples as ex
from conftest import BIN, KUBECTL, NAMESPACE, leftovers, needs_cluster, run_gone, wait_for
from test_rl import run_example

pytestmark = [needs_cluster, pytest.mark.skipif(not os.environ.get("SANDBOX_FLEET_REAL_NODE"), reason="needs the real node (run through go test ./e2e)")]

PROBLEM = os.environ.get("SANDBOX_FLEET_PROBLEM", "")
PROBLEM2 = os.environ.get("SANDBOX_FLEET_PROBLEM2", "")


@pytest.fixture(autouse=True)
def plugin(monkeypatch):
    """The plugin the tests built; under SANDBOX_FLEET_BUNDLED_PLUGIN
    (a platform wheel installed, no plugin on PATH) the one the wheel
    carries, found by the client itself."""
    if os.environ.get("SANDBOX_FLEET_BUNDLED_PLUGIN"):
        from sandbox_fleet._start import find_plugin

        monkeypatch.delenv("SANDBOX_FLEET_PLUGIN", raising=False)
        assert find_plugin().endswith("/sandbox_fleet/_bin/kubectl-sandbox_fleet"), find_plugin()
    else:
        monkeypatch.setenv("SANDBOX_FLEET_PLUGIN", BIN)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_quickstart_as_written(tmp_path):
    """The README's namespace, made for the example, and its SWE-bench rows
    from a local file: eight tasks over the node's two problem images."""
    namespace = "rl-tunix-swebench"
    subprocess.run([KUBECTL, "create", "namespace", namespace], check=True, capture_output=True)
    try:
        rows = tmp_path / "swebench.jsonl"
        rows.write_text("".join(json.dumps({"instance_id": f"p__{i}", "docker_image": [PROBLEM, PROBLEM2][i % 2],
                                            "repo": "p/p", "base_commit": "x"}) + "\n" for i in range(8)))
        results = run_example(ex.QUICKSTART, str(rows), context=False)["results"]
        assert len(results) == 8, results
        for r in results:
            assert isinstance(r, str) and r.startswith("READY "), results
    finally:
        subprocess.run([KUBECTL, "delete", "namespace", namespace, "--wait=false"], capture_output=True)


@pytest.mark.parametrize("name", ["PRIMITIVES", "ASYNC", "EPOCHS", "INSTANT_CLAIM", "RECYCLING", "RECIPES", "REWRITE", "REPORT",
                                  "OBSERVABILITY_CONFIG", "VERIFY", "FAIL_FAST_OFF", "TEARDOWN_VERIFY", "LOOKAHEAD"])
def test_example_as_written(name):
    """Each of the other examples, as written, on the real node: the tasks
    of CONTEXT are the node's problem image, in the test's namespace."""
    # An example that names its own namespace gets it, made for it.
    own = {"INSTANT_CLAIM": "rl"}.get(name)
    if own:
        subprocess.run([KUBECTL, "create", "namespace", own], check=True, capture_output=True)
    try:
        scope = run_example(getattr(ex, name), scope={"NAMESPACE": NAMESPACE, "IMAGE": PROBLEM})
    finally:
        if own:
            subprocess.run([KUBECTL, "delete", "namespace", own, "--wait=false"], capture_output=True)
    if name == "TEARDOWN_VERIFY":
        assert scope["left"]["left"] == [] and scope["again"]["left"] == [], (scope["left"], scope["again"])
    results = scope.get("results")
    flat = [r for rs in results for r in rs] if results and isinstance(results[0], list) else results or []
    assert not [r for r in flat if isinstance(r, BaseException)], results
    fleet = scope.get("fleet")
    if fleet is not None and hasattr(fleet, "_fleet"):
        fleet = fleet._fleet
    if fleet is not None:
        fleet.teardown()
        run_id = fleet._last_run_id
        if run_id:
            run_gone(run_id)


def test_capacity_as_written(tmp_path, monkeypatch, capsys):
    """The planner's example as written: its context, my-ctx, is a copy of
    the test cluster's; its pool, my-pool, the real node's label."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(open(os.environ["KUBECONFIG"]).read())
    ctx = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "config", "current-context"], capture_output=True, text=True,
                         check=True).stdout.strip()
    subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "config", "rename-context", ctx, "my-ctx"], check=True, capture_output=True)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    node = os.environ["SANDBOX_FLEET_REAL_NODE_NAME"]
    label = "cloud.google.com/gke-nodepool"
    subprocess.run([KUBECTL, "label", "node", node, f"{label}=my-pool", "--overwrite"], check=True, capture_output=True)
    try:
        run_example(ex.CAPACITY, context=False)
    finally:
        subprocess.run([KUBECTL, "label", "node", node, f"{label}-"], capture_output=True)
    out = capsys.readouterr().out
    assert "nodes         : 1" in out and "Recommended plan for 500 images x 1 = 500 tasks" in out, out


def test_a_fleet_in_with_leaves_nothing():
    from sandbox_fleet.rl import ClusterConfig, FleetConfig, SandboxFleet, swebench_probe

    with SandboxFleet(FleetConfig(clusters=[ClusterConfig(namespace=NAMESPACE)], max_concurrent=4)) as fleet:
        fleet.load_tasks([{"id": f"r{i}", "image": PROBLEM} for i in range(3)])
        serve = fleet._session()._serve
        assert serve is not None and not _gone(serve.proc.pid)
        run_id = fleet.run_id
        results = fleet.run(swebench_probe, strategy="naive", keep_warm=True)
        assert all(r.startswith("READY ") for r in results), results
        assert leftovers(run_id), "the session made nothing?"
    wait_for("serve to end with the fleet", lambda: _gone(serve.proc.pid) or serve.proc.poll() is not None, timeout=60)
    run_gone(run_id)



def test_a_second_container_as_the_notes_have_it():
    """The v1.0.9 notes' multi-container Pods: an extra_pod_spec container
    of image {task_image} beside the runtime's; exec(container=),
    open_session(container=) and target_container choose it, the runtime
    container stays the default."""
    from sandbox_fleet.errors import InvalidArgumentError
    from sandbox_fleet.rl import ClusterConfig, FleetConfig, SandboxFleet, TemplateSpec

    grader = {"name": "grader", "image": "{task_image}", "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]}
    config = FleetConfig(clusters=[ClusterConfig(namespace=NAMESPACE)], max_concurrent=1,
                         template=TemplateSpec(extra_pod_spec={"containers": [grader]}))
    with SandboxFleet(config) as fleet:
        fleet.load_tasks([{"id": "m1", "image": PROBLEM}])
        h = fleet.acquire(fleet.tasks[0])
        run_id = fleet.run_id
        h.exec("echo runtime > /tmp/which")
        assert h.exec("cat /tmp/which 2>/dev/null || echo none", container="grader") == "none\n"
        s = h.open_session(container="grader")
        s.run("cd /tmp && echo grader > which")
        assert h.exec("cat which", container="grader") == "grader\n"  # through the session: its cwd
        assert h.exec("cat /tmp/which") == "runtime\n"
        with pytest.raises(InvalidArgumentError, match="open in container"):
            h.handle.shell(f"session-{h.claim_name}-grader")
        h.target_container = "grader"
        assert h.exec("pwd") == "/tmp\n"
        h.close_session()
        fleet.release(h)
    run_gone(run_id)

FRESH = os.environ.get("SANDBOX_FLEET_FRESH_IMAGE", "")


def _prepull_jobs(run_id: str) -> list[dict]:
    out = subprocess.run([KUBECTL, "get", "prepulljobs", "-n", NAMESPACE, "-l", f"sandbox-fleet.io/run-id={run_id}", "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["items"]


@pytest.mark.skipif(not FRESH, reason="run by TestPythonPrepullOnTheRealNode, with the node's agent running")
def test_prepull_as_the_reference_does():
    """setup(prepull=True) as the README has it: the node's agent pulls an
    image the node has never held before any pool is warmed, through the
    session's own PrepullJob, which prepull_delete() deletes; a second
    prepull's job goes with the teardown."""
    from sandbox_fleet.rl import ClusterConfig, FleetConfig, SandboxFleet

    # The most the shipped agent allows, as the Go tests ask: the real
    # node's disk is this machine's, as full as its other work leaves it.
    fleet = SandboxFleet(FleetConfig(clusters=[ClusterConfig(namespace=NAMESPACE)], max_concurrent=1, prepull_high_water=85))
    fleet.load_tasks([{"id": "p1", "image": FRESH}])
    fleet.setup(prepull=True)
    run_id = fleet.run_id
    jobs = _prepull_jobs(run_id)
    assert len(jobs) == 1 and jobs[0]["spec"]["images"] == [FRESH], jobs
    nodes = jobs[0]["status"]["nodes"]
    assert [(n["node"], n["phase"], n["pulled"]) for n in nodes] == [(os.environ["SANDBOX_FLEET_REAL_NODE_NAME"], "Succeeded", 1)], nodes
    fleet.prepull_delete()
    assert _prepull_jobs(run_id) == []
    h = fleet.acquire(fleet.tasks[0])
    try:
        assert h.handle.exec(["true"]).exit_code == 0
    finally:
        fleet.release(h)
    assert fleet.prepull() is True  # present now: nothing to pull, done at once
    assert len(_prepull_jobs(run_id)) == 1
    left = fleet.teardown(verify=True)
    assert left == {"run_id": run_id, "left": []}, left
    assert _prepull_jobs(run_id) == []
    run_gone(run_id)
