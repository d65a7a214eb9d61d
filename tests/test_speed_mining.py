"""Probe mining in worker processes (`runner.mined_probes`): a run over many sessions mined them one after another
in the parent before any cell could start (11.5 s of the corpora's 29.6 s at `-j 2`). Mined in `jobs` workers,
every scenario gets the probes that mining it here gives, in the scenarios' order."""

from __future__ import annotations

import os

import pytest

from compaction_bench import runner
from compaction_bench.importing import load_transcripts
from compaction_bench.scenarios import mining
from tests.conftest import CORPORA

FILES = [
    CORPORA / "mini-swe-agent-traj/SWE-agent__mini-swe-agent/deepseek_reasoner_dev__pvlib__pvlib-python-1707.traj.json",
    CORPORA / "claude-code-jsonl/d-kimuson__claude-code-viewer/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl",
    CORPORA / "openhands-events/All-Hands-AI__OpenHands/resolver_mock_output.jsonl",
    CORPORA / "swe-agent-traj/SWE-agent__SWE-agent/ctf__web__i_got_id_demo.traj",
]


@pytest.fixture
def miners(tmp_path, monkeypatch):
    """The process ids that mined each transcript (`mine_probes` wrapped, before any worker is forked)."""
    if not all(path.exists() for path in FILES):
        pytest.skip("the corpora are not available")
    log = tmp_path / "pids"
    mine = mining.mine_probes

    def logged(transcript, **kwargs):
        with open(log, "a") as out:
            out.write(f"{os.getpid()}\n")
        return mine(transcript, **kwargs)

    monkeypatch.setattr(mining, "mine_probes", logged)
    return lambda: [int(line) for line in log.read_text().split()] if log.exists() else []


def test_mining_in_workers_gives_each_scenario_the_probes_mined_here(miners, monkeypatch):
    expected = [mining.mine_probes(t) for path in FILES for t in load_transcripts(path)]
    assert all(expected) and len(set(map(len, expected))) > 1
    here = miners()
    assert set(here) == {os.getpid()}
    monkeypatch.setattr(runner, "PARALLEL_MINING_FROM", 0)  # these small files are mined in workers too
    cases = runner.file_cases(FILES, "auto", jobs=2)
    workers = miners()[len(here):]
    assert len(workers) == len(cases) == len(expected) and os.getpid() not in workers and len(set(workers)) == 2
    assert [list(case.probes) for case in cases] == [list(runner.usable_probes([case.transcript], probes)[0]) for case, probes in zip(cases, expected, strict=True)]
    assert [list(case.probes) for case in cases] == [list(case.probes) for case in runner.file_cases(FILES, "auto", jobs=1)]


def test_a_little_mining_stays_in_this_process(miners):
    """Below `PARALLEL_MINING_FROM` characters, starting workers would cost more than the mining: it stays here."""
    assert sum(runner.transcript_characters(t) for path in FILES for t in load_transcripts(path)) < runner.PARALLEL_MINING_FROM
    cases = runner.file_cases(FILES, "auto", jobs=2)
    assert set(miners()) == {os.getpid()} and len(miners()) == len(cases)
