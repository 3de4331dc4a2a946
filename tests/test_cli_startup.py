"""Start in a blink (issue 42): the command line imports a heavy library only in the code path that needs it.

Each check runs a fresh interpreter (``sys.modules`` of this test process already holds everything) on this
checkout and reads the top-level packages it imported. Wall-clock figures are ``benchmarks/startup.py``'s;
these checks fail on an eager import, whatever the machine's speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what --help never needs: each costs 50 ms to a second to import
HEAVY = ("matplotlib", "sklearn", "statsmodels", "scipy", "grpc", "aiohttp", "kubernetes", "pandas", "numpy",
         "pyarrow", "pydantic", "prometheus_api_client", "requests", "rich", "apscheduler", "yaml")
# what the demo report (table format, bundled snapshot) never needs: charts, servers, the Kubernetes API
NOT_IN_DEMO = ("matplotlib", "grpc", "aiohttp", "kubernetes", "prometheus_api_client", "apscheduler")
COMMANDS = ("report", "snapshot", "forecast", "controller", "rollback", "serve")

PROBE = """
import json, sys
from recommender.cli.main import main
args = json.loads(sys.argv[1])
if args:
    try:
        main(args, prog_name="rightsizer", standalone_mode=False)
    except SystemExit:
        pass
sys.stdout.flush()
print("\\n" + json.dumps(sorted({name.split(".")[0] for name in sys.modules})), file=sys.stderr)
"""


def imported_by(*args: str) -> set[str]:
    """Top-level packages a fresh ``rightsizer ARGS`` process imported (none: only ``import recommender.cli.main``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(args))], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    return set(json.loads(run.stderr.strip().splitlines()[-1]))


def test_the_probe_sees_what_a_command_imports() -> None:
    demo = imported_by("report", "--demo", "-o", "json")
    assert {"recommender", "click", "pandas", "pydantic"} <= demo  # the probe reads the child's modules


def test_importing_the_cli_loads_no_heavy_library() -> None:
    loaded = imported_by()
    assert "recommender" in loaded
    assert sorted(loaded & set(HEAVY)) == []


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_loads_no_heavy_library(command: str) -> None:
    loaded = imported_by(*([command] if command else []), "--help")
    assert sorted(loaded & set(HEAVY)) == []


def test_the_demo_report_loads_no_chart_server_or_kubernetes_library() -> None:
    assert sorted(imported_by("report", "--demo") & set(NOT_IN_DEMO)) == []
