"""Reads the Dockerfile and the build context the way ``docker build`` does, for tests/test_image*.py.

Only what the repository's Dockerfile uses: instructions (continuation lines joined, comments
dropped), stages split at ``FROM``, exec-form (JSON) arguments, ``KEY=value`` lists, and
``.dockerignore`` patterns with Docker's rules (``*``, ``?``, ``[...]``, ``**``, ``!`` exceptions, the
last matching pattern wins, a pattern that matches a folder matches everything in it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case, e.g. "RUN"
    args: str  # the rest of the logical line, continuation lines joined


@dataclass(frozen=True)
class Stage:
    image: str  # what FROM names
    name: str | None  # FROM ... AS name
    body: tuple[Instruction, ...]  # the instructions after FROM

    def all(self, keyword: str) -> list[str]:
        return [i.args for i in self.body if i.keyword == keyword]

    def exec_form(self, keyword: str) -> list[str]:
        """The last ``keyword`` instruction's JSON array (ENTRYPOINT, CMD); one must be there."""
        (*_, last) = self.all(keyword)
        value = json.loads(last)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), last
        return value

    def env(self) -> dict[str, str]:
        """ENV as set at the end of the stage (``KEY=value`` form only; ``$VAR`` left unexpanded)."""
        out: dict[str, str] = {}
        for args in self.all("ENV"):
            out |= dict(pair.split("=", 1) for pair in shlex.split(args))
        return out

    def labels(self) -> dict[str, str]:
        return {k: v for args in self.all("LABEL") for k, v in (p.split("=", 1) for p in shlex.split(args))}


def instructions(text: str) -> list[Instruction]:
    out, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction is dropped, as Docker does
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        out.append(Instruction(keyword.upper(), " ".join(args.split())))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def stages(text: str) -> list[Stage]:
    found: list[Stage] = []
    for ins in instructions(text):
        if ins.keyword == "FROM":
            words = ins.args.split()
            assert not words[0].startswith("--"), f"FROM flags are not read here: {ins.args}"
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            found.append(Stage(words[0], name, ()))
        else:
            assert found, f"{ins.keyword} before the first FROM"
            last = found[-1]
            found[-1] = Stage(last.image, last.name, (*last.body, ins))
    return found


def _regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1:end]
            out, i = out + "[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]", end + 1
        else:
            out += {"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i]))
            i += 1
    return re.compile(out + r"\Z")


def ignore_rules(text: str) -> list[tuple[re.Pattern[str], bool, str]]:
    """(pattern, is_exception, literal text) per ``.dockerignore`` line, in order."""
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        path = os.path.normpath(line.removeprefix("!").strip()).lstrip("/")
        rules.append((_regex(path), exception, path))
    return rules


def ignored(path: str, rules: list[tuple[re.Pattern[str], bool, str]]) -> bool:
    """Whether ``docker build`` leaves ``path`` (relative, ``/``-separated) out of the context."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    out = False
    for regex, exception, _ in rules:
        if any(regex.match(p) for p in prefixes):
            out = not exception
    return out


def _may_hold_exceptions(folder: str, rules: list[tuple[re.Pattern[str], bool, str]]) -> bool:
    return any(exc and (lit.startswith(folder + "/") or "*" in lit or "?" in lit) for _, exc, lit in rules)


def context_files(root: Path = ROOT) -> list[str]:
    """Every file ``docker build root`` sends, relative and sorted (excluded folders are not walked
    unless an exception pattern may re-include something inside them)."""
    rules = ignore_rules((root / ".dockerignore").read_text())
    found = []
    for here, dirs, files in os.walk(root):
        rel = Path(here).relative_to(root).as_posix()
        prefix = "" if rel == "." else rel + "/"
        dirs[:] = [d for d in dirs if not ignored(prefix + d, rules) or _may_hold_exceptions(prefix + d, rules)]
        found += [prefix + f for f in files if not ignored(prefix + f, rules)]
    return sorted(found)


def copy_context(dest: Path, root: Path = ROOT) -> list[str]:
    """Copies the build context to ``dest`` (as the builder's ``COPY . .`` sees it); returns its files."""
    files = context_files(root)
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, dest / rel)
    return files
