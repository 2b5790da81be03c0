"""What only a real session shows: idempotent acquire across a dropped
response, leases of a killed client, teardown, on kwok nodes."""

from __future__ import annotations

import os
import re
import time
import signal
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import BIN, NAMESPACE, gone, leftovers, needs_cluster, wait_for

from sandbox_fleet import FleetError, ForeignHandleError, SandboxFleet

pytestmark = needs_cluster

TASKS = [{"id": f"t{i}", "image": "registry.example/swe/a:1"} for i in range(3)]


def _read_http_message(sock: socket.socket, buf: bytes) -> tuple[bytes, bytes]:
    """Reads one HTTP/1.1 message with a Content-Length body; returns it and
    what followed."""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return b"", b""
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    while len(rest) < length:
        data = sock.recv(65536)
        if not data:
            break
        rest += data
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


class DroppingProxy:
    """A loopback TCP proxy to the session's unix socket that forwards the
    first Acquire to the server, reads the server's answer, and drops the
    client's connection instead of passing the answer on."""

    def __init__(self, unix_path: str):
        self.unix_path = unix_path
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.address = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket):
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(self.unix_path)
        buf, ubuf = b"", b""
        try:
            while True:
                req, buf = _read_http_message(c, buf)
                if not req:
                    return
                upstream.sendall(req)
                resp, ubuf = _read_http_message(upstream, ubuf)
                if b"/Acquire " in req.split(b"\r\n", 1)[0] and self.dropped == 0:
                    self.dropped += 1
                    return  # the answer is lost on the way back
                c.sendall(resp)
        finally:
            c.close()
            upstream.close()

    def close(self):
        self.listener.close()


def test_acquire_is_idempotent_across_a_dropped_response(server):
    s = server()
    direct = s.client()
    direct.add_tasks(TASKS)
    proxy = DroppingProxy(s.address[len("unix://"):])
    try:
        via = SandboxFleet(proxy.address)
        h = via.acquire("t0")
        assert proxy.dropped == 1
        status = direct.status()
        assert [x.id for x in status.handles] == [h.id], status
        assert status.counts.acquired == 1, status
        claims = [o for o in leftovers(s.run_id) if o.startswith("sandboxclaim")]
        assert len(claims) == 1, claims
        via.release(h)
    finally:
        proxy.close()


TRAINER = textwrap.dedent("""
    import sys, time
    from sandbox_fleet import SandboxFleet
    f = SandboxFleet(sys.argv[1])
    h = f.acquire("t1")
    print(h.id, flush=True)
    time.sleep(600)
""")


def test_a_killed_clients_sandboxes_are_released(server):
    s = server(lease_ttl="2s")
    c = s.client()
    c.add_tasks(TASKS)
    keep = c.acquire("t0")  # a live client's sandbox outlives the other's lease
    trainer = subprocess.Popen([sys.executable, "-P", "-c", TRAINER, s.address], stdout=subprocess.PIPE, text=True)
    try:
        hid = trainer.stdout.readline().strip()
        assert hid, "the trainer acquired nothing"
        assert hid in [x.id for x in c.status().handles]
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(10)
        def released():
            st = c.status()
            return st if hid not in [x.id for x in st.handles] else None

        status = wait_for("the killed trainer's sandbox to be released", released)
        assert status.counts.expired == 1, status
        assert [x.id for x in status.handles] == [keep.id]
        wait_for("the released claim to go", lambda: not any(hid in o for o in leftovers(s.run_id)))
    finally:
        trainer.kill()
    c.release(keep)


def test_close_tears_down_and_stops_the_server(server):
    s = server()
    c = s.client()
    c.add_tasks(TASKS)
    c.lookahead(["t0"])
    assert c.wait_pools_ready(timeout=120).ready
    c.acquire("t1")
    assert leftovers(s.run_id)
    c.close()
    assert s.proc.wait(60) == 0, s.logs()
    gone(s)


def test_sigterm_tears_down(server):
    s = server()
    c = s.client()
    c.add_tasks(TASKS)
    c.acquire("t2")
    assert s.stop(signal.SIGTERM) == 0, s.logs()
    gone(s)


def test_reap_orphans_takes_a_killed_session_and_leaves_a_live_one(server):
    live, dead = server("--heartbeat", "2s"), server("--heartbeat", "2s")
    clients = [live.client(), dead.client()]
    for c in clients:
        c.add_tasks(TASKS)
        c.acquire("t0")
    dead.stop(signal.SIGKILL)
    assert leftovers(dead.run_id)
    # Long enough for the dead session's heartbeat to expire; the live one
    # renews its own every third of it.
    time.sleep(3)
    out = subprocess.run([BIN, "reap", "-n", NAMESPACE, "--orphans"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert dead.run_id in out.stdout and live.run_id not in out.stdout, out.stdout
    gone(dead)
    assert any(o.startswith("sandboxclaim") for o in leftovers(live.run_id))
    clients[0].status()  # the live session still serves


def test_a_pool_nobody_wants_is_removed_after_the_warm_ttl(server):
    s = server(warm_ttl="2s")
    c = s.client()
    c.add_tasks(TASKS)
    c.lookahead(["t0"])
    assert c.wait_pools_ready(timeout=120).ready
    assert any(o.startswith("sandboxwarmpool") for o in leftovers(s.run_id))
    wait_for("the unwanted pool to go", lambda: not any(o.startswith("sandboxwarmpool") for o in leftovers(s.run_id)))
    pools = c.status().pools
    assert [p.warm for p in pools] == [False], pools


def test_async_client(server):
    import asyncio

    from sandbox_fleet import AsyncSandboxFleet

    s = server()

    async def main():
        fleet = AsyncSandboxFleet(s.address)
        await fleet.add_tasks(TASKS)
        await fleet.lookahead(["t0"])
        assert (await fleet.wait_pools_ready(timeout=120)).ready
        handles = await asyncio.gather(*(fleet.acquire(t["id"]) for t in TASKS))
        assert len({h.id for h in handles}) == 3 and all(h.pod for h in handles)
        assert len((await fleet.status()).handles) == 3
        for h in handles:
            async with h:
                pass
        assert not (await fleet.status()).handles

    asyncio.run(main())


def test_malformed_requests_change_nothing(server):
    import json

    s = server()
    c = s.client()
    c.add_tasks(TASKS)
    path = s.address[len("unix://"):]
    from sandbox_fleet._connect import _UnixConnection

    for body, method in [(b"{not json", "Acquire"), (b'{"taskId": 42}', "Acquire"), (b"{}", "NoSuchMethod"),
                         (b'{"tasks": [{"id": "x", "image": "Bad Image"}]}', "AddTasks"),
                         *((b'{"taskId": "t0", "clientId": "c", "timeout": "%s"}' % t, "Acquire") for t in (b"-5s", b"0s", b"-9999999999s"))]:
        conn = _UnixConnection(path, 10)
        conn.request("POST", "/sandboxfleet.fleet.v1.FleetService/" + method, body=body,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        err = resp.read()
        conn.close()
        assert resp.status >= 400, (method, body, resp.status, err)
        if resp.status != 404:
            assert json.loads(err)["code"] == "invalid_argument", err
    st = c.status()
    assert st.tasks == 3, st
    assert not st.handles and not st.counts.acquired, st
    assert not any(o.startswith("sandboxclaim") for o in leftovers(s.run_id))


def test_token_guards_tcp(server, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    s = server("--listen", "127.0.0.1:0", "--token-file", str(token))
    assert s.address.startswith("http://127.0.0.1:"), s.address
    with_token = SandboxFleet(s.address, token="s3cret")
    assert with_token.status().run_id == s.run_id
    try:
        SandboxFleet(s.address).status()
        raise AssertionError("a call without the token went through")
    except FleetError as e:
        assert e.code == "unauthenticated", e


def test_tcp_without_a_token_file_gets_one(server):
    """TCP always takes a token: without --token-file serve writes one to a
    private file and says where; the client reads it with token_file."""

    s = server("--listen", "127.0.0.1:0")
    m = re.search(r"bearer token in (\S+)\)", s.logs())
    assert m, s.logs()
    assert os.stat(m.group(1)).st_mode & 0o077 == 0, oct(os.stat(m.group(1)).st_mode)
    assert SandboxFleet(s.address, token_file=m.group(1)).status().run_id == s.run_id
    with pytest.raises(FleetError) as e:
        SandboxFleet(s.address).status()
    assert e.value.code == "unauthenticated", e.value


def test_another_caller_cannot_use_a_clients_sandboxes(server):
    """A client id is bound to its client's key: a second caller naming it
    is refused and changes nothing, and may not close the session."""

    s = server()
    owner = s.client(client_id="trainer-0")
    owner.add_tasks(TASKS)
    h = owner.acquire("t0")
    thief = s.client(client_id="trainer-0")
    for call in (lambda: thief.release(h.id), lambda: thief._t.unary("Renew", {"clientId": "trainer-0"}), thief.close):
        with pytest.raises(ForeignHandleError) as e:
            call()
        assert e.value.code == "permission_denied", e.value
    assert [x.id for x in owner.status().handles] == [h.id]
    owner.release(h)


def test_lookahead_warmer_async(server):
    """``async for`` over LookaheadWarmer with the asyncio client warms the
    next step while the current one runs."""
    import asyncio

    from sandbox_fleet import AsyncSandboxFleet, LookaheadWarmer

    s = server()
    steps = [[{"id": "s0", "image": "registry.example/swe/step0:1"}], [{"id": "s1", "image": "registry.example/swe/step1:1"}]]

    async def main():
        fleet = AsyncSandboxFleet(s.address)
        await fleet.add_tasks([t for step in steps for t in step])
        seen = []
        async for step in LookaheadWarmer(fleet, steps):
            wanted = {p.image for p in (await fleet.status()).pools if p.last_wanted}
            seen.append((step[0]["id"], sorted(wanted)))
        assert seen == [("s0", ["registry.example/swe/step0:1", "registry.example/swe/step1:1"]),
                        ("s1", ["registry.example/swe/step0:1", "registry.example/swe/step1:1"])], seen
        assert (await fleet.wait_pools_ready(timeout=120)).ready

    asyncio.run(main())
    try:
        for _ in LookaheadWarmer(SandboxFleet(s.address), steps):
            pass
    except Exception as e:  # noqa: BLE001 - a sync fleet is fine; only the async one refuses a plain for
        raise AssertionError(f"a plain for over the sync client failed: {e}") from e


def test_keep_alive_reuses_connections(server):
    """The transport keeps its connections: many calls, few connections,
    and a call after the server closed an idle one goes through."""
    s = server()
    c = s.client()
    c.add_tasks(TASKS)
    for _ in range(20):
        c.status()
    assert len(c._t._idle) == 1
    conn = c._t._idle[0]
    conn.sock.shutdown(socket.SHUT_RDWR)  # as a server that timed the idle connection out
    assert c.status().run_id == s.run_id


def test_wait_pools_ready_says_what_is_not_warming(server):

    s = server()
    c = s.client()
    c.add_tasks(TASKS)
    started = time.monotonic()
    try:
        c.wait_pools_ready(timeout=120)
        raise AssertionError("waited for pools nothing warms")
    except FleetError as e:
        assert e.code == "failed_precondition" and "Lookahead" in str(e), e
    try:
        c.wait_pools_ready(timeout=120, images=["registry.example/swe/a:1"])
        raise AssertionError("waited for a pool nothing warms")
    except FleetError as e:
        assert "registry.example/swe/a:1" in str(e), e
    assert time.monotonic() - started < 10


def test_add_tasks_reads_rows_as_plan_does(server, tmp_path):
    """The SWE-bench and R2E-Gym rows `run --tasks` takes make, through
    add_tasks, the tasks `plan --tasks` counts: the same images, as many of
    each."""
    import json

    from test_fleet import ROW_TASKS, ROWS

    rows = [r if isinstance(r, str) else json.dumps(r) for r in ROWS[:4]]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(rows) + "\n")
    plan = json.loads(subprocess.run([BIN, "plan", "--tasks", str(path), "--offline", "-o", "json"],
                                     capture_output=True, text=True, check=True).stdout)
    planned = {p["image"]: p["tasks"] for p in plan["pools"]}
    c = server().client()
    added = c.add_tasks(ROWS[:4])
    assert added.added == 4
    assert {p.image for p in added.pools} == set(planned)
    assert sorted(planned.items()) == sorted((image, 1) for tid, image in ROW_TASKS.items() if tid != "4")


def scrape(url: str) -> dict[str, float]:
    """The samples of a Prometheus text page, by series."""
    import urllib.request

    out = {}
    for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


def test_metrics_move_with_the_session(server):
    """serve --metrics-addr: acquires, releases, commands, clients, held
    sandboxes and pools move as the session is driven (one expired lease
    among them)."""
    s = server("--metrics-addr", "127.0.0.1:0", lease_ttl="2s")
    url = wait_for("the metrics address", lambda: re.search(r"metrics at (http://\S+)", s.logs()))[1]
    c = s.client()
    c.add_tasks(TASKS)
    before = scrape(url)
    assert before["asrl_session_sandboxes_held"] == 0 and before["asrl_session_pools"] == 0, before
    h = c.acquire("t0")
    other = s.client()
    lost = other.acquire("t1")
    other.disconnect()
    m = scrape(url)
    assert sum(v for k, v in m.items() if k.startswith('asrl_session_acquires_total{') and 'status="ok"' in k) == 2, m
    assert m['asrl_session_acquire_latency_seconds_count{status="ok"}'] == 2, m
    assert m["asrl_session_sandboxes_held"] == 2 and m["asrl_session_clients"] == 2 and m["asrl_session_pools"] >= 1, m
    assert any(k.startswith("asrl_claims_total{") for k in m), "the engine's claims are not in serve's metrics"
    wait_for("the other client's lease to run out", lambda: scrape(url).get('asrl_session_releases_total{outcome="expired"}') == 1)
    c.release(h)
    m = scrape(url)
    assert m['asrl_session_releases_total{outcome="released"}'] == 1, m
    assert m["asrl_session_sandboxes_held"] == 0, m
    with pytest.raises(FleetError):
        other.release(lost)
