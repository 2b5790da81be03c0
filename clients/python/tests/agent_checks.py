"""What an agent framework does in a sandbox, as checks shared by FakeFleet
(test_fake_exec.py) and the real node through serve (test_real_node.py):
the fake must behave as the cluster does."""

from __future__ import annotations

import os
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
    # The background sleep went too. (The sandboxes have no pgrep, and the
    # fake's sandbox is this machine: count these sleeps alone, alive.)
    assert live(h, "sleep 613") == 0
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
    assert other.run("echo ${X:-unset}").stdout == b"unset\n"
    assert other.run("cd /; export X=2; pwd").stdout == b"/\n"
    assert sh.run("pwd; echo $X").stdout == f"{workdir}\n1\n".encode()
    other.close()


def processes(h) -> None:
    p = h.start(["python3", "-c", "import signal,sys,time\n"
                 "signal.signal(signal.SIGINT, lambda *a: sys.exit(7))\n"
                 "print('ready', flush=True)\n"
                 "line = sys.stdin.readline()\n"
                 "print('got', line.strip(), flush=True)\n"
                 "time.sleep(60)"])
    events = p.events()
    assert _stdout_until(events, b"ready\n") == b"ready\n"
    p.write_stdin("hello\n")
    assert _stdout_until(events, b"got hello\n") == b"got hello\n"
    p.signal(signal.SIGINT)
    assert p.wait(5) == 7
    assert list(events) == [("exit", 7)]
    # Every event again, from the start.
    again = list(p.events())
    assert b"".join(d for k, d in again if k == "stdout") == b"ready\ngot hello\n" and again[-1] == ("exit", 7)

    q = h.start(["sleep", "60"])
    try:
        q.wait(0.5)
        raise AssertionError("wait returned while the process runs")
    except TimeoutError:
        pass
    q.signal("TERM")
    assert q.wait(5) == 143


def _stdout_until(events, want: bytes) -> bytes:
    """Stdout read from events until it ends with want: output comes in
    chunks of any size."""
    got = b""
    for kind, data in events:
        assert kind == "stdout", (kind, data, got)
        got += data
        if got.endswith(want):
            return got
    raise AssertionError(f"the process ended after {got!r}")


def port_forward(h, port: int) -> None:
    """A server in the sandbox, reached from the trainer's side."""
    import socket
    import urllib.parse
    import urllib.request

    server = h.start(["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd="/")
    try:
        with h.port_forward(port) as url:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(url + "/", timeout=5) as resp:
                        assert resp.status == 200
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.3)
            local = urllib.parse.urlsplit(url)
        if local.port != port:  # the fake's port is the server's own
            try:
                socket.create_connection((local.hostname, local.port), timeout=2).close()
                raise AssertionError(f"{url} still answers after the context closed")
            except ConnectionRefusedError:
                pass
    finally:
        server.signal("KILL")
        server.wait(10)


def live(h, cmdline: str) -> int:
    """How many processes of h run cmdline, zombies left out (a sandbox's
    PID 1, sleep infinity, reaps none)."""
    script = ('n=0; for d in /proc/[0-9]*; do [ "$(tr "\\0" " " <$d/cmdline 2>/dev/null)" = "$1 " ] || continue; '
              'grep -q "^State:.*Z" $d/status 2>/dev/null && continue; n=$((n+1)); done; echo $n')
    return int(h.exec(["sh", "-c", script, "sh", cmdline]).stdout)


def files(h, tmp_path) -> None:
    """Whole trees up and down, and a look at what is there."""
    import os

    up = tmp_path / "up"
    (up / "pkg" / "sub").mkdir(parents=True)
    (up / "pkg" / "a.py").write_text("print('a')\n")
    (up / "pkg" / "sub" / "b.txt").write_bytes(b"\x00b")
    (up / ".hidden").write_text("h")
    os.symlink("pkg/a.py", up / "link")
    os.chmod(up / "pkg" / "a.py", 0o755)
    assert h.upload(str(up), "/work/tree") > 0
    assert h.list("/work/tree") == [".hidden", "link", "pkg"]
    assert h.list("/work/tree/pkg") == ["a.py", "sub"]
    assert h.exists("/work/tree/pkg/sub/b.txt") and h.exists("/work/tree/link") and not h.exists("/work/tree/nope")
    down = tmp_path / "down"
    h.download("/work/tree", str(down))
    assert (down / "pkg" / "sub" / "b.txt").read_bytes() == b"\x00b"
    assert os.readlink(down / "link") == "pkg/a.py" and os.access(down / "pkg" / "a.py", os.X_OK)
    h.remove("/work/tree/.hidden")
    h.remove("/work/tree/nope")
    try:
        h.remove("/work/tree/pkg")
        raise AssertionError("removed a directory without recursive")
    except Exception as e:  # noqa: BLE001 - FleetError, checked by its words
        assert "directory" in str(e).lower(), e
    h.remove("/work/tree/pkg", recursive=True)
    assert h.list("/work/tree") == ["link"]
    try:
        h.list("/work/tree/link-to-nothing")
        raise AssertionError("listed what is not there")
    except Exception as e:  # noqa: BLE001
        assert "not a directory" in str(e), e


def output_caps(h, tmp_path) -> None:
    """A command printing without end is stopped at the client's cap with a
    clear error, and the sandbox goes on; a read past its cap too, and the
    streaming read takes the whole."""
    from sandbox_fleet import OutputTooLarge

    started = time.monotonic()
    try:
        h.exec(["sh", "-c", "while :; do echo yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy; done"], max_output=1 << 20)
        raise AssertionError("an endless output was kept")
    except OutputTooLarge as e:
        assert "more than 1048576 bytes" in str(e) and "exec_stream" in str(e), e
    assert time.monotonic() - started < 30, time.monotonic() - started
    sh = h.shell("caps")
    try:
        sh.run("head -c 3000000 /dev/zero", max_output=1 << 20)
        raise AssertionError("a shell's endless output was kept")
    except OutputTooLarge:
        pass
    sh.close()
    assert h.exec(["echo", "still"]).stdout == b"still\n"
    h.write_file("/tmp/caps/big", os.urandom(2_000_000))
    try:
        h.read_tar(["/tmp/caps"], max_bytes=1 << 20)
        raise AssertionError("a tar past max_bytes was kept")
    except OutputTooLarge as e:
        assert "read_tar_into" in str(e), e
    with open(tmp_path / "caps.tar", "wb") as f:
        assert h.read_tar_into(["/tmp/caps"], f) > 2000000
