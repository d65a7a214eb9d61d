"""Runs: the cells of scenario × strategy × profile × repeat, in parallel, into the run store.

`run()` resolves the scenarios (the embedded synthetic suite by default, or the user's transcript
files with probes from a file or mined), runs every unfinished cell (replay, then the metrics of
`compaction_bench.metrics.measure`) with a progress bar, and merges the per-cell tables into
`requests`, `compactions`, `probes` and `summary` parquet files plus `report.html`. Where cells
run (this process, worker processes, a Ray cluster) is `compaction_bench.executors`' job.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from compaction_bench.errors import BenchError
from compaction_bench.executors import EXECUTORS, execute
from compaction_bench.importing import load_transcripts
from compaction_bench.llm import DEFAULT_ANSWERER, DEFAULT_SUMMARIZER, LLMClient
from compaction_bench.probes import Probe, load_probes
from compaction_bench.profiles import DEFAULT_PROFILE, get_profile
from compaction_bench.registry import strategy_class, strategy_ids
from compaction_bench.replay import USAGE_MODES, replay
from compaction_bench.store import CellKey, RunStore, write_parquet
from compaction_bench.templates import PromptSet
from compaction_bench.transcript import Transcript


def default_strategies() -> tuple[str, ...]:
    """Every built-in strategy, in registry order (what `bench run` uses without `-s`)."""
    return tuple(strategy_ids(builtin_only=True))


class RunError(BenchError, RuntimeError):
    """A run that cannot start (bad configuration) or whose cells failed."""


@dataclass(frozen=True)
class Case:
    """One scenario of a run: a transcript and the probes asked about it."""

    name: str
    transcript: Transcript
    probes: tuple[Probe, ...] = ()


@dataclass
class RunConfig:
    strategies: tuple[str, ...]
    profiles: tuple[str, ...] = (DEFAULT_PROFILE,)
    summarizer: str = DEFAULT_SUMMARIZER
    answerer: str = DEFAULT_ANSWERER
    judge: str | None = None
    usage: str = "simulated"
    repeats: int = 1
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)
    probes: str | None = None
    seed: int = 0


def parse_option_flags(flags: Iterable[str]) -> dict[str, dict[str, str]]:
    """`strategy.key=value` flags → {strategy: {key: value}}."""
    out: dict[str, dict[str, str]] = {}
    for flag in flags:
        target, eq, value = flag.partition("=")
        strategy, dot, key = target.partition(".")
        if not eq or not dot or not strategy or not key:
            raise RunError(f"--option {flag!r}: expected STRATEGY.KEY=VALUE (e.g. pi.keep_recent_tokens=30000)")
        out.setdefault(strategy, {})[key] = value
    return out


def parse_prompt_flags(flags: Iterable[str]) -> dict[str, str]:
    out = {}
    for flag in flags:
        name, eq, path = flag.partition("=")
        if not eq or not name or not path:
            raise RunError(f"--prompt {flag!r}: expected TEMPLATE=FILE (e.g. codex_summary.j2=my_prompt.j2)")
        out[name] = path
    return out


def synthetic_cases(seed: int = 0) -> list[Case]:
    from compaction_bench.scenarios.synthetic import default_suite

    return [Case(s.name, s.transcript, tuple(s.probes)) for s in default_suite(seed)]


def file_cases(
    paths: Sequence[str | Path], probes: str | None, format: str = "auto", import_options: Mapping[str, Any] | None = None
) -> list[Case]:
    """Cases from transcript files; probes from a file, mined (`auto`), or none."""
    cases: list[Case] = []
    names: set[str] = set()
    given = load_probes(probes) if probes and probes != "auto" else None
    for path in paths:
        for transcript in load_transcripts(path, format=format, **dict(import_options or {})):
            name = transcript.id
            while name in names:
                name += "'"
            names.add(name)
            if given is not None:
                case_probes = tuple(given)
            elif probes == "auto":
                from compaction_bench.scenarios.mining import mine_probes

                case_probes = tuple(mine_probes(transcript))
            else:
                case_probes = ()
            cases.append(Case(name, transcript, case_probes))
    return cases


def strategy_variant(spec: str, options: Mapping[str, Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A strategy entry and its options: `ID` or `ID@KEY=VALUE[,KEY=VALUE…]` (a variant of ID).

    `--option ID.KEY=VALUE` applies to every variant of ID; a variant's own values win. Variants
    let one run compare a strategy with itself, e.g. `-s opencode-v1 -s opencode-v1@prune=true`.
    """
    name, at, assignments = spec.rpartition("@")
    if not at or "=" not in assignments:
        return spec, dict(options.get(spec, {}))
    own: dict[str, Any] = {}
    for assignment in assignments.split(","):
        key, eq, value = assignment.partition("=")
        if not eq or not key:
            raise RunError(f"--strategy {spec!r}: expected ID@KEY=VALUE[,KEY=VALUE…]")
        own[key.strip()] = value.strip()
    return name, {**options.get(name, {}), **own}


def validate(config: RunConfig) -> None:
    """Fail before any work on an unknown strategy, profile, option, usage mode or prompt file."""
    for spec in config.strategies:
        name, options = strategy_variant(spec, config.options)
        strategy_class(name).parse_options(options)
    unknown = sorted(set(config.options) - {strategy_variant(s, {})[0] for s in config.strategies})
    if unknown:
        raise RunError(f"--option names strategies that are not in this run: {', '.join(unknown)}")
    for profile in config.profiles:
        get_profile(profile)
    if config.usage not in USAGE_MODES:
        raise RunError(f"--usage {config.usage!r}: expected one of {', '.join(USAGE_MODES)}")
    if config.repeats < 1:
        raise RunError("--repeat must be at least 1")
    PromptSet(config.prompts)


def _run_cell(case: Case, key: CellKey, config: RunConfig) -> tuple[CellKey, dict[str, list[dict[str, Any]]], dict[str, str]]:
    from compaction_bench.metrics.measure import measure_cell

    name, options = strategy_variant(key.strategy, config.options)
    result = replay(
        case.transcript,
        name,
        profile=key.profile,
        summarizer=config.summarizer,
        options=options,
        usage=config.usage,
        prompts=config.prompts,
    )
    answerer = LLMClient(config.answerer) if config.answerer else None
    judge = LLMClient(config.judge) if config.judge else None
    tables = measure_cell(result, list(case.probes), answerer=answerer, judge=judge, repeat=key.repeat)
    return key, {"requests": tables.requests, "compactions": tables.compactions, "probes": tables.probes}, result.template_hashes


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).resolve().parent
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for package in ("compaction-bench", "litellm", "tiktoken", "pandas", "pyarrow", "datasets", "jinja2", "matplotlib"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


ProgressCallback = Callable[[CellKey, str], None]


def run(
    paths: Sequence[str | Path] = (),
    strategies: Sequence[str] = (),
    profiles: Sequence[str] = (DEFAULT_PROFILE,),
    *,
    out: str | Path = "runs",
    run_id: str | None = None,
    jobs: int = 0,
    executor: str = "local",
    address: str | None = None,
    resume: bool = False,
    summarizer: str = DEFAULT_SUMMARIZER,
    answerer: str = DEFAULT_ANSWERER,
    judge: str | None = None,
    usage: str = "simulated",
    repeats: int = 1,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    prompts: Mapping[str, str] | None = None,
    probes: str | None = None,
    format: str = "auto",
    import_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    cases: Sequence[Case] | None = None,
    report: bool = True,
    on_start: Callable[[int], None] | None = None,
    on_cell: ProgressCallback | None = None,
) -> Path:
    """Run a benchmark and return the run folder.

    With no `paths` and no `cases`, the embedded synthetic suite is the corpus. `probes` is a
    probe file, `"auto"` (mine them; the default for transcript files) or None.
    """
    config = RunConfig(
        strategies=tuple(dict.fromkeys(strategies)) or default_strategies(),
        profiles=tuple(profiles) or (DEFAULT_PROFILE,),
        summarizer=summarizer,
        answerer=answerer,
        judge=judge,
        usage=usage,
        repeats=repeats,
        options={k: dict(v) for k, v in (options or {}).items()},
        prompts=dict(prompts or {}),
        probes=probes,
        seed=seed,
    )
    validate(config)
    if executor not in EXECUTORS:
        raise RunError(f"--executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    if cases is None:
        cases = file_cases(paths, probes if probes is not None else "auto", format, import_options) if paths else synthetic_cases(seed)
    if not cases:
        raise RunError("no scenario to run")
    root = Path(out)
    if resume:
        if run_id is None:
            previous = sorted(p for p in root.glob("*") if (p / "manifest.json").is_file())
            if not previous:
                raise RunError(f"--resume: no earlier run in {root}")
            run_id = previous[-1].name
    run_id = run_id or new_run_id()
    store = RunStore(root / run_id)
    if store.manifest_path.exists() and not resume:
        raise RunError(f"{store.root} already holds a run; pass --resume to finish it or choose another --run-id")
    keys = [
        CellKey(case.name, strategy, profile, repeat)
        for case in cases
        for strategy in config.strategies
        for profile in config.profiles
        for repeat in range(config.repeats)
    ]
    by_name = {case.name: case for case in cases}
    manifest: dict[str, Any] = {
        "run_id": run_id,
        "created": datetime.now(UTC).isoformat(),
        "config": {**config.__dict__, "strategies": list(config.strategies), "profiles": list(config.profiles)},
        "scenarios": [
            {"name": c.name, "source": dict(c.transcript.source), "items": len(c.transcript.items), "probes": len(c.probes)}
            for c in cases
        ],
        "versions": _versions(),
        "git_revision": _git_revision(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "template_hashes": {},
        "cells": {"total": len(keys), "failed": []},
    }
    if resume and store.manifest_path.exists():
        manifest["template_hashes"] = store.read_manifest().get("template_hashes", {})
    store.write_manifest(manifest)
    todo = [k for k in keys if not (resume and store.is_done(k))]
    if on_start:
        on_start(len(todo))
    failures: list[dict[str, str]] = []
    started = time.monotonic()

    def finished(key: CellKey, tables: dict[str, list[dict[str, Any]]], hashes: dict[str, str]) -> None:
        store.write_cell(key, tables)
        manifest["template_hashes"].update(hashes)
        if on_cell:
            on_cell(key, "done")

    def failed(key: CellKey, exc: BaseException) -> None:
        failures.append({"cell": key.slug, "error": f"{type(exc).__name__}: {exc}", "traceback": "".join(traceback.format_exception(exc))})
        if on_cell:
            on_cell(key, f"failed: {type(exc).__name__}: {exc}")

    work = [(by_name[key.scenario], key, config) for key in todo]
    for index, outcome in execute(_run_cell, work, executor=executor, jobs=jobs, address=address):
        if isinstance(outcome, BaseException):
            failed(todo[index], outcome)
        else:
            finished(*outcome)
    manifest["cells"]["failed"] = [{k: v for k, v in f.items() if k != "traceback"} for f in failures]
    manifest["wall_seconds"] = round(time.monotonic() - started, 3)
    if failures:
        (store.root / "errors.log").write_text("\n\n".join(f"{f['cell']}\n{f['traceback']}" for f in failures), encoding="utf-8")
    finalize(store, manifest, report=report)
    if failures:
        raise RunError(
            f"{len(failures)} of {len(keys)} cells failed (first: {failures[0]['cell']}: {failures[0]['error']}); "
            f"details in {store.root / 'errors.log'}; the finished cells are in {store.root}"
        )
    return store.root


def finalize(store: RunStore, manifest: dict[str, Any], report: bool = True) -> None:
    """Merge the finished cells into the run's tables, then write the manifest and the report."""
    from compaction_bench.metrics.aggregate import summarize

    tables = {name: store.read_cells(name) for name in ("requests", "compactions", "probes")}
    for name, frame in tables.items():
        write_parquet(frame, store.root / f"{name}.parquet")
    summary = summarize(tables["requests"], tables["compactions"], tables["probes"])
    write_parquet(summary, store.root / "summary.parquet")
    store.write_manifest(manifest)
    if report:
        from compaction_bench.reports.html import write_report

        write_report(store.root)
