"""Runs: the cells of scenario × strategy × profile × repeat, in parallel, into the run store.

`run()` resolves the scenarios (the embedded synthetic suite by default, or the user's transcript
files with probes from a file or mined), runs every unfinished cell (replay, then the metrics of
`compaction_bench.metrics.measure`) with a progress bar, and merges the per-cell tables into
`requests`, `compactions`, `probes` and `summary` parquet files plus `report.html`; a run whose
cells all finished then keeps its replay records in one archive instead of a folder per cell
(`RunStore.compact`). Where cells run (this process, worker processes, a Ray cluster) is
`compaction_bench.executors`' job; which cell goes next is the runner's: the largest first, by the
transcript's characters × the CPU seconds per character that the cells of the same strategy and
profile took so far in this run (learned as they finish), so one long cell does not finish last.
Local workers write their finished cells themselves and the main process reads each cell's tables
as it arrives; cells run on Ray come back to the main process, which writes them.

Runs describe themselves: the manifest names every scenario's transcript file with its sha256,
format, import options and session id (a transcript built in memory is kept in the run folder),
every profile's definition and every rendered template's text; each scenario's probes and each
cell's replay records are kept too. `score()` (`bench score`) measures a finished run again from
that folder alone, without replaying: new probes or a new answerer, written to a new folder; the
model replies the run stored answer its requests before any call. The manifest records each model
role's endpoint (`RunConfig.endpoints`) and every URL without its credentials (`llm.redact_url`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import logging
import math
import os
import platform
import shutil
import time
import traceback
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from compaction_bench import run_folder
from compaction_bench.atomic import WriteFailed, atomic_write, atomic_write_text
from compaction_bench.code_identity import code_identity, sha256_file
from compaction_bench.collector import spaced_collections
from compaction_bench.errors import BenchError, did_you_mean, with_guesses
from compaction_bench.executors import EXECUTORS, WorkerDied, check_reachable, execute, sigterm_interrupts
from compaction_bench.importing import detect, load_transcripts, warn_import_problems
from compaction_bench.llm import (
    DEFAULT_ANSWERER,
    DEFAULT_SUMMARIZER,
    CallSettings,
    LLMClient,
    LLMError,
    base_url_variables,
    is_offline,
    litellm_provider,
    model_endpoint,
    model_problem,
    redact_url,
    stored_responses,
)
from compaction_bench.metrics.cost import UNPRICED
from compaction_bench.probes import Probe, load_probes, probes_text, usable_probes, write_probes
from compaction_bench.profiles import DEFAULT_PROFILE, get_profile, profile_from_dict, stated_prices
from compaction_bench.progress import ProgressEvent, ProgressHook, display_for, shown
from compaction_bench.records import from_rows, to_rows
from compaction_bench.registry import strategy_class, strategy_ids
from compaction_bench.replay import USAGE_MODES, replay
from compaction_bench.store import (
    ID_COLUMNS,
    KEY_DTYPES,
    P_BEST_JUDGED,
    P_BEST_RULE,
    PANDAS_DTYPES,
    SCHEMA,
    TABLES,
    CellKey,
    RunStore,
    StoredCell,
    StoreError,
    cell_table,
    merge_tables,
    read_manifest,
    write_parquet,
)
from compaction_bench.templates import PromptSet
from compaction_bench.transcript import Transcript

#: The most repeats a run takes: each replays every cell again, and a run lists its cells before the first starts
#: (a mistyped `--repeat 100000000` filled the memory with cell keys instead of refusing).
MAX_REPEATS = 1_000
#: Columns of `items.parquet`: one row per transcript item of every scenario.
ITEM_COLUMNS = ["scenario", "position", "id", "kind", "call_id", "text"]
#: Columns of `questions.parquet`: one row per probe of every scenario.
QUESTION_COLUMNS = ["scenario", "probe_id", "kind", "question", "answer"]
#: How many of a scenario's import problems its manifest entry lists (all are counted; `bench inspect` shows them all)
MANIFEST_PROBLEMS = 20
LOG = logging.getLogger(__name__)


def default_strategies() -> tuple[str, ...]:
    """Every built-in strategy, in registry order (what `bench run` uses without `-s`)."""
    return tuple(strategy_ids(builtin_only=True))


class RunError(BenchError, RuntimeError):
    """A run that cannot start (bad configuration) or whose cells failed."""


class CannotWrite(RunError):
    """A cell's results could not be written into the run folder (read-only, full): the run stops there,
    since every other cell would fail the same way. One message argument, so it travels back from a worker."""


class CellsFailed(RunError):
    """Some cells of a run failed; the others finished, and the run's tables and report at `root` cover them."""

    def __init__(self, message: str, root: Path) -> None:
        super().__init__(message)
        self.root = root


@dataclass(frozen=True)
class Case:
    """One scenario of a run: a transcript and the probes asked about it.

    `file`, `format`, `import_options` and `session_index` say where the transcript came from (None
    for a transcript built in memory: the run then keeps its canonical form in `transcripts/`).
    """

    name: str
    transcript: Transcript
    probes: tuple[Probe, ...] = ()
    file: str | None = None
    format: str | None = None
    import_options: dict[str, Any] = field(default_factory=dict)
    session_index: int = 0


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
    api_base: str | None = None
    max_retries: int = 3
    max_concurrency: int = 4
    model_timeout: float = 60.0
    offline: bool = False
    responses: str | None = None
    run_dir: str | None = None

    def call_settings(self) -> CallSettings:
        """How cells call models; responses are stored in the run folder, slots shared through it."""
        root = Path(self.run_dir) if self.run_dir else None
        return CallSettings(
            api_base=self.api_base, max_retries=self.max_retries, max_concurrency=self.max_concurrency, timeout=self.model_timeout,
            offline=self.offline, responses=self.responses, record_dir=str(root / "responses") if root else None,
            slots_dir=str(root / ".model-slots") if root else None,
        )

    def endpoints(self) -> dict[str, str | None]:
        """The endpoint each model role's calls go to (`llm.model_endpoint`: `--api-base`, else the base-URL
        environment variable litellm reads for the model's provider, without credentials; None for no model, an
        offline one, or the provider's own endpoint). `--api-base` alone did not say it: a run pointed elsewhere
        by `OPENAI_BASE_URL` recorded the same configuration as one that was not."""
        return {role: model_endpoint(getattr(self, role), self.api_base) for role in MODEL_ROLES}

    def manifest_entry(self) -> dict[str, Any]:
        """The configuration as the manifest records it: every setting, `--api-base` without credentials
        (`llm.redact_url`: the run folder is shared and its export committed), and `endpoints`."""
        return {**self.__dict__, "strategies": list(self.strategies), "profiles": list(self.profiles),
                "api_base": redact_url(self.api_base), "endpoints": self.endpoints()}


#: The roles a run calls models in (`RunConfig` fields), each recorded with its endpoint (`RunConfig.endpoints`).
MODEL_ROLES = ("summarizer", "answerer", "judge")


def parse_option_flags(flags: Iterable[str]) -> dict[str, dict[str, str]]:
    """`strategy.key=value` flags → {strategy: {key: value}}; split at the last dot before `=`, as an option's
    name has none and a strategy's may (`claude-code-2.1`, a plug-in's `file.py:Class`)."""
    out: dict[str, dict[str, str]] = {}
    for flag in flags:
        target, eq, value = flag.partition("=")
        strategy, dot, key = target.rpartition(".")
        if not eq or not dot or not strategy or not key:
            raise RunError(f"--option {flag!r}: expected STRATEGY.KEY=VALUE (e.g. pi.keep_recent_tokens=30000)")
        given = out.setdefault(strategy, {})
        if key in given:
            raise RunError(f"--option {strategy}.{key}: given twice ({given[key]!r} and {value!r}); give it once")
        given[key] = value
    return out


def parse_prompt_flags(flags: Iterable[str]) -> dict[str, str]:
    """`TEMPLATE=FILE` flags → {template: file}; TEMPLATE must be a shipped template (a misspelt
    name would silently run the stock prompt)."""
    from compaction_bench.templates import shipped_templates

    known = shipped_templates()
    out = {}
    for flag in flags:
        name, eq, path = flag.partition("=")
        if not eq or not name or not path:
            raise RunError(f"--prompt {flag!r}: expected TEMPLATE=FILE (e.g. codex_summary.j2=my_prompt.j2)")
        if name not in known:
            raise RunError(f"--prompt {flag!r}: no template named {name!r}{did_you_mean(name, known)}; templates: {', '.join(known)}")
        out[name] = path
    return out


def synthetic_cases(seed: int = 0) -> list[Case]:
    from compaction_bench.scenarios.synthetic import default_suite

    return [Case(s.name, s.transcript, tuple(s.probes)) for s in default_suite(seed)]


#: Seconds of reading transcripts and mining probes after which `file_cases` reports its progress
#: (a short import stays silent: nothing but an error line before a refusal).
SLOW_IMPORT_SECONDS = 2.0


def session_digest(transcript: Transcript) -> str:
    """The sha256 of what a replay of the session reads: its model and its items (not its id, title
    or source, which a copy of the same session may have otherwise)."""
    digest = hashlib.sha256(json.dumps(transcript.model, ensure_ascii=False).encode("utf-8"))
    for item in transcript.items:
        digest.update(b"\n" + json.dumps(item.to_dict(), ensure_ascii=False, sort_keys=True).encode("utf-8", errors="surrogatepass"))
    return digest.hexdigest()


def repeated_path(paths: Sequence[str | Path]) -> str | None:
    """Why a list of transcript files that names one file twice (by its resolved path: a slip in the
    list, not a copy under another name) is refused; None for a list without one."""
    seen: dict[Path, int] = {}
    for n, path in enumerate(paths):
        first = seen.setdefault(Path(path).resolve(), n)
        if first != n:
            return f"{shown(str(path))}: given twice (the same file as {shown(str(paths[first]))}); pass each file once"
    return None


@dataclass(frozen=True)
class _Kept:
    """Where a session of the run was first given: its file as the user wrote it and resolved, its index
    in that file and how many sessions the file holds, and its scenario's name."""

    given: str
    file: str
    index: int
    count: int
    scenario: str

    def named(self) -> str:
        return shown(self.given) + (f" session {self.index + 1}" if self.count > 1 else "")


#: `nothing_to_replay`'s reason for a session without any item.
NO_MESSAGE = "it holds no message"


def nothing_to_replay(transcript: Transcript) -> str | None:
    """Why a session gives a run nothing to measure, or None when it has a recorded model response.

    The replay sends its requests where the recorded model responses were (`Transcript.steps`), so
    a session without one (a header alone, only a system prompt, a user message never answered)
    would give every strategy a cell that measured nothing, counted as a scenario in the leaderboard.
    """
    if transcript.steps():
        return None
    if not transcript.items:
        return NO_MESSAGE
    kinds = Counter(item.kind for item in transcript.items)
    held = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    return f"it holds no model response, only {held} item(s)"


def leave_out_empty(where: str, why: str, entry: dict[str, Any], empty: list[dict[str, Any]] | None) -> None:
    """Name a session with nothing to replay in a warning line and in `empty` (the manifest's `nothing_to_replay`)."""
    LOG.warning("warning: %s: nothing to replay (%s); left out of the run", where, why)
    if empty is not None:
        empty.append({**entry, "reason": why})


#: The most sessions of one file with nothing to replay that get a warning line each; more get one line for the file.
EMPTY_NAMED = 3
#: How many of them that one line names by number (the manifest lists every one).
EMPTY_SHOWN = 5


def leave_out_empty_sessions(path: str | Path, sessions: Sequence[tuple[int, str]], total: int, empty: list[dict[str, Any]] | None) -> None:
    """Leave out the `sessions` (index, reason) of the file `path` (of `total` sessions) that have nothing to replay:
    each named in a warning line (`leave_out_empty`), or, past `EMPTY_NAMED` of them, all in one line that counts
    them by reason and names the first `EMPTY_SHOWN` (an Aider history holds hundreds of sessions that end before
    the model answers); every one goes to `empty`, the manifest's `nothing_to_replay`."""
    resolved = str(Path(path).resolve())
    if len(sessions) <= EMPTY_NAMED:
        for index, why in sessions:
            where = shown(str(path)) + (f" session {index + 1}" if total > 1 else "")
            leave_out_empty(where, why, {"file": resolved, "session_index": index}, empty)
        return
    silent = sum(why == NO_MESSAGE for _, why in sessions)
    reasons = ", ".join(part for part in (f"{silent} hold no message" if silent else "",
                                          f"{len(sessions) - silent} no model response" if silent < len(sessions) else "") if part)
    numbers = ", ".join(str(index + 1) for index, _ in sessions[:EMPTY_SHOWN]) + (", …" if len(sessions) > EMPTY_SHOWN else "")
    LOG.warning("warning: %s: %d of its %d sessions have nothing to replay (%s; sessions %s, each listed in the run's manifest "
                "under nothing_to_replay); left out of the run", shown(str(path)), len(sessions), total, reasons, numbers)
    if empty is not None:
        empty.extend({"file": resolved, "session_index": index, "reason": why} for index, why in sessions)


def file_cases(
    paths: Sequence[str | Path], probes: str | None, format: str = "auto", import_options: Mapping[str, Any] | None = None,
    progress: ProgressHook | None = None, duplicates: list[dict[str, Any]] | None = None, hashed: dict[str, str] | None = None,
    empty: list[dict[str, Any]] | None = None, jobs: int = 1,
) -> list[Case]:
    """Cases from transcript files; probes from a file, mined (`auto`; in `jobs` processes, `mined_probes`),
    or none. Once the import has taken `SLOW_IMPORT_SECONDS`, `progress` gets a `scenarios` event per
    file read, then a `probes` event per scenario mined.

    A session is one scenario however often it is given: a file with the same bytes as one read
    before (a copy under another path), or a session with the same content as one already taken
    (`session_digest`), is not a second scenario, since its probes would count as a second
    independent cluster in every interval and test. The first is kept; each one left out is named
    in a warning line with the one it repeats, and appended to `duplicates` (the run's manifest
    keeps that list). A session with nothing to replay (`nothing_to_replay`) is left out too, named
    in a warning line (or counted in one for its file, `leave_out_empty_sessions`) and appended to
    `empty`. The same path given twice is refused, as a slip in the list. `hashed` collects the
    sha256 of each file by resolved path (`scenario_entry` reuses it rather than reading the file
    again)."""
    cases: list[Case] = []
    given_as: list[str] = []  # each case's file, as the user gave it
    names: set[str] = set()
    repeated = repeated_path(paths)  # before reading any: a mistake in the list is not found after minutes of import
    if repeated is not None:
        raise RunError(repeated)
    given = given_probes(probes) if probes and probes != "auto" else None
    began = time.monotonic()

    def slow(event: ProgressEvent) -> None:
        """`event` to `progress`, once the import has taken `SLOW_IMPORT_SECONDS` (a quick one shows nothing)."""
        if progress is not None and time.monotonic() - began >= SLOW_IMPORT_SECONDS:
            progress(event)

    kept: dict[str, _Kept] = {}  # session digest → where it was first given
    by_bytes: dict[str, tuple[str, list[str]]] = {}  # file sha256 → (the path first given with it, its sessions' digests)

    def listed(path: str | Path, index: int, digest: str) -> None:
        """Session `index` of `path` left out as a copy of the one `digest` was first given as, in `duplicates`."""
        if duplicates is not None:
            first = kept[digest]
            duplicates.append({"file": str(Path(path).resolve()), "session_index": index, "same_as": first.file,
                               "same_as_session_index": first.index, "scenario": first.scenario})

    def left_out(path: str | Path, index: int, count: int, digest: str) -> None:
        first = kept[digest]
        where = shown(str(path)) + (f" session {index + 1}" if count > 1 else "")
        LOG.warning("warning: %s: the same session as %s; run once, as scenario %s (the copy is left out)",
                    where, first.named(), shown(first.scenario))
        listed(path, index, digest)

    hashed = {} if hashed is None else hashed
    for done, path in enumerate(paths, start=1):
        sha256 = input_sha256(Path(path))
        if sha256 is not None:
            hashed[str(Path(path).resolve())] = sha256
        if sha256 is not None and sha256 in by_bytes:  # a copy of a file already read: not read again
            digests = by_bytes[sha256][1]
            LOG.warning("warning: %s: the same file as %s (identical bytes); its %s run once (the copy is left out)",
                        shown(str(path)), shown(by_bytes[sha256][0]), "session is" if len(digests) == 1 else f"{len(digests)} sessions are")
            for index, digest in enumerate(digests):
                listed(path, index, digest)
            slow(ProgressEvent("scenarios", done, len(paths), f"{Path(path).name} (a copy)"))
            continue
        transcripts = load_transcripts(path, format=format, **dict(import_options or {}))
        warn_import_problems(path, transcripts)
        detected = detect(Path(path)).format if format == "auto" and Path(path).is_file() else format
        digests = [session_digest(t) for t in transcripts]
        if sha256 is not None:
            by_bytes[sha256] = (str(path), digests)
        reasons = [nothing_to_replay(transcript) for transcript in transcripts]
        leave_out_empty_sessions(path, [(index, why) for index, why in enumerate(reasons) if why is not None], len(transcripts), empty)
        for index, transcript in enumerate(transcripts):
            if reasons[index] is not None:
                continue
            if digests[index] in kept:
                left_out(path, index, len(transcripts), digests[index])
                continue
            name = scenario_name(Path(path), transcript, index, len(transcripts), names)
            kept[digests[index]] = _Kept(str(path), str(Path(path).resolve()), index, len(transcripts), name)
            names.add(name)
            cases.append(Case(name, transcript, (), str(Path(path).resolve()), detected, dict(import_options or {}), index))
            given_as.append(str(path))
        sessions = f" ({len(transcripts)} sessions)" if len(transcripts) > 1 else ""
        slow(ProgressEvent("scenarios", done, len(paths), f"{Path(path).name}{sessions}"))

    if probes == "auto":  # each session's own probes
        asked = [usable_probes([case.transcript], found, origin=f"probes mined from {path}")[0]
                 for case, found, path in zip(cases, mined_probes(cases, jobs, slow), given_as, strict=True)]
    else:
        asked = asked_somewhere(usable_probes([case.transcript for case in cases], given or (), origin=str(probes)), given, probes)
    return [dataclasses.replace(case, probes=found) for case, found in zip(cases, asked, strict=True)]


#: Characters of transcripts (`transcript_characters`) from which `mined_probes` mines in worker processes: about half a
#: second of mining on one core (0.27 s per MB of the corpora's files); less is mined here, as workers would cost more.
PARALLEL_MINING_FROM = 2_000_000


def transcript_characters(transcript: Transcript) -> int:
    """The characters of a transcript's item texts and call arguments, which its replay's and its mining's work grow with."""
    return sum(len(item.text or "") + len(item.arguments or "") for item in transcript.items)


class _Largest:
    """The `Priority` of work on transcripts (compaction_bench.executors): the largest first, so that one long
    session does not finish last."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = sizes

    def group(self, index: int) -> None:
        return None

    def weight(self, index: int) -> float:
        return self.sizes[index]

    def rate(self, group: Hashable) -> float:
        return 1.0


def _import_mining() -> None:
    import compaction_bench.scenarios.mining  # noqa: F401  (forked workers start with it)


def _mine_task(cases: Sequence[Case], index: int) -> list[Probe]:
    from compaction_bench.scenarios.mining import mine_probes

    return mine_probes(cases[index].transcript)


def asked_somewhere(asked: list[tuple[Probe, ...]], given: Sequence[Probe] | None, path: str | Path | None) -> list[tuple[Probe, ...]]:
    """`asked`, the probes each session asks of a `--probes` file (`given`), unless none asks any: a file written for
    other sessions is refused as an empty one is (`given_probes`), its probes each named in a warning before."""
    if given and not any(asked):
        raise RunError(f"--probes {path}: none of its {len(given)} probe(s) applies to these sessions (the warnings above say why); "
                       "a run would measure no retention")
    return asked


def given_probes(path: str | Path) -> list[Probe]:
    """The probes of a `--probes` file; one that holds none is refused (a run of it would measure no retention,
    and say nothing of why)."""
    probes = load_probes(path)
    if not probes:
        raise RunError(f"--probes {path}: holds no probe; drop --probes to mine them from each session")
    return probes


def mined_probes(cases: Sequence[Case], jobs: int = 1, progress: ProgressHook | None = None) -> list[list[Probe]]:
    """Each case's transcript's mined probes (`mine_probes`), in order. Once the transcripts hold
    `PARALLEL_MINING_FROM` characters, they are mined in `jobs` local worker processes (0: one per
    core), the largest first; mining gives the same probes in any process (it does not depend on
    string hashes). `progress` gets a `probes` event per case mined."""
    sizes = [transcript_characters(case.transcript) for case in cases]
    workers = jobs if sum(sizes) >= PARALLEL_MINING_FROM else 1
    out: list[list[Probe]] = [[] for _ in cases]
    with closing(execute(_mine_task, [(index,) for index in range(len(cases))], shared=list(cases), jobs=workers,
                         priority=_Largest(sizes), warm=_import_mining)) as outcomes:
        for done, (index, outcome) in enumerate(outcomes, start=1):
            if isinstance(outcome, WorkerDied):  # one line, exit 2, as any cell's worker (it was a traceback)
                raise RunError(f"mining the probes of {shown(cases[index].name)}: {outcome}")
            if isinstance(outcome, BaseException):
                raise outcome
            out[index] = outcome
            if progress is not None:
                progress(ProgressEvent("probes", done, len(cases), cases[index].name))
    return out


def distinct_cases(cases: Sequence[Case], duplicates: list[dict[str, Any]], empty: list[dict[str, Any]] | None = None) -> list[Case]:
    """Cases built in memory (`run(cases=...)`), each session once, as `file_cases` takes files: a
    name given twice is refused (the second scenario would replace the first), and a case whose
    session is one already taken (`session_digest`) is left out, named in a warning line and
    appended to `duplicates` (`file` and `same_as` are the cases' files, None for a transcript
    built in memory; `given_as` its name). A case with nothing to replay (`nothing_to_replay`) is
    left out, named in a warning line and appended to `empty`."""
    names: set[str] = set()
    kept: dict[str, Case] = {}
    out: list[Case] = []
    for case in cases:
        if case.name in names:
            raise RunError(f"scenario {case.name!r} given twice: give each case its own name")
        names.add(case.name)
        why = nothing_to_replay(case.transcript)
        if why is not None:
            leave_out_empty(f"scenario {shown(case.name)}", why,
                            {"file": case.file, "session_index": case.session_index, "given_as": case.name}, empty)
            continue
        digest = session_digest(case.transcript)
        first = kept.get(digest)
        if first is None:
            kept[digest] = case
            out.append(case)
            continue
        LOG.warning("warning: scenario %s: the same session as scenario %s; run once, as %s (the copy is left out)",
                    shown(case.name), shown(first.name), shown(first.name))
        duplicates.append({"file": case.file, "session_index": case.session_index, "same_as": first.file,
                           "same_as_session_index": first.session_index, "scenario": first.name, "given_as": case.name})
    return out


def readable(file_name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (kept by Python as lone surrogates) become U+FFFD."""
    return file_name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def scenario_name(path: Path, transcript: Transcript, index: int, count: int, taken: set[str]) -> str:
    """A name people recognise: the file's name, plus `#<n>` and the session's title when the file holds several.

    A name already taken (two files of the same name in different folders) gets the parent folder
    in front, then a counter. The session id stays in the manifest (`scenarios[].session_id`).
    Bytes of a file name that are not UTF-8 (which Python keeps as lone surrogates) show as U+FFFD:
    the name is text in every table and page, the file itself stays named by its path.
    """
    name = readable(path.name)
    if count > 1:
        title = str(transcript.meta.get("title") or "").strip()
        name = f"{name} #{index + 1}" + (f" {title[:60]}" if title else "")
    if name in taken:
        name = f"{readable(path.resolve().parent.name)}/{name}"
    base, n = name, 2
    while name in taken:
        name, n = f"{base} ({n})", n + 1
    return name


def items_table(cases: Sequence[Case]) -> list[dict[str, Any]]:
    """Every transcript item of the run's scenarios (the report shows what compactions kept, summarized and dropped)."""
    rows = []
    for case in cases:
        for position, item in enumerate(case.transcript.items):
            text = item.text
            if item.kind == "tool_call":
                text = f"{item.tool_name or ''}({item.arguments or ''})"
            rows.append(
                {"scenario": case.name, "position": position, "id": item.id, "kind": item.kind, "call_id": item.call_id, "text": text}
            )
    return rows


def questions_table(cases: Sequence[Case]) -> list[dict[str, Any]]:
    """Every probe of the run's scenarios with its question and expected answer (for the reports)."""
    return [
        {
            "scenario": case.name, "probe_id": probe.id, "kind": probe.kind, "question": probe.question,
            "answer": probe.answer if isinstance(probe.answer, str) else " | ".join(probe.answer),
        }
        for case in cases
        for probe in case.probes
    ]


def variant_base(spec: str) -> str:
    """The strategy a `--strategy` entry names: `ID` of `ID@KEY=VALUE[,KEY=VALUE…]`, the entry itself otherwise."""
    name, at, assignments = spec.rpartition("@")
    return name if at and "=" in assignments else spec


def strategy_variant(spec: str, options: Mapping[str, Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A strategy entry and its options: `ID` or `ID@KEY=VALUE[,KEY=VALUE…]` (a variant of ID).

    `--option ID.KEY=VALUE` applies to every variant of ID; a variant's own values win. Variants
    let one run compare a strategy with itself, e.g. `-s opencode-v1 -s opencode-v1@prune=true`.
    """
    name = variant_base(spec)
    if name == spec:
        return spec, dict(options.get(spec, {}))
    assignments = spec[len(name) + 1:]
    own: dict[str, Any] = {}
    for assignment in assignments.split(","):
        key, eq, value = assignment.partition("=")
        if not eq or not key:
            raise RunError(f"--strategy {spec!r}: expected ID@KEY=VALUE[,KEY=VALUE…]")
        own[key.strip()] = value.strip()
    return name, {**options.get(name, {}), **own}


def check_no_import_settings(probes: str | None, format: str, import_options: Mapping[str, Any] | None, corpus: str) -> None:
    """`--probes`, `--format` and `--import-option` say how to read transcript files: without any,
    they would be recorded in the manifest yet change nothing, so they are refused."""
    given = [flag for flag, used in (("--probes", probes is not None), ("--format", format != "auto"),
                                     ("--import-option", bool(import_options))) if used]
    if given:
        raise RunError(
            f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to transcript files only; {corpus} brings its own probes and needs no import "
            "(name transcript files, or leave these out)"
        )


def _refuse_unusable_model(flag: str, model: str | None, offline: tuple[str, ...], api_base: str | None) -> None:
    """`RunError` naming `flag` for a model that cannot be called in its role (`llm.model_problem`); None: no model named."""
    problem = model_problem(model, offline, api_base) if model else None
    if problem:
        raise RunError(f"{flag} {model}: {problem}")


def validate(config: RunConfig) -> None:
    """Fail before any work on an unknown strategy, profile, option, usage mode or prompt file."""
    for spec in config.strategies:
        name, options = strategy_variant(spec, config.options)
        strategy_class(name).parse_options(options)
    in_run = {variant_base(s) for s in config.strategies}
    unknown = sorted(set(config.options) - in_run)
    if unknown:
        raise RunError(f"--option names strategies that are not in this run: {with_guesses(unknown, in_run)}")
    for profile in config.profiles:
        model = get_profile(profile)
        if model.prices.unpriced:
            LOG.warning("warning: profile %s: litellm's model map states no price for %s; its dollars are reported as %s",
                        profile, model.model, UNPRICED)
    if stated_prices(config.summarizer) is False:
        LOG.warning("warning: summarizer %s: litellm's model map states no price for it; its calls' dollars are reported as %s",
                    config.summarizer, UNPRICED)
    for flag, model_id, offline in (("--summarizer", config.summarizer, (DEFAULT_SUMMARIZER,)),
                                    ("--answerer", config.answerer, (DEFAULT_ANSWERER,)), ("--judge", config.judge, ())):
        _refuse_unusable_model(flag, model_id, offline, config.api_base)
    if config.usage not in USAGE_MODES:
        raise RunError(f"--usage {config.usage!r}: expected one of {', '.join(USAGE_MODES)}")
    if not 1 <= config.repeats <= MAX_REPEATS:
        raise RunError(f"--repeat {config.repeats}: expected 1 to {MAX_REPEATS:,} (each repeat replays every cell again)")
    if not math.isfinite(config.model_timeout):
        raise RunError(f"--model-timeout must be a finite number of seconds, got {config.model_timeout}")
    PromptSet(config.prompts)


def _run_cell(case: Case, key: CellKey, config: RunConfig) -> tuple[dict[str, Any], dict[str, str]]:
    """One cell: replay, then the metrics; its tables (with the replay records) and the templates it rendered."""
    from compaction_bench.metrics.measure import measure_cell

    name, options = strategy_variant(key.strategy, config.options)
    with spaced_collections():  # the measurement's allocations too (compaction_bench.collector)
        result = replay(
            case.transcript,
            name,
            profile=key.profile,
            summarizer=LLMClient(config.summarizer, config.call_settings(), repeat=key.repeat),
            options=options,
            usage=config.usage,
            prompts=config.prompts,
        )
        settings = config.call_settings()
        answerer = LLMClient(config.answerer, settings, repeat=key.repeat) if config.answerer else None
        judge = LLMClient(config.judge, settings, repeat=key.repeat) if config.judge else None
        tables = measure_cell(result, list(case.probes), answerer=answerer, judge=judge, repeat=key.repeat)
    cell: dict[str, Any] = {"requests": tables.requests, "compactions": tables.compactions, "probes": tables.probes, "replay": to_rows(result)}
    return cell, result.template_hashes


@dataclass(frozen=True)
class CellWork:
    """What every worker gets once: the scenarios by name, the settings, and the run folder it writes
    finished cells into (None: it sends them back, as on a Ray cluster that cannot see this folder)."""

    cases: dict[str, Case]
    config: RunConfig
    store_root: str | None


@dataclass(frozen=True)
class CellOutcome:
    """A finished cell: the templates it rendered, its CPU seconds, and its tables unless the worker wrote them."""

    key: CellKey
    template_hashes: dict[str, str]
    cpu_seconds: float
    cell: dict[str, Any] | None


def _cell_task(work: CellWork, key: CellKey) -> CellOutcome:
    started = time.process_time()
    try:
        cell, hashes = _run_cell(work.cases[key.scenario], key, work.config)
        if work.store_root is None:
            return CellOutcome(key, hashes, time.process_time() - started, cell)
        RunStore(Path(work.store_root)).write_cell(key, cell)
    except WriteFailed as exc:  # its folder, or the responses stored in it: not this cell's fault
        raise CannotWrite(str(exc)) from None
    return CellOutcome(key, hashes, time.process_time() - started, None)


def warm(config: RunConfig) -> None:
    """Load what every cell needs (the engine, the metrics, the run's strategies and tokenizers) once,
    in the process that local workers are forked from."""
    from compaction_bench.metrics.measure import measure_cell  # noqa: F401 (imported for its import cost)
    from compaction_bench.tokens import shared_counter

    for spec in config.strategies:
        strategy_class(strategy_variant(spec, config.options)[0])
    for profile in config.profiles:
        shared_counter(get_profile(profile).tokenizer)


class LargestFirst:
    """The `Priority` of each cell (compaction_bench.executors): its transcript's characters (`weight`)
    × the CPU seconds per character that finished cells of its strategy and profile took (`rate` of
    the group; the mean over all finished cells for a pair not seen yet, 1 before any cell finished)."""

    def __init__(self, cells: Sequence[CellKey], cases: Mapping[str, Case]) -> None:
        self.cells = cells
        self.size = {name: max(transcript_characters(case.transcript), 1) for name, case in cases.items()}
        self.seconds: dict[tuple[str, str], list[float]] = {}
        self._all = [0.0, 0.0]  # seconds and characters over every finished cell

    def finished(self, key: CellKey, cpu_seconds: float) -> None:
        rates = self.seconds.setdefault((key.strategy, key.profile), [0.0, 0.0])
        for totals in (rates, self._all):
            totals[0] += cpu_seconds
            totals[1] += self.size[key.scenario]

    def group(self, index: int) -> tuple[str, str]:
        key = self.cells[index]
        return key.strategy, key.profile

    def weight(self, index: int) -> float:
        return self.size[self.cells[index].scenario]

    def rate(self, group: Hashable) -> float:
        seconds, chars = self.seconds.get(group) or self._all  # type: ignore[call-overload]
        return seconds / chars if chars else 1.0


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
    paths: str | Path | Sequence[str | Path] = (),
    strategies: str | Sequence[str] = (),
    profiles: str | Sequence[str] = (DEFAULT_PROFILE,),
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
    on_claim: Callable[[Path], None] | None = None,
    on_cell: ProgressCallback | None = None,
    progress: bool = True,
    callback: ProgressHook | None = None,
    api_base: str | None = None,
    max_retries: int = 3,
    max_concurrency: int = 4,
    model_timeout: float = 60.0,
    offline: bool = False,
    responses: str | None = None,
) -> Path:
    """Run a benchmark and return the run folder.

    `paths`, `strategies` and `profiles` are lists, or one alone (`run("session.jsonl", strategies="pi")`).
    With no `paths` and no `cases`, the embedded synthetic suite is the corpus; `cases` are
    scenarios built in memory, each session once (`distinct_cases`). `probes` is a
    probe file, `"auto"` (mine them; the default for transcript files) or None; it, `format` and
    `import_options` are for transcript files only (`check_no_import_settings`). `progress` shows
    a progress bar (terminal or notebook; plain lines elsewhere) over the cells and the finalize
    phase; `callback` receives every `ProgressEvent` as well. `on_claim` is called with the run
    folder once it is claimed, `on_start` with the number of cells to do once its manifest is written.

    Stopping: Ctrl-C or SIGTERM at any point (import, cells, finalize) raises `KeyboardInterrupt`
    (SIGTERM as `executors.Terminated`) with the finished cells kept for `resume` (stopped before the run wrote its
    manifest, the folder it made is removed: `RunFolder.remove_unstarted`); a cell whose worker
    process died is a failed cell (`executors.WorkerDied`); a run folder that cannot be written (full,
    read-only) stops the run at once (`CannotWrite`). With `resume`, cells an earlier attempt finished
    whose tables have other columns than this version's (another version wrote them) are done again.
    """
    paths, strategies, profiles = _listed(paths), _listed(strategies), _listed(profiles)
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
        probes=None if probes == "auto" else probes,  # the default spelled out is the default: a resume may name it or not
        seed=seed,
        api_base=api_base,
        max_retries=max_retries,
        max_concurrency=max_concurrency,
        model_timeout=model_timeout,
        offline=offline,
        responses=str(responses) if responses else None,
    )
    validate(config)
    config.call_settings()  # rejects a bad --max-retries, --max-concurrency, --model-timeout or --responses file before any work
    if executor not in EXECUTORS:
        raise RunError(f"--executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    if address is not None and executor != "ray":
        raise RunError(f"--address {address!r} names a Ray cluster: pass --executor ray with it (cells would run on this machine)")
    if executor == "ray":  # before any folder: a run that cannot start leaves nothing to --resume
        if importlib.util.find_spec("ray") is None:
            raise RunError("--executor ray needs Ray: pip install 'compaction-bench[ray]'")
        given_as = "--address" if address else "RAY_ADDRESS"
        address = address or os.environ.get("RAY_ADDRESS") or None  # Ray's own variable (a Ray Job's entry point has it)
        if address:
            check_reachable(address, given_as)  # before any folder: Ray itself retries an address where nothing listens for minutes
    if paths and cases is not None:
        raise RunError("give transcript paths or cases, not both (the paths would not be read)")
    if not paths:
        check_no_import_settings(probes, format, import_options, "the given scenarios" if cases is not None else "the synthetic suite")
    display = display_for() if progress else None
    hooks = [h for h in (display, callback) if h is not None]

    def emit(event: ProgressEvent) -> None:
        for hook in hooks:
            hook(event)

    # SIGTERM stops the whole run as Ctrl-C does (exit 130, finished cells kept), not only while cells run.
    with sigterm_interrupts(), ExitStack() as cleanup:
        if display is not None:
            cleanup.callback(display.close)
        try:  # a refusal of the folder comes before the import, however long that takes; `claim` checks again under the lock
            run_folder.precheck(Path(out), run_id, resume=resume)
        except run_folder.RunFolderError as exc:
            raise RunError(str(exc)) from None
        duplicates: list[dict[str, Any]] = []  # sessions given again, left out (named in the manifest)
        empty: list[dict[str, Any]] = []  # sessions with nothing to replay, left out (named in the manifest)
        hashed: dict[str, str] = {}  # each transcript file's sha256, read once
        if cases is not None:
            cases = distinct_cases(cases, duplicates, empty)
        else:
            cases = (file_cases(paths, probes if probes is not None else "auto", format, import_options, progress=emit,
                                duplicates=duplicates, hashed=hashed, empty=empty, jobs=jobs)
                     if paths else synthetic_cases(seed))
        if not cases and empty:
            first = empty[0]
            where = shown(str(first.get("given_as") or first["file"]))
            raise RunError(f"no scenario to run: no session given has a model response to replay ({where}: {first['reason']})")
        if not cases:
            raise RunError("no scenario to run")
        try:  # a plain folder name; a bare --resume takes the newest run; the folder stays locked for the run
            folder = run_folder.claim(Path(out), run_id, resume=resume, new_id=new_run_id())
        except run_folder.RunFolderError as exc:
            raise RunError(str(exc)) from None
        # A run stopped before its manifest leaves no folder. Nothing can stop it between `claim` (which removes what it made
        # when stopped) and this `try`: CPython raises a signal's KeyboardInterrupt at a call, a function's start or a loop's
        # jump (its eval breaker), never between a return and the store of its value.
        try:
            cleanup.callback(folder.release)
            if on_claim:
                on_claim(folder.path)
            return _run_claimed(folder, list(cases), config, resume=resume, jobs=jobs, executor=executor, address=address,
                                report=report, on_start=on_start, on_cell=on_cell, emit=emit, duplicates=duplicates, hashed=hashed,
                                empty=empty)
        except BaseException:  # Ctrl-C, SIGTERM or an error before the manifest: no folder neither --resume nor a new run takes
            folder.remove_unstarted()
            raise


def _listed(value: str | Path | Iterable[Any]) -> tuple[Any, ...]:
    """A list argument of `run` as a tuple: one name or path given alone is the list of it (iterating a string would
    give its characters: strategy 'p', file 'o')."""
    return (value,) if isinstance(value, str | Path) else tuple(value)


def _input_files(config: RunConfig) -> dict[str, str]:
    """The sha256 of every file the run's configuration names by path and a cell reads (`--prompt`
    templates, strategies loaded from a file): a resume after one of them changed is refused, since
    the run's finished cells were made from the old text (`run_folder.config_difference`)."""
    named = {f"--prompt {name}": path for name, path in sorted(config.prompts.items())}
    for spec in config.strategies:
        name = variant_base(spec)
        if ".py:" in name:
            named[run_folder.strategy_file_key(name)] = name.partition(".py:")[0] + ".py"
    return {flag: sha256_file(Path(path)) for flag, path in named.items() if Path(path).is_file()}


def stored_template_hashes(store: RunStore, keys: Iterable[CellKey]) -> dict[str, str]:
    """The templates the finished cells `keys` rendered (name → sha256: each cell's replay.json `template_hashes`,
    `records.to_rows`), read from the cells as stored (the archive's `cells.parquet`, or `cells/`). A resume's manifest
    names them with its own cells': the manifest an interrupted attempt left was written before any cell finished."""
    wanted = {key.slug: key for key in keys}
    hashes: dict[str, str] = {}
    archived = store.archived()
    if any(slug in archived for slug in wanted):
        index = store.archive_dir / "cells.parquet"
        for batch in pq.ParquetFile(index).iter_batches(batch_size=64, columns=["cell", "replay"]):  # not every cell's text at once
            for row in batch.to_pylist():
                if row["cell"] in wanted:
                    hashes.update(_rendered_templates(row["replay"], f"{index} (cell {row['cell']})"))
    for slug, key in wanted.items():
        cell = store.stored(key) if slug not in archived else None
        if cell is not None:
            hashes.update(_rendered_templates(cell.replay_text(), str(cell.path)))
    return hashes


#: How the store writes a replay.json's top-level `template_hashes` (`store.json_text`: indented by two, so a nested key
#: has more spaces before it, and a newline inside a string is written as `\n`).
_TEMPLATE_HASHES_KEY = '\n  "template_hashes": '


def _rendered_templates(replay: str | None, where: str) -> dict[str, str]:
    """The `template_hashes` of a cell's replay.json text (`where` names it in the error for text that is not one). Only
    that entry is decoded where the text is laid out as the store writes it: a replay.json holds the cell's compactions
    and is about a megabyte for a long session (313 MB over the 294 cells of one run); a text laid out otherwise is
    decoded whole."""
    at = replay.find(_TEMPLATE_HASHES_KEY) if replay else -1
    try:
        if at >= 0:
            hashes = json.JSONDecoder().raw_decode(replay or "", at + len(_TEMPLATE_HASHES_KEY))[0]
        else:
            hashes = json.loads(replay).get("template_hashes") if replay else {}
    except (ValueError, AttributeError) as exc:
        raise StoreError(f"{where}: its replay.json is not a cell's replay record ({exc}); delete the cell, and `bench run --resume` "
                         "does it again") from None
    if not isinstance(hashes, dict):
        raise StoreError(f"{where}: its replay.json's template_hashes is not a mapping of template names to sha256")
    return {str(name): str(digest) for name, digest in hashes.items()}


def _run_claimed(
    folder: run_folder.RunFolder,
    cases: list[Case],
    config: RunConfig,
    *,
    resume: bool,
    jobs: int,
    executor: str,
    address: str | None,
    report: bool,
    on_start: Callable[[int], None] | None,
    on_cell: ProgressCallback | None,
    emit: ProgressHook,
    duplicates: Sequence[Mapping[str, Any]] = (),
    hashed: Mapping[str, str] | None = None,
    empty: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """`run` once its folder is claimed: the manifest, the cells, then `finalize`. `duplicates` are
    the sessions given again that `file_cases` left out and `empty` those with nothing to replay (the
    manifest lists both), `hashed` the transcript files' sha256 it already computed."""
    store = RunStore(folder.path)
    config.run_dir = str(store.root.resolve())  # absolute: a Ray worker resolves a relative path from its own folder
    keys = [
        CellKey(case.name, strategy, profile, repeat)
        for case in cases
        for strategy in config.strategies
        for profile in config.profiles
        for repeat in range(config.repeats)
    ]
    by_name = {case.name: case for case in cases}
    files = [scenario_files(n, c) for n, c in enumerate(cases)]
    hashed = dict(hashed or {})  # a file of several sessions is hashed once (by `file_cases`, for the user's files)
    manifest: dict[str, Any] = {
        "run_id": folder.run_id,
        "created": datetime.now(UTC).isoformat(),
        "config": config.manifest_entry(),
        "scenarios": [scenario_entry(n, c, files[n], hashed) for n, c in enumerate(cases)],
        "duplicates": [dict(d) for d in duplicates],
        "nothing_to_replay": [dict(e) for e in empty],
        "profiles": {name: get_profile(name).to_dict() for name in config.profiles},
        run_folder.INPUT_FILES: _input_files(config),
        "versions": _versions(),
        **code_identity(),  # compared on resume: the cells must be made by the same source files
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "template_hashes": {},  # the templates the cells rendered (`replay`), filled as they finish
        "template_set_hashes": PromptSet(config.prompts).text_hashes(),  # every template the cells could render
        "cells": {"total": len(keys), "failed": []},
    }
    if resume and store.manifest_path.exists():
        try:  # refused (naming the differences) when the configuration is not the run's own
            previous = folder.resume_manifest(manifest)
        except run_folder.RunFolderError as exc:
            raise RunError(str(exc)) from None
        manifest.update(created=previous.get("created", manifest["created"]), template_hashes=previous.get("template_hashes", {}))
        # the earlier attempt's failed cells stay on record until this attempt has done them again: an interrupted
        # resume otherwise left a run whose manifest named no failed cell while its tables lacked them
        cells = previous.get("cells")
        earlier_failed = cells.get("failed") if isinstance(cells, dict) else None
        if isinstance(earlier_failed, list):
            manifest["cells"]["failed"] = earlier_failed
    # The manifest first, the run's other files after it: stopped in between, the folder is a run `--resume` finishes (it
    # writes them again); stopped before it, `run` removes the folder it made (`RunFolder.remove_unstarted`).
    store.write_manifest(manifest)
    for relative, text in (pair for scenario in files for pair in scenario.items()):
        atomic_write_text(store.root / relative, text, sweep=True)  # a run folder has one writer: its run
    write_parquet(pd.DataFrame(items_table(cases), columns=ITEM_COLUMNS), store.root / "items.parquet")
    write_parquet(pd.DataFrame(questions_table(cases), columns=QUESTION_COLUMNS), store.root / "questions.parquet")
    todo = [k for k in keys if not (resume and store.is_done(k))]
    pending = set(todo)
    earlier = [k for k in keys if k not in pending]  # finished by an earlier attempt, maybe by another version
    manifest["template_hashes"].update(stored_template_hashes(store, earlier))
    if on_start:
        on_start(len(todo))
    failures: list[dict[str, str]] = []
    started = time.monotonic()

    def label(key: CellKey) -> str:
        return cell_label(key, config.repeats)

    def failed(key: CellKey, exc: BaseException) -> None:
        failures.append({"cell": key.slug, "error": f"{type(exc).__name__}: {exc}", "traceback": "".join(traceback.format_exception(exc))})
        if on_cell:
            on_cell(key, f"failed: {type(exc).__name__}: {exc}")

    loaded: dict[str, dict[str, pa.Table]] = {}
    shared = CellWork(by_name, config, str(store.root) if executor == "local" else None)
    batches, done, total = [todo], 0, len(todo)
    emit(ProgressEvent("cells", 0, total, "starting"))
    while batches:
        batch = batches.pop()
        with closing(execute(_cell_task, [(key,) for key in batch], shared=shared, executor=executor, jobs=jobs, address=address,
                             priority=(order := LargestFirst(batch, by_name)), warm=lambda: warm(config))) as outcomes:
            for index, outcome in outcomes:
                key, done = batch[index], done + 1
                if isinstance(outcome, CannotWrite):  # the run folder is full or read-only: every other cell would fail the same way
                    raise CannotWrite(f"{outcome}; the run stopped, its finished cells are kept for `bench run --resume`")
                if isinstance(outcome, BaseException):
                    failed(key, outcome)
                    emit(ProgressEvent("cells", done, total, f"{label(key)}: {type(outcome).__name__}: {outcome}", failed=True))
                    continue
                if outcome.cell is not None:  # sent back by a Ray worker: written here, and a failed write stops the run as a worker's does
                    try:
                        store.write_cell(key, outcome.cell)
                    except WriteFailed as exc:
                        raise CannotWrite(f"{exc}; the run stopped, its finished cells are kept for `bench run --resume`") from None
                order.finished(key, outcome.cpu_seconds)
                manifest["template_hashes"].update(outcome.template_hashes)
                loaded[key.slug] = StoredCell(store.cell_path(key)).tables()  # merged while the other cells run
                if on_cell:
                    on_cell(key, "done")
                emit(ProgressEvent("cells", done, total, label(key)))
        # an earlier attempt's cells, read once: to compare with this process's, then merged as read
        earlier_tables = {key: cell.tables() for key in earlier if (cell := store.stored(key)) is not None} if loaded else {}
        stale = _stale_cells(earlier_tables, loaded)
        loaded.update((key.slug, tables) for key, tables in earlier_tables.items() if key not in stale)
        earlier = []
        if stale:  # cells of another version: their tables would be merged with this version's, columns missing
            first, why = next(iter(stale.items()))
            LOG.warning("warning: %d finished cell(s) of this run were written by another version of compaction-bench "
                        "(e.g. %s: %s); doing them again", len(stale), first.slug, why)
            for key in stale:
                store.forget(key)
            batches.append(list(stale))
            total += len(stale)
    manifest["cells"]["failed"] = [{k: v for k, v in f.items() if k != "traceback"} for f in failures]
    manifest["wall_seconds"] = round(time.monotonic() - started, 3)
    manifest["templates"] = template_texts(config.prompts, manifest["template_hashes"])
    try:
        if failures:
            atomic_write_text(store.root / "errors.log", "\n\n".join(f"{f['cell']}\n{f['traceback']}" for f in failures), sweep=True)
        else:  # a resume that finished every cell: the log of an earlier attempt no longer applies
            (store.root / "errors.log").unlink(missing_ok=True)
        tables = store.merged_tables(loaded)
        loaded.clear()  # the cells' tables are the merged frames' now, which `finalize` lets go of as it is done with them
        finalize(store, manifest, tables, report=report, progress=emit, compact=not failures, jobs=jobs)
    except WriteFailed as exc:  # every cell is in the folder: a resume runs none of them again and writes the rest
        raise CannotWrite(f"{exc}; every cell finished and is kept: write the tables with `bench run --resume` and the same "
                          f"arguments (--run-id {store.root.name} -o {store.root.parent})") from None
    note_unusual_replies(store.root)
    if failures:
        raise CellsFailed(
            f"{len(failures)} of {len(keys)} cells failed (first: {failures[0]['cell']}: {failures[0]['error']}); "
            f"details in {store.root / 'errors.log'}; the finished cells are in {store.root}",
            store.root,
        )
    return store.root


def note_unusual_replies(root: Path) -> None:
    """Say at the end of a run (or a score) how many of the model replies it stored (`responses/`) were cut off at
    their `max_tokens` (finish_reason "length") or reported no usage (`LLMResult.usage_known`), by purpose: the
    tables count a cut-off summary or answer as a complete one, and litellm's zero counts of a reply without
    usage are no counts. Silent when there is none (offline models store no reply)."""
    try:
        replies = stored_responses(root)
    except LLMError as exc:  # a line a killed run left half written: said, the run's results stand
        LOG.warning("note: the stored model replies could not be read for their finish reasons: %s", exc)
        return
    cut = Counter(str(r.get("purpose")) for r in replies if r.get("finish_reason") == "length")
    unmetered = Counter(str(r.get("purpose")) for r in replies if r.get("usage_known") is False)
    where = root / "responses"
    if cut:
        LOG.warning("note: %s (%s) %s cut off at max_tokens (finish_reason 'length') and counted as complete; their lines in %s "
                    "say so", _replies(cut), _by_purpose(cut), "was" if cut.total() == 1 else "were", where)
    if unmetered:
        LOG.warning("note: %s (%s) reported no token usage: their tokens and cost are unknown, not the zero counts and $0 litellm "
                    "gives them; their lines in %s say usage_known false", _replies(unmetered), _by_purpose(unmetered), where)


def _replies(counts: Counter[str]) -> str:
    """`1 model reply`, `3 model replies`."""
    return f"{counts.total()} model repl{'y' if counts.total() == 1 else 'ies'}"


def _by_purpose(counts: Counter[str]) -> str:
    """`3 summary, 1 answer`: counts of replies by the purpose of their call, largest first."""
    return ", ".join(f"{n} {purpose}" for purpose, n in counts.most_common())


def _stale_cells(earlier: Mapping[CellKey, Mapping[str, pa.Table]], loaded: Mapping[str, Mapping[str, pa.Table]]) -> dict[CellKey, str]:
    """Cells an earlier attempt finished (`earlier`: their tables) whose tables do not have the columns the
    cells this process wrote (`loaded`) have (a version with other metrics wrote them; merged, their rows would
    hold NaN in the new columns and the summary fail or mislead): cell → what differs. Empty tables (no
    compaction, no probe) have only the key columns and are not compared; archived cells are not either (an
    archive holds every cell of a run, so nothing is left to resume beside them)."""
    if not earlier or not loaded:
        return {}
    current: dict[str, set[str]] = {}
    for tables in loaded.values():
        for name, table in tables.items():
            if table.num_rows and name not in current:
                current[name] = set(table.column_names)
    stale: dict[CellKey, str] = {}
    for key, tables in earlier.items():
        for name, columns in current.items():
            names = set(tables[name].column_names)
            if tables[name].num_rows and names != columns:
                missing, extra = sorted(columns - names), sorted(names - columns)
                stale[key] = f"its {name} table " + "; ".join(
                    part for part in (f"lacks {', '.join(missing)}" if missing else "", f"has {', '.join(extra)} too" if extra else "") if part
                )
                break
    return stale


def finalize(
    store: RunStore,
    manifest: dict[str, Any],
    tables: Mapping[str, pd.DataFrame],
    report: bool = True,
    progress: ProgressHook | None = None,
    compact: bool = False,
    jobs: int = 1,
) -> None:
    """Write the run's merged `tables`, the manifest and the summary, then the report and (with
    `compact`, at the same time in a thread) the archive of the cells' replay records.

    `summary.parquet` is written after the tables and the manifest and removed before them (with the
    report it summarizes, whether or not a new one is written): a finalize that is stopped or killed part-way never leaves a summary or
    report beside tables it does not describe (`load_run` then calls the run unfinished).
    With `jobs` > 1 (0: one per core) the report's figures that read the tables alone (`Drawings`) are
    drawn in `jobs` − 1 worker processes from the start, while the summary is computed and the rest of
    the report is built.
    `progress` receives a `finalize` event per step (the tables, the summary, the report and each of its
    pages, the archive), numbered over the steps this call takes.
    The frames are handed over: once the tables are written and summarized, the compactions' lists of ids
    (`store.ID_COLUMNS`, Arrow) are dropped from its frame, so that they are not held while the report reads the
    run again (a masking run lists 33 M ids; the reader of its file takes a few hundred MB while it reads).
    """
    from compaction_bench.metrics.aggregate import summarize
    from compaction_bench.metrics.measure import COMPACTION_COLUMNS
    from compaction_bench.reports.report_files import remove_report

    steps = ["tables", "summary", *(["report", "pages"] if report else []), *(["archive"] if compact else [])]
    emit = progress or (lambda event: None)

    def step(name: str, label: str) -> None:
        emit(ProgressEvent("finalize", steps.index(name), len(steps), label))

    with ExitStack() as cleanup:
        drawings = None
        if report:
            from compaction_bench.reports.drawings import Drawings
            from compaction_bench.reports.html import write_report

            drawings = cleanup.enter_context(Drawings(tables["requests"], tables["compactions"], tables["probes"], manifest, jobs))
        step("tables", "writing tables")
        (store.root / "summary.parquet").unlink(missing_ok=True)
        remove_report(store.root)  # with or without a new one: an old report describes the old tables
        if tables["compactions"].empty:  # no cell compacted: the table still has its columns, typed (`load_run` users read them)
            dtypes = {column: PANDAS_DTYPES[SCHEMA["compactions"][column]] for column in (*KEY_DTYPES, *COMPACTION_COLUMNS)}
            tables = {**tables, "compactions": pd.DataFrame({column: pd.Series(dtype=dtype) for column, dtype in dtypes.items()})}
        for name in TABLES:
            write_parquet(tables[name], store.root / f"{name}.parquet")
        manifest[P_BEST_JUDGED] = P_BEST_RULE  # the summary below withholds a P(best) its tests cannot claim (`load_run`)
        store.write_manifest(manifest)
        step("summary", "summary")
        summary = summarize(tables["requests"], tables["compactions"], tables["probes"])
        write_parquet(summary, store.root / "summary.parquet")
        for name in ID_COLUMNS:  # from the frame itself (handed over): no copy of the rest of it is made
            if name in tables["compactions"]:
                del tables["compactions"][name]
        # The archive (Arrow reads, hashing and writes, mostly outside the GIL) is built in a thread while
        # the report renders. Not beside the summary: pandas' work holds the GIL, and the two together
        # took about as long as one after the other.
        background = cleanup.enter_context(ThreadPoolExecutor(max_workers=1, thread_name_prefix="archive"))
        archived = background.submit(store.compact) if compact else None
        if drawings is not None:

            def page(done: int, total: int, label: str) -> None:
                step("pages", f"report {done}/{total}: {label}")

            step("report", "report")
            write_report(store.root, progress=page, drawings=drawings)
        if archived is not None:
            step("archive", "archiving the cells' replay records")
            archived.result()
    emit(ProgressEvent("finalize", len(steps), len(steps), "done"))


# --------------------------------------------------------------------------- self-describing runs
def input_sha256(path: Path) -> str | None:
    """The sha256 of a transcript input: a file's bytes; for a folder an importer reads as one session (an OpenHands
    V1 conversation, `importing.folder_input`), of each file under it, by its path relative to the folder and its
    bytes, in path order (symlinked folders not followed); None for a name that is neither (a Hub dataset id)."""
    if path.is_file():
        return sha256_file(path)
    if not path.is_dir():
        return None
    files = sorted(Path(top, name) for top, _, names in os.walk(path) for name in names)
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file.relative_to(path).as_posix()}\0{sha256_file(file)}\n".encode())
    return digest.hexdigest()


def scenario_files(index: int, case: Case) -> dict[Path, str]:
    """The files scenario `index` keeps in the run folder (relative path → text): its probes and,
    for a transcript built in memory, the transcript's canonical form."""
    files = {Path("probes") / f"scenario-{index}.yaml": probes_text(case.probes)}
    if case.file is None:
        files[Path("transcripts") / f"scenario-{index}.jsonl"] = case.transcript.dumps()
    return files


def scenario_entry(index: int, case: Case, files: Mapping[Path, str], hashed: dict[str, str] | None = None) -> dict[str, Any]:
    """The manifest entry of scenario `index`, whose run-folder `files` are `scenario_files(index, case)`
    (hashed here as they will be written, so a refused resume writes nothing). `hashed` keeps the
    sha256 of each transcript file read so far: a file of 1,000 sessions is read once, not 1,000 times.

    `file` is absolute for the user's transcript files and relative to the run folder for the
    canonical copies in `transcripts/`; `sha256` is the file's, or a folder's (`input_sha256`; None for a
    name that is neither, e.g. a Hub dataset id).
    """
    probes_file, *copy = files
    if case.file is not None:
        file, fmt, options, session = case.file, case.format, dict(case.import_options), case.session_index
        if hashed is None:
            hashed = {}
        if file not in hashed and (digest := input_sha256(Path(file))) is not None:
            hashed[file] = digest
        sha256 = hashed.get(file)
    else:
        file, fmt, options, session = str(copy[0]), "canonical", {}, 0
        sha256 = _sha256_text(files[copy[0]])
    problems = list(case.transcript.meta.get("problems", ()))
    return {
        "name": case.name,
        "session_id": case.transcript.id,
        "session_index": session,
        "source": dict(case.transcript.source),
        "items": len(case.transcript.items),
        "import_problem_count": len(problems),
        "import_problems": problems[:MANIFEST_PROBLEMS],
        "probes": len(case.probes),
        "probes_file": str(probes_file),
        "probes_sha256": _sha256_text(files[probes_file]),
        "file": file,
        "sha256": sha256,
        "format": fmt,
        "import_options": options,
    }


def _sha256_text(text: str) -> str:
    """The sha256 of `text` as `atomic_write_text` writes it (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def template_texts(prompts: Mapping[str, str], hashes: Mapping[str, str]) -> dict[str, dict[str, str | None]]:
    """Every template the run rendered: its sha256 and text (None if the file changed since it was rendered)."""
    prompt_set = PromptSet(prompts)
    out: dict[str, dict[str, str | None]] = {}
    for name, digest in sorted(hashes.items()):
        text = prompt_set.source(name)
        same = hashlib.sha256(text.encode("utf-8")).hexdigest() == digest
        out[name] = {"sha256": digest, "text": text if same else None}
    return out


def scenario_transcripts(root: Path, entries: Sequence[Mapping[str, Any]]) -> dict[str, Transcript]:
    """Import a run's scenarios again from their files (scenario name → transcript), after checking each file is
    the one the run read. A file is hashed and imported once, however many of the run's scenarios it holds (an
    Aider history or a tau-bench file holds hundreds): importing it once per scenario made `bench score` quadratic."""
    digests: dict[Path, str] = {}
    imported: dict[tuple[Path, str, str], tuple[list[Transcript], dict[str, list[int]]]] = {}
    out: dict[str, Transcript] = {}
    for entry in entries:
        name = entry["name"]
        file = Path(entry["file"])
        path = file if file.is_absolute() else root / file
        if entry.get("sha256") is not None:
            if path not in digests:
                digest = input_sha256(path)
                if digest is None:
                    raise RunError(f"scenario {name!r}: its transcript {path} is gone")
                digests[path] = digest
            if digests[path] != entry["sha256"]:
                raise RunError(f"scenario {name!r}: {path} changed since the run (sha256 differs); scores would not match the replay")
        options = entry.get("import_options", {})
        source = (path, entry["format"] or "auto", json.dumps(options, sort_keys=True))
        if source not in imported:
            transcripts = load_transcripts(path, format=source[1], **options)
            by_id: dict[str, list[int]] = {}
            for index, transcript in enumerate(transcripts):
                by_id.setdefault(transcript.id, []).append(index)
            imported[source] = (transcripts, by_id)
        transcripts, by_id = imported[source]
        same_id = by_id.get(entry["session_id"], [])
        index = same_id[0] if len(same_id) == 1 else entry.get("session_index", 0)
        if index >= len(transcripts) or transcripts[index].id != entry["session_id"]:
            raise RunError(f"scenario {name!r}: session {entry['session_id']!r} is not in {path}")
        out[name] = transcripts[index]
    return out


def _config_from_manifest(manifest: Mapping[str, Any]) -> RunConfig:
    known = {f.name for f in dataclasses.fields(RunConfig)}
    data = {k: v for k, v in manifest.get("config", {}).items() if k in known}
    data["strategies"] = tuple(data.get("strategies", ()))
    data["profiles"] = tuple(data.get("profiles", ()))
    return RunConfig(**data)


def score(
    run_dir: str | Path,
    *,
    probes: str | Path | None = None,
    answerer: str | None = None,
    out: str | Path | None = None,
    in_place: bool = False,
    report: bool = True,
    progress: ProgressHook | None = None,
) -> Path:
    """Measure a finished run again from its folder, without replaying, and return the folder written.

    Each cell's replay is rebuilt from its stored records (`compaction_bench.records.from_rows`)
    and the scenario's transcript, imported again from the recorded file after its sha256 is
    checked (a file of many sessions is imported once); then the metrics run as in `bench run`.
    `probes` replaces every scenario's probes (those whose source is not in a transcript are
    skipped, as in a run; without it the run's probe files are carried over as they are),
    `answerer` the answer model. A model request is answered from the run's own stored replies (its
    `responses/`, as `bench run --responses` answers from an export), else the cache, else the model; the
    score says on stderr how many it sent to the model (`ModelCalls`). The result goes to `out` (default: a new sibling folder `<run>-scored-<time>`), or over
    the run's own tables with `in_place`, which holds the run's lock and replaces nothing of the run's before every cell
    is measured; a new folder is removed when scoring fails or is interrupted (Ctrl-C or SIGTERM), and a run without a
    finished cell is a `RunError`. `progress` receives a `cells` event per cell measured, then the
    `finalize` events, as in `run`.
    """
    source = RunStore(Path(run_dir))
    with sigterm_interrupts(), ExitStack() as cleanup:  # SIGTERM stops it as Ctrl-C does: a new folder removed, exit 130
        return _score(source, probes, answerer, out, in_place, report, progress, cleanup)


def _score(source: RunStore, probes: str | Path | None, answerer: str | None, out: str | Path | None, in_place: bool, report: bool,
           progress: ProgressHook | None, cleanup: ExitStack) -> Path:
    """`score`, its claim on the folder it writes released by `cleanup`."""
    from compaction_bench.metrics.measure import measure_cell

    manifest = read_manifest(source.root, required=("config", "scenarios"))
    scenarios = manifest["scenarios"]
    if "profiles" not in manifest or not all({"file", "sha256", "format", "probes_file"} <= set(s) for s in scenarios):
        raise RunError(f"{source.root}: the run does not describe its inputs (it predates self-describing runs); replay it with `bench run`")
    for entry in scenarios:  # the files a score writes are the run's own: a manifest edited to name others is refused
        for field_name in ("file", "probes_file"):
            named = Path(str(entry[field_name]))
            if ".." in named.parts or (field_name == "probes_file" and named.is_absolute()):
                raise RunError(f"{source.root / 'manifest.json'}: scenario {entry.get('name')!r}: its {field_name} {str(named)!r} is outside "
                               "the run folder, where the run's own files are")
    if in_place and out is not None:
        raise RunError("--out and --in-place exclude each other")
    _refuse_unusable_model("--answerer", answerer, (DEFAULT_ANSWERER,), manifest.get("config", {}).get("api_base"))
    if not in_place and out is not None and Path(out).exists():
        raise RunError(f"{out} already exists; choose another --out (the run's own tables are replaced only with --in-place)")
    total = len(source.archived()) + len(source.stored_cells())
    if not total:
        raise RunError(f"{source.root}: no finished cell to score (a failed cell's error is in errors.log); `bench run --resume` runs the rest")
    _refuse_unfinished(source.root, manifest, total)
    given = given_probes(probes) if probes is not None else None
    config = _config_from_manifest(manifest)
    config.answerer = config.answerer if answerer is None else answerer
    _refuse_moved_endpoints(manifest["config"], config, answerer_named=answerer is not None)
    # The folder written is claimed as a run's is (`run_folder.claim`): the run itself with --in-place (no run or
    # other score works in it meanwhile), else a new folder made atomically, `<run>-scored-<time>` (`-2`, `-3`, …
    # for scores started in the same second) unless --out names it.
    resolved = source.root.resolve()
    chosen = resolved if in_place else Path(out) if out is not None else None
    where = chosen.parent if chosen is not None else resolved.parent
    try:
        claimed = run_folder.claim(where, chosen.name if chosen is not None else None, resume=in_place,
                                   new_id=f"{resolved.name}-scored-{new_run_id()}")
    except run_folder.RunFolderError as exc:
        raise RunError(str(exc)) from None
    cleanup.callback(claimed.release)
    target = claimed.path if not in_place else source.root
    cases: dict[str, Case] = {}
    transcripts = scenario_transcripts(source.root, scenarios)
    names = [entry["name"] for entry in scenarios]
    if given is not None:
        asked = asked_somewhere(usable_probes([transcripts[name] for name in names], given, origin=str(probes)), given, probes)
    else:
        asked = [tuple(load_probes(source.root / entry["probes_file"])) for entry in scenarios]
    for name, case_probes in zip(names, asked, strict=True):
        cases[name] = Case(name, transcripts[name], case_probes)
    profiles = {name: profile_from_dict(data) for name, data in manifest["profiles"].items()}
    config.run_dir = str(target)
    # the run's own replies answer first: a score of a run needs no call its cells made (`llm` step 3)
    settings = dataclasses.replace(config.call_settings(), run_responses=str(source.root))
    store = RunStore(target)
    scored = dict(manifest)
    scored["config"] = {**manifest["config"], "answerer": config.answerer, "probes": str(probes) if probes is not None else manifest["config"].get("probes"),
                        "api_base": redact_url(config.api_base), "endpoints": _scored_endpoints(manifest["config"], config)}
    calls = ModelCalls()
    scored["scored"] = {"from": str(source.root.resolve()), "at": datetime.now(UTC).isoformat(), "probes": str(probes) if probes else None}
    with _removed_on_failure(target, not in_place):  # a scored folder is whole or not there
        by_name: dict[str, dict[str, pa.Table]] = {name: {} for name in TABLES}
        emit = progress or (lambda event: None)
        emit(ProgressEvent("cells", 0, total, "starting"))
        for done, rows in enumerate(source.replays(), 1):
            key = CellKey(**rows["replay"]["key"])
            case = cases[key.scenario]
            try:
                result = from_rows(case.transcript, profiles[key.profile], rows["messages"], rows["requests"], rows["replay"])
            except (KeyError, TypeError, ValueError, IndexError) as exc:  # records the run did not write so (edited, damaged)
                raise StoreError(f"{source.root}: the stored replay records of the cell {key.label} cannot be read back "
                                 f"({type(exc).__name__}: {exc})") from None
            client = LLMClient(config.answerer, settings, repeat=key.repeat) if config.answerer else None
            judge = LLMClient(config.judge, settings, repeat=key.repeat) if config.judge else None
            tables = measure_cell(result, list(case.probes), answerer=client, judge=judge, repeat=key.repeat)
            calls.add(client, judge)
            for name in TABLES:  # as a cell's table reads back from its file in a run
                by_name[name][key.slug] = cell_table(key, getattr(tables, name))
            emit(ProgressEvent("cells", done, total, cell_label(key, config.repeats)))
        # Only now, every cell measured, is anything of the run's own replaced (--in-place): stopped before, it is as it was.
        scored["scenarios"] = []
        for entry in scenarios:
            case = cases[entry["name"]]
            if not in_place and not Path(entry["file"]).is_absolute():
                _copy(source.root / entry["file"], target / entry["file"])
            if given is not None:
                write_probes(case.probes, target / entry["probes_file"], sweep=True)
            elif not in_place:  # the run's own probes: its file, as it is
                _copy(source.root / entry["probes_file"], target / entry["probes_file"])
            scored["scenarios"].append({**entry, "probes": len(case.probes), "probes_sha256": sha256_file(target / entry["probes_file"])})
        if not in_place and (source.root / "items.parquet").is_file():
            _copy(source.root / "items.parquet", target / "items.parquet")
        write_parquet(pd.DataFrame(questions_table(list(cases.values())), columns=QUESTION_COLUMNS), target / "questions.parquet")
        if not in_place:  # the new folder gets the (unchanged) replay records in its own archive
            store.archive_from(source)
        merged = {name: merge_tables(by_name[name]) for name in TABLES}
        by_name.clear()  # the merged frames hold the cells' tables now (`finalize`)
        finalize(store, scored, merged, report=report, progress=progress, compact=in_place)
    calls.say(source.root)
    note_unusual_replies(store.root)
    return store.root


def _refuse_unfinished(root: Path, manifest: Mapping[str, Any], done: int) -> None:
    """`RunError` for a run whose cells did not all finish or fail (an interrupted run: its manifest's `cells.total`
    counts more than its `done` cells and its recorded failures). Scored, its tables would hold the cells it reached
    under a manifest that reads as finished, and `load_run` and `bench report` would take it for one."""
    cells = manifest.get("cells")
    if not isinstance(cells, Mapping) or not isinstance(cells.get("total"), int):
        return
    failed = len(cells.get("failed") or ())
    if done + failed < cells["total"]:
        also = f", {failed} failed" if failed else ""
        raise RunError(f"{root}: the run did not finish ({done} of its {cells['total']} cells done{also}); "
                       "`bench run --resume` finishes it, then score it")


def _refuse_moved_endpoints(run_config: Mapping[str, Any], config: RunConfig, *, answerer_named: bool) -> None:
    """`RunError` when a model the score asks as the run asked it (the judge; the answerer unless `--answerer` names
    one) would be called at another endpoint than the run recorded for it (`RunConfig.endpoints`): a base-URL variable
    set, unset or changed since the run. The run's replies are keyed by their endpoint, so none of them would answer,
    and the score would ask another server without a word. A run that recorded no endpoints (before the fortieth
    pass) is not checked."""
    recorded = run_config.get("endpoints")
    if not isinstance(recorded, dict):
        return
    for role in ("judge",) if answerer_named else ("answerer", "judge"):
        model = getattr(config, role)
        if not model or role not in recorded:
            continue
        now = model_endpoint(model, config.api_base)
        if now != recorded[role]:
            default = "the provider's default endpoint"
            variables = " or ".join(base_url_variables(litellm_provider(model)))
            other = "; to score with another endpoint on purpose, name the answerer (--answerer MODEL)" if role == "answerer" else ""
            raise RunError(f"the run called its {role} {model} at {recorded[role] or default}, and this score would call "
                           f"{now or default}: set {variables} as the run had it{other}")


def _scored_endpoints(run_config: Mapping[str, Any], config: RunConfig) -> dict[str, Any]:
    """The endpoints of a scored run's manifest: the summarizer's as the run recorded it (its summaries are the run's;
    an old run that recorded none gets none), the answerer's and the judge's as this score calls them."""
    recorded = run_config.get("endpoints")
    kept = {"summarizer": recorded.get("summarizer")} if isinstance(recorded, dict) and "summarizer" in recorded else {}
    return {**kept, "answerer": model_endpoint(config.answerer, config.api_base), "judge": model_endpoint(config.judge, config.api_base)}


@dataclass
class ModelCalls:
    """A score's model requests: how many a store answered (the run's `responses/`, the cache) and how many went to
    the model (`LLMClient.stored`, `LLMClient.fetched`)."""

    stored: int = 0
    fetched: int = 0

    def add(self, *clients: LLMClient | None) -> None:
        for client in clients:
            if client is not None and not is_offline(client.model):
                self.stored += client.stored
                self.fetched += client.fetched

    def say(self, run: Path) -> None:
        """One line on stderr: how many requests the score sent to a model (none when the run stored every reply)."""
        if self.stored or self.fetched:
            LOG.warning("note: bench score sent %d of %d model request(s) to the model; the other %d were answered by the run's "
                        "stored replies (%s) or the cache", self.fetched, self.stored + self.fetched, self.stored, run / "responses")


@contextmanager
def _removed_on_failure(folder: Path, enabled: bool) -> Iterator[None]:
    """Remove `folder`, which the work inside writes from nothing, when that work fails or is interrupted (`enabled`):
    a scored folder left half written would read as a run with tables missing or stale."""
    try:
        yield
    except BaseException:
        if enabled:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def cell_label(key: CellKey, repeats: int) -> str:
    """How progress names a cell: scenario · strategy · profile, and its repeat when a run repeats."""
    return f"{key.scenario} · {key.strategy} · {key.profile}" + (f" · r{key.repeat}" if repeats > 1 else "")


def _copy(source: Path, target: Path) -> None:
    """Copy a run's file into the scored folder: a failure to read names `source`, one to write `target`."""
    data = source.read_bytes()
    atomic_write(target, lambda tmp: tmp.write_bytes(data), sweep=True)  # the scored folder has one writer: this score
