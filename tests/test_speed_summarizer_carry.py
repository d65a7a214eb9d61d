"""The offline summarizer's split of a request carried from the last one (`split_readings` with `Shared`,
issue 18) against reading every run of the request.

A request that shares runs with the last one (`compaction_bench.llm._WireRuns.read_request`) takes
their content parts as a slice of the last request's content and their earlier summaries from its
list, reading only the runs around them; its input tokens and readings are the last request's less
those of the runs that left, plus those of the new ones. The straightforward computation is
`split_readings` of all the request's runs, and, for the client's results, converting, counting and
summarizing the whole request as plain wire messages (`chat_messages`, `payload_tokens`,
`extractive_summary`). Checked on random consecutive requests (sliding windows with a new first
message and a new truncated oldest one, earlier summaries, system, developer and previous-summary
messages inside and outside the shared runs, a request whose last user message is among the shared
runs, images, empty requests, requests sharing nothing) and on windows of a real Codex session.
"""

from __future__ import annotations

import random

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.llm import DEFAULT_SUMMARIZER, LLMClient, _wire_runs, payload_tokens
from compaction_bench.offline_models import Shared, Split, extractive_summary, split_readings
from compaction_bench.request import Message, ToolCall, message_from_item
from compaction_bench.transcript import Attachment
from compaction_bench.wire import chat_messages
from tests.conftest import CORPORA

ROLLOUT = CORPORA / "codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl"
PROMPT = "Summarize the conversation.\n\n## Goal\n\n## Errors\n\n## Files\n\n## Next steps"
WORDS = ("fix", "src/app.py", "error", "never", "decided", "next", "done", "must", "tests", "failed", "because", "plan")


def parts_of(split: Split) -> tuple[object, ...]:
    """A split as plain values: its content parts by identity (as `_select`'s chain finds them) and the rest."""
    return (split.titles, [id(part) for part in split.content], split.content, split.previous, split.apart, split.summaries)


def carried_and_whole(messages: list[Message], max_tokens: int | None, split_before: list[Split | None]) -> None:
    """The request read by `_WireRuns` and split with what it shares with the last request equals the
    split of all its runs, and the client's (text, input tokens) equal the whole request's."""
    read = _wire_runs.read_request(messages, "test/carry", "offline")
    assert read is not None
    request, earlier, where, first, count = read
    assert [run.reading for run in request.runs] == request.readings
    assert all(a is b for a, b in zip(request.readings, [run.reading for run in request.runs], strict=True))
    assert request.tokens == sum(run.tokens for run in request.runs)
    if earlier is not None:
        assert all(a is b for a, b in zip(request.runs[where : where + count], earlier.runs[first : first + count], strict=True))
    previous = split_before[0]
    shared = Shared(previous, where, first, count) if previous is not None and earlier is not None else None
    carried = split_readings(request.readings, shared)
    assert parts_of(carried) == parts_of(split_readings(request.readings))
    split_before[0] = carried

    client = LLMClient(DEFAULT_SUMMARIZER)
    result = client.complete(messages, max_tokens=max_tokens)
    whole = chat_messages(messages)
    assert (result.text, result.input_tokens) == (extractive_summary(whole, max_tokens), payload_tokens(whole))


def random_message(rng: random.Random, n: int) -> Message:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) + f" {n}"
    lines = "\n".join(f"{text} line {k}" for k in range(rng.randint(1, 3)))
    kind = rng.random()
    if kind < 0.35:
        return Message("user", lines)
    if kind < 0.40:
        return Message("user", f"Summary of the conversation so far: {lines}")  # an earlier summary
    if kind < 0.43:
        return Message("user", lines, attachments=(Attachment("image/png", f"shot{n}.png", 1000 + n),))
    if kind < 0.55:
        return Message("assistant", lines)
    if kind < 0.65:
        return Message("assistant", "", tool_calls=(ToolCall(id=f"c{n}", name="bash", arguments=f'{{"cmd": "pytest {n}"}}'),))
    if kind < 0.78:
        return Message("tool", lines, tool_call_id=f"c{n - 1}")
    if kind < 0.83:
        return Message("reasoning", rng.choice(("", lines)))
    if kind < 0.87:
        return Message("compaction", rng.choice(("", lines)))
    if kind < 0.90:
        return Message("system", lines)
    if kind < 0.93:
        return Message("developer", f"<previous-summary>\n## Goal\n- {text}\n</previous-summary>")
    return Message("user", f"<notes>\n{lines}\n</notes>\nplease go on")


def test_random_consecutive_requests_split_as_whole():
    rng = random.Random(18)
    pool = [random_message(rng, n) for n in range(400)]
    split_before: list[Split | None] = [None]
    low, high = 0, 40
    for step in range(160):
        window = pool[low:high]
        head = [Message("system", f"You are agent {step}. Never push.")]
        if window and rng.random() < 0.5:  # the oldest message truncated: a new object
            head.append(Message(window[0].role, window[0].content[: len(window[0].content) // 2] + " [truncated]"))
            window = window[1:]
        tail = [random_message(rng, 1000 + step) for _ in range(rng.randint(0, 3))]
        ending = rng.random()
        if ending < 0.7:
            tail.append(Message("user", PROMPT))
        elif ending < 0.8:
            tail.append(Message("system", "## Goal\n## Next steps"))
        # else: the request's last user message may be among the shared runs
        messages = [*head, *window, *tail] if rng.random() > 0.03 else []
        if rng.random() < 0.05:  # a request that shares nothing with the last one
            messages = [random_message(rng, 2000 + step), Message("user", PROMPT)]
        if messages:
            carried_and_whole(messages, rng.choice((None, 200, 900)), split_before)
        low = min(low + rng.choice((0, 0, 1, 1, 2, 5)), len(pool) - 1)
        high = min(max(high + rng.choice((-3, 0, 1, 2, 3, 4)), low + 1), len(pool))


@pytest.fixture(scope="module")
def rollout() -> list[Message]:
    (transcript,) = load_transcripts(ROLLOUT)
    return [message_from_item(item) for item in transcript.items if item.kind != "marker"]


def test_sliding_retained_windows_of_a_real_session_split_as_whole(rollout):
    """As a remote Codex compaction sends them: a system message, the retained user messages (the oldest
    truncated), a compaction item, a turn's items and the prompt."""
    users = [m for m in rollout if m.role == "user"]
    split_before: list[Split | None] = [None]
    for end in range(20, len(rollout), max(len(rollout) // 40, 1)):
        retained = [m for m in users if id(m) in {id(x) for x in rollout[:end]}][-60:]
        oldest = Message("user", retained[0].content[:100] + "...")
        turn = rollout[end : end + 4]
        messages = [Message("system", "You are Codex."), oldest, *retained[1:], Message("compaction", f"summary {end}"), *turn,
                    Message("user", PROMPT)]
        carried_and_whole(messages, 1500, split_before)
