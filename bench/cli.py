"""The `bench` command line: run, list, import, inspect, report, score, compare, gate, calibrate,
probes, fidelity and cache.

Errors a user can cause (a missing or malformed file, an unknown strategy, profile, option or
format) end in one line on stderr and exit status 2, never a traceback; a misspelled name gets the
closest registered one suggested. Output meant for files and other programs (tables, YAML, markdown,
paths) goes to stdout whole, one message a line; progress and warnings go to stderr.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, cast

import typer
from rich.console import Console
from rich.table import Table

from compaction_bench.errors import BenchError

if TYPE_CHECKING:
    from compaction_bench.probes import Probe
    from compaction_bench.profiles import ModelProfile
    from compaction_bench.transcript import Transcript

app = typer.Typer(
    help="compaction-bench: replay agent transcripts through context-compaction strategies and measure them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
list_app = typer.Typer(help="List strategies, profiles or transcript formats.", no_args_is_help=True)
probes_app = typer.Typer(help="Probe questions: mine them from a transcript, check a probe file, measure mining against labels.", no_args_is_help=True)
fidelity_app = typer.Typer(help="Compare a strategy's decisions with a real agent's recorded ones.", no_args_is_help=True)


def _show_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        print(f"compaction-bench {version('compaction-bench')}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """`bench --version`; the group's help is the Typer's own."""


app.add_typer(list_app, name="list")
app.add_typer(probes_app, name="probes")
app.add_typer(fidelity_app, name="fidelity")
cache_app = typer.Typer(help="Stored model responses: export a run's for re-runs without calls.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("export")
def cache_export(
    run_dir: Annotated[Path, typer.Argument(help="A run folder.")],
    out_text: Annotated[str, typer.Option("--out", "-o", metavar="<path>", help="The JSONL file to write (use it with `bench run --responses FILE`).")],
    force: Annotated[bool, typer.Option("--force", help="Replace --out if it exists (default: refuse, leaving it as it is).")] = False,
) -> None:
    """Write every model response a run stored to one file, so CI can re-run it with zero calls."""
    from compaction_bench.atomic import check_output
    from compaction_bench.llm import export_responses

    out = cast(Path, _output_file(out_text, "--out"))
    check_output(out, replace=force, reads=(run_dir,))
    with _reading_runs(run_dir):  # not while a run is still storing responses in it
        count = export_responses(run_dir, out, replace=force)
    console.print(f"{count} responses written to {out}", markup=False, soft_wrap=True)

# Piped output is not wrapped at 80 columns: tables stay whole for files and other programs.
console = Console(width=None if sys.stdout.isatty() else 220)
# Messages to a pipe or file are never wrapped: one message, one line.
errors = Console(stderr=True, soft_wrap=not sys.stderr.isatty())


class UsageFailure(BenchError):
    """Raised inside commands for a user error that is not one of the library's error classes."""


def _output_folder(text: str | None, option: str) -> Path | None:
    """The folder an output option names (`None` when it is not given); an empty name is refused, where pathlib
    would read it as the current folder (`-o ""`, an unset shell variable, wrote the run there)."""
    if text is None:
        return None
    if not text.strip():
        raise UsageFailure(f"{option} is empty; name the folder to write (`.` for this one)")
    return Path(text)


def _output_file(text: str | None, option: str) -> Path | None:
    """The file an output option names (`None` when it is not given). An empty name, one ending in a slash or an
    existing folder is refused: pathlib drops a trailing slash, so `-o out/` would write a file named `out`."""
    if text is None:
        return None
    if not text.strip():
        raise UsageFailure(f"{option} is empty; name the file to write")
    if text.endswith("/") or Path(text).is_dir():
        raise UsageFailure(f"{option} {text}: names a folder; name the file to write in it")
    return Path(text)


#: Run folders `bench run` claimed in this process: an interrupted run says how to finish the one it left.
_claimed: list[Path] = []


#: `bench run`'s exit status when cells failed (the finished ones are in the run's tables and report)
EXIT_FAILED_CELLS = 1
FORMAT_HELP = "Read the file as this format (see `bench list formats`) instead of detecting it from the content."
IMPORT_OPTION_HELP = "Importer option KEY=VALUE, e.g. branch=<leaf id> (Pi), chain=sidechains (Claude Code); repeatable."


def _import_options(flags: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for flag in flags or ():
        key, eq, value = flag.partition("=")
        if not eq or not key:
            raise UsageFailure(f"--import-option {flag!r}: expected KEY=VALUE")
        if key in out:
            raise UsageFailure(f"--import-option {key}: given twice ({out[key]!r} and {value!r}); give it once")
        out[key] = value
    return out


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix: every `BenchError`, and files that cannot be opened."""
    # OSError: also a read-only or full output folder (EROFS, ENOSPC), which the user must fix.
    return (BenchError, OSError)


# --------------------------------------------------------------------------- run
@app.command()
def run(
    paths: Annotated[Optional[list[str]], typer.Argument(help="Transcript files (any supported format; an owner/name that is no path is a Hugging Face dataset id with --format hf-dataset). Default: the embedded synthetic suite.")] = None,
    strategy: Annotated[Optional[list[str]], typer.Option("--strategy", "-s", help="Strategy id, path/file.py:Class, or a variant ID@KEY=VALUE[,KEY=VALUE]; repeatable. Default: all built-in strategies.")] = None,
    profile: Annotated[Optional[list[str]], typer.Option("--profile", "-p", help="Model profile; repeatable (see `bench list profiles`). Default: 64k.")] = None,
    summarizer: Annotated[str, typer.Option(help="litellm model id of the summarizer.")] = "offline/extractive",
    answerer: Annotated[str, typer.Option(help="litellm model id that answers probe questions.")] = "offline/reader",
    judge: Annotated[Optional[str], typer.Option(help="litellm model id of the judge for `judge` probes (unscored without one).")] = None,
    out_text: Annotated[str, typer.Option("--out", "-o", metavar="<path>", help="Folder that holds runs.")] = "runs",
    run_id: Annotated[Optional[str], typer.Option(help="Name of the run folder (default: a timestamp); an existing folder that holds anything but a run is refused.")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=0, help="Worker processes, for the cells and for mining probes (0: one per core); with --executor ray, the CPUs of the local Ray it starts (none with --address) and the processes mining here.")] = 0,
    executor: Annotated[str, typer.Option(help="'local' (processes on this machine) or 'ray' (a Ray cluster; needs the `ray` extra).")] = "local",
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address HOST:PORT, with --executor ray (default: start a local Ray).")] = None,
    resume: Annotated[bool, typer.Option(help="Finish an interrupted run (the newest, or --run-id) with the same arguments, redoing only unfinished cells; other settings, transcripts or prompt files, or a folder without a run, are refused.")] = False,
    option: Annotated[Optional[list[str]], typer.Option("--option", help="Strategy option STRATEGY.KEY=VALUE; repeatable. Numbers must be finite, at most 2**53 either way, and in the option's range (token and character counts ≥ 0, ratios in (0, 1], fractions in (0, 1), percentages in (0, 100], …).")] = None,
    prompt: Annotated[Optional[list[str]], typer.Option("--prompt", help="Replace a prompt template TEMPLATE=FILE; repeatable. The file may use the variables the stock template uses, no other.")] = None,
    probes: Annotated[Optional[str], typer.Option(help="Probe file (YAML/JSONL), or 'auto' to mine probes (default for transcript files). Transcript files only: the synthetic suite has its own probes.")] = None,
    usage: Annotated[str, typer.Option(help="'simulated' usage; 'recorded': the transcript's own usage while the replayed context is the recording's; 'recorded-always': at every step.")] = "simulated",
    repeat: Annotated[int, typer.Option(help="Repeats per cell (answer samples vote), 1 to 1,000.")] = 1,
    format: Annotated[str, typer.Option("--format", help="Force a transcript format (see `bench list formats`); transcript files only.")] = "auto",
    import_option: Annotated[Optional[list[str]], typer.Option("--import-option", help=IMPORT_OPTION_HELP + " Transcript files only.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic suite.")] = 0,
    api_base: Annotated[Optional[str], typer.Option(help="Endpoint of the real models (an OpenAI- or Anthropic-compatible base URL); keys come from the environment.")] = None,
    max_retries: Annotated[int, typer.Option(help="Retries of a model call on 429, 5xx, timeouts and connection errors (exponential backoff, at most 60 s apart); 0 to 100.")] = 3,
    max_concurrency: Annotated[int, typer.Option(help="Model calls in flight at once, across all workers; at least 1.")] = 4,
    model_timeout: Annotated[float, typer.Option(help="Seconds a model call may wait for each read of its reply (then it is retried); above 0, up to 86,400 (a day).")] = 60.0,
    offline: Annotated[bool, typer.Option(help="Never call a real model: a response that is not recorded or cached is an error.")] = False,
    responses: Annotated[Optional[Path], typer.Option(help="Recorded responses (from `bench cache export`) answered before the cache; checked whole before the run.")] = None,
    allow_missing_metrics: Annotated[bool, typer.Option(help="Exit 0 even when a whole metric could not be computed (e.g. the answerer failed on every call); default: exit 3.")] = False,
    report: Annotated[bool, typer.Option(help="Render report.html at the end (--no-report: tables only; `bench report RUN` renders it later).")] = True,
) -> None:
    """Replay scenarios through strategies and write runs/<id>/ with tables and report.html."""
    from compaction_bench.runner import CellsFailed, parse_option_flags, parse_prompt_flags
    from compaction_bench.runner import run as run_benchmark

    # Progress (cells, then the finalize phase) goes to stderr: a bar on a terminal, plain lines otherwise.
    failed: CellsFailed | None = None
    try:
        root = run_benchmark(
            paths or (),
            strategy or (),
            profile or (),
            out=cast(Path, _output_folder(out_text, "--out")), run_id=run_id, jobs=jobs, executor=executor, address=address, resume=resume, summarizer=summarizer, answerer=answerer,
            judge=judge, usage=usage, repeats=repeat, options=parse_option_flags(option or ()),
            prompts=parse_prompt_flags(prompt or ()), probes=probes, format=format, seed=seed,
            import_options=_import_options(import_option), progress=True, api_base=api_base, max_retries=max_retries,
            max_concurrency=max_concurrency, model_timeout=model_timeout, offline=offline, responses=str(responses) if responses else None,
            report=report, on_claim=_claimed.append,
        )
    except CellsFailed as exc:  # the finished cells still have their leaderboard and report
        failed, root = exc, exc.root
    else:
        _claimed.clear()  # every cell finished: nothing is left to resume
    _print_summary(root, report=report)
    if report:
        console.print(f"report: {root / 'report.html'}", markup=False, soft_wrap=True)
    missing = _warn_missing_metrics(root)
    if failed is not None:
        errors.print(f"error: {failed}", markup=False)
        raise typer.Exit(EXIT_FAILED_CELLS)
    if missing and not allow_missing_metrics:
        from compaction_bench.missing_metrics import EXIT_MISSING_METRICS

        raise typer.Exit(EXIT_MISSING_METRICS)


def _warn_missing_metrics(root: Path) -> bool:
    """Print a warning per metric the run at `root` could not compute (and failed answers); whether one is missing."""
    from compaction_bench.missing_metrics import check_run

    health = check_run(root)
    for line in health.lines():
        errors.print(f"warning: {line}", markup=False, style="bold red" if health.missing else "yellow")
    return bool(health.missing)


def _print_summary(root: Path, *, report: bool = True) -> None:
    import pandas as pd
    import pyarrow.parquet as pq

    from compaction_bench.metrics.aggregate import INTEGRITY_COLUMNS, compared_rows, overall_of, shared_scenarios, unfinished
    from compaction_bench.reports.leaderboard import column_width, leaderboard, terminal_columns
    from compaction_bench.reports.verdict import few_scenarios_notes, p_best_notes, servable, unreached_threshold_notes

    probes_file, requests = root / "probes.parquet", root / "requests.parquet"
    # the cells, and what the verdict's flags read where the summary lacks them (a run written before `cannot_serve`)
    wanted = ("scenario", "profile", "strategy", "repeat", "kind", "request", "overflow", "threshold", "true_tokens", *INTEGRITY_COLUMNS)
    cells = pd.read_parquet(requests, columns=[c for c in wanted if c in pq.read_schema(requests).names]) if requests.is_file() else None
    probes = pd.read_parquet(probes_file) if probes_file.is_file() else None
    compared = compared_rows(probes, cells) if probes is not None and not probes.empty else None  # pooled, and why P(best) is withheld
    summary = pd.read_parquet(root / "summary.parquet")
    # P(best) among the strategies the verdict ranks as serving the window (none to rank in a run without a finished cell)
    contenders = servable(summary, cells) if not summary.empty else None
    pooled = overall_of(compared, contenders=contenders) if compared is not None else None
    header, rows = leaderboard(summary, probes, cells, pooled=pooled, serving=contenders)
    if not rows:
        console.print(f"run {root.name}: no finished cell to show", markup=False)
        return
    rows = [[_plain(cell) for cell in row] for row in rows]
    title = f"run {root.name}"
    profiles = {row[header.index("profile")] for row in rows} if "profile" in header else set()
    if len(profiles) == 1:  # one profile: said in the title, its column left out
        title += f" · profile {profiles.pop()}"
        k = header.index("profile")
        header, rows = [*header[:k], *header[k + 1 :]], [[*row[:k], *row[k + 1 :]] for row in rows]
    # as many columns as the terminal shows with every number whole (a cut one, "0.8…", would read as another)
    shown = terminal_columns(header, rows, console.width)
    table = Table(title=_plain(title))
    for k in shown:
        label = header[k] in ("strategy", "profile")
        table.add_column(header[k], justify="left" if label else "right", no_wrap=label, width=column_width(header, rows, k))
    for row in rows:
        table.add_row(*(row[k] for k in shown))
    console.print(table)
    left_out = [header[k] for k in range(len(header)) if k not in shown]
    if left_out:
        every = root / "report.html" if report else f"`bench report {root}` renders report.html"
        console.print(f"not shown at this width: {', '.join(left_out)} (every column: {every})", markup=False, soft_wrap=True)
    from compaction_bench.reports.leaderboard import offline_note, provider_note

    for note in (offline_note(root), provider_note(root)):
        if note:
            console.print(note, markup=False, soft_wrap=True)
    from compaction_bench.store import read_manifest

    manifest = read_manifest(root) if (root / "manifest.json").is_file() else {}  # tables alone: no run's lists
    config = manifest.get("config") or {}
    repeats = config.get("repeats") or 1
    if repeats > 1:  # as the report's leaderboard says it
        console.print(f"note: counts, tokens and dollars are per repeat (the mean over the {repeats} repeats), summed over the scenarios",
                      markup=False, soft_wrap=True)
    # a scenario in which every cell failed has no request: only the run's own list of scenarios names it
    unfinished_cells = unfinished(cells, [s["name"] for s in manifest.get("scenarios", [])])
    for (scenario, profile), missing in unfinished_cells.items():
        console.print(f"note: left out of the {profile} comparison: {_plain(str(scenario))}, where {', '.join(missing)} did not finish",
                      markup=False, soft_wrap=True)
    # per profile of the run, the strategies that finished a cell there
    finished: dict[str, set[str]] = {str(p): set() for p in config.get("profiles") or ()}
    for profile, frame in cells.groupby("profile") if cells is not None else ():
        finished.setdefault(str(profile), set()).update(frame["strategy"].astype(str))
    for strategy in (str(s) for s in config.get("strategies") or ()):  # the report's verdict names it too
        absent = [profile for profile, names in finished.items() if strategy not in names]
        if len(absent) == len(finished):
            console.print(f"note: not in the comparison: {_plain(strategy)}, which finished no cell (see errors.log)", markup=False, soft_wrap=True)
            continue
        for profile in absent:
            console.print(f"note: not in the {profile} comparison: {_plain(strategy)}, which finished no cell at {profile} (see errors.log)",
                          markup=False, soft_wrap=True)
    if compared is not None and pooled is not None and "p_best" in pooled.columns and pooled["p_best"].isna().any():  # why, from the verdict's test
        for profile, note in p_best_notes(pooled, compared, contenders).items():
            console.print(f"note: {profile}: {_plain(note)}", markup=False, soft_wrap=True)
    for profile, note in few_scenarios_notes(compared).items() if compared is not None else ():
        console.print(f"note: {profile}: {_plain(note)}", markup=False, soft_wrap=True)
    # over the scenarios the verdict compares
    for profile, notes in unreached_threshold_notes(shared_scenarios(summary, unfinished_cells), shared_scenarios(cells, unfinished_cells)).items() if cells is not None else ():
        for note in notes:
            console.print(f"note: {profile}: {_plain(note)}", markup=False, soft_wrap=True)


# --------------------------------------------------------------------------- list
LIST_JSON_HELP = ("Print a JSON array of objects instead of the table, one per row with the table's fields (numbers as numbers, "
                  "an unknown price as null), and nothing else on stdout.")


def _print_records(records: list[dict[str, Any]]) -> None:
    """A list's rows as one JSON array on stdout, for other programs (strict JSON: no NaN)."""
    import json

    print(json.dumps(records, ensure_ascii=False, indent=2, allow_nan=False, default=str))


@list_app.command("strategies")
def list_strategies(
    ids: Annotated[Optional[list[str]], typer.Argument(help="Show these strategies' options one per row: type, default, the values each accepts and what it does.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=LIST_JSON_HELP)] = False,
) -> None:
    """Registered strategies with their spec and options (with IDs, each option explained)."""
    from compaction_bench.registry import broken, strategies, strategy_class
    from compaction_bench.strategy import StrategyInfo

    chosen = {name: strategy_class(name) for name in ids} if ids else strategies()
    records: list[dict[str, Any]] = []
    for name, cls in chosen.items():
        info = StrategyInfo.of(cls, details=bool(ids))
        record: dict[str, Any] = {"id": name, "what": info.description, "spec": info.spec, "options": dict(info.options)}
        records.append(record | ({"option_details": info.details} if ids else {}))
    if as_json:
        _print_records(records)
    elif ids:
        for record in records:
            table = Table("option", "type", "default", "accepts", "what it does", title=_plain(f"{record['id']}: {record['what']} ({record['spec']})"))
            for row in record["option_details"]:
                table.add_row(row["option"], row["type"], repr(row["default"]), row["accepts"], row["meaning"])
            console.print(table if record["option_details"] else f"{_plain(record['id'])}: no options")
    else:
        table = Table("id", "what", "spec", "options (defaults; `bench list strategies ID` explains each)")
        table.columns[3].overflow = "fold"  # an option's name and default are never cut short
        for record in records:
            table.add_row(record["id"], record["what"], record["spec"], ", ".join(f"{k}={v!r}" for k, v in record["options"].items()))
        console.print(table)
    for name, reason in broken().get("compaction_bench.strategies", {}).items():
        errors.print(f"strategy {name} failed to load: {reason}", markup=False, style="yellow")


def _per_million(price_per_token: float) -> float:
    """Dollars per million tokens, without the float noise of the multiplication (1.25e-06 × 1e6 = 1.2499…)."""
    return round(price_per_token * 1e6, 9)


def _profile_record(profile: ModelProfile) -> dict[str, Any]:
    """A profile's row of `bench list profiles` as plain values: counts as integers, prices in dollars per
    million tokens (null when the map has no price; the cached price null too when the profile has no cache)."""
    from compaction_bench.metrics.cost import cached_input_price
    from compaction_bench.profiles import ALIASES, MARKED_READS

    cache = profile.cache
    priced = not profile.prices.unpriced
    return {
        "name": profile.name, "alias_of": ALIASES.get(profile.name), "model": profile.model, "window": profile.context_window,
        "context": profile.context_limit or profile.context_window, "input_limit": profile.input_limit or None,
        "max_output": profile.max_output, "overflow_when": profile.overflow_text(), "tokenizer": profile.tokenizer,
        "cache": None if cache.provider == "none" else {
            "provider": cache.provider, "min_prefix": cache.min_prefix, "block": cache.block, "reads": cache.reads,
            "breakpoints": cache.breakpoints if cache.reads == MARKED_READS else None, "ttl_seconds": cache.ttl_seconds},
        "usd_per_mtok_in": _per_million(profile.prices.input) if priced else None,
        "usd_per_mtok_cached": _per_million(cached_input_price(profile)) if priced and cache.provider != "none" else None,
        "usd_per_mtok_out": _per_million(profile.prices.output) if priced else None,
    }


def _cache_rules(cache: dict[str, Any]) -> str:
    """Where a profile's cache reads may end and how long an entry lives, in words (the note under the table)."""
    ends = {"marked": f"end only at a breakpoint the agent marked (at most {cache['breakpoints']} per request)",
            "implicit": "end only at the breakpoint the provider places"}.get(cache["reads"], "may end anywhere (any cached prefix)")
    return f"reads {ends}; an entry lives {cache['ttl_seconds'] // 60} min"


@list_app.command("profiles")
def list_profiles(
    model: Annotated[Optional[list[str]], typer.Argument(help="Also show these profiles (any litellm model id, MODEL@WINDOW).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=LIST_JSON_HELP)] = False,
) -> None:
    """Model profiles: every limit, the overflow rule, tokenizer, cache rules and prices."""
    from compaction_bench.metrics.cost import format_dollars
    from compaction_bench.profiles import PROFILES, get_profile

    records = [_profile_record(p) for p in [*PROFILES.values(), *(get_profile(m) for m in model or ())]]
    if as_json:
        _print_records(records)
        return
    table = Table("name", "model", "window", "context", "input limit", "max output", "overflow when", "tokenizer", "cache",
                  "$/Mtok in", "$/Mtok cached", "$/Mtok out")
    rules: dict[str, int] = {}  # each distinct cache rule once, numbered in the order the rows first show it
    for r in records:
        cache = r["cache"]
        unpriced = r["usd_per_mtok_in"] is None
        rule = rules.setdefault(_cache_rules(cache), len(rules) + 1) if cache is not None else 0
        table.add_row(
            f"{r['name']} (= {r['alias_of']})" if r["alias_of"] else r["name"], r["model"], f"{r['window']:,}", f"{r['context']:,}",
            f"{r['input_limit']:,}" if r["input_limit"] else "-", f"{r['max_output']:,}", r["overflow_when"], r["tokenizer"],
            "none" if cache is None else f"{cache['provider']} ≥{cache['min_prefix']}" + (f" /{cache['block']}" if cache["block"] > 1 else "") + f" [{rule}]",
            format_dollars(r["usd_per_mtok_in"]),
            "-" if cache is None and not unpriced else format_dollars(r["usd_per_mtok_cached"], "{:.3f}"),
            format_dollars(r["usd_per_mtok_out"]),
        )
    console.print(table)
    for text, number in rules.items():
        console.print(f"[{number}] cache {text}", markup=False, soft_wrap=True)
    console.print("Any chat model of litellm's bundled map is a profile too (-p openai/gpt-5, -p anthropic/claude-sonnet-4-5, "
                  "-p deepseek/deepseek-chat), and MODEL@WINDOW shrinks one proportionately (-p openai/gpt-5@64k).", markup=False, soft_wrap=True)


@list_app.command("formats")
def list_formats(as_json: Annotated[bool, typer.Option("--json", help=LIST_JSON_HELP)] = False) -> None:
    """Transcript formats that can be imported (auto-detected from content)."""
    from compaction_bench.importing import formats
    from compaction_bench.registry import broken

    records: list[dict[str, Any]] = [
        {"format": name, "description": cls.description, "file_names": list(cls.suffixes)} for name, cls in sorted(formats().items())
    ]
    if as_json:
        _print_records(records)
    else:
        table = Table("format", "description", "file names")
        for record in records:
            table.add_row(record["format"], record["description"], " ".join(record["file_names"]))
        console.print(table)
    for name, reason in broken().get("compaction_bench.importers", {}).items():
        errors.print(f"importer {name} failed to load: {reason}", markup=False, style="yellow")


# --------------------------------------------------------------------------- import / inspect
@app.command("import")
def import_(
    file: Annotated[str, typer.Argument(help="A transcript file in any supported format (kept as typed: `./org/name` is a path, `org/name` may be a dataset id).")],
    output: Annotated[str, typer.Option("--output", "-o", help="Where to write the canonical JSONL (a folder when the file holds several sessions).")],
    format: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "auto",
    import_option: Annotated[Optional[list[str]], typer.Option("--import-option", help=IMPORT_OPTION_HELP)] = None,
) -> None:
    """Write a transcript in the canonical compaction-bench JSONL form."""
    from compaction_bench.importing import TypedPath, load_transcripts, warn_import_problems, write_transcripts

    if not output.strip():
        raise UsageFailure("-o is empty; name the file (or the folder) to write")
    transcripts = load_transcripts(file, format=format, **_import_options(import_option))
    target = TypedPath.of(output)  # `-o ./out.jsonl` is named as typed
    # File names come from session ids inside the file: sanitized, kept inside -o, never overwriting.
    for path in write_transcripts(transcripts, target):
        console.print(f"wrote {target if path == target else path}", markup=False, soft_wrap=True)
    warn_import_problems(file, transcripts)  # once written (a refused output is the one error said)


@app.command()
def inspect(
    file: Annotated[str, typer.Argument(help="A transcript file in any supported format (kept as typed: `./org/name` is a path, `org/name` may be a dataset id).")],
    format: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "auto",
    import_option: Annotated[Optional[list[str]], typer.Option("--import-option", help=IMPORT_OPTION_HELP)] = None,
) -> None:
    """Show what a transcript holds: format, items by kind, turns, steps, usage, compactions, problems."""
    from compaction_bench.importing import load_transcripts

    for transcript in load_transcripts(file, format=format, **_import_options(import_option)):
        kinds = Counter(i.kind for i in transcript.items)
        usages = transcript.recorded_usage()
        steps = transcript.steps()
        # Everything shown from the file is escaped: its text is data, never Rich markup or terminal control.
        table = Table(title=_plain(f"{transcript.id} ({transcript.source.get('format', format)})"), show_header=False)
        table.add_row("model", _plain(transcript.model or "unknown"))
        table.add_row("items", _plain(", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))))
        table.add_row("real user turns", str(len(transcript.real_user_messages())))
        table.add_row("steps (model responses)", str(len(steps)))
        if usages:
            inputs = [u.input for u in usages]
            table.add_row("recorded usage", f"{len(usages)} responses; input {min(inputs):,} – {max(inputs):,} tokens")
        else:
            table.add_row("recorded usage", "none")
        compactions = transcript.markers("compaction")
        table.add_row("recorded compactions", str(len(compactions)))
        orphans = transcript.orphans()
        table.add_row("tool calls without result", str(len(orphans["calls_without_result"])))
        table.add_row("tool results without call", str(len(orphans["results_without_call"])))
        problems = list(transcript.meta.get("problems", ()))
        table.add_row("problems", str(len(problems)))
        console.print(table)
        for problem in problems[:20]:
            console.print(f"  {_plain(problem)}", style="yellow")
        if len(problems) > 20:
            console.print(f"  … and {len(problems) - 20} more")


def _plain(value: object) -> str:
    """Text from a transcript or run made safe to print: control characters (but line breaks and tabs)
    shown as escapes, Rich markup escaped."""
    from rich.markup import escape

    text = str(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode("ascii") for c in text)
    return escape(text)


@contextmanager
def _reading_runs(*folders: Path) -> Iterator[None]:
    """A run folder whose files are damaged (a truncated parquet, a malformed manifest) or cannot be
    written is a user error (exit 2, one line), never a traceback whose exit 1 `gate` would share
    with "the candidate regressed"; so is a folder a run is still working in. A file that cannot be
    read or written is named itself (an output in a read-only folder is not the run's fault)."""
    import pyarrow

    from compaction_bench.run_folder import LOCK_NAME, in_use

    for folder in folders:
        if in_use(folder):
            raise UsageFailure(f"{folder}: a run is still working in this folder (it holds {folder / LOCK_NAME}); wait for it to finish")
    try:
        yield
    except BenchError:
        raise
    except OSError as exc:
        if exc.filename is None:
            where = " / ".join(str(f) for f in folders)
            raise UsageFailure(f"{where}: unusable run folder ({type(exc).__name__}: {exc})") from None
        # the file it is about: one of a run's, or an output (a read-only or full folder)
        raise UsageFailure(f"{exc.filename}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, pyarrow.ArrowException) as exc:
        where = " / ".join(str(f) for f in folders)
        raise UsageFailure(f"{where}: unusable run folder ({type(exc).__name__}: {exc})") from None


# --------------------------------------------------------------------------- report
@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (runs/<id>).")],
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=0, help="Processes drawing the figures, this one included (0: one per core).")] = 0,
) -> None:
    """Render report.html again from a run's tables."""
    from compaction_bench.executors import sigterm_interrupts
    from compaction_bench.progress import ProgressEvent, display_for
    from compaction_bench.reports.html import write_report

    display = display_for()  # a large run's pages take minutes: show them as they are built, as `bench run` does
    try:
        with sigterm_interrupts(), _reading_runs(run_dir):  # SIGTERM stops it as Ctrl-C does (exit 130)
            written = write_report(run_dir, jobs=jobs, progress=lambda done, total, label: display(ProgressEvent("report", done, total, label)))
    finally:
        display.close()
    console.print(f"report: {written}", markup=False, soft_wrap=True)


@app.command()
def score(
    run_dir: Annotated[Path, typer.Argument(help="A finished run folder (runs/<id>).")],
    probes: Annotated[Optional[Path], typer.Option("--probes", help="Grade these probes instead of the run's.")] = None,
    answerer: Annotated[Optional[str], typer.Option("--answerer", help="Answer model (litellm id; default: the run's; \"\" grades presence only).")] = None,
    out_text: Annotated[Optional[str], typer.Option("--out", metavar="<path>", help="New run folder (default: <run>-scored-<time>; removed again if scoring fails).")] = None,
    in_place: Annotated[bool, typer.Option("--in-place", help="Replace the run's own tables instead.")] = False,
    report: Annotated[bool, typer.Option(help="Render report.html at the end (--no-report: tables only; `bench report RUN` renders it later).")] = True,
    allow_missing_metrics: Annotated[bool, typer.Option(help="Exit 0 even when a whole metric could not be computed (e.g. the answerer failed on every call); default: exit 3, as `bench run`.")] = False,
) -> None:
    """Measure a finished run again from its folder (stored contexts and transcripts), without replaying."""
    from compaction_bench.progress import display_for
    from compaction_bench.runner import score as score_run

    with _reading_runs(run_dir):
        root = score_run(run_dir, probes=str(probes) if probes else None, answerer=answerer, out=_output_folder(out_text, "--out"), in_place=in_place,
                         report=report, progress=display_for())  # every cell is measured again: minutes on a large run
    _print_summary(root, report=report)
    if report:
        console.print(f"report: {root / 'report.html'}", markup=False, soft_wrap=True)
    if _warn_missing_metrics(root) and not allow_missing_metrics:
        from compaction_bench.missing_metrics import EXIT_MISSING_METRICS

        raise typer.Exit(EXIT_MISSING_METRICS)


# --------------------------------------------------------------------------- compare / gate
@app.command()
def compare(
    baseline: Annotated[Path, typer.Argument(help="The baseline run folder.")],
    candidate: Annotated[Path, typer.Argument(help="The candidate run folder.")],
    html_text: Annotated[Optional[str], typer.Option("--html", metavar="<path>", help="Also write a comparison report (deltas with intervals, flipped probes, changed compactions).")] = None,
    allow_different_inputs: Annotated[bool, typer.Option(help="Compare runs whose scenarios, models, probes, options, cells or code (compaction-bench's source, litellm's or tiktoken's version) differ.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace the --html file if it exists (default: refuse, leaving it as it is).")] = False,
) -> None:
    """Two runs side by side per strategy and profile, with the change in every metric (exit 2 when they are not comparable)."""
    from compaction_bench.atomic import check_output
    from compaction_bench.reports.compare import compared_retention, shared_probes
    from compaction_bench.reports.gate import METRICS, Run, change_figure, check_comparable, compare_runs, metric_figure

    html = _output_file(html_text, "--html")
    check_output(html, replace=force, reads=(baseline, candidate))

    with _reading_runs(baseline, candidate):
        runs = (Run.load(baseline), Run.load(candidate))
        notes = check_comparable(*runs, allow_different_inputs=allow_different_inputs, allow_offline_summarizer=True, by="comparison")
        compared = compare_runs(*runs)
    for note in notes:
        errors.print(f"note: {note}", markup=False)
    table = Table("strategy", "profile", "metric", "baseline", "candidate", "change", title=_plain(f"{baseline.name} → {candidate.name}"))
    for key, values in compared.iterrows():
        strategy_name, profile_name = cast(tuple[str, str], key)  # the index is (strategy, profile)
        for metric in METRICS:
            if f"{metric}_change" in values:
                table.add_row(
                    strategy_name, profile_name, metric, metric_figure(values[f"{metric}_baseline"], metric),
                    metric_figure(values[f"{metric}_candidate"], metric), change_figure(values[f"{metric}_change"], metric),
                )
    console.print(table)
    retention = compared_retention(*shared_probes(runs)[1:], compared)  # computed once, for the terminal and the page
    _print_retention_changes(*retention)
    from compaction_bench.reports.leaderboard import offline_notes

    for note in offline_notes(baseline, candidate):
        console.print(note, markup=False, soft_wrap=True)
    if html:
        from compaction_bench.reports.compare import write_compare

        with _reading_runs(baseline, candidate):
            console.print(f"comparison report: {write_compare(baseline, candidate, html, replace=force, retention=retention)}", markup=False,
                          soft_wrap=True)


def _print_retention_changes(keys: list[tuple[str, str]], changes: dict[tuple[str, str], Any]) -> None:
    """`bench compare`'s second table: each row's retention change at the probe points both runs share, with its 95%
    interval and whether it is a claim (the comparison page's tags and their note, `reports/compare.py`)."""
    from compaction_bench.reports.compare import adjustment_note

    shown = [(key, changes[key]) for key in keys if changes.get(key) is not None]
    if not shown:
        return
    table = Table("strategy", "profile", "retention change (points)", "95% CI", "paired points", "significant",
                  title="retention at the paired probe points")
    for (strategy_name, profile_name), change in shown:
        tag = ("better" if change.mean > 0 else "worse") if change.detectable else "no detectable change"
        table.add_row(strategy_name, profile_name, f"{100 * change.mean:+.1f}", f"[{100 * change.lo:+.1f}, {100 * change.hi:+.1f}]",
                      f"{change.n:,}", tag)
    console.print(table)
    note = adjustment_note(changes)
    if note:
        console.print(note, markup=False, soft_wrap=True)


@app.command("gate")
def gate_command(
    baseline: Annotated[Path, typer.Option(help="The baseline run folder.")],
    candidate: Annotated[Path, typer.Option(help="The candidate run folder.")],
    fail_on: Annotated[list[str], typer.Option("--fail-on", help="METRIC:TOLERANCE, e.g. retention:0.02, integrity:0; repeatable. Metrics: retention (or presence), summarized_source, answered, integrity, failed_requests, overflows, refused_requests, silent_loss, estimate_ape, cache_hit_rate, rebilled_tokens, cost.")],
    alpha: Annotated[float, typer.Option(help="Significance level of the paired probe tests, from 0.001 to below 1.")] = 0.05,
    output_text: Annotated[Optional[str], typer.Option("--markdown", "--output", "-o", metavar="<path>", help="Also write the markdown summary (the pull-request comment) to this file.")] = None,
    allow_different_inputs: Annotated[bool, typer.Option(help="Compare runs whose scenarios, models, probes, options, cells or code (compaction-bench's source, litellm's or tiktoken's version) differ.")] = False,
    allow_offline_summarizer: Annotated[bool, typer.Option(help="Gate a summary-template change although the offline summarizer cannot read instructions.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace the --markdown file if it exists (default: refuse, leaving it as it is).")] = False,
) -> None:
    """Exit 1 when the candidate regresses beyond a tolerance (probe metrics, and every metric a model's summaries sample: significantly), 2 when the runs are not comparable or when some rule could be tested on no row (and none failed); prints markdown."""
    from compaction_bench.atomic import check_output, write_output
    from compaction_bench.reports.gate import Rule, gate

    output = _output_file(output_text, "--markdown")
    check_output(output, replace=force, reads=(baseline, candidate))

    rules = [Rule.parse(r) for r in fail_on]
    with _reading_runs(baseline, candidate):
        result = gate(
            baseline, candidate, rules, alpha=alpha,
            allow_different_inputs=allow_different_inputs, allow_offline_summarizer=allow_offline_summarizer,
        )
    text = result.markdown()
    print(text)
    if output:
        write_output(output, text + "\n", replace=force)
    if not result.passed:
        raise typer.Exit(1)
    if not result.tested:
        untested = ", ".join(result.untested_rules) or "no --fail-on rule"
        raise UsageFailure(
            f"{untested} could not be tested on these runs (the notes under the table say why); the gate neither passes nor fails"
        )


# --------------------------------------------------------------------------- calibrate
@app.command()
def calibrate(files: Annotated[list[Path], typer.Argument(help="Transcripts with recorded compactions (Codex, Claude Code, Pi).")]) -> None:
    """How many facts the real recorded summaries and the offline summarizer keep of the same spans (markdown table)."""
    from compaction_bench.calibrate import calibrate as calibrate_files
    from compaction_bench.calibrate import markdown

    rows = calibrate_files(files)
    if not rows:
        why = "; ".join(rows.notes)
        raise UsageFailure("no recorded compaction with a summary in these files (Codex `compacted`, Claude Code `isCompactSummary`, "
                           "Pi `compaction`)" + (f": {why}" if why else ""))
    print(markdown(rows))


# --------------------------------------------------------------------------- probes
@probes_app.command("mine")
def probes_mine(
    file: Annotated[Path, typer.Argument(help="A transcript file.")],
    output_text: Annotated[Optional[str], typer.Option("--output", "-o", metavar="<path>", help="Write the probes to this file: JSONL when it ends in .jsonl, YAML otherwise (default: YAML on stdout).")] = None,
    format: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "auto",
    import_option: Annotated[Optional[list[str]], typer.Option("--import-option", help=IMPORT_OPTION_HELP)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace --output if it exists (default: refuse, leaving it as it is).")] = False,
) -> None:
    """Mine deterministic probes (errors, artifacts, constraints, recall facts, decisions, next steps) from a transcript."""
    from compaction_bench.atomic import check_output, write_output
    from compaction_bench.importing import load_transcripts, warn_import_problems
    from compaction_bench.probes import probes_text
    from compaction_bench.progress import shown
    from compaction_bench.scenarios.mining import mine_transcripts

    output = _output_file(output_text, "--output")
    if output is not None and output.exists() and Path(file).exists() and output.samefile(file):
        raise UsageFailure(f"--output {output_text}: is the transcript this command reads; write the probes elsewhere (--force or not)")
    check_output(output, replace=force)
    sessions = load_transcripts(file, format=format, **_import_options(import_option))
    warn_import_problems(file, sessions)
    mined = mine_transcripts(sessions)
    if not mined:
        items = sum(len(t.items) for t in sessions)
        errors.print(f"note: {shown(str(file))}: no probe mined ({len(sessions)} session(s), {items} item(s): no fact a rule "
                     "recognises; see the mining rules in the README)", markup=False)
    if output:
        written = write_output(output, probes_text(mined, output.suffix), replace=force)
        console.print(f"wrote {len(mined)} probes to {written}", markup=False, soft_wrap=True)
    else:
        print(probes_text(mined, ".yaml"), end="")  # plain: YAML for a pipe, never wrapped to the terminal's width


def _absent_at_source(transcript: Transcript, probe: Probe, start: int) -> str | None:
    """Why a probe is graded absent with nothing compacted at a checkpoint right after its source: absent for every
    strategy there, `none` too (None: it is present there, or it is a `judge` probe, whose reference answer need not
    be verbatim). It is the grader's own test, `metrics.grading.presence` with the evidence `metrics.retention`
    anchors at the source item, on the uncompacted context up to and including the source (the least a checkpoint
    after it holds), normalized as a run normalizes a context. A short or numeric answer (or set member, or a
    `meta["evidence"]` term) counts only inside its evidence, so a passage the normalization changes (an evidence
    regex with a newline, which whitespace collapsing makes a space) matches nowhere and the probe is never present;
    a long answer or a regex that first occurs after the source is absent at every checkpoint before it does."""
    from compaction_bench.metrics import grading, retention
    from compaction_bench.request import message_from_item

    if probe.match == "judge":
        return None
    parts = grading.context_parts([message_from_item(i) for i in transcript.items[: start + 1] if i.kind != "marker"])
    normalized = grading.normalize_joined(parts)
    evidence = grading.anchor(probe, retention.source_text(transcript, start))
    if grading.presence(probe, "\n".join(parts), normalized, evidence).present:
        return None
    source = transcript.items[start].id
    missing = [e for e in grading.evidence_terms(probe) if not grading.occurs(e, normalized)]
    if missing:
        return f"never graded present: its evidence term {missing[0]!r} does not occur up to its source {source!r}"
    terms = [a for a in probe.answers if grading.is_short(a)] if probe.match != "regex" else []
    if not terms:
        what = "regex" if probe.match == "regex" else "answer"
        return (f"graded absent for every strategy, `none` too, at a checkpoint right after its source {source!r}: its "
                f"{what} does not occur up to it (a source should be the item that first states the fact)")
    if not evidence.spans(normalized):
        what = f"evidence regex {evidence.pattern!r}" if evidence.pattern is not None else "evidence (the line of its source stating it)"
        return (f"never graded present: its {what} matches nowhere up to its source {source!r} in the text as the "
                "grader normalizes it (case folded, each run of whitespace, newlines too, one space)")
    return f"never graded present: its short answer {terms[0]!r} does not occur inside its evidence up to its source {source!r}"


@probes_app.command("check")
def probes_check(
    file: Annotated[Path, typer.Argument(help="A transcript file.")],
    probes: Annotated[Path, typer.Option("--probes", help="The probe file (YAML/JSONL) to check against the transcript.")],
    format: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "auto",
    import_option: Annotated[Optional[list[str]], typer.Option("--import-option", help=IMPORT_OPTION_HELP)] = None,
) -> None:
    """Validate a probe file and check each probe against each session of a transcript (exit 1 on a problem)."""
    from compaction_bench.importing import load_transcripts, warn_import_problems
    from compaction_bench.probes import assign_probes, load_probes, source_index

    loaded = load_probes(probes)
    sessions = load_transcripts(file, format=format, **_import_options(import_option))
    warn_import_problems(file, sessions)
    assigned, left_out = assign_probes(sessions, loaded)
    asked = {probe.id for found in assigned for probe in found}
    problems = 0
    for gone in left_out:
        if gone.probe.id not in asked:  # a probe asked in one session is sound there
            session = f" (session {gone.session})" if gone.session is not None and len(sessions) > 1 else ""
            print(f"{gone.probe.id}\tskipped in a run: {gone.why}{session}")
            problems += 1
            asked.add(gone.probe.id)  # named once
    # a probe not present (as the grader reads it) in the uncompacted context up to its own source is absent for every
    # strategy, `none` too, at a checkpoint right after it
    absent: set[str] = set()
    for transcript, found in zip(sessions, assigned, strict=True):
        for probe in found:
            start = source_index(transcript, probe)
            why = _absent_at_source(transcript, probe, start) if start is not None and probe.id not in absent else None
            if why is not None:
                where = f" (session {transcript.id})" if len(sessions) > 1 else ""
                print(f"{probe.id}\t{why}{where}")
                problems += 1
                absent.add(probe.id)  # named once
    if not loaded:
        print(f"{_plain(str(probes))}\tholds no probe: `bench run --probes` refuses it")
        problems += 1
    print(f"{len(loaded)} probes checked: {problems} problem(s)")
    if problems:
        raise typer.Exit(1)


@probes_app.command("eval")
def probes_eval(
    file: Annotated[Path, typer.Argument(help="The transcript the labelled probes were written for.")],
    labelled: Annotated[Path, typer.Option("--labelled", help="Hand-labelled probes (YAML/JSONL) of that transcript.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the counts as JSON (for CI).")] = False,
    format: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "auto",
    import_option: Annotated[Optional[list[str]], typer.Option("--import-option", help=IMPORT_OPTION_HELP)] = None,
) -> None:
    """Mining recall by kind against hand-labelled probes, and the share of mined probes located where they say."""
    import json

    from compaction_bench.importing import load_transcripts
    from compaction_bench.probes import load_probes, source_index
    from compaction_bench.scenarios.mining import mine_probes
    from compaction_bench.scenarios.probe_eval import evaluate, markdown_table

    wanted = load_probes(labelled)
    if not wanted:
        raise UsageFailure(f"{labelled}: holds no labelled probe, so there is no recall to measure")
    sessions = load_transcripts(file, format=format, **_import_options(import_option))
    # The session the labels were written for: the one where most of their sources are found.
    located = [sum(source_index(t, p) is not None for p in wanted) for t in sessions]
    best = max(range(len(sessions)), key=located.__getitem__)
    if not located[best]:  # a recall of 0% would read as a measurement of the miner
        raise UsageFailure(f"{labelled}: none of its {len(wanted)} labelled probes has its source in {file}; "
                           "the labels were written for another transcript")
    if located[best] < len(wanted):
        errors.print(f"note: {len(wanted) - located[best]} of the {len(wanted)} labelled probes have no source in "
                     f"{file}{f' (session {sessions[best].id})' if len(sessions) > 1 else ''}; they count as not recalled", markup=False)
    transcript = sessions[best]
    result = evaluate(transcript, wanted, mine_probes(transcript))
    print(json.dumps(result.to_dict(), indent=2) if as_json else markdown_table(result))


# --------------------------------------------------------------------------- fidelity
@fidelity_app.command("pi")
def fidelity_pi(
    file: Annotated[Path, typer.Argument(help="A Pi session JSONL with recorded compactions.")],
    profile: Annotated[
        Optional[str],
        typer.Option("--profile", "-p", help="Model profile whose window the replays use (see `bench list profiles`; any litellm model id, "
                     "MODEL@WINDOW). Default: the session model's, built in or from litellm's model map."),
    ] = None,
) -> None:
    """Pi's recorded compactions next to the `pi`, `pi-2026-03` and `pi-2025-12` replays (markdown table)."""
    from compaction_bench.fidelity import fidelity_table
    from compaction_bench.profiles import get_profile

    if profile is not None:
        get_profile(profile)  # an unknown profile is refused before the session is read
    print(fidelity_table(file, profile=profile))  # a markdown table: plain lines, never wrapped to the terminal's width


def _once_each(files: Sequence[Path]) -> None:
    """Refuse a file named twice, as `run` and `calibrate` do (its rows would be in the table twice)."""
    from compaction_bench.runner import repeated_path

    if (repeated := repeated_path(files)) is not None:
        raise UsageFailure(repeated)


@fidelity_app.command("claude-code")
def fidelity_claude_code(
    files: Annotated[list[Path], typer.Argument(help="Claude Code session JSONL files.")],
    max_output_tokens: Annotated[
        int | None, typer.Option(help="CLAUDE_CODE_MAX_OUTPUT_TOKENS of the recording (unset: 32,000).")
    ] = None,
    strategy: Annotated[list[str], typer.Option("--strategy", "-s", help="Claude Code strategies to replay (claude-code, claude-code-2.1).")] = ["claude-code"],  # noqa: B006
) -> None:
    """Every recorded compact_boundary next to the replay's trigger decision with recorded usage (markdown table)."""
    from compaction_bench.fidelity import claude_code_fidelity_rows, claude_code_fidelity_table, simulated_rows_note

    _once_each(files)
    options = {"max_output_tokens_env": max_output_tokens} if max_output_tokens is not None else {}
    rows = [row for file in files for row in claude_code_fidelity_rows(file, strategies=strategy, options=options)]
    if not rows:  # an empty table would read as agreement
        raise UsageFailure(f"no recorded compaction (a compact_boundary) in {', '.join(map(str, files))} to set the replays beside; "
                           "`bench inspect` counts a file's compactions")
    print(claude_code_fidelity_table(rows))
    if (note := simulated_rows_note(rows)) is not None:  # the table says it per row; this says why
        errors.print(f"note: {note}", markup=False)


@fidelity_app.command("cache")
def fidelity_cache(
    files: Annotated[list[Path], typer.Argument(help="Transcript files whose recorded usage has cached tokens (Claude Code, Codex).")],
    profile: Annotated[str, typer.Option(help="Profile, or 'auto': claude-* models on the Claude profiles, the rest on gpt-5.")] = "auto",
) -> None:
    """Modelled against recorded cached tokens, replaying `none` with recorded usage (markdown table)."""
    from compaction_bench.fidelity import recorded_agreement
    from compaction_bench.importing import load_transcripts
    from compaction_bench.profiles import get_profile

    _once_each(files)
    if profile != "auto":
        get_profile(profile)  # an unknown profile is refused before any output
    rows = []  # every file is read before the table starts: an unreadable one is an error, not half a table
    for file in files:
        for transcript in load_transcripts(file):
            chosen = profile if profile != "auto" else _profile_for(transcript.model)
            a = recorded_agreement(transcript, chosen)
            rows.append("| " + " | ".join(_agreement_cells(Path(file.parent.name, file.name).as_posix(), chosen, a)) + " |")
    print("| file | profile | requests | not compared (after the recording's compaction) | with recorded cache "
          "| recorded hit rate (the unrecorded prefix included) | modelled hit rate (the replayed messages) | recorded uncached tokens "
          "| modelled uncached tokens | uncached input error (Σ abs. difference / Σ replayed tokens) "
          "| uncached input error per request (median of abs. difference / replayed tokens) | unrecorded tokens (median) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


def _agreement_cells(file: str, profile: str, a: dict[str, Any]) -> list[str]:
    """One row of `fidelity cache` (`fidelity.recorded_agreement`). The uncached figures do not move with the
    unrecorded prefix the provider cached; the recorded hit rate does, so it is labelled with it."""
    def share(key: str) -> str:
        return f"{a[key]:.3f}" if a[key] is not None else "–"

    return [
        file, profile, str(a["requests"]), str(a["requests_not_compared"]), str(a["requests_with_recorded_cache"]),
        share("recorded_hit_rate"), share("modelled_hit_rate"), f"{a['recorded_uncached_tokens']:,}", f"{a['modelled_uncached_tokens']:,}",
        share("uncached_error_share"), share("uncached_error_median"),
        f"{a['unrecorded_tokens_median']:,.0f}" if a["unrecorded_tokens_median"] is not None else "–",
    ]


def _profile_for(model: str | None) -> str:
    model = (model or "").lower()
    if "opus" in model:
        return "claude-opus"
    if "claude" in model or "sonnet" in model:
        return "claude-sonnet"
    return "gpt-5"


def _click_error() -> Any:
    """The base class of command-line parsing errors (typer bundles its own click, not importable by a public name)."""
    return next(cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "ClickException")


def main() -> None:
    """Console entry point.

    Exit status: 0 success; 1 a check that failed (a gate rule, a failed cell); 2 a user error —
    a command-line mistake or bad input — printed as one `error: …` line without a traceback (a
    group called without a command prints its help alone); 3 `bench run` or `bench score` finished
    but a whole metric could not be computed (`--allow-missing-metrics`); 130 interrupted (with how
    to finish the run when a run folder was left to resume).
    """
    handled = _user_errors()
    try:
        status = app(standalone_mode=False)
    except handled as exc:
        from compaction_bench.progress import shown

        print(f"error: {shown(str(exc))}", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as exc:
        if not str(exc).startswith("Symlink loop"):  # pathlib's resolve() of a link loop before Python 3.13 (an OSError since)
            raise
        from compaction_bench.progress import shown

        print(f"error: {shown(str(exc))}", file=sys.stderr)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        errors.print(_interrupted(), markup=False)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except _click_error() as exc:
        if _is_help_only(exc):  # `bench`, `bench list`: the help was printed, there is no error to add
            sys.exit(2)
        ctx = getattr(exc, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        print(f"error: {where}{exc.format_message()}{hint}", file=sys.stderr)
        sys.exit(2)
    if status == 130:  # typer turns Ctrl-C (and SIGTERM during a run) into Exit(130) before it reaches us
        errors.print(_interrupted(), markup=False)
    sys.exit(status if isinstance(status, int) else 0)


def _interrupted() -> str:
    """What to say after Ctrl-C (or SIGTERM): how to finish the run, when one was left with a manifest to resume."""
    left = [folder for folder in _claimed if (folder / "manifest.json").is_file()]
    if not left:
        return "interrupted"
    folder = left[-1]
    return f"interrupted; finish the run with `bench run --resume` and the same arguments (--run-id {folder.name} -o {folder.parent})"


def _is_help_only(exc: Any) -> bool:
    """A group called without a command (`no_args_is_help`): click prints the help, and its error has no message."""
    return any(cls.__name__ == "NoArgsIsHelpError" for cls in type(exc).__mro__)


if __name__ == "__main__":
    main()
