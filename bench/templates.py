"""Summary-prompt templates: jinja2 files under `strategies/prompts/`, overridable per run.

`--prompt NAME=FILE` replaces the template `NAME` (e.g. `codex_summary.j2`) for a run; the sha256
of every template a run renders goes into its manifest, so `bench gate` can tell prompts apart.
A strategy renders a template with the variables its stock template uses (no more, no fewer), so
an override may use those variables and no other: one that uses another is refused when the set is
made, naming its file, line and variable, instead of failing at its first render (or never, when
the strategy never compacts).
"""

from __future__ import annotations

import hashlib
import importlib.resources
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.sandbox import SandboxedEnvironment

from compaction_bench.errors import BenchError, no_file


class TemplateError(BenchError, LookupError):
    """A missing template, an override file that does not exist, or a template that does not parse or render."""


def default_prompt_dir() -> Path:
    return Path(str(importlib.resources.files("compaction_bench.strategies") / "prompts"))


def shipped_templates() -> list[str]:
    """The names of the prompt templates the package ships, sorted: what `--prompt NAME=FILE` may replace and a
    template option may name."""
    return sorted(p.name for p in default_prompt_dir().glob("*.j2"))


class PromptSet:
    """Templates by name, with per-run overrides, remembering the hash of each one used.

    A user's override is read and parsed when the set is made, so a broken one fails before any
    replay, naming its file and line, not at the first compaction. The directory's own templates
    are parsed when first rendered (a replay renders one or two of them; parsing all of them was
    0.4 tokenization floors of a fresh process's replay of the Codex corpus file). `parse_all`
    parses every one of them now.
    """

    def __init__(self, overrides: Mapping[str, str | Path] | None = None, directory: Path | None = None) -> None:
        self.directory = directory or default_prompt_dir()
        self.overrides = {name: Path(path) for name, path in (overrides or {}).items()}
        for name, path in self.overrides.items():
            if not path.is_file():
                raise TemplateError(f"--prompt {name}={path}: {no_file(path)}")
            if not (self.directory / name).is_file():
                known = ", ".join(sorted(p.name for p in self.directory.glob("*.j2")))
                raise TemplateError(f"--prompt {name}={path}: there is no template {name!r} to replace; known: {known}")
        self.hashes: dict[str, str] = {}
        # Sandboxed: a user's template reaches no Python internals, and `range` stops at 100,000 items (an override
        # looping over range(10**12) hung the run).
        self._env = SandboxedEnvironment(
            undefined=jinja2.StrictUndefined, keep_trailing_newline=False, trim_blocks=True, lstrip_blocks=True
        )
        self._compiled: dict[str, jinja2.Template] = {}
        self._texts: dict[str, str] = {}
        for name in sorted(self.overrides):
            self._compile(name)
            self._check_variables(name)

    def parse_all(self) -> None:
        """Parse every template of the set now (`TemplateError` for the first that does not parse)."""
        for name in sorted({p.name for p in self.directory.glob("*.j2")} | set(self.overrides)):
            self._compile(name)

    def text_hashes(self) -> dict[str, str]:
        """The sha256 of every template of the set (overrides applied), rendered or not: what a run records so that a
        template only another run rendered can be compared with its text here (`reports.gate.comparability`)."""
        names = sorted({p.name for p in self.directory.glob("*.j2")} | set(self.overrides))
        return {name: hashlib.sha256(self.source(name).encode("utf-8")).hexdigest() for name in names}

    def path(self, name: str) -> Path:
        return self.overrides.get(name) or self.directory / name

    def _check_variables(self, name: str) -> None:
        """Refuse an override that reads a variable its stock template does not (the strategies pass only those)."""
        globals_ = set(self._env.globals)
        passed = meta.find_undeclared_variables(self._env.parse(self._read(name, self.directory / name))) - globals_
        tree = self._env.parse(self._texts[name])
        extra = meta.find_undeclared_variables(tree) - globals_ - passed
        if not extra:
            return
        line, variable = min((node.lineno, node.name) for node in tree.find_all(nodes.Name) if node.name in extra and node.ctx == "load")
        given = ", ".join(sorted(passed)) or "none"
        raise TemplateError(
            f"{self.path(name)}:{line}: prompt template {name!r} uses the undefined variable {variable!r} "
            f"(the strategies render {name} with these variables: {given})"
        )

    def source(self, name: str) -> str:
        return self._read(name, self.path(name))

    def _read(self, name: str, path: Path) -> str:
        if not path.is_file():
            raise TemplateError(f"prompt template {name!r} not found in {self.directory}")
        try:
            return path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise TemplateError(f"{path}: prompt template {name!r} is not UTF-8 text (byte {exc.start})") from None
        except OSError as exc:
            raise TemplateError(f"{path}: cannot read prompt template {name!r} ({exc.strerror or exc})") from None

    def _compile(self, name: str) -> jinja2.Template:
        template = self._compiled.get(name)
        if template is None:
            text = self.source(name)
            try:
                template = self._env.from_string(text)
            except jinja2.TemplateSyntaxError as exc:
                raise TemplateError(f"{self.path(name)}:{exc.lineno}: prompt template {name!r} does not parse: {exc.message}") from None
            except (RecursionError, SyntaxError, MemoryError):  # Jinja's parser, or Python compiling what it made of the text
                raise TemplateError(f"{self.path(name)}: prompt template {name!r} does not parse: nested too deeply") from None
            self._texts[name] = text
            self._compiled[name] = template
        return template

    def render(self, name: str, **variables: Any) -> str:
        template = self._compile(name)
        self.hashes[name] = hashlib.sha256(self._texts[name].encode("utf-8")).hexdigest()
        try:
            return template.render(**variables).strip()
        except (jinja2.TemplateError, RecursionError, OverflowError) as exc:  # a macro calling itself without end, a range too big
            raise TemplateError(f"{self.path(name)}: prompt template {name!r} failed to render: {type(exc).__name__}: {exc}") from None
