"""Imports point down only (issue 17): no module of ``argus`` imports a higher layer.

Every module under ``argus/`` is parsed with :mod:`ast`; its imports at module level and
inside functions both count (a function-level import is a dependency all the same). A module
belongs to the layer of the longest prefix below that names it; a module that no prefix names
fails the test, so a new package has to be placed in the table.

=====  ==================================================  =====================================
layer  modules                                             what
=====  ==================================================  =====================================
0      ``argus`` (the package: ``__version__``),           errors, settings, broker security
       ``argus.config``, ``argus.errors``,
       ``argus.kafka.security``
1      ``argus.schemas``, ``argus.routing``,               codec, packed arrays, ``*.avsc``; the
       ``argus.ranks``                                     comparison groups anomaly keys name;
                                                           rank lists as text
2      ``argus.summaries``                                 KDE, log-normal, quantile wire,
                                                           summary records
3      ``argus.detectors``                                 L1-L3, routing, findings, funnel
4      ``argus.streams.windows``, ``argus.streams.roles``  the engine's pure roles and what
       ``argus.streams.step_digest``,                      they need (no faust, no Kafka)
       ``argus.streams.pipeline_config``,
       ``argus.streams.limits``, ``argus.streams.metrics``,
       ``argus.streams.validate``
5      ``argus.streams`` (the rest), ``argus.cli``,        faust agents, app, memory driver,
       ``argus.commands``, ``argus.diagnose``,             operator commands, sinks, simulator,
       ``argus.replay``, ``argus.report``,                 Kafka admin
       ``argus.trace``, ``argus.demo``, ``argus.sim``,
       ``argus.sinks``, ``argus.kafka``,
       ``argus.stacks_view``, ``argus.topics``,
       ``argus.drill``
C      ``argus.collectors``                                beside 5 (which may import them), but
                                                           run inside training
                                                           processes: import only layers 0-1,
                                                           ``argus.topics`` and themselves, and
                                                           so does everything they pull in
=====  ==================================================  =====================================

A module may import its own layer and any lower one. For collectors the check is transitive
(every module a collector pulls in, parent packages included, must itself be allowed), since
whatever they load is loaded into a user's training job.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "argus"

#: Module prefix -> layer, lowest first (see the module docstring). ``"C"`` = collectors.
LAYERS: dict[str, int | str] = {
    "argus": 0,  # the package itself: __version__ only (tested below)
    "argus.config": 0,
    "argus.errors": 0,
    "argus.kafka.security": 0,
    "argus.malloc": 0,  # glibc allocator settings of the processes that compress (ctypes only)
    "argus.schemas": 1,
    "argus.routing": 1,
    "argus.ranks": 1,  # rank lists as text (reports, alerts, commands)
    "argus.summaries": 2,
    "argus.detectors": 3,
    "argus.streams.windows": 4,
    "argus.streams.roles": 4,
    "argus.streams.step_digest": 4,  # the steps roles' block -> job digests
    "argus.streams.pipeline_config": 4,  # the roles' settings
    "argus.streams.limits": 4,  # the input limits pipeline_config inherits
    "argus.streams.metrics": 4,  # Prometheus instruments the roles count into
    "argus.streams.validate": 4,  # the input checks the roles apply (the compressor's)
    "argus.streams": 5,
    "argus.diagnose": 5,
    "argus.replay": 5,
    "argus.report": 5,
    "argus.trace": 5,
    "argus.cli": 5,
    "argus.commands": 5,
    "argus.demo": 5,
    "argus.sim": 5,
    "argus.ingest": 5,  # Kineto traces -> records (pure; the command writes/publishes)
    "argus.sinks": 5,
    "argus.kafka": 5,
    "argus.stacks_view": 5,
    "argus.drill": 5,  # drill-down windows, empty-read reasons, argus status
    "argus.topics": 5,
    "argus.collectors": "C",
}

#: What collectors may import besides layers 0-1 and themselves.
COLLECTOR_EXTRA = ("argus.topics",)

#: Imports that break the layering and are not fixed yet: (importer, imported) -> why.
#: Each one is a debt with a plan, not a permission; keep the list short.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


MODULES = _modules()


def layer_of(module: str) -> int | str:
    """Layer of ``module`` by its longest prefix in :data:`LAYERS`; KeyError if none.

    ``"argus"`` names the package module only, not a prefix of everything below it.
    """
    if module == "argus":
        return LAYERS[module]
    parts = module.split(".")
    for n in range(len(parts), 1, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise KeyError(module)


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    """Absolute module of a ``from ... import`` (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    is_pkg = MODULES[importer].name == "__init__.py"
    base = importer.split(".")
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """``(imported argus module, line)`` for every import in ``module``, at any depth.

    ``from a.b import c`` counts as importing ``a.b.c`` when that is a module, else ``a.b``.
    """
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"), str(MODULES[module]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "argus" or alias.name.startswith("argus."):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            if base != "argus" and not base.startswith("argus."):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in MODULES else base), node.lineno


def _collector_may_import(target: str) -> bool:
    layer = layer_of(target)
    return (
        layer == "C"
        or (isinstance(layer, int) and layer <= 1)
        or any(target == m or target.startswith(m + ".") for m in COLLECTOR_EXTRA)
    )


def _with_parents(module: str) -> Iterator[str]:
    """``module`` and the packages Python runs first to import it (``a``, ``a.b``, ...)."""
    parts = module.split(".")
    for n in range(1, len(parts) + 1):
        yield ".".join(parts[:n])


def test_every_module_has_a_layer() -> None:
    unplaced = []
    for m in MODULES:
        try:
            layer_of(m)
        except KeyError:
            unplaced.append(m)
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"


def _lower_or_equal(theirs: int | str, mine: int | str) -> bool:
    """May a module of layer ``mine`` import one of layer ``theirs``? (collectors aside)"""
    if mine == "C":
        return theirs == "C" or (isinstance(theirs, int) and theirs <= 1)
    return isinstance(mine, int) and (mine == 5 if theirs == "C" else int(theirs) <= mine)


def upward(edges: Iterable[tuple[str, str, str]]) -> tuple[list[str], set[tuple[str, str]]]:
    """The imports among ``(importer, imported, where)`` that point up, and the exceptions used."""
    bad: list[str] = []
    used: set[tuple[str, str]] = set()
    for module, target, where in edges:
        mine, theirs = layer_of(module), layer_of(target)
        ok = _collector_may_import(target) if mine == "C" else _lower_or_equal(theirs, mine)
        if ok:
            continue
        if (module, target) in EXCEPTIONS:
            used.add((module, target))
            continue
        bad.append(f"{where}: {module} (layer {mine}) imports {target} (layer {theirs})")
    return bad, used


def _edges() -> list[tuple[str, str, str]]:
    """``(importer, imported, "path:line")`` for every import of every module, once each."""
    return sorted(
        {
            (module, target, f"{path.relative_to(ROOT)}:{line}")
            for module, path in MODULES.items()
            for target, line in imports_of(module)
        }
    )


def test_imports_resolve() -> None:
    missing = [f"{w}: no module {t}" for _, t, w in _edges() if t not in MODULES]
    assert not missing, "\n".join(missing)


def test_imports_point_down() -> None:
    bad, used = upward(e for e in _edges() if e[1] in MODULES)
    assert not bad, "imports that point up:\n" + "\n".join(bad)
    stale = set(EXCEPTIONS) - used
    assert not stale, f"EXCEPTIONS no longer needed (remove them): {sorted(stale)}"


def test_an_upward_import_is_named() -> None:
    """The check can fail, and says which import, from where to where."""
    bad, _ = upward(
        [
            ("argus.detectors.l1", "argus.streams.app", "argus/detectors/l1.py:7"),
            ("argus.summaries.kde", "argus.schemas.codec", "ok"),
            ("argus.collectors.runtime", "argus.summaries.kde", "argus/collectors/runtime.py:9"),
            ("argus.streams.roles.l3", "argus.streams.windows", "ok"),
            ("argus.schemas.codec", "argus.collectors.producer", "argus/schemas/codec.py:3"),
        ]
    )
    assert bad == [
        "argus/detectors/l1.py:7: argus.detectors.l1 (layer 3) imports argus.streams.app (layer 5)",
        "argus/collectors/runtime.py:9: argus.collectors.runtime (layer C) imports "
        "argus.summaries.kde (layer 2)",
        "argus/schemas/codec.py:3: argus.schemas.codec (layer 1) imports "
        "argus.collectors.producer (layer C)",
    ]


def test_collectors_pull_in_nothing_above_their_layer() -> None:
    """What a collector loads, transitively, is allowed to collectors.

    Parent packages that Python runs on the way (``argus.kafka`` for ``argus.kafka.security``)
    are followed too: what they import counts, though they may sit in another layer.
    """
    bad: list[str] = []
    for start in (m for m in MODULES if layer_of(m) == "C"):
        seen = {start}
        stack = [(start, [start])]
        while stack:
            module, chain = stack.pop()
            for target, _ in imports_of(module):
                if (module, target) in EXCEPTIONS:
                    continue
                for dep in _with_parents(target):
                    if dep in seen or dep not in MODULES:
                        continue
                    seen.add(dep)
                    if dep == target and not _collector_may_import(dep):
                        bad.append(" -> ".join([*chain, dep]))
                        continue
                    stack.append((dep, [*chain, dep]))
    assert not bad, "collectors pull in:\n" + "\n".join(sorted(set(bad)))


def test_layer_table() -> None:
    assert layer_of("argus.detectors.l1") == 3
    assert layer_of("argus.streams.app") == 5
    assert layer_of("argus.streams.roles.steps") == 4
    assert layer_of("argus.errors") == 0 and layer_of("argus.schemas.codec") == 1
    with pytest.raises(KeyError):
        layer_of("argus.newpackage.module")  # the package root is no prefix for the rest
    assert not _collector_may_import("argus.detectors.l2")
    assert _collector_may_import("argus.routing")
    assert _collector_may_import("argus.topics") and _collector_may_import("argus.config")
    assert list(_with_parents("argus.kafka.security")) == [
        "argus",
        "argus.kafka",
        "argus.kafka.security",
    ]


def test_package_root_imports_nothing() -> None:
    """``argus/__init__.py`` is layer 0 because it only holds ``__version__``."""
    assert list(imports_of("argus")) == []


def test_packages_above_their_modules_import_nothing() -> None:
    """``argus/streams/__init__.py`` (layer 5) runs whenever a role (layer 4) is imported,
    so a package whose modules sit lower than itself must import nothing."""
    bad: set[str] = set()
    for module in MODULES:
        for pkg in list(_with_parents(module))[:-1]:
            if pkg not in MODULES or layer_of(pkg) == layer_of(module):
                continue
            for target, _ in imports_of(pkg):
                if _lower_or_equal(layer_of(target), layer_of(module)):
                    continue
                bad.add(f"{MODULES[pkg].relative_to(ROOT)} imports {target}, run for {module}")
    assert not bad, "\n".join(sorted(bad))
