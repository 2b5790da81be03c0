"""What an agent framework does in a sandbox, as checks shared by FakeFleet
(test_fake_exec.py) and the real node through serve (test_real_node.py):
the fake must behave as the cluster does."""

from __future__ import annotations

import signal
import threading
import time


def timeouts_kill(h) -> None:
    """A command past its timeout is stopped with what it started, and
    reported as timeout(1) would: no exception."""
    started = time.monotonic()
    r = h.exec(["sh", "-c", "echo before; sleep 613 & sleep 613"], timeout=1)
    assert time.monotonic() - started < 3, time.monotonic() - started
    assert r.timed_out and r.exit_code == 124 and r.stdout == b"before\n", r
    # The background sleep went too (the fake's sandbox is this machine:
    # look for these sleeps alone).
    assert h.exec(["sh", "-c", "pgrep -f 'slee[p] 613'"]).exit_code == 1
    assert not h.exec(["true"], timeout=5).timed_out


def shells_keep_state(h, workdir: str) -> None:
    sh = h.shell()
    assert sh.run(f"mkdir -p {workdir} && cd {workdir}; export X=1; greet() {{ echo \"hi $1\"; }}").exit_code == 0
    r = sh.run("pwd; echo $X; greet you")
    assert r.stdout == f"{workdir}\n1\nhi you\n".encode(), r
    r = sh.run("echo out; echo err >&2; false")
    assert (r.exit_code, r.stdout, r.stderr) == (1, b"out\n", b"err\n"), r
    assert sh.run("echo out; echo err >&2", merge_stderr=True).stdout == b"out\nerr\n"
    assert sh.run("if then").exit_code == 2  # a syntax error is the script's, not the shell's end

    started = time.monotonic()
    r = sh.run("sleep 100", timeout=1)
    assert r.timed_out and r.exit_code == 124, r
    assert time.monotonic() - started < 5
    assert sh.run("echo $X").stdout == b"1\n"  # the shell stayed, and kept its state

    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", sh.run("sleep 60")))
    t.start()
    deadline = time.monotonic() + 10
    while t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.3)
        sh.interrupt()
        t.join(0.5)
    assert not t.is_alive(), "interrupt() did not end sleep"
    assert result["r"].exit_code == 130, result
    assert sh.run("echo still").stdout == b"still\n"

    other = h.shell("other")
    assert other.run("pwd").stdout != f"{workdir}\n".encode()
    assert other.run("echo ${X:-unset}").stdout == b"unset\n"
    assert sh.run("echo $X").stdout == b"1\n"
    other.close()


def processes(h) -> None:
    p = h.start(["python3", "-c", "import signal,sys,time\n"
                 "signal.signal(signal.SIGINT, lambda *a: sys.exit(7))\n"
                 "print('ready', flush=True)\n"
                 "line = sys.stdin.readline()\n"
                 "print('got', line.strip(), flush=True)\n"
                 "time.sleep(60)"])
    events = p.events()
    assert next(events) == ("stdout", b"ready\n")
    p.write_stdin("hello\n")
    assert next(events) == ("stdout", b"got hello\n")
    p.signal(signal.SIGINT)
    assert p.wait(5) == 7
    assert list(events) == [("exit", 7)]
    # Every event again, from the start.
    assert [k for k, _ in p.events()] == ["stdout", "stdout", "exit"]

    q = h.start(["sleep", "60"])
    try:
        q.wait(0.5)
        raise AssertionError("wait returned while the process runs")
    except TimeoutError:
        pass
    q.signal("TERM")
    assert q.wait(5) == 143
