"""Pieces of the report with hand-built inputs: scenario names people recognise, integrity findings with the
items around the orphan, the glossary, and JSON that cannot close its script element."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from compaction_bench.reports.html import _id_lists, describe, integrity_findings, json_script
from compaction_bench.runner import scenario_name
from compaction_bench.transcript import Item, Transcript


def transcript(session: str, title: str = "") -> Transcript:
    return Transcript(session, (Item("u1", "user", "hello"),), meta={"title": title} if title else {})


def test_scenarios_are_named_after_their_file():
    taken: set[str] = set()
    one = scenario_name(Path("/data/codex/rollout-1.jsonl"), transcript("019a7ae6"), 0, 1, taken)
    assert one == "rollout-1.jsonl"
    taken.add(one)
    several = [scenario_name(Path("/data/tau/results.json"), transcript(f"s{n}", "retail task" if n == 1 else ""), n, 3, taken) for n in range(3)]
    assert several == ["results.json #1", "results.json #2 retail task", "results.json #3"]
    taken.update(several)
    # The same file name in another folder gets its folder in front.
    assert scenario_name(Path("/other/codex/rollout-1.jsonl"), transcript("x"), 0, 1, taken) == "codex/rollout-1.jsonl"


def test_integrity_findings_show_the_items_around_the_orphan():
    items = pd.DataFrame(
        [
            {"scenario": "s", "position": n, "id": f"i{n}", "kind": kind, "call_id": call, "text": text}
            for n, (kind, call, text) in enumerate(
                [("user", None, "fix it"), ("assistant", None, "looking"), ("tool_call", "c1", "shell({})"), ("tool_result", "c1", "ok"),
                 ("tool_call", "c2", "read({})"), ("assistant", None, "done"), ("user", None, "thanks"), ("assistant", None, "bye")]
            )
        ]
    )
    detail = [{"format": "anthropic", "kind": "orphan_call", "call_id": "c2", "messages": [3], "recorded": False}]
    requests = pd.DataFrame([
        {"scenario": "s", "strategy": "truncate", "profile": "64k", "request": 7, "step": 4, "integrity_anthropic": 1,
         "integrity_recorded_anthropic": 0, "integrity_detail": json.dumps(detail)},
        {"scenario": "s", "strategy": "truncate", "profile": "64k", "request": 8, "step": 5, "integrity_anthropic": 0,
         "integrity_recorded_anthropic": 2, "integrity_detail": "[]"},
    ])
    found = integrity_findings(requests, items, "s")
    assert (found.caused, found.recorded, found.unmarked, len(found.listed)) == (1, 2, 0, 1)
    finding = found.listed[0]
    assert (finding["request"], finding["kind"], finding["call_id"]) == (7, "orphan_call", "c2")
    excerpt = finding["excerpt"]
    assert excerpt["source"] == "the transcript"
    assert [r["id"] for r in excerpt["rows"]] == ["i2", "i3", "i4", "i5", "i6"]  # two items either side of the call
    assert [r["id"] for r in excerpt["rows"] if r["hit"]] == ["i4"]


def test_the_request_s_own_items_are_used_when_the_run_stored_them():
    items = pd.DataFrame([{"scenario": "s", "position": n, "id": f"i{n}", "kind": "tool_call" if n == 5 else "user",
                           "call_id": "c5" if n == 5 else None, "text": f"t{n}"} for n in range(8)])
    detail = [{"format": "openai_chat", "kind": "orphan_call", "call_id": "c5", "messages": [1], "recorded": False}]
    requests = pd.DataFrame([{"scenario": "s", "strategy": "x", "profile": "64k", "request": 1, "step": 1, "integrity_openai_chat": 1,
                              "integrity_detail": json.dumps(detail), "item_ids": ["i0", "i5", "i7"]}])
    (finding,) = integrity_findings(requests, items, "s").listed
    assert finding["excerpt"]["source"] == "the request"
    assert [r["id"] for r in finding["excerpt"]["rows"]] == ["i0", "i5", "i7"]


def test_the_recording_s_own_orphans_are_counted_apart_from_the_strategy_s_findings():
    """Two requests: the first carries the recording's aborted call cX (in all three formats) and an orphan the strategy
    made (c1, chat only); the second only cX. The strategy caused 1, the recording's account for 6."""
    items = pd.DataFrame([{"scenario": "s", "position": n, "id": f"i{n}", "kind": "tool_call", "call_id": f"c{n}", "text": ""} for n in range(3)])

    def violation(fmt: str, call: str, recorded: bool) -> dict:
        return {"format": fmt, "kind": "orphan_call", "call_id": call, "messages": [1], "recorded": recorded}

    formats = ("openai_chat", "openai_responses", "anthropic")
    recorded = [violation(f, "cX", True) for f in formats]
    requests = pd.DataFrame([
        {"scenario": "s", "strategy": "x", "profile": "64k", "request": 1, "step": 1,
         **{f"integrity_{f}": int(f == "openai_chat") for f in formats}, **{f"integrity_recorded_{f}": 1 for f in formats},
         "integrity_detail": json.dumps([*recorded, violation("openai_chat", "c1", False)])},
        {"scenario": "s", "strategy": "x", "profile": "64k", "request": 2, "step": 2,
         **{f"integrity_{f}": 0 for f in formats}, **{f"integrity_recorded_{f}": 1 for f in formats}, "integrity_detail": json.dumps(recorded)},
        {"scenario": "other", "strategy": "x", "profile": "64k", "request": 1, "step": 1,
         **{f"integrity_{f}": 5 for f in formats}, **{f"integrity_recorded_{f}": 5 for f in formats}, "integrity_detail": "[]"},
    ])
    found = integrity_findings(requests, items, "s")
    assert (found.caused, found.recorded, found.unmarked) == (1, 6, 0)
    assert [(f["request"], f["format"], f["call_id"]) for f in found.listed] == [(1, "openai_chat", "c1")]
    # A run measured before violations were marked: a format whose request holds one kind only is told by its counts;
    # the chat violations of request 1 (one of each kind) cannot be told apart and are not listed.
    legacy = requests.assign(integrity_detail=[json.dumps([{k: v for k, v in d.items() if k != "recorded"} for d in json.loads(t)])
                                               for t in requests["integrity_detail"]])
    found = integrity_findings(legacy, items, "s")
    assert (found.caused, found.recorded, found.unmarked, found.listed) == (1, 6, 2, [])


def test_a_compaction_s_id_lists_are_runs_of_positions_and_the_ids_outside_the_transcript():
    where = {f"i{n}": n for n in range(10)}
    record = {
        "kept_ids": ["i7", "i1", "i2", "gone", "i3", "i9", "i8", "i3"],  # unsorted, one unknown id, i3 twice
        "summarized_ids": ["i0"],
        "dropped_ids": None,  # a compaction without the list
    }
    lists = _id_lists(record, where)
    # sorted runs of consecutive positions; a position given twice starts a run of its own
    assert lists["kept"] == {"n": 8, "ranges": [[1, 3], [3, 3], [7, 9]], "other": ["gone"]}
    assert lists["summarized"] == {"n": 1, "ranges": [[0, 0]], "other": []}
    assert lists["dropped"] == {"n": 0, "ranges": [], "other": []}
    many = _id_lists({"kept_ids": [f"x{n}" for n in range(300)], "summarized_ids": [], "dropped_ids": []}, where)
    assert many["kept"]["n"] == 300 and many["kept"]["ranges"] == [] and many["kept"]["other"] == [f"x{n}" for n in range(200)]


def test_json_in_a_script_element_cannot_close_it():
    text = json_script({"t": "</script><script>alert(1)</script> & <!--"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"t": "</script><script>alert(1)</script> & <!--"}


def test_every_summary_column_has_a_meaning():
    columns = ["retention", "retention_lo", "retention_age_lt8k", "answered_recall", "integrity_recorded_anthropic", "estimate_ape_n",
               "cannot_serve", "failed_requests", "p_best", "paired_pairs", "window", "retention [95% CI]"]
    meanings = {c: describe(c) for c in columns}
    assert all(m and "see docs" not in m for m in meanings.values()), meanings
    assert meanings["retention_age_lt8k"] == "retention for facts whose source lies under 8k tokens before the probed context"


def test_a_leaderboard_header_means_what_its_column_means():
    from compaction_bench.reports.leaderboard import COLUMNS, HEADLINE

    for header, column, *_ in (*HEADLINE, *COLUMNS):
        assert describe(header) == describe(column), header


def test_the_glossary_says_what_the_summary_computes():
    """Hand-built rows at one final point, one strategy: p1's answer is kept verbatim and also in the summary text, p2's only
    in the summary text, p3's source was summarized and the summary dropped it but a re-read kept it verbatim, p4 is absent.
    One turn request overflowed; another reached the model with two pairing violations."""
    from compaction_bench.metrics.aggregate import summarize
    from compaction_bench.metrics.integrity import FORMATS

    cell = {"scenario": "s", "strategy": "x", "profile": "64k", "repeat": 0}
    found = {"p1": ("kept", True, True), "p2": ("summary", True, True), "p3": ("kept", True, False), "p4": ("absent", False, False)}
    probes = pd.DataFrame([{**cell, "sample": 0, "probe_id": probe, "kind": "recall", "point_kind": "final", "step": 3, "request": 1,
                            "present": where != "absent", "found": where, "source_summarized": summarized, "in_summary": carried,
                            "fact_age_tokens": 100}
                           for probe, (where, summarized, carried) in found.items()])
    requests = pd.DataFrame([{**cell, "request": n, "step": n, "kind": "turn", "overflow": n == 0, "true_tokens": 100, "cached_tokens": 0,
                              "rebilled_tokens": 0, "cache_write_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "estimate_error": 0.0,
                              "estimate_ape": 0.0, "missed_trigger": False, "integrity_detail": "[]",
                              **{f"integrity{part}_{fmt}": 2 * (n == 1 and fmt == "openai_chat" and not part) for fmt in FORMATS
                                 for part in ("", "_recorded")}}
                             for n in range(2)])
    (row,) = summarize(requests, pd.DataFrame(), probes).to_dict("records")
    # "summary": only in summary text (p2), not p1, whose answer is also verbatim elsewhere
    assert describe("summary") == describe("retention_summary") and "only in summary text" in describe("summary")
    assert (row["retention_kept"], row["retention_summary"]) == (0.5, 0.25)
    # summarized-source retention: of p1-p3, whose source was summarized, the share the summary text carries (p3 is
    # present, kept by its re-read, but not carried): 2/3, where "still present" would be 3/3
    assert row["retention_summarized_source"] == pytest.approx(2 / 3)
    assert "the summary text carries" in describe("summarized-source retention") and "still present" not in describe("summarized-source retention")
    # failed requests: the overflow, not the request with two pairing violations, which the pair errors count
    assert (row["failed_requests"], row["integrity_openai_chat"]) == (1, 2)
    assert "too long" in describe("failed requests") and "pair errors" in describe("failed requests")


def test_requests_the_agent_would_not_send_are_failed_requests_not_overflows():
    """Hand-built turn requests of one cell: the provider refused request 1 as too long, the agent did not send
    request 2 (its own limit: `refused`, which the engine records as `overflow` too, since it reached no model),
    request 3 went through, and the step's last request, 4, the agent did not send either. Right answers: one
    overflow, two refused, three failed; the step of request 4 never got a request through: cannot serve. A run made
    before `refused` existed (no such column) counts every failure as an overflow, as it did."""
    from compaction_bench.metrics.aggregate import summarize

    cell = {"scenario": "s", "strategy": "x", "profile": "64k", "repeat": 0}
    flags = [(False, False), (True, False), (True, True), (False, False), (True, True)]
    requests = pd.DataFrame([{**cell, "request": n, "step": n, "kind": "turn", "overflow": overflow, "refused": refused,
                              "true_tokens": 100, "cached_tokens": 0, "rebilled_tokens": 0, "cache_write_tokens": 0, "output_tokens": 0,
                              "cost_usd": 0.0, "estimate_error": 0.0, "estimate_ape": 0.0, "missed_trigger": False, "integrity_detail": "[]"}
                             for n, (overflow, refused) in enumerate(flags)])
    (row,) = summarize(requests, pd.DataFrame(), pd.DataFrame()).to_dict("records")
    assert (row["overflows"], row["refused_requests"], row["failed_requests"], row["cannot_serve"]) == (1, 2, 3, True)
    (older,) = summarize(requests.drop(columns="refused"), pd.DataFrame(), pd.DataFrame()).to_dict("records")
    assert (older["overflows"], older["refused_requests"], older["failed_requests"]) == (3, 0, 3)
    assert "refused_requests" in describe("failed requests") and "agent" in describe("refused by agent")


def test_the_cache_figure_of_a_session_whose_requests_never_reached_a_model_says_so_without_a_warning():
    import warnings

    from compaction_bench.reports.figures import cache_over_session

    overflowed = pd.DataFrame({
        "scenario": "s", "strategy": ["none", "none"], "profile": "32k", "repeat": 0, "request": [0, 1], "kind": ["turn", "final"],
        "overflow": [True, True], "cached_tokens": 0, "true_tokens": [40_000, 40_000], "rebilled_tokens": 0,
    })
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warned of a legend without entries
        svg = cache_over_session(overflowed, "s", ["none"])
    assert svg.count("no request reached the model") == 2
