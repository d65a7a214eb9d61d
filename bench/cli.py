"""The `bench` command line: run, list, import, inspect, report, probes and fidelity.

Errors a user can cause (a missing or malformed file, an unknown strategy, profile, option or
format) end in one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from compaction_bench.errors import BenchError

app = typer.Typer(
    help="compaction-bench: replay agent transcripts through context-compaction strategies and measure them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
list_app = typer.Typer(help="List strategies, profiles or transcript formats.", no_args_is_help=True)
probes_app = typer.Typer(help="Probe questions: mine them from transcripts.", no_args_is_help=True)
fidelity_app = typer.Typer(help="Compare a strategy's decisions with a real agent's recorded ones.", no_args_is_help=True)
app.add_typer(list_app, name="list")
app.add_typer(probes_app, name="probes")
app.add_typer(fidelity_app, name="fidelity")

# Piped output is not wrapped at 80 columns: tables stay whole for files and other programs.
console = Console(width=None if sys.stdout.isatty() else 220)
errors = Console(stderr=True)


class UsageFailure(BenchError):
    """Raised inside commands for a user error that is not one of the library's error classes."""


IMPORT_OPTION_HELP = "Importer option KEY=VALUE, e.g. branch=<leaf id> (Pi), chain=sidechains (Claude Code); repeatable."


def _import_options(flags: list[str] | None) -> dict[str, str]:
    out = {}
    for flag in flags or ():
        key, eq, value = flag.partition("=")
        if not eq or not key:
            raise UsageFailure(f"--import-option {flag!r}: expected KEY=VALUE")
        out[key] = value
    return out


def _user_errors() -> tuple[type[BaseException], ...]:
    from compaction_bench.importing import ImportFailure
    from compaction_bench.llm import LLMError
    from compaction_bench.probes import ProbeError
    from compaction_bench.profiles import ProfileError
    from compaction_bench.registry import RegistryError
    from compaction_bench.reports.gate import GateError
    from compaction_bench.runner import RunError
    from compaction_bench.store import StoreError
    from compaction_bench.strategy import OptionError
    from compaction_bench.templates import TemplateError
    from compaction_bench.transcript import TranscriptError

    return (
        GateError, ImportFailure, TranscriptError, LLMError, ProbeError, ProfileError, RegistryError, RunError,
        StoreError, OptionError, TemplateError, UsageFailure, FileNotFoundError, IsADirectoryError, PermissionError,
    )


# --------------------------------------------------------------------------- run
@app.command()
def run(
    paths: Annotated[Optional[list[Path]], typer.Argument(help="Transcript files (any supported format). Default: the embedded synthetic suite.")] = None,
    strategy: Annotated[Optional[list[str]], typer.Option("--strategy", "-s", help="Strategy id, path/file.py:Class, or a variant ID@KEY=VALUE[,KEY=VALUE]; repeatable. Default: all built-in strategies.")] = None,
    profile: Annotated[Optional[list[str]], typer.Option("--profile", "-p", help="Model profile; repeatable (see `bench list profiles`).")] = None,
    summarizer: Annotated[str, typer.Option(help="litellm model id of the summarizer.")] = "offline/extractive",
    answerer: Annotated[str, typer.Option(help="litellm model id that answers probe questions.")] = "offline/reader",
    judge: Annotated[Optional[str], typer.Option(help="litellm model id of the judge for `judge` probes (unscored without one).")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder that holds runs.")] = Path("runs"),
    run_id: Annotated[Optional[str], typer.Option(help="Name of the run folder (default: a timestamp).")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Worker processes (0: one per core).")] = 0,
    executor: Annotated[str, typer.Option(help="'local' (processes on this machine) or 'ray' (a Ray cluster; needs the `ray` extra).")] = "local",
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address (default: start a local Ray).")] = None,
    resume: Annotated[bool, typer.Option(help="Finish an interrupted run (the newest, or --run-id), redoing only unfinished cells.")] = False,
    option: Annotated[Optional[list[str]], typer.Option("--option", help="Strategy option STRATEGY.KEY=VALUE; repeatable.")] = None,
    prompt: Annotated[Optional[list[str]], typer.Option("--prompt", help="Replace a prompt template TEMPLATE=FILE; repeatable.")] = None,
    probes: Annotated[Optional[str], typer.Option(help="Probe file (YAML/JSONL), or 'auto' to mine probes (default for transcript files).")] = None,
    usage: Annotated[str, typer.Option(help="'simulated' usage, or 'recorded' to feed the transcript's own usage.")] = "simulated",
    repeat: Annotated[int, typer.Option(help="Repeats per cell (answer samples vote).")] = 1,
    format: Annotated[str, typer.Option("--format", help="Force a transcript format (see `bench list formats`).")] = "auto",
    import_option: Annotated[Optional[list[str]], typer.Option("--import-option", help=IMPORT_OPTION_HELP)] = None,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic suite.")] = 0,
) -> None:
    """Replay scenarios through strategies and write runs/<id>/ with tables and report.html."""
    from compaction_bench.runner import parse_option_flags, parse_prompt_flags
    from compaction_bench.runner import run as run_benchmark

    progress = Progress(
        TextColumn("[bold]cells"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"),
        console=errors, transient=False,
    )
    task_ids: list[int] = []

    def on_start(total: int) -> None:
        task_ids.append(progress.add_task("", total=total))
        progress.start()

    def on_cell(key, status: str) -> None:
        label = f"{key.scenario} · {key.strategy} · {key.profile}"
        if status != "done":
            progress.console.print(f"cell {label} {status}", markup=False, style="red")
        progress.update(task_ids[0], advance=1, description=label)

    try:
        root = run_benchmark(
            paths or (),
            strategy or (),
            profile or (),
            out=out, run_id=run_id, jobs=jobs, executor=executor, address=address, resume=resume, summarizer=summarizer, answerer=answerer,
            judge=judge, usage=usage, repeats=repeat, options=parse_option_flags(option or ()),
            prompts=parse_prompt_flags(prompt or ()), probes=probes, format=format, seed=seed,
            import_options=_import_options(import_option),
            on_start=on_start, on_cell=on_cell,
        )
    finally:
        progress.stop()
    _print_summary(root)
    console.print(f"report: {root / 'report.html'}")


def _print_summary(root: Path) -> None:
    import pandas as pd

    from compaction_bench.reports.leaderboard import leaderboard

    header, rows = leaderboard(pd.read_parquet(root / "summary.parquet"))
    table = Table(title=f"run {root.name}")
    for title in header:
        label = title in ("strategy", "profile")
        table.add_column(title, justify="left" if label else "right", no_wrap=label)
    for row in rows:
        table.add_row(*row)
    console.print(table)


# --------------------------------------------------------------------------- list
@list_app.command("strategies")
def list_strategies() -> None:
    """Registered strategies with their spec and options."""
    from compaction_bench.registry import broken, strategies
    from compaction_bench.strategy import StrategyInfo

    table = Table("id", "what", "spec", "options (defaults)")
    for name, cls in strategies().items():
        info = StrategyInfo.of(cls)
        options = ", ".join(f"{k}={v!r}" for k, v in info.options.items())
        table.add_row(name, info.description, info.spec, options)
    console.print(table)
    for name, reason in broken().get("compaction_bench.strategies", {}).items():
        errors.print(f"[yellow]strategy {name} failed to load: {reason}")


@list_app.command("profiles")
def list_profiles() -> None:
    """Model profiles: window, output, tokenizer, cache rules and prices."""
    from compaction_bench.profiles import PROFILES

    table = Table("name", "model", "window", "max output", "tokenizer", "cache", "$/Mtok in", "$/Mtok cached", "$/Mtok out")
    for p in PROFILES.values():
        cache = f"{p.cache.provider} ≥{p.cache.min_prefix}" + (f" /{p.cache.block}" if p.cache.block > 1 else "")
        table.add_row(
            p.name, p.model, f"{p.context_window:,}", f"{p.max_output:,}", p.tokenizer, cache,
            f"{p.prices.input * 1e6:.2f}", f"{p.prices.cached_input * 1e6:.3f}", f"{p.prices.output * 1e6:.2f}",
        )
    console.print(table)


@list_app.command("formats")
def list_formats() -> None:
    """Transcript formats that can be imported (auto-detected from content)."""
    from compaction_bench.importing import formats
    from compaction_bench.registry import broken

    table = Table("format", "description", "file names")
    for name, cls in sorted(formats().items()):
        table.add_row(name, cls.description, " ".join(cls.suffixes))
    console.print(table)
    for name, reason in broken().get("compaction_bench.importers", {}).items():
        errors.print(f"[yellow]importer {name} failed to load: {reason}")


# --------------------------------------------------------------------------- import / inspect
@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="A transcript file in any supported format.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the canonical JSONL (a folder when the file holds several sessions).")],
    format: Annotated[str, typer.Option("--format", help="Force a format.")] = "auto",
    import_option: Annotated[Optional[list[str]], typer.Option("--import-option", help=IMPORT_OPTION_HELP)] = None,
) -> None:
    """Write a transcript in the canonical compaction-bench JSONL form."""
    from compaction_bench.importing import load_transcripts

    transcripts = load_transcripts(file, format=format, **_import_options(import_option))
    if len(transcripts) == 1:
        written = [transcripts[0].write(output)]
    else:
        written = [t.write(output / f"{t.id}.jsonl") for t in transcripts]
    for path in written:
        console.print(f"wrote {path}")


@app.command()
def inspect(
    file: Annotated[Path, typer.Argument(help="A transcript file in any supported format.")],
    format: Annotated[str, typer.Option("--format", help="Force a format.")] = "auto",
    import_option: Annotated[Optional[list[str]], typer.Option("--import-option", help=IMPORT_OPTION_HELP)] = None,
) -> None:
    """Show what a transcript holds: format, items by kind, turns, steps, usage, compactions, problems."""
    from compaction_bench.importing import load_transcripts

    for transcript in load_transcripts(file, format=format, **_import_options(import_option)):
        kinds = Counter(i.kind for i in transcript.items)
        usages = transcript.recorded_usage()
        steps = transcript.steps()
        table = Table(title=f"{transcript.id} ({transcript.source.get('format', format)})", show_header=False)
        table.add_row("model", str(transcript.model or "unknown"))
        table.add_row("items", ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
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
            console.print(f"  [yellow]{problem}")
        if len(problems) > 20:
            console.print(f"  … and {len(problems) - 20} more")


# --------------------------------------------------------------------------- report
@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A run folder (runs/<id>).")]) -> None:
    """Render report.html again from a run's tables."""
    from compaction_bench.reports.html import write_report

    console.print(f"report: {write_report(run_dir)}")


# --------------------------------------------------------------------------- compare / gate
@app.command()
def compare(
    baseline: Annotated[Path, typer.Argument(help="The baseline run folder.")],
    candidate: Annotated[Path, typer.Argument(help="The candidate run folder.")],
) -> None:
    """Two runs side by side per strategy and profile, with the change in every metric."""
    from compaction_bench.reports.gate import METRICS, compare_runs

    compared = compare_runs(baseline, candidate)
    table = Table("strategy", "profile", "metric", "baseline", "candidate", "change", title=f"{baseline.name} → {candidate.name}")
    for (strategy_name, profile_name), values in compared.iterrows():
        for metric in METRICS:
            if f"{metric}_change" in values:
                table.add_row(
                    strategy_name, profile_name, metric, f"{values[f'{metric}_baseline']:.4g}",
                    f"{values[f'{metric}_candidate']:.4g}", f"{values[f'{metric}_change']:+.4g}",
                )
    console.print(table)


@app.command("gate")
def gate_command(
    baseline: Annotated[Path, typer.Option(help="The baseline run folder.")],
    candidate: Annotated[Path, typer.Option(help="The candidate run folder.")],
    fail_on: Annotated[list[str], typer.Option("--fail-on", help="METRIC:TOLERANCE, e.g. presence:0.02, integrity:0; repeatable.")],
    alpha: Annotated[float, typer.Option(help="Significance level of the paired probe tests.")] = 0.05,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the markdown summary to this file.")] = None,
) -> None:
    """Exit 1 when the candidate regresses beyond a tolerance (probe metrics: significantly); prints markdown."""
    from compaction_bench.reports.gate import Rule, gate

    result = gate(baseline, candidate, [Rule.parse(r) for r in fail_on], alpha=alpha)
    text = result.markdown()
    print(text)
    if output:
        output.write_text(text + "\n", encoding="utf-8")
    if not result.passed:
        raise typer.Exit(1)


# --------------------------------------------------------------------------- probes
@probes_app.command("mine")
def probes_mine(
    file: Annotated[Path, typer.Argument(help="A transcript file.")],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the probes to a .yaml or .jsonl file.")] = None,
    format: Annotated[str, typer.Option("--format", help="Force a format.")] = "auto",
) -> None:
    """Mine deterministic probes (artifacts, errors, constraints, commands, plans, decisions) from a transcript."""
    from compaction_bench.importing import load_transcript
    from compaction_bench.probes import write_probes
    from compaction_bench.scenarios.mining import mine_probes

    mined = mine_probes(load_transcript(file, format=format))
    if output:
        console.print(f"wrote {len(mined)} probes to {write_probes(mined, output)}")
    else:
        import yaml

        console.print(yaml.safe_dump([p.to_dict() for p in mined], sort_keys=False, allow_unicode=True), markup=False)


# --------------------------------------------------------------------------- fidelity
@fidelity_app.command("pi")
def fidelity_pi(file: Annotated[Path, typer.Argument(help="A Pi session JSONL with recorded compactions.")]) -> None:
    """Pi's recorded compactions next to the `pi` and `pi-2026-03` replays (markdown table)."""
    from compaction_bench.fidelity import fidelity_table

    console.print(fidelity_table(file), markup=False)


@fidelity_app.command("cache")
def fidelity_cache(
    files: Annotated[list[Path], typer.Argument(help="Transcript files whose recorded usage has cached tokens (Claude Code, Codex).")],
    profile: Annotated[str, typer.Option(help="Profile, or 'auto': claude-* models on the Claude profiles, the rest on gpt-5.")] = "auto",
) -> None:
    """Modelled against recorded cached tokens, replaying `none` with recorded usage (markdown table)."""
    from compaction_bench.importing import load_transcripts
    from compaction_bench.fidelity import recorded_agreement

    print("| file | profile | requests | with recorded cache | recorded hit rate | modelled hit rate | MAE (share of input) | MAE tokens / recorded input | unrecorded tokens (median) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for file in files:
        for transcript in load_transcripts(file):
            chosen = profile if profile != "auto" else _profile_for(transcript.model)
            a = recorded_agreement(transcript, chosen)
            cells = [
                f"{file.parent.name}/{file.name}", chosen, str(a["requests"]), str(a["requests_with_recorded_cache"]),
                *(f"{a[k]:.3f}" if a[k] is not None else "–" for k in ("recorded_hit_rate", "modelled_hit_rate", "mae_share", "mae_tokens_share")),
                f"{a['unrecorded_tokens_median']:,.0f}" if a["unrecorded_tokens_median"] is not None else "–",
            ]
            print("| " + " | ".join(cells) + " |")


def _profile_for(model: str | None) -> str:
    model = (model or "").lower()
    if "opus" in model:
        return "claude-opus"
    if "claude" in model or "sonnet" in model:
        return "claude-sonnet"
    return "gpt-5"


def main() -> None:
    """Console entry point: user errors become one line on stderr and exit status 2."""
    handled = _user_errors()
    try:
        app(standalone_mode=False)
    except handled as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        errors.print("interrupted; finish the run with `bench run --resume`")
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except __import__("click").ClickException as exc:
        exc.show()
        sys.exit(2)


if __name__ == "__main__":
    main()
