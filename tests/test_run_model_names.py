"""Model names a run cannot call are refused before any cell runs, with the model the user likely meant.

Before this check `--answerer offline` ran every cell and failed each of its 1,489 answer calls
(litellm: "LLM Provider NOT provided"), and `--summarizer offline/extractve` ran, its report's note
calling the misspelled name "a deterministic extractive heuristic", until the first compaction failed.
"""

from __future__ import annotations

import pytest

import compaction_bench as bench
from compaction_bench.llm import DEFAULT_ANSWERER, DEFAULT_SUMMARIZER, model_problem
from compaction_bench.runner import RunError
from tests.conftest import assert_user_error, bench_cli, write_tiny_session


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return write_tiny_session(tmp_path_factory.mktemp("session"))


def test_the_offline_models_in_their_roles_and_a_routable_model_pass():
    assert model_problem(DEFAULT_SUMMARIZER, (DEFAULT_SUMMARIZER,)) is None
    assert model_problem(DEFAULT_ANSWERER, (DEFAULT_ANSWERER,)) is None
    # litellm routes a provider-prefixed id and a model of its map; nothing is called
    assert model_problem("openai/any-model-name", ()) is None
    assert model_problem("gpt-4o", ()) is None


@pytest.mark.parametrize(
    ("model", "offline", "fragments"),
    [
        ("offline/extractve", (DEFAULT_SUMMARIZER,), ("no such offline model", "did you mean 'offline/extractive'?")),
        ("offline/readr", (DEFAULT_ANSWERER,), ("no such offline model", "did you mean 'offline/reader'?")),
        # each role has its own offline model: the summarizer's is no answerer
        ("offline/extractive", (DEFAULT_ANSWERER,), ("no such offline model", "offline models: offline/reader")),
        ("offline", (DEFAULT_ANSWERER,), ("cannot route it to a provider", "did you mean 'offline/reader'?")),
        ("offline", (DEFAULT_SUMMARIZER,), ("cannot route it to a provider", "did you mean 'offline/extractive'?")),
        ("gpt-nonexistent-9", (DEFAULT_SUMMARIZER,), ("cannot route it to a provider", "provider/model")),
        # no offline model writes a judge's verdict
        ("offline/reader", (), ("no offline model writes a verdict",)),
    ],
)
def test_a_model_that_cannot_be_called_is_named_with_a_guess(model, offline, fragments):
    problem = model_problem(model, offline)
    assert problem is not None
    for fragment in fragments:
        assert fragment in problem, (fragment, problem)


def test_a_run_refuses_them_before_it_starts(session, tmp_path):
    for flags, fragment in (({"answerer": "offline"}, "--answerer offline"), ({"summarizer": "offline/extractve"}, "--summarizer offline/extractve"),
                            ({"judge": "offline/reader"}, "--judge offline/reader")):
        out = tmp_path / "runs"
        with pytest.raises(RunError, match=fragment):
            bench.run([session], ["truncate"], ["32k"], out=out, report=False, progress=False, **flags)
        assert not out.exists()  # no run folder: nothing ran


def test_the_cli_says_it_in_one_line_and_exits_2(session, tmp_path):
    proc = bench_cli("run", str(session), "-s", "truncate", "-p", "32k", "--answerer", "offline", "-o", str(tmp_path / "runs"), "--no-report")
    assert_user_error(proc, "--answerer offline", "did you mean 'offline/reader'?")
    assert not (tmp_path / "runs").exists()


def test_score_refuses_an_answerer_it_cannot_call(session, tmp_path):
    bench.run([session], ["truncate"], ["32k"], out=tmp_path / "runs", run_id="r", report=False, progress=False, jobs=1)
    with pytest.raises(RunError, match="did you mean 'offline/reader'"):
        bench.score(tmp_path / "runs" / "r", answerer="offline/readr", report=False)
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["r"]  # no scored folder was made
