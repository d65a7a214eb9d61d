"""Session 42's audit of the Python API the notebooks use: a paired difference is taken at one profile (a probe at two
profiles is not two independent probes), and what `bench run` says about a run (a metric it could not compute, the
cells that failed) the API says too. Each test was a reproduced defect."""

from __future__ import annotations

import http.server
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.metrics.aggregate import overall, paired_differences
from compaction_bench.runner import CellsFailed
from compaction_bench.store import read_manifest
from tests.conftest import write_tiny_session
from tests.model_servers import RefusingHandler


def two_profiles_b_loses_four() -> pd.DataFrame:
    """Ten one-probe scenarios (sessions: the sign-flip test's units) asked once each of strategies a and b at two
    profiles; b loses the same four of them at each."""
    rows = []
    for profile in ("32k", "64k"):
        for strategy in ("a", "b"):
            for i in range(10):
                lost = strategy == "b" and i < 4
                rows.append({"scenario": f"s{i}", "strategy": strategy, "profile": profile, "repeat": 0, "probe_id": f"p{i}", "kind": "recall",
                             "point_kind": "final", "step": 9, "request": 9, "present": not lost, "found": "absent" if lost else "kept"})
    return pd.DataFrame(rows)


def test_a_paired_difference_at_one_profile_is_the_sign_flip_test_of_its_scenarios():
    """Four of ten scenarios lose their probe, none gains: the exact two-sided sign-flip p is 2 × 0.5^4 = 0.125, not
    detectable."""
    probes = two_profiles_b_loses_four()
    for profile in ("32k", "64k"):
        change = paired_differences(probes[probes.profile == profile], "a", "b")
        assert change.mean == pytest.approx(-0.4) and change.p_value == pytest.approx(0.125)
        assert (change.pairs, change.probes, change.scenarios, change.changed) == (10, 10, 10, 4) and not change.detectable


def test_rows_of_two_profiles_are_refused_not_pooled_as_twice_the_probes():
    """Before: the two profiles' copies of each probe were eight independent losses, p = 2 × 0.5^8 = 0.0078, "detectable",
    where the verdict, which compares per profile, found nothing at either."""
    probes = two_profiles_b_loses_four()
    with pytest.raises(ValueError, match=r"2 profiles \(32k, 64k\).*paired_differences\(probes\[probes\.profile == '32k'\], 'a', 'b'\)"):
        paired_differences(probes, "a", "b")
    # the profiles of the two strategies compared are what count: a third strategy at another profile is not pooled
    other = probes[probes.profile == "64k"].assign(strategy="c")
    change = paired_differences(pd.concat([probes[probes.profile == "32k"], other]), "a", "b")
    assert change.p_value == pytest.approx(0.125)


def test_overall_still_tests_the_leading_pair_per_profile():
    """`overall` (the leaderboard's and the verdict's pooled figures) calls `paired_differences` once per profile: at each,
    a keeps all ten probes and b six, and with four probes changed P(best) is withheld (NaN) at both."""
    table = overall(two_profiles_b_loses_four()).set_index(["strategy", "profile"])
    for profile in ("32k", "64k"):
        assert table.loc[("a", profile), "retention"] == 1.0 and table.loc[("b", profile), "retention"] == pytest.approx(0.6)
        assert np.isnan(table.loc[("a", profile), "p_best"]) and np.isnan(table.loc[("b", profile), "p_best"])


@pytest.fixture
def refusing_endpoint() -> Iterator[str]:
    """An OpenAI-compatible endpoint that answers every call with 401 (a wrong key)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RefusingHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def tiny_run(folder: Path, run_id: str, **options) -> Path:
    session = folder / "tiny.jsonl" if (folder / "tiny.jsonl").exists() else write_tiny_session(folder)
    return bench.run([session], strategies=options.pop("strategies", ["none"]), profiles=options.pop("profiles", ["32k"]), out=folder / "runs",
                     run_id=run_id, jobs=1, report=False, progress=False, probes=str(folder / "probes.yaml"), **options)


def runtime_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_a_run_whose_answerer_failed_on_every_call_warns_from_run_and_load_run(tmp_path, refusing_endpoint, monkeypatch):
    """Before: `bench run` said "metric not computed: answered" and exited 3, while `compaction_bench.run` and `load_run`
    said nothing, and a notebook showed an `answered` of NaN, which reads as a metric that does not apply."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    with pytest.warns(RuntimeWarning, match=r"metric not computed: answered \(the answerer openai/gpt-4o-mini failed on all \d+ calls"):
        root = tiny_run(tmp_path, "refused", answerer="openai/gpt-4o-mini", api_base=refusing_endpoint, max_retries=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tables = bench.load_run(root)
    assert tables["probes"]["correct"].isna().all() and tables["summary"]["answered"].isna().all()
    (said,) = runtime_warnings(caught)  # one warning, naming the run and the metric
    assert said.startswith(f"{root}: metric not computed: answered (the answerer openai/gpt-4o-mini failed on all")
    assert "invalid api key" in said


def test_a_run_with_every_metric_computed_warns_of_nothing(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        root = tiny_run(tmp_path, "offline")
        bench.load_run(root)
    assert not runtime_warnings(caught)


FAILING = """
from compaction_bench.strategies.baselines import NoCompaction


class Failing(NoCompaction):
    def request(self):
        raise ZeroDivisionError("boom")
"""


def test_load_run_names_every_failed_cell(tmp_path):
    """Before: the warning named the first failed cell only ("first: …") although `load_run` says it names them: the
    two profiles' failed cells, each named with its error, as the manifest records them."""
    plugin = tmp_path / "failing.py"
    plugin.write_text(FAILING)
    with pytest.raises(CellsFailed):
        tiny_run(tmp_path, "failed", strategies=["none", f"{plugin}:Failing"], profiles=["32k", "64k"])
    root = tmp_path / "runs" / "failed"
    failed = read_manifest(root)["cells"]["failed"]
    assert len(failed) == 2 and {f["error"] for f in failed} == {"ZeroDivisionError: boom"}
    with pytest.warns(RuntimeWarning, match=r"2 cell\(s\) failed") as caught:
        tables = bench.load_run(root)
    (said,) = runtime_warnings(caught.list)
    for cell in failed:
        assert cell["cell"] in said
    assert "ZeroDivisionError: boom (2): " in said
    assert set(tables["summary"]["strategy"]) == {"none"}
