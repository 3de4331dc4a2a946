"""Messages name only flags that exist on the commands that print them (issue 39: ``rollback`` told the user
to pass ``--no-kubernetes``, which it does not have)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
from click.testing import CliRunner

from recommender.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# "module" or "module:function" whose messages reach these commands only (the rest: any command)
PRINTED_BY = {
    "collectors/kubernetes/client.py": ("report", "snapshot", "controller", "serve", "rollback"),
    "recommender/cli/controller.py": ("controller",),
    "recommender/cli/controller.py:rollback": ("rollback",),
    "recommender/cli/serve.py": ("serve",),
}
NOT_OURS = {  # flags of other programs that messages name: vLLM's and the kube-apiserver's
    "--gpu-memory-utilization", "--max-num-seqs", "--max-model-len", "--model", "--served-model-name",
    "--tensor-parallel-size", "--requestheader-client-ca-file",
}


def command_flags(name: str) -> set[str]:
    cmd = main.commands[name] if name else main
    return {o for p in cmd.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)} | {"--help"}


def _skipped(tree: ast.Module) -> set[int]:
    """Docstrings and the declarations of options (``click.option("-o", "--output", ...)``'s positional names)."""
    skip = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
            and n.body and isinstance(n.body[0], ast.Expr)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", "")) in ("option", "Option"):
            skip |= {id(a) for a in n.args}
    return skip


def message_flags(path: Path, rel: str) -> dict[str, set[str]]:
    """Every ``--flag`` inside a string constant of one module (f-strings included), by ``module:function``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip, found = _skipped(tree), {}
    for top in tree.body:
        where = f"{rel}:{top.name}" if isinstance(top, ast.FunctionDef | ast.ClassDef) else rel
        for node in ast.walk(top):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                flags = set(FLAG.findall(node.value)) - NOT_OURS
                if flags:
                    found.setdefault(where, set()).update(flags)
    return found


def named_flags() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for folder in ("recommender", "collectors"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            out.update(message_flags(path, path.relative_to(ROOT).as_posix()))
    return out


def printed_by(where: str) -> tuple[str, ...] | None:
    return PRINTED_BY.get(where) or PRINTED_BY.get(where.split(":")[0])


def test_the_scan_finds_flags_in_messages() -> None:
    """The scan itself works: it sees the hints every one-line error gives."""
    found = named_flags()
    assert "--prometheus-url" in found["recommender/cli/options.py:pick_source"]
    assert "--kubeconfig" in found["collectors/kubernetes/client.py:make_api_client"]
    assert "--signing-secret" in found["recommender/cli/controller.py:rollback"]


def test_every_flag_a_message_names_exists_on_the_commands_that_print_it() -> None:
    every = set().union(*(command_flags(c) for c in main.commands))
    wrong = []
    for module, flags in named_flags().items():
        commands = printed_by(module)
        for flag in sorted(flags):
            missing = [c for c in commands if flag not in command_flags(c)] if commands else \
                ([] if flag in every else ["any command"])
            if missing:
                wrong.append(f"{module} names {flag}, which {', '.join(missing)} does not have")
    assert not wrong, "\n".join(wrong)


def test_rollback_without_kubeconfig_names_only_its_own_flags(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["rollback", "ml/Deployment/chat", "--kubeconfig", str(tmp_path / "none")])
    assert result.exit_code == 2
    said = set(FLAG.findall(result.output))
    assert said and said <= command_flags("rollback"), said


def test_help_names_the_environment_variables_options_read() -> None:
    """``report --help`` shows PROMETHEUS_URL and the token variable beside their options (issue 39)."""
    text = CliRunner().invoke(main, ["report", "--help"], terminal_width=200).output
    for option in main.commands["report"].params:
        for var in ([option.envvar] if isinstance(option.envvar, str) else option.envvar or []):
            assert var in text, var
    assert "PROMETHEUS_URL" in text and "PROMETHEUS_TOKEN" in text
