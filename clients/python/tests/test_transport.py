"""The transport's handling of credentials, without a server."""

from __future__ import annotations

import os

from sandbox_fleet._connect import Transport


def test_a_rotated_token_file_is_read_again(tmp_path):
    """A Pod's projected token is replaced in place by the kubelet (a new
    file renamed over the old): the next call sends the new token."""
    token = tmp_path / "token"
    token.write_text("first\n")
    t = Transport("https://sandbox-fleet-serve.rl.svc:7070", token_file=str(token))
    assert t._headers("application/json")["Authorization"] == "Bearer first"
    rotated = tmp_path / "token.new"
    rotated.write_text("second\n")
    os.replace(rotated, token)
    assert t._headers("application/json")["Authorization"] == "Bearer second"
