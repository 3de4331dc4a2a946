"""Declared dependencies only: every module of the package imports with nothing but its core requirements.

A subprocess imports every module of ``recommender``, ``collectors`` and ``policies`` with an import hook
that refuses every third-party top-level package outside the transitive closure of gpu-rightsizer's
non-extra requirements (what ``pip install gpu-rightsizer`` brings, without ``[test]``). A module that
imports pytest, hypothesis, kmock or any package pyproject does not declare fails here, not in a user's
clean install.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("recommender", "collectors", "policies")
DIST = "gpu-rightsizer"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def allowed_distributions() -> set[str]:
    """The distributions ``pip install gpu-rightsizer`` installs: its requirements without ``extra ==``
    markers, then theirs (with the extras each requirement names), recursively; normalised names."""
    env = {k: str(v) for k, v in default_environment().items()}
    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(DIST, frozenset())]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        seen.add(_norm(name))
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python, not installed here
        for text in reqs:
            req = Requirement(text)
            if req.marker is not None and not any(req.marker.evaluate({**env, "extra": e})
                                                  for e in (extras or {""})):
                continue
            todo.append((_norm(req.name), frozenset(req.extras)))
    return seen


def blocked_top_levels() -> set[str]:
    """Installed third-party top-level import names that no allowed distribution provides."""
    allowed = allowed_distributions()
    blocked = {top for top, dists in metadata.packages_distributions().items()
               if not any(_norm(d) in allowed for d in dists)}
    return blocked - set(sys.stdlib_module_names) - set(PACKAGES) - {"tests"}


CHILD = r"""
import importlib, json, pkgutil, sys

blocked = set(json.loads(sys.argv[1]))
packages = sys.argv[2:]


class Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in blocked:
            raise ImportError(f"{name} is not a declared dependency of gpu-rightsizer")
        return None


sys.meta_path.insert(0, Refuse())
failed = []
for package in packages:
    root = importlib.import_module(package)
    names = [package] + [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")]
    for name in names:
        if name.rpartition(".")[2] == "__main__":
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_the_blocked_set_holds_the_test_extras_and_not_the_core() -> None:
    blocked = blocked_top_levels()
    for name in ("pytest", "hypothesis", "kmock", "jsonschema", "nbclient"):
        assert name in blocked or name not in metadata.packages_distributions(), name
    for name in ("yaml", "numpy", "pandas", "kubernetes", "jsonpatch", "jsonpointer", "grpc", "google",
                 "matplotlib", "pydantic", "aiohttp"):
        assert name not in blocked, name
    assert "jsonpatch" in allowed_distributions()  # the controller's undo applies RFC 6902 patches with it


def test_every_module_imports_with_declared_dependencies_only() -> None:
    run = subprocess.run([sys.executable, "-c", CHILD, json.dumps(sorted(blocked_top_levels())), *PACKAGES],
                         capture_output=True, text=True, timeout=240, check=False, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]


def test_an_undeclared_import_is_caught(tmp_path: Path) -> None:
    """The check itself: a package whose module imports pytest fails it."""
    (tmp_path / "leaky").mkdir()
    (tmp_path / "leaky" / "__init__.py").write_text("")
    (tmp_path / "leaky" / "mod.py").write_text("import pytest\n")
    run = subprocess.run([sys.executable, "-c", CHILD, json.dumps(sorted(blocked_top_levels())), "leaky"],
                         capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert run.returncode == 1 and "leaky.mod: ImportError: pytest is not a declared dependency" in run.stdout, \
        run.stdout + run.stderr
