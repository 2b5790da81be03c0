"""sandbox_fleet.rl, agent-sandbox-rl's API: the reference's examples run as
they are written (reference_examples.py) on the compatible FakeFleet, and
the reference's semantics hold: a Task to process_fn, values and
exception objects back, exec's text, the report's keys."""

from __future__ import annotations

import ast
import asyncio
import json

import pytest

import reference_examples as ex
from conftest import BIN
import sandbox_fleet.rl
from sandbox_fleet.rl import ClusterConfig, FleetConfig, FleetError, ResourceSpec, Task, TemplateSpec
from sandbox_fleet.rl.testing import AsyncFakeFleet, FakeFleet

IMAGE = "registry.example/swe/rl:1"


@pytest.fixture(autouse=True)
def plugin(monkeypatch):
    """The tests' plugin, named as a trainer names one not on PATH."""
    if BIN:
        monkeypatch.setenv("SANDBOX_FLEET_PLUGIN", BIN)


@pytest.fixture
def rows(tmp_path):
    """Eight SWE-bench rows over four images, as a JSONL file."""
    path = tmp_path / "swebench.jsonl"
    path.write_text("".join(json.dumps({"instance_id": f"repo__{i}", "docker_image": f"registry.example/swe/p{i % 4}:1",
                                        "repo": "org/repo", "base_commit": "abc"}) + "\n" for i in range(8)))
    return str(path)


@pytest.fixture
def fake(monkeypatch):
    """The compatible module's fleets are the fakes while a test runs, so
    an example's own import line gets them."""
    monkeypatch.setattr(sandbox_fleet.rl, "SandboxFleet", FakeFleet)
    monkeypatch.setattr(sandbox_fleet.rl, "AsyncSandboxFleet", AsyncFakeFleet)


def run_example(text: str, rows: str = "", context: bool = True, scope: dict | None = None) -> dict:
    """Runs an example's text (top-level await allowed) in a scope of its
    own, after CONTEXT when it continues an earlier snippet; scope has the
    names CONTEXT takes from its caller (NAMESPACE, IMAGE)."""
    scope = {"NAMESPACE": "rl", "IMAGE": IMAGE, "ROWS": rows, **(scope or {})}
    for part in ([ex.CONTEXT] if context else []) + [text]:
        code = compile(part, "reference_examples.py", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, scope)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    return scope


def test_quickstart(fake, rows):
    scope = run_example(ex.QUICKSTART, rows, context=False)
    results = scope["results"]
    assert len(results) == 8 and all(isinstance(r, str) and r.startswith("READY fake-") for r in results), results
    assert [t.id for t in scope["fleet"].tasks] == [f"repo__{i}" for i in range(8)]
    assert scope["fleet"].tasks[0].metadata == {"repo": "org/repo", "base_commit": "abc"}


def test_primitives(fake, capsys):
    scope = run_example(ex.PRIMITIVES)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("fake-") and out[0].endswith(".fake:8888"), out
    assert out[1].startswith("hi fake-"), out
    assert scope["fleet"].handles() == []


def test_async(fake):
    assert run_example(ex.ASYNC)["results"] == ["t0", "t1", "t2", "t3"]


def test_epochs_and_keep_warm(fake):
    results = run_example(ex.EPOCHS)["results"]
    assert results == [["t0", "t1", "t2", "t3"]] * 3


def test_instant_claim(fake):
    run_example(ex.INSTANT_CLAIM)


def test_recycling_and_the_canary(fake):
    scope = run_example(ex.RECYCLING)
    assert scope["results"] == ["t0", "t1", "t2", "t3"]
    assert scope["out"]["outcome"] == "reset"


def test_recipes(fake):
    run_example(ex.RECIPES)


def test_rewrite(fake):
    t = run_example(ex.REWRITE)["fleet"].tasks[0]
    assert t.image == "us-docker.pkg.dev/my-proj/swebench-mirror/swebench/sweb.eval.x86_64.django__django-11099:latest"
    assert t.metadata["original_image"] == "docker.io/swebench/sweb.eval.x86_64.django__django-11099:latest"


def test_report(fake, capsys):
    data = run_example(ex.REPORT)["data"]
    assert set(data) == {"strategy", "total_s", "phases", "claims", "tasks_ok", "tasks_err", "warm_replicas_total",
                         "warm_replicas_peak", "environment"}
    assert (data["strategy"], data["claims"], data["tasks_ok"], data["tasks_err"]) == ("naive", 4, 4, 0), data
    assert set(data["phases"]["claim"]) == {"count", "total_s", "max_s"} and data["phases"]["claim"]["count"] == 4
    assert "── Run report (strategy=naive) ──" in capsys.readouterr().out


def test_configs(fake):
    assert run_example(ex.OBSERVABILITY_CONFIG)["config"].observability.enable_tracing
    assert not run_example(ex.FAIL_FAST_OFF)["config"].fail_fast.enabled


def test_preflight(fake):
    run_example(ex.VERIFY, context=False)


def test_teardown_verify(fake):
    scope = run_example(ex.TEARDOWN_VERIFY)
    assert scope["left"]["left"] == [] and scope["again"]["left"] == []


def test_lookahead_add_tasks_wait(fake):
    assert run_example(ex.LOOKAHEAD)["ready"] is True


# The reference's semantics, beyond its examples.

def test_results_are_values_and_exception_objects():
    fleet = FakeFleet(FleetConfig(max_concurrent=2))
    fleet.load_tasks([{"id": "ok", "image": IMAGE}, {"id": "bad", "image": IMAGE}, {"id": "exit", "image": IMAGE}])

    def fn(task, h):
        assert isinstance(task, Task)
        if task.id == "bad":
            raise KeyError(task.id)
        return h.exec("echo out; echo err >&2; exit 3")
    results = fleet.run(fn)
    assert results[0] == "out\nerr\n" and results[2] == "out\nerr\n"
    assert isinstance(results[1], KeyError)
    ok = [r for r in results if not isinstance(r, Exception)]
    assert len(ok) == 2


def test_exec_timeout_and_sessions():
    fleet = FakeFleet()
    fleet.load_tasks(["busybox:1.36"])
    h = fleet.acquire(fleet.tasks[0])
    with pytest.raises(TimeoutError):
        h.exec("sleep 30", timeout=1)
    s = h.open_session()
    s.run("cd /tmp && export X=1")
    assert h.exec("pwd; echo $X") == "/tmp\n1\n"
    h.close_session()
    assert h.exec(["pwd"]) == "/\n"
    assert h.endpoint() == f"{h.hostname}.fake:8888" and h.is_alive()
    fleet.release(h)
    fleet.release(h)  # a second release is no error
    fleet.teardown()


def test_config_errors_name_the_reference_field():
    with pytest.raises(ValueError, match="FleetConfig.max_concurrent"):
        FleetConfig(max_concurrent=0)
    with pytest.raises(ValueError, match="TemplateSpec.image_pull_policy"):
        TemplateSpec(image_pull_policy="Sometimes")
    with pytest.raises(ValueError, match="ClusterConfig.weight"):
        ClusterConfig(weight=0)
    with pytest.raises(ValueError, match="FleetConfig.prepull_max_parallel"):
        FleetConfig(prepull_max_parallel=17)
    with pytest.raises(ValueError, match="FleetConfig.prepull_high_water"):
        FleetConfig(prepull_high_water=0)


def test_setup_with_prepull():
    """setup(prepull=True) as the README has it: on the fake nothing is
    pulled, and the pools are warm after it (test_real_node_rl.py has the
    node's agent pull)."""
    fleet = FakeFleet(FleetConfig(max_concurrent=2))
    fleet.load_tasks([{"id": "a", "image": IMAGE}])
    assert fleet.setup(prepull=True) is fleet and fleet.prepull() is True
    assert fleet.wait_pools_ready(timeout=5)
    fleet.prepull_delete()
    fleet.teardown()


def test_run_refuses_what_the_reference_refuses():
    fleet = FakeFleet()
    with pytest.raises(FleetError, match="load_tasks"):
        fleet.run(lambda t, h: None)
    fleet.load_tasks([IMAGE])
    with pytest.raises(ValueError, match="unknown strategy"):
        fleet.run(lambda t, h: None, strategy="eager")
    with pytest.raises(ValueError, match="epochs"):
        fleet.run(lambda t, h: None, epochs=0)


def test_a_field_the_engine_refuses_is_named_as_the_reference_spells_it():
    import shutil

    if not (BIN or shutil.which("kubectl-sandbox_fleet")):
        pytest.skip("needs the plugin, whose planner checks the configuration")
    fleet = FakeFleet(FleetConfig(template=TemplateSpec(resources=ResourceSpec(cpu="lots"))))
    fleet.load_tasks([IMAGE])
    with pytest.raises(FleetError) as e:
        fleet.plan()
    assert 'ResourceSpec.cpu: "lots" is not a quantity' in str(e.value), e.value


def test_the_capacity_planner():
    """The planner's API on the test cluster's nodes, by the engine's probe."""
    import subprocess

    from conftest import KUBECTL, NAMESPACE
    from sandbox_fleet.rl import STRATEGIES, Cluster, plan_benchmark, probe_capacity, render_plan

    if not (BIN and NAMESPACE):
        pytest.skip("needs the local test cluster")
    context = subprocess.run([KUBECTL, "config", "current-context"], capture_output=True, text=True, check=True).stdout.strip()
    core = Cluster(ClusterConfig(name="test", context=context, namespace=NAMESPACE)).core_api
    cap = probe_capacity(core)
    assert cap.nodes >= 1 and cap.cpu_milli_total > 0 and cap.pods_total > 0, cap
    assert cap.to_dict()["cpu_milli_per_node"] == cap.cpu_milli_total // cap.nodes
    plan = plan_benchmark(cap, n_images=5, tasks_per_image=4, avg_image_gb=1)
    assert plan.strategy in STRATEGIES and plan.max_concurrent >= 1 and plan.n_tasks == 20 and plan.bottleneck, plan
    assert plan.warm_per_task and plan.colocate, "an RL shape gets instant claims"
    text = render_plan(cap, plan)
    assert "Recommended plan for 5 images x 4 = 20 tasks" in text and f"strategy          : {plan.strategy}" in text, text
    with pytest.raises(ValueError):
        plan_benchmark(cap, n_images=0)


def test_serve_metrics():
    """serve_metrics serves what the open sessions' serves export."""
    import urllib.request

    from conftest import NAMESPACE
    from sandbox_fleet.rl import SandboxFleet, serve_metrics

    if not (BIN and NAMESPACE):
        pytest.skip("needs the local test cluster")
    fleet = SandboxFleet(FleetConfig(clusters=[ClusterConfig(name="c", namespace=NAMESPACE)]))
    fleet.load_tasks([IMAGE])
    server, _ = serve_metrics(port=0, addr="127.0.0.1")
    try:
        fleet.start_warmpools(wait=False)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=30) as resp:
            text = resp.read().decode()
        assert "asrl_session_pools" in text, text[:2000]
        assert text.count("# TYPE asrl_session_pools ") == 1
    finally:
        server.shutdown()
        fleet.teardown()
