"""agent-sandbox-rl's tasks and task sources: ``Task`` (id, image,
metadata), lists, JSONL files and image lists, SWE-bench rows, and the
image rewriter."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable


@dataclass
class Task:
    """One unit of work: a stable id, the image it runs in, and whatever
    else its row had (``metadata``)."""

    id: str
    image: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> "Task":
        """A copy with ``update``'s fields, as pydantic's model_copy."""
        return replace(self, **dict(update or {}))

    def row(self) -> dict[str, Any]:
        """The task as a row serve reads: its metadata, id and image."""
        return {**self.metadata, "id": self.id, "image": self.image}


@runtime_checkable
class TaskSource(Protocol):
    """Anything that produces a list of Tasks."""

    def load(self) -> list[Task]: ...


class ListSource:
    """A TaskSource over Tasks in memory."""

    def __init__(self, tasks: Iterable[Task]):
        self._tasks = list(tasks)

    def load(self) -> list[Task]:
        return list(self._tasks)


def _row_task(row: Mapping[str, Any], i: int, id_field: str, image_field: str, where: str) -> Task:
    if image_field not in row:
        raise KeyError(f"{where}: row is missing image field {image_field!r}")
    return Task(id=str(row.get(id_field, i)), image=row[image_field],
                metadata={k: v for k, v in row.items() if k not in (image_field, id_field)})


class JsonlSource:
    """One task per JSON line of ``path``: its ``image_field`` and
    ``id_field`` (the row's index when it has none), the rest metadata;
    ``limit`` tasks at most (None: all, 0: none)."""

    def __init__(self, path: str, *, image_field: str = "image", id_field: str = "id", limit: int | None = None):
        self.path, self.image_field, self.id_field, self.limit = path, image_field, id_field, limit

    def load(self) -> list[Task]:
        tasks: list[Task] = []
        if self.limit == 0:
            return tasks
        with open(self.path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise ValueError(f"{self.path}:{i + 1}: invalid JSON: {e}") from None
                tasks.append(_row_task(row, i, self.id_field, self.image_field, f"{self.path}:{i + 1}"))
                if self.limit is not None and len(tasks) >= self.limit:
                    break
        return tasks


def load_image_list(path: str) -> list[str]:
    """The images listed in a local file, one a line (blank lines and
    ``#`` comments skipped). A ``gs://`` list is copied locally first
    (``gcloud storage cp``): this package reads no cloud storage."""
    if "://" in path:
        raise ValueError(f"{path}: only local image lists are read; copy it here first (gcloud storage cp {path} .)")
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]


class ImageListSource:
    """One task per image of a local image list (load_image_list); the id
    is the image's index."""

    def __init__(self, path: str, *, limit: int | None = None):
        self.path, self.limit = path, limit

    def load(self) -> list[Task]:
        images = load_image_list(self.path)
        if self.limit is not None:
            images = images[:self.limit]
        return [Task(id=str(i), image=image) for i, image in enumerate(images)]


def to_tasks(source: Any, *, image_field: str = "image", id_field: str = "id") -> list[Task]:
    """Tasks of a TaskSource, Tasks, images (strings) or rows (dicts with
    at least ``image_field``)."""
    if isinstance(source, TaskSource):
        return source.load()
    if isinstance(source, (list, tuple)):
        out: list[Task] = []
        for i, item in enumerate(source):
            if isinstance(item, Task):
                out.append(item)
            elif isinstance(item, str):
                out.append(Task(id=str(i), image=item))
            elif isinstance(item, Mapping):
                out.append(_row_task(item, i, id_field, image_field, f"task #{i} dict"))
            else:
                raise TypeError(f"cannot coerce {type(item)!r} to Task")
        return out
    raise TypeError(f"unsupported task source: {type(source)!r}")


SWEBENCH_DATASET = "R2E-Gym/SWE-Bench-Verified"
SWEBENCH_PROBE = ["bash", "-lc",
                  "echo READY $(hostname); git -C /testbed log -1 --oneline 2>/dev/null || ls -d /testbed 2>/dev/null || ls /"]


class SweBenchSource:
    """SWE-bench-style rows (a ``docker_image`` and an ``instance_id``) as
    Tasks with ``repo`` and ``base_commit`` metadata (the whole row under
    ``metadata["ds"]`` with ``keep_row``). The rows come from ``path`` (a
    JSONL or JSON file of the dataset, e.g. saved with ``datasets``'
    ``to_json``), from ``rows``, or else from the Hugging Face Hub through
    the ``datasets`` package where it is installed."""

    def __init__(self, dataset: str = SWEBENCH_DATASET, split: str = "test", limit: int | None = None, offset: int = 0,
                 image_field: str = "docker_image", id_field: str = "instance_id", keep_row: bool = False, *,
                 path: str | None = None, rows: Iterable[Mapping[str, Any]] | None = None):
        self.dataset, self.split, self.limit, self.offset = dataset, split, limit, offset
        self.image_field, self.id_field, self.keep_row = image_field, id_field, keep_row
        self.path, self.rows = path, rows

    def _rows(self) -> list[Mapping[str, Any]]:
        if self.rows is not None:
            rows = list(self.rows)
        elif self.path is not None:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
            rows = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x.strip()]
        else:
            try:
                from datasets import load_dataset  # type: ignore[import]
            except ImportError:
                raise ImportError(f"SweBenchSource reads {self.dataset} from the Hub with the datasets package "
                                  "(pip install datasets), or give path= (a JSONL of its rows)") from None
            rows = list(load_dataset(self.dataset, split=self.split))
        end = None if self.limit is None else self.offset + self.limit
        return rows[self.offset:end]

    def load(self) -> list[Task]:
        if self.limit == 0:
            return []
        tasks = []
        for i, r in enumerate(self._rows()):
            meta: dict[str, Any] = {"repo": r.get("repo", ""), "base_commit": r.get("base_commit", "")}
            if self.keep_row:
                meta["ds"] = copy.deepcopy(dict(r))
            tasks.append(Task(id=str(r.get(self.id_field, i)), image=r[self.image_field], metadata=meta))
        return tasks


def swebench_probe(task: Task, handle: Any) -> str:
    """A process_fn that runs the readiness probe in the sandbox and returns
    its output (``READY <hostname>`` and /testbed's last commit)."""
    return str(handle.exec(SWEBENCH_PROBE)).strip()


# The hosts of Docker Hub: the images a rewriter redirects by default.
DOCKER_HOSTS = ("docker.io", "index.docker.io", "registry-1.docker.io")


def _split_host(image: str) -> tuple[str | None, str]:
    """(registry host, rest): the first path segment is a host when it has
    a '.' or ':' or is localhost, as the image reference grammar has it."""
    head = image.split("/", 1)[0]
    if "/" in image and ("." in head or ":" in head or head == "localhost"):
        return head, image[len(head) + 1:]
    return None, image


def rewrite_image(image: str, *, registry: str, project: str = "", repo: str = "",
                  only_hosts: tuple[str, ...] | None = DOCKER_HOSTS) -> str:
    """image as ``REGISTRY/PROJECT/REPO/<path>:<tag>``, when its host (Docker
    Hub when it names none) is one of only_hosts (None: any); else image.
    Hub's library shorthand (``ubuntu``) becomes ``library/ubuntu``."""
    host, rest = _split_host(image)
    effective = host or "docker.io"
    if only_hosts is not None and effective not in only_hosts:
        return image
    name = rest.split("@", 1)[0].split(":", 1)[0]
    if effective in DOCKER_HOSTS and "/" not in name:
        rest = f"library/{rest}"
    prefix = "/".join(p for p in (registry, project, repo) if p)
    return f"{prefix}/{rest}"


def make_rewriter(*, registry: str, project: str = "", repo: str = "",
                  only_hosts: tuple[str, ...] | None = DOCKER_HOSTS) -> Callable[[str], str]:
    """An image -> image hook for ``load_tasks(image_rewrite=...)``."""
    def rewrite(image: str) -> str:
        return rewrite_image(image, registry=registry, project=project, repo=repo, only_hosts=only_hosts)
    return rewrite
