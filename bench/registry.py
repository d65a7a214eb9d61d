"""Registries of strategies and importers: built-ins declared in code, plug-ins from entry points.

Built-ins come from the `BUILTIN` tables of `compaction_bench.strategies` and
`compaction_bench.scenarios` (id -> "module:Class"), so a source checkout with missing or stale
install metadata still has all of them. Third-party packages add strategies under the entry-point
group `compaction_bench.strategies` and importers under `compaction_bench.importers`. A plug-in id
that clashes with a built-in or with another plug-in is served as `<distribution>/<id>`; asking for
the bare id of two plug-ins is an error naming both. Every registered class must subclass
`Strategy` (or `Importer`); classes are imported on first use, and one that fails to load is
reported by name without hiding the others. `--strategy path/to/file.py:ClassName` loads a
strategy class ad hoc.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from compaction_bench.errors import BenchError, did_you_mean

STRATEGY_GROUP = "compaction_bench.strategies"
IMPORTER_GROUP = "compaction_bench.importers"
_BUILTIN_PACKAGES = {STRATEGY_GROUP: "compaction_bench.strategies", IMPORTER_GROUP: "compaction_bench.scenarios"}


class RegistryError(BenchError, LookupError):
    """An unknown, ambiguous or unloadable strategy or importer; the message lists what exists."""


@dataclass(frozen=True)
class Entry:
    """One registered id: where its class lives and who provides it."""

    id: str
    target: str  # "module:Class"
    source: str  # "built-in" or the distribution that declared the entry point


_entries: dict[str, dict[str, Entry]] = {}
_ambiguous: dict[str, dict[str, list[Entry]]] = {}
_classes: dict[tuple[str, str], Any] = {}
_broken: dict[str, dict[str, str]] = {}


def _base_class(group: str) -> type:
    if group == STRATEGY_GROUP:
        from compaction_bench.strategy import Strategy

        return Strategy
    from compaction_bench.importing import Importer

    return Importer


def _scan(group: str) -> None:
    """Build the id table of a group once: built-ins first, then entry points."""
    if group in _entries:
        return
    package = _BUILTIN_PACKAGES[group]
    table: dict[str, Entry] = {
        name: Entry(name, f"{package}.{target}", "built-in")
        for name, target in importlib.import_module(package).BUILTIN.items()
    }
    plugins: dict[str, list[Entry]] = {}
    for ep in entry_points(group=group):
        dist = ep.dist.name if ep.dist is not None else "unknown-distribution"
        if ep.value.startswith(package + "."):
            continue  # an old install of this very project declaring the built-ins
        plugins.setdefault(ep.name, []).append(Entry(ep.name, ep.value, dist))
    ambiguous: dict[str, list[Entry]] = {}
    for name, found in sorted(plugins.items()):
        if len(found) == 1 and name not in table:
            table[name] = found[0]
            continue
        if len(found) > 1:
            ambiguous[name] = found
        for entry in found:
            table[f"{entry.source}/{name}"] = entry
    _entries[group], _ambiguous[group], _broken[group] = table, ambiguous, {}


def _load_class(group: str, entry: Entry) -> Any:
    key = (group, entry.id if entry.source in ("built-in", "this process") else f"{entry.source}/{entry.id}")
    if key in _classes:
        return _classes[key]
    module_name, _, attr = entry.target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        _broken[group][entry.id] = reason
        raise RegistryError(f"{entry.id!r} ({entry.source}, {entry.target}) failed to load: {reason}") from exc
    base = _base_class(group)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        _broken[group][entry.id] = f"{entry.target} is not a subclass of {base.__name__}"
        raise RegistryError(f"{entry.id!r} ({entry.source}, {entry.target}) is not a subclass of {base.__name__}")
    _classes[key] = cls
    return cls


def _lookup(group: str, kind: str, name: str) -> Any:
    _scan(group)
    if name in _entries[group]:
        return _load_class(group, _entries[group][name])
    if name in _ambiguous[group]:
        sources = " and ".join(f"{e.source} ({e.target})" for e in _ambiguous[group][name])
        choices = ", ".join(f"{e.source}/{name}" for e in _ambiguous[group][name])
        raise RegistryError(f"{kind} {name!r} is provided by {sources}; name one of: {choices}")
    raise RegistryError(f"unknown {kind} {name!r}{did_you_mean(name, _entries[group])}; known: {', '.join(_entries[group]) or '(none)'}")


def _all(group: str) -> dict[str, Any]:
    _scan(group)
    out = {}
    for name, entry in _entries[group].items():
        try:
            out[name] = _load_class(group, entry)
        except RegistryError:
            continue  # listed by `broken()`
    return out


def strategy_ids(*, builtin_only: bool = False) -> list[str]:
    """Registered strategy ids, without importing any strategy."""
    _scan(STRATEGY_GROUP)
    return [n for n, e in _entries[STRATEGY_GROUP].items() if not builtin_only or e.source == "built-in"]


def strategies() -> dict[str, Any]:
    """Strategy classes by id (those that loaded)."""
    return _all(STRATEGY_GROUP)


def importers() -> dict[str, Any]:
    """Importer classes by format name (those that loaded)."""
    return _all(IMPORTER_GROUP)


def importer_class(name: str) -> Any:
    """An importer class by format name."""
    return _lookup(IMPORTER_GROUP, "format", name)


def broken() -> dict[str, dict[str, str]]:
    """Registered classes that failed to load, by group, with the reason."""
    _all(STRATEGY_GROUP)
    _all(IMPORTER_GROUP)
    return {group: dict(items) for group, items in _broken.items() if items}


def register_strategy(cls: Any) -> None:
    """Register a strategy class defined in this process (a notebook or a test) under its `name`."""
    from compaction_bench.strategy import Strategy

    if not (isinstance(cls, type) and issubclass(cls, Strategy)) or not cls.name:
        raise RegistryError(f"{cls!r} is not a named subclass of Strategy")
    _scan(STRATEGY_GROUP)
    existing = _entries[STRATEGY_GROUP].get(cls.name)
    if existing is not None and _classes.get((STRATEGY_GROUP, cls.name)) is not cls:
        raise RegistryError(f"strategy {cls.name!r} is already provided by {existing.source} ({existing.target})")
    _entries[STRATEGY_GROUP][cls.name] = Entry(cls.name, f"{cls.__module__}:{cls.__qualname__}", "this process")
    _classes[(STRATEGY_GROUP, cls.name)] = cls


def reset() -> None:
    """Forget what was scanned and loaded (tests that install or hide plug-ins call this)."""
    for table in (_entries, _ambiguous, _classes, _broken):
        table.clear()


def load_from_file(spec: str) -> Any:
    """Load `path/to/file.py:ClassName`."""
    path_text, _, name = spec.rpartition(":")
    path = Path(path_text)
    if not path_text or not name:
        raise RegistryError(f"{spec!r}: expected path/to/file.py:ClassName")
    if not path.is_file():
        raise RegistryError(f"{spec!r}: no such file {path}")
    module_name = f"_bench_adhoc_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise RegistryError(f"{spec!r}: cannot import {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        raise RegistryError(f"{spec!r}: importing {path} failed: {exc}") from exc
    try:
        return getattr(module, name)
    except AttributeError:
        raise RegistryError(f"{spec!r}: {path} defines no {name}") from None


def strategy_class(name: str) -> Any:
    """A strategy class by registered id or `file.py:Class`."""
    if ".py:" in name:
        cls = load_from_file(name)
        from compaction_bench.strategy import Strategy

        if not (isinstance(cls, type) and issubclass(cls, Strategy)):
            raise RegistryError(f"{name!r} is not a subclass of Strategy")
        if not cls.__dict__.get("name"):  # an inherited id would pass it off as its parent
            cls.name = name.rpartition(":")[2]
        return cls
    return _lookup(STRATEGY_GROUP, "strategy", name)
