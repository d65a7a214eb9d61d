"""Probes of a file of several sessions are asked in their own session only.

The sessions of one file (tau-bench, Aider, OpenHands outputs) number their items alike: `user-5` is in
each. Before, a probe file mined from such a file gave each session every probe whose `source` id it
happened to hold, so `none`, which keeps everything, lost 45% of its probes on three tau-bench
sessions. The reference here is independent of the assignment: the probes a run mines itself, session
by session (`probes: auto`)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

import compaction_bench as bench
from compaction_bench import runner
from compaction_bench.probes import Probe, assign_probes, load_probes, write_probes
from compaction_bench.scenarios.mining import mine_transcripts
from compaction_bench.store import load_run
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA

TAU = CORPORA / "tau-bench-traj" / "sierra-research__tau-bench" / "gpt-4o-airline.json"


@pytest.fixture(scope="module")
def three_sessions(tmp_path_factory):
    path = tmp_path_factory.mktemp("tau") / "tau3.json"
    path.write_text(json.dumps(json.loads(TAU.read_text(encoding="utf-8"))[:3]), encoding="utf-8")
    return path


def test_a_mined_probe_file_gives_each_session_its_own_probes(three_sessions, tmp_path):
    sessions = bench.load_transcripts(three_sessions)
    assert len({t.id for t in sessions}) == 3
    mined = mine_transcripts(sessions)
    assert {p.session for p in mined} == {t.id for t in sessions}
    # the same source ids in several sessions: the case the binding is for
    assert any(sum(1 for p in mined if p.source == probe.source) > 1 for probe in mined)
    probes = write_probes(mined, tmp_path / "probes.yaml")
    assert [p.session for p in load_probes(probes)] == [p.session for p in mined]  # written and read back

    given = runner.file_cases([three_sessions], str(probes))
    auto = runner.file_cases([three_sessions], "auto")
    for case, own in zip(given, auto, strict=True):
        assert [p.id for p in case.probes] == [f"{case.transcript.id}/{p.id}" for p in own.probes]
        assert all(p.session == case.transcript.id for p in case.probes)


def test_none_keeps_every_probe_of_a_mined_multi_session_file(three_sessions, tmp_path):
    probes = write_probes(mine_transcripts(bench.load_transcripts(three_sessions)), tmp_path / "probes.yaml")
    root = bench.run([three_sessions], ["none"], ["32k"], out=tmp_path / "runs", run_id="r", jobs=1, probes=str(probes), report=False)
    graded = load_run(root)["probes"]
    assert len(graded) and graded["present"].all()
    asked = graded.groupby("scenario")["probe_id"].unique()
    for scenario, ids in asked.items():
        assert len({i.split("/")[0] for i in ids}) == 1, scenario  # each scenario asks its own session's probes


def _session(name: str) -> Transcript:
    return Transcript(name, (Item("user-0", "user", f"Deploy {name} to the staging cluster.", turn=0),
                             Item("assistant-1", "assistant", "Done.", response=0, turn=0)))


def _probe(pid: str, **fields: str) -> Probe:
    return Probe(pid, "recall", "Where is it deployed?", "staging", **fields)


def test_a_source_id_held_by_several_sessions_is_asked_in_none():
    a, b = _session("alpha"), _session("beta")
    bound = _probe("bound", source="user-0", session="beta")
    loose = _probe("loose", source="user-0")
    by_text = _probe("by-text", source_text="Deploy alpha")
    assigned, left_out = assign_probes([a, b], [bound, loose, by_text])
    assert assigned == [(by_text,), (bound,)]
    assert [(g.probe.id, g.session) for g in left_out] == [("loose", None)]
    assert "is in 2 sessions ('alpha', 'beta')" in left_out[0].why and "'session'" in left_out[0].why
    # alone, the same probe is unambiguous
    assert assign_probes([a], [loose]) == ([(loose,)], [])


def test_a_probe_of_another_session_or_misplaced_is_named_once_and_left_out(caplog):
    a, b = _session("alpha"), _session("beta")
    stranger = _probe("stranger", source="user-0", session="gamma")
    misplaced = Probe("misplaced", "recall", "Which cluster?", "production", source_text="Deploy beta")
    with caplog.at_level(logging.WARNING, logger="compaction_bench.probes"):
        assert runner.usable_probes([a, b], [stranger, misplaced], origin="p.yaml") == [(), ()]
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "warning: p.yaml: probe 'stranger' skipped: its session 'gamma' is not among the 2 sessions",
        "warning: p.yaml: probe 'misplaced' skipped for session 'beta': not where its source says: "
        "answer 'production' does not occur at or after the source",
    ]


def test_probes_check_names_an_ambiguous_probe_and_accepts_a_mined_file(three_sessions, tmp_path):
    sessions = bench.load_transcripts(three_sessions)
    mined = mine_transcripts(sessions)
    good = write_probes(mined, tmp_path / "good.yaml")
    loose = mined[0].to_dict()
    loose.pop("session")
    loose["id"] = "loose"
    bad = write_probes([*mined, Probe.from_dict(loose)], tmp_path / "bad.yaml")

    def check(probes):
        return subprocess.run([sys.executable, "-m", "compaction_bench.cli", "probes", "check", str(three_sessions), "--probes", str(probes)],
                              capture_output=True, text=True, timeout=300)

    ok = check(good)
    assert ok.returncode == 0 and f"{len(mined)} probes checked: 0 problem(s)" in ok.stdout, ok.stdout + ok.stderr
    proc = check(bad)
    assert proc.returncode == 1, proc.stderr
    holders = [t.id for t in sessions if mined[0].source in t.by_id]
    assert len(holders) > 1
    assert [line for line in proc.stdout.splitlines() if line.startswith("loose\t")] == [
        f"loose\tskipped in a run: its source item {mined[0].source!r} is in {len(holders)} sessions "
        f"({', '.join(map(repr, holders))}), each numbering its items alike; give the probe a 'session' naming its own"
    ]
