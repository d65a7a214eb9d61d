"""`aider` rules settled against upstream `Aider-AI/aider@5dc9490b` in the faithfulness audit: the summary
transcript's newline rule for empty messages, and `/clear` with a summary still pending."""

from __future__ import annotations

from compaction_bench.profiles import get_profile
from compaction_bench.replay import replay
from compaction_bench.strategies.aider import SUMMARY_PREFIX, Aider, ChatMessage
from compaction_bench.transcript import Item
from tests.pi_builders import Session, small_profile
from tests.test_aider_strategy import EngineSide


def test_an_empty_message_adds_no_blank_line_to_the_summary_transcript():
    # history.py L99-107: `content += f"# {role}\n"; content += msg["content"]; if not content.endswith("\n"):
    # content += "\n"`. The test reads the whole transcript so far, so after an empty message the heading's
    # newline ends it and nothing is added; a message ending in a newline gets none either.
    aider = Aider(EngineSide(get_profile("64k"), prompt="PROMPT"))
    messages = [ChatMessage("user", "run the tests"), ChatMessage("assistant", ""), ChatMessage("user", ""),
                ChatMessage("assistant", "all pass\n"), ChatMessage("system", "skipped"), ChatMessage("user", "thanks")]
    request = aider._summary_request(messages)
    assert [m.content for m in request.messages] == [
        "PROMPT",
        "# USER\nrun the tests\n# ASSISTANT\n# USER\n# ASSISTANT\nall pass\n# USER\nthanks\n",
    ]


def _session_cleared_while_summarising() -> Session:
    """Six edited turns of ~600 tokens (over the 1,024 limit of an 8k window from the second on), the
    last of which starts a summary, then `/clear` before any request, then one more exchange."""
    s = Session()
    for n in range(6):
        s.user(f"change number {n}: " + " ".join(f"word{n}x{k}" for k in range(150)))
        s.assistant(f"edit for change {n} " + " ".join(f"reply{n}y{k}" for k in range(150)))
        s.items.append(Item(id=f"out{n}", kind="marker", text=f"Applied edit to f{n}.py\nCommit abc{n:04d} feat: change {n}",
                            meta={"event": "aider-output"}))
    s.user("/clear")
    s.user("after clear")
    s.assistant("fresh answer")
    return s


def test_clear_leaves_the_pending_summary_to_the_next_request():
    # `_clear_chat_history` (commands.py L435-437) sets `done_messages = []` and `cur_messages = []` and
    # leaves the summariser thread alone. Before 2025-01-20 `summarize_end` then assigned the summary
    # unconditionally (base_coder.py at 565069747^, L953-961): the first request after `/clear` starts with
    # the summary of the cleared history.
    transcript = _session_cleared_while_summarising().transcript()
    applied = replay(transcript, "aider", profile=small_profile(8_000), options={"applied": True})
    last = [r for r in applied.requests if r.kind == "turn"][-1].messages
    assert last[0].role == "user" and last[0].content.startswith(SUMMARY_PREFIX)
    assert last[-1].content == "after clear"
    # As run (since the guard), the snapshot is not the emptied history: the summary is thrown away.
    as_run = replay(transcript, "aider", profile=small_profile(8_000))
    assert [m.content for m in [r for r in as_run.requests if r.kind == "turn"][-1].messages] == ["after clear"]
    assert as_run.compactions[-1].trigger == "discarded-summary"
