"""Summary-prompt templates: jinja2 files under `strategies/prompts/`, overridable per run.

`--prompt NAME=FILE` replaces the template `NAME` (e.g. `codex_summary.j2`) for a run; the sha256
of every template a run renders goes into its manifest, so `bench gate` can tell prompts apart.
"""

from __future__ import annotations

import hashlib
import importlib.resources
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from compaction_bench.errors import BenchError


class TemplateError(BenchError, LookupError):
    """A missing template or an override file that does not exist."""


def default_prompt_dir() -> Path:
    return Path(str(importlib.resources.files("compaction_bench.strategies") / "prompts"))


class PromptSet:
    """Templates by name, with per-run overrides, remembering the hash of each one used."""

    def __init__(self, overrides: Mapping[str, str | Path] | None = None, directory: Path | None = None) -> None:
        self.directory = directory or default_prompt_dir()
        self.overrides = {name: Path(path) for name, path in (overrides or {}).items()}
        for name, path in self.overrides.items():
            if not path.is_file():
                raise TemplateError(f"--prompt {name}={path}: no such file")
        self.hashes: dict[str, str] = {}
        self._env = jinja2.Environment(
            undefined=jinja2.StrictUndefined, keep_trailing_newline=False, trim_blocks=True, lstrip_blocks=True
        )
        self._compiled: dict[str, jinja2.Template] = {}

    def source(self, name: str) -> str:
        path = self.overrides.get(name) or self.directory / name
        if not path.is_file():
            raise TemplateError(f"prompt template {name!r} not found in {self.directory}")
        return path.read_text(encoding="utf-8")

    def render(self, name: str, **variables: Any) -> str:
        template = self._compiled.get(name)
        if template is None:
            text = self.source(name)
            self.hashes[name] = hashlib.sha256(text.encode("utf-8")).hexdigest()
            template = self._compiled[name] = self._env.from_string(text)
        return template.render(**variables).strip()
