"""The image's install, run here as its builder stage runs it: the Dockerfile's own RUN line on the
build context .dockerignore lets through, into a new venv, then the entrypoint from that venv alone.

No Docker engine is needed. This proves the wheel carries its package data (the demo snapshot, the
report's CSS, the catalogues, the proto) and that the commands write only where the image's ENV says
(under /tmp, the Deployment's emptyDir). Needs PyPI (or pip's cache) for the build backend and the
dependencies: about a minute with a warm cache. Deselect with ``-m "not image"``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path, PurePosixPath

import pytest

from tests import dockerfile as df

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]

BUILDER, RUNTIME = df.stages(df.DOCKERFILE.read_text())
(VENV,) = (c.split()[-1] for c in RUNTIME.all("COPY"))  # /opt/venv
PACKAGE_DATA: dict[str, list[str]] = tomllib.loads((df.ROOT / "pyproject.toml").read_text())[
    "tool"]["setuptools"]["package-data"]


class Image:
    """The venv as installed, and how to run a command as the image would (its ENV, its WORKDIR)."""

    def __init__(self, venv: Path, writable: Path) -> None:
        self.venv, self.writable = venv, writable

    def env(self) -> dict[str, str]:
        def here(value: str) -> str:  # the image's paths, moved to this machine's
            return value.replace("/tmp", str(self.writable)).replace(VENV, str(self.venv)).replace(
                "$PATH", "/usr/bin:/bin")
        return {k: here(v) for k, v in RUNTIME.env().items()}

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        (workdir,) = RUNTIME.all("WORKDIR")
        assert workdir == "/tmp"
        done = subprocess.run([str(self.venv / "bin" / argv[0]), *argv[1:]], cwd=self.writable, env=self.env(),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr[-2000:]}"
        return done

    def site_packages(self) -> Path:
        (found,) = self.venv.glob("lib/python3.*/site-packages")
        return found


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    minor = re.search(r":(\d+\.\d+)\.", RUNTIME.image)
    assert minor and f"{sys.version_info[0]}.{sys.version_info[1]}" == minor[1], f"needs {RUNTIME.image}'s Python"
    base = tmp_path_factory.mktemp("image")
    context, venv, writable = base / "src", base / "venv", base / "tmp"
    df.copy_context(context)
    writable.mkdir()
    (workdir,) = BUILDER.all("WORKDIR")
    (run,) = BUILDER.all("RUN")
    moved = {workdir: str(context), VENV: str(venv)}
    argv = [moved.get(a, a) for a in shlex.split(run)]
    # This interpreter is `python3` for the script, as the base image's is in the builder. pip's cache
    # is kept (the builder's PIP_NO_CACHE_DIR only keeps the layer small).
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(argv, cwd=context, env=env, capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, f"{run}: {done.stderr[-3000:]}"
    return Image(venv, writable)


def test_the_venv_has_the_entrypoint_and_no_installer(image: Image) -> None:
    names = {p.name.split("-")[0].lower() for p in image.site_packages().iterdir()}
    assert {"recommender", "collectors", "policies", "gpu_rightsizer"} <= names
    assert not names & {"pip", "setuptools", "wheel"}, "nothing should install at run time"
    assert "controller" in image.run("rightsizer", "--help").stdout
    assert "--config" in image.run("rightsizer", "controller", "--help").stdout


def test_the_wheel_carries_every_package_data_file(image: Image) -> None:
    total = 0
    for package, patterns in PACKAGE_DATA.items():
        for pattern in patterns:
            repo = {p.relative_to(df.ROOT).as_posix() for p in (df.ROOT / package).glob(pattern)}
            site = {p.relative_to(image.site_packages()).as_posix()
                    for p in (image.site_packages() / package).glob(pattern)}
            assert site == repo, f"{package}/{pattern}"
            total += len(repo)
    assert total >= 5, "pyproject.toml's package-data matched (almost) nothing"


def test_the_demo_report_runs_from_the_venv_alone_and_writes_only_to_tmp(image: Image) -> None:
    before = _tree(image.venv)
    where = image.run("python", "-c", "import recommender; print(recommender.__file__)").stdout.strip()
    assert PurePosixPath(where).is_relative_to(image.site_packages()), where
    image.run("rightsizer", "report", "--demo", "-o", "html", "--output-file", "report.html")
    html = (image.writable / "report.html").read_text()
    # The demo snapshot's workloads, the packaged CSS and matplotlib's charts.
    assert "<style" in html and "<svg" in html and "llama" in html
    assert _tree(image.venv) == before, "a command wrote into the venv (read-only in the image)"
    mpl = Path(image.env()["MPLCONFIGDIR"])
    assert mpl.is_relative_to(image.writable) and any(mpl.glob("fontlist*.json"))
