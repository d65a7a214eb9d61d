"""The fictional project the synthetic sessions work on, and the tool outputs it produces.

`VirtualRepo` is a small seeded Python code base ("ledgerline", a payments-settlement service):
real-looking modules and tests generated from a vocabulary, so that a session's file reads, greps,
edits and test runs are mutually consistent (a grep finds the lines a read shows, an edit changes
what the next read returns, a traceback quotes the line it points at). It also renders the shapes of
output an agent sees: numbered file reads, `rg -n` hits, pytest runs (passing, or failing with a
traceback), service logs of any size, `git status`, and Codex-style shell envelopes.

Everything is a pure function of the `random.Random` passed in, so a seed reproduces a session.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

PROJECT = "ledgerline"
ROOT = f"/home/dev/{PROJECT}"
#: a line that defines a function, its name the group
DEFINED = re.compile(r"def (\w+)\(")

VERBS = (
    "load", "parse", "validate", "apply", "compute", "build", "merge", "flush", "reconcile", "resolve",
    "fetch", "emit", "normalize", "split", "schedule", "export", "render", "lookup", "record", "refresh",
)
NOUNS = (
    "batch", "ledger_entry", "fee", "payout", "window", "tenant", "cursor", "snapshot", "invoice",
    "currency", "checkpoint", "statement", "journal", "account", "transfer", "refund", "rate", "hold",
)
ATTRS = ("amount_cents", "currency", "tenant_id", "created_at", "status", "entries", "reference", "posted_at", "meta")
TYPES = ("int", "str", "Decimal", "list[dict]", "dict[str, Any]", "bool", "datetime", "Batch", "LedgerEntry")
MESSAGES = (
    "batch is already settled", "currency mismatch", "window must be positive", "unknown tenant",
    "cursor went backwards", "entry has no reference", "refund exceeds original amount",
)

#: Module layout: path -> planted function names it must define (besides generated ones).
MODULES: dict[str, tuple[str, ...]] = {
    "ledger/api.py": ("create_settlement", "preview_settlement"),
    "ledger/models.py": (),
    "ledger/settlement.py": ("apply_fees", "settle_batch_entries"),
    "ledger/retry.py": ("compute_delay", "call_with_retry"),
    "ledger/cli.py": ("settle_batch", "export_command"),
    "ledger/storage/sqlite_store.py": ("open_store", "write_entries"),
    "ledger/storage/cache.py": ("cached_rates",),
    "ledger/sync/worker.py": ("run_worker", "drain_queue"),
    "ledger/sync/scheduler.py": ("next_run_at",),
    "ledger/reports/export.py": ("export_csv",),
    "ledger/vendor/iso4217.py": ("currency_exponent",),
}


def _name(rng: random.Random) -> str:
    return f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"


#: Statement templates of generated function bodies (lines relative to the body's indent).
STATEMENTS = (
    'if {arg} is None:\n    raise ValueError("{message}")',
    "{local}s = []\nfor item in {arg}.entries:\n    if item.{attr} is not None:\n        {local}s.append(item.{attr})",
    'logger.debug("{name}: %s=%r", "{attr}", {arg})',
    "{local} = {name}({arg}, {attr}={number})",
    "try:\n    {local} = {arg}.{attr}\nexcept AttributeError:\n    {local} = {fallback}",
    'total = sum(e.amount_cents for e in {arg}.entries if e.status == "{status}")',
    "# {Message}: keep the old behaviour for tenants on plan {plan}.",
    'with self._lock if hasattr(self, "_lock") else nullcontext():\n    {arg}.{attr} = {local}_default()',
    'assert {arg} is not None, "{message}"',
)


def _statement(rng: random.Random, args: list[str], indent: str) -> list[str]:
    message = rng.choice(MESSAGES)
    values = {
        "arg": rng.choice(args) if args else "self",
        "attr": rng.choice(ATTRS),
        "local": rng.choice(NOUNS),
        "message": message,
        "Message": message.capitalize(),
        "name": _name(rng),
        "number": rng.randint(1, 500),
        "fallback": rng.choice(("None", "0", "Decimal(0)", "{}")),
        "status": rng.choice(("posted", "held", "pending")),
        "plan": rng.choice("ABC"),
    }
    return [indent + line for line in rng.choice(STATEMENTS).format(**values).splitlines()]


def _function(rng: random.Random, name: str, indent: str = "", method: bool = False) -> list[str]:
    args = rng.sample(NOUNS, rng.randint(1, 3))
    params = (["self"] if method else []) + [f"{a}: {rng.choice(TYPES)}" for a in args]
    lines = [f"{indent}def {name}({', '.join(params)}) -> {rng.choice(TYPES)}:"]
    lines.append(f'{indent}    """{rng.choice(VERBS).capitalize()} the {rng.choice(NOUNS).replace("_", " ")} for {name.replace("_", " ")}."""')
    for _ in range(rng.randint(2, 7)):
        lines.extend(_statement(rng, args, indent + "    "))
    lines.append(f"{indent}    return {rng.choice(args)}")
    return lines


def python_module(rng: random.Random, path: str, planted: tuple[str, ...]) -> list[str]:
    """A plausible Python module defining `planted` plus a few generated functions and a class."""
    lines = [
        f'"""{path.rsplit("/", 1)[-1][:-3].replace("_", " ").capitalize()}: {rng.choice(VERBS)} and {rng.choice(VERBS)} {rng.choice(NOUNS).replace("_", " ")}s."""',
        "",
        "from __future__ import annotations",
        "",
        "import logging",
        "from contextlib import nullcontext",
        "from datetime import datetime",
        "from decimal import Decimal",
        "from typing import Any",
        "",
        "from ledger.models import Batch, LedgerEntry",
        "",
        "logger = logging.getLogger(__name__)",
        f"{rng.choice(NOUNS).upper()}_LIMIT = {rng.randint(2, 90)}",
        "",
    ]
    names = list(planted) + [_name(rng) for _ in range(rng.randint(3, 8))]
    rng.shuffle(names)
    for name in dict.fromkeys(names):
        lines.extend(["", *_function(rng, name)])
        lines.append("")
    cls = "".join(p.capitalize() for p in rng.choice(NOUNS).split("_")) + rng.choice(("Store", "Client", "Planner", "Service"))
    lines.extend(["", f"class {cls}:", f'    """{rng.choice(VERBS).capitalize()}s {rng.choice(NOUNS).replace("_", " ")}s for one tenant."""', ""])
    lines.extend(["    def __init__(self, tenant_id: str) -> None:", "        self.tenant_id = tenant_id", "        self._cache: dict[str, Any] = {}", ""])
    for _ in range(rng.randint(2, 4)):
        lines.extend([*_function(rng, _name(rng), indent="    ", method=True), ""])
    return lines


def test_file(rng: random.Random, target: str, functions: list[str]) -> list[str]:
    module = target[:-3].replace("/", ".")
    lines = [f'"""Tests for {module}."""', "", "import pytest", "", f"from {module} import {', '.join(sorted(functions))}", ""]
    for fn in functions:
        for case in rng.sample(("basic", "empty", "rounding", "currency", "tenant_rate", "retries", "idempotent"), 2):
            lines.extend(["", f"def test_{fn}_{case}(make_batch):"])
            lines.append(f'    batch = make_batch(tenant="{rng.choice(("acme", "globex", "initech", "umbrella"))}")')
            lines.append(f"    result = {fn}(batch)")
            lines.append("    assert result is not None")
            lines.append(f"    assert result.{rng.choice(ATTRS)} == {rng.randint(0, 999)}")
    return lines


@dataclass
class VirtualRepo:
    """The files of the project, as lists of lines, with the operations tools perform on them."""

    files: dict[str, list[str]] = field(default_factory=dict)
    edits: dict[str, int] = field(default_factory=dict)  # patches applied per path

    @classmethod
    def generate(cls, rng: random.Random, line_length: int = 88) -> VirtualRepo:
        repo = cls()
        for path, planted in MODULES.items():
            repo.files[path] = python_module(rng, path, planted)
        for path in list(MODULES):
            if "/vendor/" in path:
                continue
            names = repo.functions(path)[:4]
            test_path = "tests/test_" + path.rsplit("/", 1)[-1]
            repo.files[test_path] = test_file(rng, path, names)
        repo.files["pyproject.toml"] = [
            "[project]", f'name = "{PROJECT}"', 'version = "0.9.3"', 'requires-python = ">=3.11"',
            'dependencies = ["httpx>=0.27", "sqlalchemy>=2.0", "click>=8.1"]', "", "[tool.ruff]", f"line-length = {line_length}",
        ]
        return repo

    # ------------------------------------------------------------- queries
    def paths(self, *, tests: bool | None = None) -> list[str]:
        return [p for p in self.files if p.endswith(".py") and (tests is None or p.startswith("tests/") == tests)]

    def functions(self, path: str) -> list[str]:
        return [m.group(1) for line in self.files[path] if line.startswith("def ") and (m := DEFINED.match(line))]

    def text(self, path: str) -> str:
        return "\n".join(self.files[path])

    def numbered(self, path: str, start: int = 1, limit: int | None = None) -> str:
        lines = self.files[path][start - 1 : (start - 1 + limit) if limit else None]
        return "\n".join(f"{n:>5}\t{line}" for n, line in enumerate(lines, start=start))

    def definition(self, path: str, name: str) -> int:
        """1-based line number of `def name(` in `path`."""
        regex, head = re.compile(rf"\s*def {re.escape(name)}\("), f"def {name}("
        for n, line in enumerate(self.files[path], start=1):
            if head in line and regex.match(line):
                return n
        raise KeyError(f"{path} defines no {name}")

    def grep(self, pattern: str, limit: int = 60) -> str:
        regex, holds = re.compile(pattern), _holder(pattern)
        hits = [
            f"{path}:{n}:{line}"
            for path, lines in self.files.items() if holds(lines)
            for n, line in enumerate(lines, start=1)
            if regex.search(line)
        ]
        return "\n".join(hits[:limit])

    # ------------------------------------------------------------- edits
    def patch(self, rng: random.Random, path: str, note: str) -> str:
        """Change one statement of `path` (in place) and return the apply_patch text of the change."""
        lines = self.files[path]
        candidates = [n for n, line in enumerate(lines) if line.startswith("    ") and not line.strip().startswith(('"""', "def ", "#"))]
        index = rng.choice(candidates) if candidates else len(lines) - 1
        old = lines[index]
        indent = old[: len(old) - len(old.lstrip())]
        new = [f"{indent}# {note}", old.rstrip() + ("" if old.rstrip().endswith(":") else f"  # {rng.choice(NOUNS)} checked")]
        lines[index : index + 1] = new
        self.edits[path] = self.edits.get(path, 0) + 1
        context = lines[max(0, index - 2) : index]
        body = "\n".join(
            [*(f" {c}" for c in context), f"-{old}", *(f"+{n}" for n in new)]
        )
        return f"*** Begin Patch\n*** Update File: {path}\n@@\n{body}\n*** End Patch"

    def rewrite(self, rng: random.Random, path: str, name: str) -> str:
        """Replace the body of function `name` in `path` with a new one (in place) and return the
        apply_patch text of the change: a whole-function hunk, as recorded edits carry."""
        lines = self.files[path]
        start = self.definition(path, name) - 1
        end = next((n for n in range(start + 1, len(lines)) if not lines[n].strip()), len(lines))
        old = lines[start:end]
        indent = old[0][: len(old[0]) - len(old[0].lstrip())]
        new = _function(rng, name, indent=indent)
        for _ in range(rng.randint(1, 5)):  # a longer body: the change usually adds handling
            new[-1:-1] = _statement(rng, rng.sample(NOUNS, 2), indent + "    ")
        lines[start:end] = new
        self.edits[path] = self.edits.get(path, 0) + 1
        context = lines[max(0, start - 3) : start]
        body = "\n".join([*(f" {c}" for c in context), *(f"-{o}" for o in old), *(f"+{n}" for n in new)])
        return f"*** Begin Patch\n*** Update File: {path}\n@@ def {name}(\n{body}\n*** End Patch"

    def add_file(self, rng: random.Random, path: str, tested: str = "") -> str:
        """Create `path` (tests of module `tested` when given, else a new module) and return the
        apply_patch text that writes it whole."""
        if tested:
            functions = self.functions(tested)
            self.files[path] = test_file(rng, tested, rng.sample(functions, min(3, len(functions))))
        else:
            self.files[path] = python_module(rng, path, ())
        self.edits[path] = self.edits.get(path, 0) + 1
        body = "\n".join(f"+{line}" for line in self.files[path])
        return f"*** Begin Patch\n*** Add File: {path}\n{body}\n*** End Patch"

    def listing(self, folder: str) -> str:
        """`ls folder`: the names directly inside it."""
        prefix = folder.rstrip("/") + "/"
        names = {p[len(prefix) :].split("/", 1)[0] + ("/" if "/" in p[len(prefix) :] else "") for p in self.files if p.startswith(prefix)}
        return "\n".join(sorted(names))

    def files_matching(self, pattern: str) -> str:
        """`rg -l pattern`: the paths holding a match."""
        regex, holds = re.compile(pattern), _holder(pattern)
        return "\n".join(p for p, lines in self.files.items() if holds(lines) and any(regex.search(line) for line in lines))


def _holder(pattern: str) -> Callable[[list[str]], bool]:
    """Whether some line of a file may match `pattern`, told cheaply: a pattern that is a word, whole (`\\bword\\b`) or
    not, matches only lines holding the word, so a file whose text lacks it has none; any other pattern may match."""
    word = pattern.removeprefix(r"\b").removesuffix(r"\b")
    if not re.fullmatch(r"\w+", word):
        return lambda lines: True
    return lambda lines: word in "\n".join(lines)


# ------------------------------------------------------------------- tool output shapes
def shell_output(output: str, exit_code: int = 0, seconds: float = 0.4) -> str:
    """Codex's envelope around a shell command's output."""
    return f"Exit code: {exit_code}\nWall time: {seconds:.1f} seconds\nOutput:\n{output}"


@dataclass(frozen=True)
class Failure:
    """A failing test, the frame it fails in and the exact error line pytest prints."""

    test_path: str
    test_name: str
    source_path: str
    function: str
    error: str


def pytest_run(rng: random.Random, repo: VirtualRepo, paths: list[str], failures: list[Failure]) -> tuple[str, int]:
    """(pytest -q output, exit code) for running `paths` with the given failures."""
    collected = {p: 6 + len(repo.functions(p)) * 2 for p in paths}
    total = sum(collected.values())
    lines = [
        "=" * 29 + " test session starts " + "=" * 30,
        "platform linux -- Python 3.11.9, pytest-8.3.3, pluggy-1.5.0",
        f"rootdir: {ROOT}",
        "configfile: pyproject.toml",
        "plugins: anyio-4.4.0, cov-5.0.0",
        f"collected {total} items",
        "",
    ]
    done = 0
    failing = {f.test_path: f for f in failures}
    for path, count in collected.items():
        done += count
        marks = ["."] * count
        if path in failing:
            marks[rng.randrange(count)] = "F"
        lines.append(f"{path} {''.join(marks)}".ljust(73) + f"[{100 * done // max(total, 1):>3}%]")
    if failures:
        lines.extend(["", "=" * 35 + " FAILURES " + "=" * 35])
        for f in failures:
            line_no = repo.definition(f.source_path, f.function)
            body = repo.files[f.source_path][line_no - 1 : line_no + 4]
            while len(body) > 1 and body[-1].strip().startswith(("#", '"""')):
                body.pop()  # pytest points at the statement that raised, never at a comment
            error_type = f.error.split(":", 1)[0]
            lines.extend([
                f"{'_' * 20} {f.test_name} {'_' * 20}",
                "",
                f"    def {f.test_name}(make_batch):",
                '        batch = make_batch(tenant="acme")',
                f">       result = {f.function}(batch)",
                "",
                f"{f.test_path}:{rng.randint(8, 60)}: ",
                "_ " * 39,
                "",
                *(f"    {b}" for b in body[:-1]),
                f">   {body[-1]}" if body else ">",
                f"E       {f.error}",
                "",
                f"{f.source_path}:{line_no + len(body) - 1}: {error_type}",
            ])
        lines.append("=" * 27 + " short test summary info " + "=" * 28)
        lines.extend(f"FAILED {f.test_path}::{f.test_name} - {f.error}" for f in failures)
    passed = total - len(failures)
    status = f"{len(failures)} failed, {passed} passed" if failures else f"{passed} passed"
    lines.append(f"{'=' * 20} {status} in {rng.uniform(0.4, 9.0):.2f}s {'=' * 20}")
    return "\n".join(lines), 1 if failures else 0


LOG_EVENTS = (
    "settlement batch {b} tenant={t} entries={n} status=posted",
    "fetched {n} rates for tenant={t} in {ms}ms",
    "retrying bank call attempt={a} delay={ms}ms tenant={t}",
    "checkpoint advanced cursor={c} tenant={t}",
    "queue depth={n} lag_ms={ms}",
    "export finished rows={n} tenant={t} duration_ms={ms}",
    "webhook delivered id=wh_{c} status=200 tenant={t}",
)


def service_log(rng: random.Random, lines: int, planted: str | None = None, start_hour: int = 3) -> str:
    """`lines` lines of a worker log; `planted` (one line) replaces a line in the second half."""
    at = rng.randrange(lines // 2, lines) if planted and lines else -1
    out = []
    for n in range(lines):
        seconds = n * 3 + rng.randrange(3)
        stamp = f"2026-03-01T{start_hour + seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{rng.randrange(1000):03d}Z"
        if n == at:
            out.append(f"{stamp} {planted}")
            continue
        level = rng.choices(("INFO", "DEBUG", "WARNING", "ERROR"), (60, 30, 8, 2))[0]
        event = rng.choice(LOG_EVENTS).format(
            b=f"b{rng.randrange(10**5):05d}", t=rng.choice(("acme", "globex", "initech", "umbrella", "hooli")),
            n=rng.randint(1, 4000), ms=rng.randint(2, 9000), a=rng.randint(1, 5), c=f"{rng.randrange(16**6):06x}",
        )
        out.append(f"{stamp} {level:<7} ledger.sync.worker {event}")
    return "\n".join(out)


def git_status(repo: VirtualRepo) -> str:
    """`git status --short && git diff --stat` after the patches applied so far."""
    if not repo.edits:
        return ""
    stat = [f" {path} | {2 * n} {'+' * n}{'-' * (n // 2)}" for path, n in repo.edits.items()]
    inserted = sum(repo.edits.values())
    summary = f" {len(repo.edits)} files changed, {2 * inserted} insertions(+), {inserted} deletions(-)"
    return "\n".join([*(f" M {path}" for path in repo.edits), *stat, summary])


def directory_listing(repo: VirtualRepo) -> str:
    return "\n".join(sorted(repo.files))
