"""Task rows as trainers have them — dicts (generic, SWE-bench or R2E-Gym
rows), JSON text or images — sent to ``serve``, whose parser is the one
``run --tasks`` uses (pkg/fleet/tasks); and read here the same way for
FakeFleet, which has no server. test_serve.py checks the two agree."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import InvalidArgumentError

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DOCKER_HUB = "docker.io"


def encode(rows: Iterable[Mapping[str, Any] | str]) -> list[str]:
    """Each row as the text a task file's line would hold."""
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, str):
            out.append(row)
        elif isinstance(row, Mapping):
            # Values JSON has no form for (dates, numpy scalars) go as text.
            out.append(json.dumps(dict(row), default=str))
        else:
            raise TypeError(f"rows[{i}] is a {type(row).__name__}: give a dict (a task row) or a str (an image)")
    return out


def request(rows: Iterable[Mapping[str, Any] | str], id_field: str | None, image_field: str | None,
            rewrite: Iterable[str]) -> dict[str, Any]:
    msg: dict[str, Any] = {"rows": encode(rows)}
    if id_field:
        msg["idField"] = id_field
    if image_field:
        msg["imageField"] = image_field
    if rewrite:
        msg["rewrite"] = list(rewrite)
    return msg


class _Problems(Exception):
    pass


def _q(s: str) -> str:
    """s quoted as serve's errors (Go's %q) quote it."""
    return json.dumps(s)


def read(rows: list[str], seen: dict[str, str], id_field: str | None = None, image_field: str | None = None,
         rewrite: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The tasks of rows (``{"id", "image", **metadata}``), read as serve
    reads them, or FleetError naming every bad row; seen (id -> where) is
    updated only when all are good."""
    rules = [_rule(i, r) for i, r in enumerate(rewrite)]
    now = dict(seen)
    tasks, problems = [], []
    for i, text in enumerate(rows):
        where = f"rows[{i}]"
        try:
            text = text.strip()
            if not text:
                raise _Problems("an empty row: give a JSON object or an image")
            if text.startswith("{"):
                task = _row(text, id_field, image_field)
            else:
                task = {"id": str(len(now)), "image": text}
            tasks.append(_add(where, task, now, rules))
        except _Problems as e:
            problems.append(f"{where}: {e}")
    if problems:
        raise InvalidArgumentError("\n".join(problems[:20]))
    seen.update(now)
    return tasks


def _row(text: str, id_field: str | None, image_field: str | None) -> dict[str, Any]:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise _Problems(f"invalid JSON: the key {_q(k)} appears twice")
            out[k] = v
        return out

    try:
        row = json.loads(text, object_pairs_hook=unique)
    except ValueError as e:
        raise _Problems(f"invalid JSON: {e}") from None
    if not isinstance(row, dict):
        raise _Problems("invalid JSON: a row must be a JSON object")
    tid, id_keys = _id_of(row, id_field)
    image, image_key = _image_of(row, image_field, tid)
    meta = {k: v for k, v in row.items() if k not in (*id_keys, image_key)}
    return {**meta, "id": tid, "image": image}


def _scalar(v: Any) -> str | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        return v or None
    if isinstance(v, (int, float)):
        return json.dumps(v)
    return None


def _kind(v: Any) -> str:
    return {list: "a list", dict: "an object", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(v), "a string")


def _id_of(row: dict[str, Any], field: str | None) -> tuple[str, list[str]]:
    if field:
        v = _scalar(row.get(field))
        if v is None:
            raise _Problems(f"no task id: the row has no string or number field {_q(field)} (id_field)")
        return v, [field]
    for f in ("id", "instance_id"):
        v = _scalar(row.get(f))
        if v is not None:
            return v, [f]
        if f in row:
            raise _Problems(f"the task id {_q(f)} is {_kind(row[f])}, not a string or number")
    repo, commit = _scalar(row.get("repo_name")), _scalar(row.get("commit_hash"))
    if repo and commit:
        return repo.replace("/", "__") + "-" + commit[:12], []
    raise _Problems('no task id: the row has no "id", "instance_id" or R2E-Gym "repo_name" and "commit_hash"; '
                    "name the id field with id_field")


def _image_of(row: dict[str, Any], field: str | None, tid: str) -> tuple[str, str]:
    if field:
        v = row.get(field)
        if not isinstance(v, str) or not v:
            raise _Problems(f"task {_q(tid)}: no image: the row has no string field {_q(field)} (image_field)")
        return v, field
    for f in ("image", "docker_image"):
        v = row.get(f)
        if isinstance(v, str) and v:
            return v, f
        if f in row and not isinstance(v, str):
            raise _Problems(f"task {_q(tid)}: the image {_q(f)} is {_kind(v)}, not a string")
    iid = row.get("instance_id")
    if isinstance(iid, str) and iid:
        return swebench_image(iid), ""
    raise _Problems(f'task {_q(tid)}: no image: the row has no "image", "docker_image" or SWE-bench "instance_id"; '
                    "name the image field with image_field")


def swebench_image(instance_id: str) -> str:
    """The image SWE-bench publishes for an instance (pkg/fleet/tasks.SWEBenchImage)."""
    return "docker.io/swebench/sweb.eval.x86_64." + instance_id.replace("__", "_1776_").lower() + ":latest"


def _add(where: str, task: dict[str, Any], seen: dict[str, str], rules: list[tuple[str, str]]) -> dict[str, Any]:
    tid = task["id"]
    if not tid or len(tid) > 63 or not _LABEL_VALUE.match(tid):
        raise _Problems(f"task id {_q(tid)} cannot be a Kubernetes label value; choose another field with id_field")
    if tid in seen:
        raise _Problems(f"duplicate task id {_q(tid)} (first at {seen[tid]})")
    full = normalize(task["image"])
    for source, to in rules:
        if full == source or (full.startswith(source) and full[len(source)] in "/:@"):
            task = {**task, "image": to + full[len(source):], "originalImage": task["image"]}
            break
    seen[tid] = where
    return task


def _host(image: str) -> tuple[str, str]:
    head, sep, tail = image.partition("/")
    if sep and (any(c in head for c in ".:") or head == "localhost"):
        return head, tail
    return "", image


def normalize(image: str) -> str:
    """The full form of an image reference (pkg/images.Normalize)."""
    if not image or image != image.strip() or any(c.isspace() or c.isupper() for c in _host(image)[1].split("@")[0].rsplit(":", 1)[0]):
        raise _Problems(f"invalid image reference {_q(image)}")
    host, rest = _host(image)
    host = host.lower()
    if host in ("", "index.docker.io", "registry-1.docker.io"):
        host = _DOCKER_HUB
    repo, suffix = rest, ""
    if "@" in rest:
        repo, suffix = rest.split("@", 1)[0], "@" + rest.split("@", 1)[1]
    elif ":" in rest.rsplit("/", 1)[-1]:
        repo, tag = rest.rsplit(":", 1)
        suffix = ":" + tag
    if host == _DOCKER_HUB and "/" not in repo:
        repo = "library/" + repo
    return f"{host}/{repo}{suffix or ':latest'}"


def _rule(i: int, text: str) -> tuple[str, str]:
    src, sep, to = text.partition("=")
    src, to = src.strip().rstrip("/"), to.strip().rstrip("/")
    if not sep or not src or not to:
        raise InvalidArgumentError(f"rewrite[{i}]: rewrite rule {_q(text)}: want FROM=TO, e.g. docker.io=mirror.example.com/dockerhub")
    if "/" not in src and not any(c in src for c in ".:") and src != "localhost":
        src = _DOCKER_HUB + "/" + src
    return src, to
