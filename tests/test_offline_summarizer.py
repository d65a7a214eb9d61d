"""The offline extractive summarizer: salience decides what fits, section titles only the layout,
and the budget is the strategy's own summary limit."""

from __future__ import annotations

import re

import pytest

import compaction_bench as bench
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.offline_models import extractive_summary
from compaction_bench.templates import default_prompt_dir

CONVERSATION = [
    {"role": "user", "content": "Fix the flaky upload test. You must never touch the vendored libs in third_party/."},
    {"role": "assistant", "content": "Reading tests/test_upload.py first."},
    {"role": "tool", "content": "def test_upload():\n    assert client.upload(b'x') == 200\nAssertionError: 503 != 200"},
    {"role": "assistant", "content": "I decided to retry on 503 because the server is rate limited."},
    {"role": "tool", "content": "just some ordinary output line\nanother unremarkable line of output"},
    {"role": "assistant", "content": "Updated src/upload/client.py with a retry; next I will run the suite."},
]
LAYOUT = "Summarize the conversation above with these sections:\n\n## {a}\n...\n\n## {b}\n...\n\n## {c}\n...\n"


def bullets(summary: str) -> set[str]:
    return {line[2:] for line in summary.splitlines() if line.startswith("- ") and line != "- (none)"}


def test_renamed_headings_select_the_same_lines():
    first = extractive_summary([*CONVERSATION, {"role": "user", "content": LAYOUT.format(a="Goal", b="Errors", c="Next steps")}], 2000)
    renamed = extractive_summary(
        [*CONVERSATION, {"role": "user", "content": LAYOUT.format(a="What the user wants", b="Problems hit", c="Upcoming")}], 2000
    )
    assert bullets(first) == bullets(renamed) and bullets(first)
    assert "## What the user wants" in renamed and "## Goal" not in renamed  # the template decides the layout


def test_salient_lines_win_when_the_budget_is_tight():
    summary = extractive_summary([*CONVERSATION, {"role": "user", "content": LAYOUT.format(a="Goal", b="Errors", c="Next")}], 60)
    kept = bullets(summary)
    assert any("must never touch the vendored libs" in line for line in kept)  # the user's constraint comes first
    assert not any("unremarkable" in line for line in kept)


def test_the_budget_follows_the_strategy_limit():
    long = [{"role": "tool", "content": "\n".join(f"error: step {n} failed in src/mod_{n}.py" for n in range(400))}]
    ask = {"role": "user", "content": LAYOUT.format(a="Goal", b="Errors", c="Next")}
    small, large = extractive_summary([*long, ask], 100), extractive_summary([*long, ask], 1000)
    assert len(small) <= 100 * 3 < len(large) <= 1000 * 3


def _rename(text: str, names: dict[str, str]) -> str:
    for old, new in names.items():
        text = re.sub(rf"^(#+ ){re.escape(old)}$", rf"\g<1>{new}", text, flags=re.M)
    return text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "template", "names"),
    [
        ("codex-local", "codex_summary.j2", {
            "Progress and key decisions": "What was done and decided",
            "Context, constraints and user preferences": "Rules the user set",
            "Remaining work and next steps": "Still to do",
            "Critical data, examples and references": "Data and references",
        }),
        ("opencode-v1", "opencode_summary.j2", {
            "Objective": "Aim", "Important Details": "Key facts", "Work State": "Status", "Next Move": "Then", "Relevant Files": "Files touched",
        }),
    ],
)
def test_renaming_a_templates_headings_keeps_the_facts_within_ten_percent(tmp_path, strategy, template, names):
    from compaction_bench.scenarios.synthetic import default_suite

    scenario = next(s for s in default_suite() if s.name.startswith("synthetic-constraint-change"))
    original = (default_prompt_dir() / template).read_text(encoding="utf-8")
    renamed = _rename(original, names)
    assert renamed != original and all(f" {new}\n" in renamed for new in names.values())
    path = tmp_path / template
    path.write_text(renamed, encoding="utf-8")
    counts = []
    for prompts in ({}, {template: str(path)}):
        result = bench.replay(scenario.transcript, strategy, profile="32k", prompts=prompts)
        assert result.compactions, "the scenario must compact at 32k"
        rows = measure_cell(result, list(scenario.probes), answerer=None).probes
        counts.append(sum(1 for r in rows if r["in_summary"]))
    assert counts[0] > 0
    assert abs(counts[1] - counts[0]) <= 0.1 * counts[0], counts
