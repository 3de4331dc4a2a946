"""The one generic registry (recommender.core.registry) behind sources, policies and report formats."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from recommender.core import registry as reg
from recommender.core.errors import ConfigError
from recommender.core.registry import DuplicateError, Registry, callable_or_not

GROUP = "gpu_rightsizer.test_things"


def one() -> int:
    return 1


def two() -> int:
    return 2


NOT_CALLABLE = 3


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> list[EntryPoint]:
    """Installed entry points, faked: the registry reads them through ``entry_points(group=...)``."""
    eps: list[EntryPoint] = []
    monkeypatch.setattr(reg, "entry_points", lambda group: [ep for ep in eps if ep.group == group])
    return eps


@pytest.fixture
def things() -> Registry[Callable[[], int]]:
    return Registry("thing", GROUP, check=callable_or_not)


def test_a_different_object_under_a_taken_name_is_rejected(things: Registry[Callable[[], int]]) -> None:
    things.register("a")(one)
    with pytest.raises(DuplicateError, match=r"thing 'a' is already registered \(tests.test_registry.one\); "
                                             r"refusing tests.test_registry.two"):
        things.register("a")(two)
    assert things.get("a") is one


def test_registering_the_same_object_again_is_a_no_op(things: Registry[Callable[[], int]]) -> None:
    assert things.register("a")(one) is one
    assert things.register("a")(one) is one
    assert things.get("a") is one and things.names() == ["a"]


@pytest.mark.parametrize("bad", ["", " a", "a ", "  "])
def test_bad_names_are_rejected(things: Registry[Callable[[], int]], bad: str) -> None:
    with pytest.raises(ValueError, match=r"thing name .* must be non-empty"):
        things.register(bad)


def test_unknown_name_lists_the_known_ones(installed: list[EntryPoint]) -> None:
    things: Registry[Callable[[], int]] = Registry("thing", GROUP, known="valid things")
    things.add("b", two)
    things.add("a", one)
    with pytest.raises(ConfigError, match=r"^unknown thing 'c'; valid things: a, b$"):
        things.get("c")
    assert things.find("c") is None
    things.unregister("a")
    assert things.names() == ["b"]


@pytest.fixture
def builtin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A throwaway module that registers ``hello`` in ``LAZY`` when (and only when) it is imported."""
    name = "registry_builtin_probe"
    (tmp_path / f"{name}.py").write_text(
        "from tests.test_registry import LAZY\n\n@LAZY.register('hello')\ndef hello() -> int:\n    return 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    LAZY.builtins = {"hello": name}
    yield name
    sys.modules.pop(name, None)
    LAZY.unregister("hello")


LAZY: Registry[Callable[[], int]] = Registry("thing", None)


def test_builtins_are_imported_only_when_asked_for(builtin_module: str) -> None:
    assert LAZY.names() == ["hello"]  # listed from the table, nothing imported
    assert builtin_module not in sys.modules
    assert LAZY.get("hello")() == 7
    assert builtin_module in sys.modules


def test_a_builtin_name_is_taken_before_its_module_is_imported(builtin_module: str) -> None:
    with pytest.raises(DuplicateError, match=rf"thing 'hello' is already registered \(built-in, {builtin_module}\)"):
        LAZY.register("hello")(one)
    assert builtin_module not in sys.modules
    assert set(LAZY.loaded()) == {"hello"}  # loaded() imports every built-in


def test_plugins_load_lazily_and_a_broken_one_is_a_config_error(installed: list[EntryPoint],
                                                                 things: Registry[Callable[[], int]]) -> None:
    things.add("a", one)
    installed += [EntryPoint("p", "tests.test_registry:two", GROUP),
                  EntryPoint("broken", "no_such_module_xyz:thing", GROUP),
                  EntryPoint("elsewhere", "tests.test_registry:one", "another.group")]
    assert things.names() == ["a", "broken", "p"]  # listed without importing anything
    assert things.get("p") is two
    assert things.get("a") is one  # a broken plugin does not break the others
    with pytest.raises(ConfigError, match=r"^thing 'broken' \(no_such_module_xyz:thing\) failed to load: "):
        things.get("broken")


def test_a_plugin_is_checked(installed: list[EntryPoint], things: Registry[Callable[[], int]]) -> None:
    installed.append(EntryPoint("three", "tests.test_registry:NOT_CALLABLE", GROUP))
    with pytest.raises(ConfigError, match=r"thing 'three' \(tests.test_registry:NOT_CALLABLE\) is not callable"):
        things.get("three")


def test_several_plugins_under_one_name_are_an_error(installed: list[EntryPoint],
                                                     things: Registry[Callable[[], int]]) -> None:
    installed += [EntryPoint("twin", "tests.test_registry:one", GROUP),
                  EntryPoint("twin", "tests.test_registry:two", GROUP)]
    with pytest.raises(ConfigError, match=r"thing 'twin' is provided by several plugins: tests.test_registry:one, "
                                          r"tests.test_registry:two; uninstall all but one"):
        things.get("twin")


def test_a_plugin_cannot_take_a_registered_name(installed: list[EntryPoint],
                                                things: Registry[Callable[[], int]]) -> None:
    things.add("a", one)
    installed.append(EntryPoint("a", "tests.test_registry:two", GROUP))
    assert things.get("a") is one
    assert things.names() == ["a"]


def test_a_real_dist_info_on_the_path_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               things: Registry[Callable[[], int]]) -> None:
    """No faking: an installed distribution's entry_points.txt, read by importlib.metadata."""
    dist = tmp_path / "registry_probe_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: registry-probe-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\nfrom_dist = tests.test_registry:two\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "from_dist" in things.names()
    assert things.get("from_dist") is two


def test_the_three_registries_are_instances() -> None:
    from collectors.registry import SOURCES
    from policies.registry import POLICIES
    from recommender.outputs.registry import COMPANIONS, FORMATTERS

    assert {"demo", "file", "prometheus"} <= set(SOURCES.names())
    assert "gpu-rightsize" in POLICIES.names()
    assert {"csv", "html", "json", "markdown", "table", "wide", "yaml"} <= set(FORMATTERS.names())
    assert COMPANIONS.find("csv") is not None and COMPANIONS.find("json") is None
    with pytest.raises(ConfigError, match=r"^unknown source 'x'; known: demo, file, prometheus"):
        SOURCES.get("x")
    with pytest.raises(ConfigError, match=r"^unknown policy 'x'; known: gpu-rightsize"):
        POLICIES.get("x")
