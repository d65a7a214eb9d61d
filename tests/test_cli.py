"""The `bench` command line: listings, import/inspect, and one clear line for every user error."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from compaction_bench.transcript import Item, Transcript

BENCH = [sys.executable, "-m", "compaction_bench.cli"]


def bench(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def assert_user_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    text = " ".join(lines)
    assert text.startswith("error: ")
    for fragment in fragments:
        assert fragment in text


@pytest.fixture
def canonical_file(tmp_path: Path) -> Path:
    t = Transcript(
        "tiny",
        (
            Item("u0", "user", "hello", turn=0),
            Item("c0", "tool_call", call_id="c", tool_name="bash", arguments="{}", response=0, turn=0),
            Item("r0", "tool_result", "ok", call_id="c", turn=0),
            Item("a0", "assistant", "bye", response=1, turn=0),
        ),
    )
    return t.write(tmp_path / "tiny.jsonl")


def test_list_profiles_shows_windows():
    proc = bench("list", "profiles")
    assert proc.returncode == 0
    assert "272,000" in proc.stdout and "200,000" in proc.stdout and "32,000" in proc.stdout


def test_list_profiles_shows_the_cached_price_a_request_is_billed():
    # ft:gpt-4o-2024-11-20 has no cached price in litellm's map: a hit is billed at GPT-4o's 50% (evaluation.md §7),
    # $1.875 of its $3.75 input; gpt-4o-2024-05-13 is the snapshot OpenAI's caching excluded, and claude-v2 predates
    # prompt caching (no cache, no cached price)
    proc = bench("list", "profiles", "ft:gpt-4o-2024-11-20", "gpt-4o-2024-05-13", "bedrock/anthropic.claude-v2:1")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[-4:-1]] for line in proc.stdout.splitlines()
            if line.startswith(("│ ft:gpt-4o", "│ gpt-4o"))}
    assert rows == {"ft:gpt-4o-2024-11-20": ["3.75", "1.875", "15.00"], "gpt-4o-2024-05-13": ["5.00", "-", "15.00"]}
    cells = next(cells for line in proc.stdout.splitlines() if len(cells := [c.strip() for c in line.split("│")]) > 12
                 and "claude-v2:1" in cells[1])
    assert cells[9] == "none" and cells[11] == "-"


def test_list_strategies_shows_baselines():
    proc = bench("list", "strategies")
    assert proc.returncode == 0
    for name in ("none", "truncate", "observation-masking"):
        assert name in proc.stdout


def test_unknown_strategy(canonical_file):
    assert_user_error(bench("run", str(canonical_file), "-s", "nope", "--probes", "none.yaml"), "unknown strategy 'nope'")


def test_unknown_profile(canonical_file):
    assert_user_error(bench("run", str(canonical_file), "-s", "none", "-p", "3k"), "unknown profile '3k'", "known: gpt-5")


def test_unknown_option(canonical_file):
    assert_user_error(bench("run", str(canonical_file), "-s", "truncate", "--option", "truncate.colour=red"), "colour", "valid:")


def test_missing_file(tmp_path):
    assert_user_error(bench("inspect", str(tmp_path / "absent.jsonl")), "absent.jsonl: no such file")


def test_malformed_line_names_file_and_line(canonical_file):
    lines = canonical_file.read_text().split("\n")
    lines[2] = lines[2][: len(lines[2]) // 2]
    canonical_file.write_text("\n".join(lines))
    assert_user_error(bench("inspect", str(canonical_file)), f"{canonical_file}:3: malformed JSON")


def test_import_then_inspect_round_trip(canonical_file, tmp_path):
    out = tmp_path / "again.jsonl"
    proc = bench("import", str(canonical_file), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert Transcript.read(out) == Transcript.read(canonical_file)
    proc = bench("inspect", str(out))
    assert proc.returncode == 0
    assert "steps (model responses)" in proc.stdout and "│ 2" in proc.stdout


def test_the_terminal_shows_the_columns_that_fit_whole_most_telling_first():
    """Hand-computed: each column needs its longest cell (or its header's longest word) plus 3, the table 1 more;
    the strategy's name is always shown, then by `TERMINAL_PRIORITY` while they fit, in table order."""
    from compaction_bench.reports.leaderboard import terminal_columns

    header = ["strategy", "profile", "retention [95% CI]", "window", "cost $"]
    rows = [["a-very-long-name", "64k", "0.900 [0.80, 0.95]", "ok", "1.00"]]
    # widths 16, 7 ("profile"), 18, 6 ("window"), 4: 19 + 10 + 21 + 9 + 7, plus 1
    assert terminal_columns(header, rows, 67) == [0, 1, 2, 3, 4]
    assert terminal_columns(header, rows, 60) == [0, 1, 2, 3]
    assert terminal_columns(header, rows, 59) == [0, 1, 2, 4]  # the window does not fit; the narrower cost does
    assert terminal_columns(header, rows, 10) == [0]


def test_the_run_s_leaderboard_shows_whole_numbers_and_names_the_columns_left_out(tmp_path):
    """`bench run` piped (220 columns), on a session `none` cannot serve at `32k`: the 26 columns do not all
    fit, and no cell is cut ("0.8…" would read as another number), the table fits, the one profile is in
    the title, retention with its interval and the window's mark are shown, and the columns left out are named."""
    from compaction_bench.scenarios.synthetic import generate

    session = tmp_path / "session.jsonl"
    generate("short-turns", seed=1, target_tokens=60_000).transcript.write(session)
    proc = bench("run", str(session), "-s", "none", "-s", "truncate", "-p", "32k", "--no-report", "-o", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 220 for line in table) and "…" not in proc.stdout
    assert any("profile 32k" in line for line in lines)
    none_row = next(line for line in table if line.startswith("│ none "))
    assert "cannot serve (1 of 1)" in none_row and re.search(r"\d\.\d{3} \[\d\.\d\d, \d\.\d\d\]", none_row)
    (left_out,) = [line for line in lines if line.startswith("not shown at this width: ")]
    assert "report.html" in left_out
