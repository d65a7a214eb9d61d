"""Registries of strategies and importers, filled from entry points.

Strategies register under the entry-point group `compaction_bench.strategies` and importers under
`compaction_bench.importers`, so a third-party package adds either without touching this
repository. `--strategy path/to/file.py:ClassName` loads a strategy class ad hoc.
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

STRATEGY_GROUP = "compaction_bench.strategies"
IMPORTER_GROUP = "compaction_bench.importers"


class RegistryError(LookupError):
    """An unknown or unloadable strategy or importer; the message lists what exists."""


_loaded: dict[str, dict[str, Any]] = {}
_broken: dict[str, dict[str, str]] = {}


def _load(group: str) -> None:
    """Load a group once; an entry point that fails to load is remembered, not fatal to the others."""
    if group in _loaded:
        return
    found: dict[str, Any] = {}
    broken: dict[str, str] = {}
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            found[ep.name] = ep.load()
        except Exception as exc:
            broken[ep.name] = f"{type(exc).__name__}: {exc}"
    _loaded[group], _broken[group] = found, broken


def _lookup(group: str, kind: str, name: str) -> Any:
    _load(group)
    if name in _loaded[group]:
        return _loaded[group][name]
    if name in _broken[group]:
        raise RegistryError(f"{kind} {name!r} is registered but failed to load: {_broken[group][name]}")
    raise RegistryError(f"unknown {kind} {name!r}; known: {', '.join(_loaded[group]) or '(none)'}")


def strategies() -> dict[str, Any]:
    """Strategy classes by id (those that loaded)."""
    _load(STRATEGY_GROUP)
    return dict(_loaded[STRATEGY_GROUP])


def importers() -> dict[str, Any]:
    """Importer classes by format name (those that loaded)."""
    _load(IMPORTER_GROUP)
    return dict(_loaded[IMPORTER_GROUP])


def broken() -> dict[str, dict[str, str]]:
    """Entry points that failed to load, by group, with the reason."""
    _load(STRATEGY_GROUP)
    _load(IMPORTER_GROUP)
    return {group: dict(items) for group, items in _broken.items() if items}


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
        if not cls.__dict__.get("name"):  # an inherited id would pass it off as its parent
            cls.name = name.rpartition(":")[2]
        return cls
    return _lookup(STRATEGY_GROUP, "strategy", name)
