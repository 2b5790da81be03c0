"""The package as a trainer installs it: the tests run against the wheel
built from the checkout (internal/testpython installs it into a venv of
their own), never the source tree, and the wheel holds every module."""

from __future__ import annotations

import importlib
import os
import zipfile

import pytest

import sandbox_fleet

WHEEL = os.environ.get("SANDBOX_FLEET_WHEEL")
SOURCE = os.environ.get("SANDBOX_FLEET_SOURCE")

installed = pytest.mark.skipif(not (WHEEL and SOURCE), reason="run through go test ./clients/python, which installs the wheel")


def _source_files() -> set[str]:
    """The package's files in the checkout, relative to its parent."""
    root = os.path.join(SOURCE, "sandbox_fleet")
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith(".py") or name == "py.typed":
                out.add(os.path.relpath(os.path.join(dirpath, name), SOURCE))
    return out


@installed
def test_the_tests_import_the_installed_package():
    here = os.path.realpath(sandbox_fleet.__file__)
    assert not here.startswith(os.path.realpath(SOURCE) + os.sep), f"sandbox_fleet was imported from the source tree: {here}"
    assert f"{os.sep}site-packages{os.sep}" in here, here


@installed
def test_the_wheel_holds_every_module():
    with zipfile.ZipFile(WHEEL) as whl:
        shipped = {n for n in whl.namelist() if n.startswith("sandbox_fleet/")}
    missing = _source_files() - shipped
    assert not missing, f"the wheel lacks {sorted(missing)}: list them in pyproject.toml"
    assert "sandbox_fleet/adapters/__init__.py" in shipped
    assert "sandbox_fleet/py.typed" in shipped


def test_every_module_imports():
    """Each module of the package imports on the standard library alone
    (the adapters import a framework only when it is installed)."""
    root = os.path.dirname(sandbox_fleet.__file__)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, name[:-3]), os.path.dirname(root))
                module = rel.replace(os.sep, ".").removesuffix(".__init__")
                importlib.import_module(module)
