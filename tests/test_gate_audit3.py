"""What makes two runs comparable, and how the gate labels its p-values (the third outside audit of the verdicts):
hand-built run folders (`tests.test_verdict_audit_gate.write_run`) whose answers follow from the rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction_bench.reports.gate import GateError, Rule, Run, comparability, gate
from tests.test_verdict_audit_gate import probe_rows, write_run


def _scenarios(**identity) -> list[dict]:
    return [{"name": f"s{k}", "sha256": f"{k:064x}", "probes_sha256": f"{k + 100:064x}", **identity} for k in range(2)]


@pytest.mark.parametrize(
    ("key", "left", "right"),
    [
        ("import_options", {"messages": "a"}, {"messages": "b"}),  # another column of one Hugging Face file
        ("format", "claude-code", "generic-jsonl"),
        ("session_id", "one", "two"),  # another session of one multi-session file
        ("session_index", 0, 3),
    ],
)
def test_one_file_read_another_way_is_another_transcript(tmp_path, key, left, right):
    """The same file (same sha256) imported with another option, as another format or as another session of it holds
    other messages: `--resume` refuses such a change, and the gate gave a verdict on it (exit 1) as if it were one
    transcript."""
    rows = probe_rows("x", 2, 10)
    a = write_run(tmp_path / "a", rows, scenarios=_scenarios(**{key: left}))
    b = write_run(tmp_path / "b", rows, scenarios=_scenarios(**{key: right}))
    with pytest.raises(GateError, match=rf"scenario 's0': {key} differs"):
        gate(a, b, [Rule.parse("retention:0")])
    same = write_run(tmp_path / "c", rows, scenarios=_scenarios(**{key: left}))
    assert gate(a, same, [Rule.parse("retention:0")]).passed


def _with_templates(root: Path, rendered: dict[str, str], template_set: dict[str, str] | None) -> Run:
    path = root / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["template_hashes"] = rendered
    if template_set is not None:
        manifest["template_set_hashes"] = template_set
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return Run.load(root)


STOCK, EDITED = "a" * 64, "b" * 64


def test_a_template_only_one_run_rendered_is_compared_with_the_other_runs_text(tmp_path):
    """A run records the templates its cells rendered; one whose strategy never compacted rendered none. The same
    stock text in both runs' template sets is no change (it was "templates whose text differs"); another text is."""
    rows = probe_rows("x", 2, 10)
    compacted = _with_templates(write_run(tmp_path / "a", rows), {"codex_summary.j2": STOCK}, {"codex_summary.j2": STOCK})
    quiet = _with_templates(write_run(tmp_path / "b", rows), {}, {"codex_summary.j2": STOCK})
    assert comparability(compacted, quiet) == ([], [])
    edited = _with_templates(write_run(tmp_path / "c", rows), {}, {"codex_summary.j2": EDITED})
    assert comparability(compacted, edited) == ([], ["templates whose text differs: codex_summary.j2"])
    older = _with_templates(write_run(tmp_path / "d", rows), {}, None)  # a run made before template sets were recorded
    (note,) = comparability(compacted, older)[1]
    assert "not recorded" in note and "codex_summary.j2" in note and "text differs" not in note


def test_a_new_run_records_the_hash_of_every_template_it_could_render(tmp_path):
    from compaction_bench.templates import PromptSet, default_prompt_dir

    hashes = PromptSet().text_hashes()
    assert set(hashes) == {p.name for p in default_prompt_dir().glob("*.j2")}
    override = tmp_path / "mine.j2"
    override.write_text("Summarize.\n", encoding="utf-8")
    assert PromptSet({"pi_summary.j2": str(override)}).text_hashes()["pi_summary.j2"] != hashes["pi_summary.j2"]


def test_the_adjustment_is_named_only_where_p_values_were_adjusted(tmp_path):
    """`x` loses one probe in each of five scenarios (one-sided sign-flip p = 0.5^5 = 1/32); `y` loses one probe in
    one scenario (p = 0.5, which can never reach alpha: no member of the family). With one member nothing is
    adjusted, so the header must not say so; with two (`z` as `x`), it does, and `y`'s own p is marked. `z` loses in
    the same five scenarios as `x`: of the 32 ways to flip those five draws in both rows at once, only leaving them
    all unflipped gives either row p ≤ 1/32, so the joint test's p is 1/32 for both (Holm's method said 2/32)."""
    base = probe_rows("x", 5, 10) + probe_rows("y", 5, 10)
    cand = probe_rows("x", 5, 10, lost={(k, 0) for k in range(5)}) + probe_rows("y", 5, 10, lost={(0, 0)})
    one = gate(write_run(tmp_path / "a", base), write_run(tmp_path / "b", cand), [Rule.parse("retention:0")])
    assert "p (one-sided) |" in one.markdown() and "adjusted" not in one.markdown()
    rows = {row["strategy"]: row for row in one.table.to_dict("records")}
    assert rows["x"]["p_value"] == pytest.approx(1 / 32) and rows["y"]["p_value"] == pytest.approx(0.5)
    base += probe_rows("z", 5, 10)
    cand += probe_rows("z", 5, 10, lost={(k, 0) for k in range(5)})
    two = gate(write_run(tmp_path / "c", base), write_run(tmp_path / "d", cand), [Rule.parse("retention:0")])
    text = two.markdown()
    assert "p (one-sided, adjusted) |" in text
    rows = {row["strategy"]: row for row in two.table.to_dict("records")}
    assert rows["x"]["p_value"] == rows["z"]["p_value"] == pytest.approx(1 / 32) and rows["x"]["adjusted"] and not rows["y"]["adjusted"]
    assert "| 0.5 (not adjusted) |" in text
