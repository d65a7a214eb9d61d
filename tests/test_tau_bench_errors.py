"""tau-bench's failed calls (session 42): its tool messages carry no error flag, but its environment words every
failure one way, `Error: …` (a tool's own refusal, or its exception as `f"Error: {e}"`) and `Unknown action …`
(sierra-research/tau-bench tau_bench/envs/base.py@59a200c6 L101-113). Before, such a result imported as a success:
mining asked `Error: not enough seats on flight HAT290` as a recall fact ("what did the call return?") and never as
the error it is, and strategies that show a failed call as one (OpenCode's `[Tool error]`, Gemini CLI's `{error: …}`)
showed it as output. A reproduced defect."""

from __future__ import annotations

from compaction_bench.importing import load_transcripts
from compaction_bench.scenarios.mining import mine_probes
from tests.test_mining_s41 import _recall_answers, _tau_file


def test_a_tau_bench_failure_imports_as_a_failed_call_and_is_mined_as_an_error(tmp_path):
    (transcript,) = load_transcripts(_tau_file(tmp_path / "tau.json", [
        ("call_1", "book_reservation", {"user_id": "mei_brown_7075", "flight_number": "HAT290"}, "Error: not enough seats on flight HAT290"),
        ("call_2", "get_user_details", {"user_id": "mei_brown_7075"}, '{"name": "Mei Brown", "membership": "gold"}'),
        ("call_3", "cancel_everything", {}, "Unknown action cancel_everything"),
        ("call_4", "calculate", {"expression": "50 * 4"}, "200.0"),
    ]))
    results = {i.call_id: i for i in transcript.items if i.kind == "tool_result"}
    assert [results[c].is_error for c in ("call_1", "call_2", "call_3", "call_4")] == [True, False, True, False]
    recall = _recall_answers(transcript)
    assert "Error: not enough seats on flight HAT290" not in recall and "200.0" in recall, recall
    errors = {p.answer for p in mine_probes(transcript) if p.kind == "error"}
    assert errors == {"Error: not enough seats on flight HAT290", "Unknown action cancel_everything"}, errors


def test_an_error_word_inside_a_tau_bench_result_is_no_failure(tmp_path):
    """Only the environment's own prefix marks a failure: a successful result that mentions an error is output."""
    (transcript,) = load_transcripts(_tau_file(tmp_path / "tau.json", [
        ("call_1", "get_reservation_details", {"reservation_id": "ABC123"}, '{"status": "Error: none", "note": "Unknown action"}'),
    ]))
    (result,) = [i for i in transcript.items if i.kind == "tool_result"]
    assert not result.is_error
