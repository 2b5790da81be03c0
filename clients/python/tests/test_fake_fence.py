"""FakeFleet's sandboxes are fenced off this machine: commands see the
sandbox's directory as /, an image's environment and nothing of the
trainer's, so a trainer's unit tests run what it runs on a cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import uuid

import pytest

from sandbox_fleet import InfraError, LookaheadWarmer, NotWarmingError, SandboxFleet
from sandbox_fleet.testing import FakeFleet

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs")
IMAGE = "docker.io/swebench/...:latest"  # the image docs/training-loops.md names


@pytest.fixture
def image_root(tmp_path):
    """An image's directory: a repository in /testbed with a test log."""
    root = tmp_path / "image"
    testbed = root / "testbed"
    testbed.mkdir(parents=True)
    (testbed / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (testbed / "test.log").write_text("FAILED test_add\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=testbed, check=True)
    subprocess.run([*git, "add", "-A"], cwd=testbed, check=True)
    subprocess.run([*git, "commit", "-qm", "pristine"], cwd=testbed, check=True)
    return str(root)


PATCH = """\
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""


def _loop_of_the_docs() -> str:
    """The Python loop of docs/training-loops.md as written, without its
    import and the line that connects to a serve."""
    with open(os.path.join(DOCS, "training-loops.md")) as f:
        text = f.read()
    block = re.search(r"```python\n(from sandbox_fleet import SandboxFleet, LookaheadWarmer.*?)```", text, re.S)
    assert block, "docs/training-loops.md has no training loop"
    lines = block.group(1).splitlines()
    assert lines[0].startswith("from sandbox_fleet import") and "SandboxFleet(" in lines[2], lines[:3]
    return "\n".join(lines[3:])


def test_the_training_loop_of_the_docs_runs_as_written(image_root):
    fleet = FakeFleet(isolate=True, image_roots={IMAGE: image_root})
    scope = {"fleet": fleet, "steps": [[{"id": "p1-g0"}]], "patch": PATCH, "LookaheadWarmer": LookaheadWarmer,
             "InfraError": InfraError, "SandboxFleet": SandboxFleet}
    # The loop keeps r and log of its last rollout.
    exec(compile(_loop_of_the_docs(), "docs/training-loops.md", "exec"), scope)
    assert scope["r"].exit_code == 0, scope["r"]
    assert scope["log"] == b"FAILED test_add\n"
    fleet.close()
    # The image's directory is as it was: a sandbox starts as a copy.
    with open(os.path.join(image_root, "testbed", "calc.py")) as f:
        assert "a - b" in f.read()


def _marked(mark: str) -> list[str]:
    """What this machine's /, /tmp and home hold whose name has mark (other
    tests run beside this one, so only the names the sandbox's commands
    wrote are looked for)."""
    return [os.path.join(d, n) for d in ("/", "/tmp", os.path.expanduser("~")) for n in os.listdir(d) if mark in n]


def test_commands_see_the_sandbox_not_this_machine(image_root, tmp_path):
    mark = "sf-fence-" + uuid.uuid4().hex[:8]
    host_tmp, host_root = os.path.join("/tmp", mark), os.path.join(os.path.expanduser("~"), mark)
    os.environ["SF_TRAINER_ONLY"] = mark
    try:
        fleet = FakeFleet(isolate=True, image_roots={IMAGE: image_root})
        fleet.add_tasks([{"id": "t", "image": IMAGE}])
        with fleet.acquire("t") as h:
            assert h.exec("cd /testbed; pwd").stdout == b"/testbed\n"
            sh = h.shell()
            sh.run("cd /testbed && export IN_SHELL=1")
            assert sh.run("pwd; echo $IN_SHELL").stdout == b"/testbed\n1\n"
            env = h.exec(["env"]).stdout.decode()
            assert mark not in env and "SF_TRAINER_ONLY" not in env, env
            assert "HOME=/root" in env and "PATH=/usr/local/sbin:" in env, env
            # Writes to absolute paths land in the sandbox's directory.
            r = h.exec(f"echo x > /tmp/{mark} && echo y > /root/{mark} && echo z > /testbed/{mark} && echo w > /{mark} "
                       f"&& cat /tmp/{mark}")
            assert (r.exit_code, r.stdout) == (0, b"x\n"), r
            p = h.start(["sh", "-c", f"echo w > /tmp/{mark}.proc"])
            assert p.wait(10) == 0
            assert h.read_file(f"/tmp/{mark}.proc") == b"w\n"
            assert h.exec(["no-such-program"]).exit_code == 127
            # mini-swe-agent v2 sources $BASH_ENV: the sandbox's, not ours.
            r = h.exec(["bash", "-c", "echo $X"], env={"BASH_ENV": "/root/.bashrc"})
            assert r.exit_code == 0 and r.stdout == b"\n", r
        fleet.close()
        for path in (host_tmp, host_root, host_tmp + ".proc", os.path.join("/testbed", mark)):
            assert not os.path.lexists(path), f"a command of the fake sandbox wrote {path} on this machine"
        assert _marked(mark) == [], "the fake sandbox's commands wrote these on this machine"
    finally:
        del os.environ["SF_TRAINER_ONLY"]


def test_exec_takes_shell_text_or_an_argv():
    fleet = FakeFleet(isolate=True)
    fleet.add_tasks([{"id": "t", "image": "busybox:1.36"}])
    with fleet.acquire("t") as h:
        r = h.exec("echo hi && exit 3")
        assert (r.exit_code, r.stdout) == (3, b"hi\n")
        assert h.exec(("echo", "a b")).stdout == b"a b\n"
        for bad in (42, None, [b"echo"], ["echo", 1]):
            with pytest.raises(TypeError):
                h.exec(bad)
    fleet.close()


def test_errors_name_their_case():
    fleet = FakeFleet(isolate=True)
    fleet.add_tasks([{"id": "a", "image": "busybox:1.36"}])
    with pytest.raises(NotWarmingError):
        fleet.wait_pools_ready(timeout=1)
    fleet.close()


TRAINER = """
import sys
from sandbox_fleet.testing import FakeFleet
f = FakeFleet(isolate=True)
f.add_tasks([{"id": "t", "image": "busybox:1.36"}])
h = f.acquire("t")
h.start(["sleep", sys.argv[1]])
h.shell().run("true")
print(f.root_of(h), flush=True)
sys.stdin.read()
"""


def _running(word: str) -> list[str]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if word in cmdline.split():
            out.append(f"{pid} {cmdline}")
    return out


def test_a_killed_trainers_sandboxes_end_with_it():
    """A trainer SIGKILLed with a fake sandbox's process and shell running:
    they end with it (bwrap --die-with-parent), nothing is left running."""
    import signal
    import sys
    import time

    seconds = str(3000 + int.from_bytes(os.urandom(2), "big") % 1000)  # a sleep no one else runs
    trainer = subprocess.Popen([sys.executable, "-P", "-c", TRAINER, seconds], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    root = ""
    try:
        root = trainer.stdout.readline().strip()
        assert root, "the trainer did not start"
        # bwrap's own command line names the sleep too; wait for the sleep
        # itself: bwrap ties it to its parent just before it runs it, so a
        # trainer killed in that instant can leave it (bwrap's window, not
        # one this test is about).
        deadline = time.monotonic() + 10
        while not any(p.split()[1] == "sleep" for p in _running(seconds)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(p.split()[1] == "sleep" for p in _running(seconds)), "the sandbox's process did not start"
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(10)
        deadline = time.monotonic() + 10
        while _running(seconds) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _running(seconds) == [], "the killed trainer's sandbox still runs"
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
        # What a killed trainer cannot delete: its fake sandbox's directory.
        if root.startswith(tempfile.gettempdir()):
            shutil.rmtree(root, ignore_errors=True)
