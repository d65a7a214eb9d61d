"""A reported threshold is the smallest own count at which the strategy's token rule fires.

Strategies compare their count with their limit either strictly (`count > T`: Pi, OpenHands, Codex's model
downshift, the Anthropic edits, truncate, hybrid) or not (`count >= T`: Claude Code, OpenCode V1 and V2, Codex's
status check, Gemini CLI). The token-accuracy verdicts (`metrics/accuracy.py`) read one meaning
for all: a missed trigger is `true >= threshold > estimate`, a premature compaction `tokens_before <
threshold`. So a strict strategy reports `T + 1`, a true count of exactly `T` is no missed trigger for it
and a compaction at a true count of `T` is premature; a non-strict one whose limit is a fraction reports the
ceiling. A strategy whose rule reads a part of the context (Aider's done messages, Codex's body after the
prefill) reports no threshold. Each session below is built so that the right answer follows from the spec
rule cited, worked out by hand or calibrated on a first replay, never read from the strategy's threshold.
"""

from __future__ import annotations

import json

from compaction_bench.metrics.accuracy import estimate_error, premature
from compaction_bench.profiles import get_profile
from compaction_bench.replay import replay
from compaction_bench.tokens import get_encoding
from compaction_bench.transcript import Item, Transcript, Usage
from tests.pi_builders import RecordingSummarizer, Session, small_profile

#: dense text for the chars/4 estimators: about one token per character, a quarter of a token estimated
CJK = "".join(chr(0x4E00 + (n * 37) % 2000) for n in range(400))


def turns(result):
    return [r for r in result.requests if r.kind == "turn"]


# ----------------------------------------------------------------------------- Pi (strict, §2.2)
def _pi_session() -> Session:
    s = Session()
    s.user("please fix the parser in src/parse.py; the tests in tests/test_parse.py fail on nested lists")
    s.assistant("I will read the parser first.", total=1)
    s.user(CJK)
    s.assistant("done", total=2)
    return s


def _pi(s: Session, strategy: str, limit: int, window: int = 100_000, **options):
    """`contextWindow - reserveTokens = limit`, usage as recorded."""
    return replay(s.transcript(), strategy, profile=small_profile(window), usage="recorded-always",
                  options={"reserve_tokens": window - limit, **options}, summarizer=RecordingSummarizer())


def test_pi_true_count_exactly_at_its_limit_is_no_missed_trigger():
    # `shouldCompact` is `contextTokens > contextWindow - reserveTokens` (§2.2). The second request's own
    # count is the recorded usage 1 plus chars/4 of the dense message after it, far under its true count c.
    # With the limit at c, a count of c would not compact: no missed trigger. With the limit at c - 1 it would.
    c = turns(_pi(_pi_session(), "pi", 50_000))[1].true_tokens
    for strategy in ("pi", "pi-2026-03", "pi-2025-12"):
        at = _pi(_pi_session(), strategy, c)
        second = turns(at)[1]
        assert not at.compactions
        assert second.true_tokens == c and second.estimate_tokens is not None and second.estimate_tokens < c
        assert not estimate_error(second).missed_trigger, strategy
        under = turns(_pi(_pi_session(), strategy, c - 1))[1]
        assert under.true_tokens == c and estimate_error(under).missed_trigger, strategy


def test_pi_compaction_whose_true_count_is_exactly_its_limit_is_premature():
    # The recorded usage 9,000 fires the check after the first run; the context before that compaction holds c
    # tokens by the true count. With the limit at c, the true count (not > c) would not have compacted:
    # premature. With the limit at c - 1 the true count exceeds it: not premature. (A limit that low makes the
    # later usage of 300 compact again: only the first compaction is judged here.)
    s = Session()
    s.user("please fix the parser")
    s.assistant("a" * 200, total=9_000)
    s.user("thanks")
    s.assistant("b", total=300)
    opts = {"keep_recent_tokens": 30}
    (first,) = _pi(s, "pi", 8_000, window=10_000, **opts).compactions
    c = first.tokens_before
    for strategy in ("pi", "pi-2026-03"):
        at = _pi(s, strategy, c, **opts).compactions[0]
        assert at.trigger == "threshold" and at.tokens_before == c and at.estimate_tokens is not None
        assert premature(at), strategy
        over = _pi(s, strategy, c - 1, **opts).compactions[0]
        assert over.tokens_before == c and not premature(over), strategy


# ----------------------------------------------------------------------------- OpenCode V2 (>=, compaction.ts@031a4a9c L569)
def test_opencode_v2_compacts_at_an_estimate_exactly_at_its_ceiling_and_misses_a_true_count_over_it():
    # `required` compacts when `estimateTokens >= promptCeiling` (anomalyco/opencode compaction.ts@031a4a9c L569,
    # which supersedes the spec's strict §6.6), ceiling = context - max(min(output, 32,000), 20,000) = context -
    # 20,000 here. Before any response the estimate is the parts' round(len / 4): the first request's own estimate
    # e (no tool definitions: `tools_json_chars=2`). A ceiling of e compacts it; one of e + 1 sends it, though its
    # dense text holds more true tokens than e + 1: a rule `>= e + 1` fires on that true count, a missed trigger.
    s = Session()
    s.user(CJK * 5)
    s.assistant("ok", total=10)
    base = {"tools_json_chars": 2, "output_limit": 1_000}
    e = turns(replay(s.transcript(), "opencode-v2", profile="64k", options={**base, "context_limit": 60_000}))[0].estimate_tokens
    at = replay(s.transcript(), "opencode-v2", profile="64k", options={**base, "context_limit": e + 20_000})
    assert [(c.step, c.estimate_tokens, c.threshold) for c in at.compactions][0] == (0, e, e)
    result = replay(s.transcript(), "opencode-v2", profile="64k", options={**base, "context_limit": e + 20_001})
    first = turns(result)[0]
    assert not [c for c in result.compactions if c.step == 0]  # (the final context, measured by then, compacts)
    assert first.estimate_tokens == e < e + 1 == first.threshold <= first.true_tokens
    assert estimate_error(first).missed_trigger


# ----------------------------------------------------------------------------- Gemini CLI (>=, §2.2)
def _gemini_session(totals: list[int]) -> Session:
    s = Session()
    for n, total in enumerate(totals):
        s.user(f"request {n}: please handle item {n}. " + "w " * 1_000)
        s.assistant(f"answer {n} " + "v " * 1_000, total=total)
    return s


def test_gemini_compresses_from_the_ceiling_of_an_odd_limit_and_reports_it():
    # `originalTokenCount < threshold * tokenLimit` returns NOOP (§2.2 step 4): with 0.5 x 32,001 = 16,000.5 a
    # count of 16,000 does not compress and 16,001 does; 16,001 is the smallest count that compresses.
    s = _gemini_session([10_000, 16_000, 16_001, 1_000, 1_000])
    result = replay(s.transcript(), "gemini-cli", profile="64k", usage="recorded", options={"token_limit": 32_001})
    (compaction,) = [c for c in result.compactions if c.trigger == "threshold"]
    assert compaction.step == 3 and compaction.estimate_tokens == 16_001
    assert compaction.threshold == 16_001
    assert [r.threshold for r in turns(result)[:3]] == [16_001] * 3


def test_gemini_true_count_under_a_fractional_limit_is_no_missed_trigger():
    # The second request's own count is the first response's recorded prompt count, 10, its true count c. With
    # the limit 2c + 1 the rule fires from c + 0.5: a true count of c would not compress it.
    s = Session()
    s.user("please summarise the design document " + "w " * 500)
    s.assistant("ok", total=10)
    s.user("and list the open questions " + "q " * 500)
    s.assistant("done", total=20)
    c = turns(replay(s.transcript(), "gemini-cli", profile="64k", usage="recorded-always"))[1].true_tokens
    result = replay(s.transcript(), "gemini-cli", profile="64k", usage="recorded-always", options={"token_limit": 2 * c + 1})
    second = turns(result)[1]
    assert not result.compactions
    assert second.true_tokens == c and second.estimate_tokens == 10
    assert not estimate_error(second).missed_trigger


# ----------------------------------------------------------------------------- OpenHands (strict, §4.1)
def _tool_steps(steps: int, tool: str = "execute_bash", chars: int = 400) -> Session:
    s = Session()
    s.user("Refactor the billing module; keep the public API unchanged.")
    for k in range(steps):
        s.assistant(f"step {k}", calls=[(f"c{k}", tool, {"command": f"run {k}"})])
        s.result(f"c{k}", f"result {k} " + "r" * chars, name=tool)
    s.assistant("done")
    return s


def test_openhands_view_counted_exactly_at_max_tokens_is_not_condensed():
    # TOKENS is `get_total_token_count(view) > effective_max_tokens` (§4.1). With max_tokens at the third
    # request's count c, that request goes out as it is and the next, over c, condenses: c + 1 is the smallest
    # count that condenses.
    s = _tool_steps(6)
    c = turns(replay(s.transcript(), "openhands", profile="64k"))[2].true_tokens
    result = replay(s.transcript(), "openhands", profile="64k", options={"max_tokens": c})
    third = turns(result)[2]
    assert third.estimate_tokens == third.true_tokens == c
    first = result.compactions[0]
    assert first.step == 3 and first.details["reasons"] == ["TOKENS"] and first.estimate_tokens > c
    assert third.threshold == first.threshold == c + 1


# ----------------------------------------------------------------------------- hybrid and truncate (strict)
def test_hybrid_and_truncate_count_exactly_at_their_limit_is_sent_as_is():
    # Both act when their true count "crosses" / "passes" `trigger_ratio` of the window (strategies/hybrid.py,
    # strategies/baselines.py): `tokens > int(window * ratio)`. A ratio of (c + 0.5) / window puts the limit at
    # the third request's count c: that request is sent as it is, the next compacts.
    s = _tool_steps(6)
    window = get_profile("64k").context_window
    for strategy, extra in (("hybrid", {"summarize_steps": 1_000, "keep_last": 1}), ("truncate", {})):
        c = turns(replay(s.transcript(), strategy, profile="64k", options=extra))[2].true_tokens
        ratio = (c + 0.5) / window
        assert int(window * ratio) == c
        # truncate refuses a target at or above its trigger (TruncateOptions, session 42; it was 0.6 here): half of it
        target = {"target_ratio": ratio / 2} if strategy == "truncate" else {}
        result = replay(s.transcript(), strategy, profile="64k", options={"trigger_ratio": ratio, **extra, **target})
        third = turns(result)[2]
        assert third.true_tokens == c, strategy
        decided = [x for x in result.compactions if x.trigger == "threshold"]
        assert decided and decided[0].step == 3 and decided[0].estimate_tokens > c, strategy
        assert third.threshold == decided[0].threshold == c + 1, strategy


# ----------------------------------------------------------------------------- Anthropic clearing (strict, §2.1)
def test_clear_tool_uses_prompt_counted_exactly_at_the_trigger_is_not_edited():
    # "The edit activates once the prompt exceeds this" (§2.1, read as `>`). With the trigger at the fifth
    # request's exact count c that prompt goes out unedited; the next one, over it, is edited.
    s = _tool_steps(7, tool="Bash")
    c = turns(replay(s.transcript(), "none", profile="claude-opus"))[4].true_tokens
    result = replay(s.transcript(), "anthropic-clear-tool-uses", profile="claude-opus", options={"trigger_value": c})
    fifth, sixth = turns(result)[4:6]
    assert fifth.true_tokens == fifth.estimate_tokens == c and "applied_edits" not in fifth.meta
    assert "applied_edits" in sixth.meta
    assert fifth.threshold == result.compactions[0].threshold == c + 1


# ----------------------------------------------------------------------------- Codex (§1.1, §1.2, §1.4)
def _codex_item(id: str, kind: str, text: str, *, turn: int, response: int | None = None, usage: Usage | None = None) -> Item:
    return Item(id, kind, text, turn=turn, response=response, usage=usage)


def test_codex_fallback_buffer_raises_the_count_that_rolls_over():
    # Token-budget mode with a fallback prompt: `scope_tokens >= scope_limit + fallback_buffer` (§1.1, §1.2).
    # The second request's own count (the recorded total 1 plus the local estimate of the new message) is under
    # the configured limit L, its true count c at L + 10, under L + 100: the rule would not fire on the true
    # count, so no trigger was missed.
    items = (
        _codex_item("u1", "user", "Describe the repository layout in detail. " + "layout " * 400, turn=0),
        _codex_item("a1", "assistant", "Here it is.", turn=0, response=0, usage=Usage(total=1)),
        _codex_item("u2", "user", "Thanks, now the tests.", turn=1),
        _codex_item("a2", "assistant", "Done.", turn=1, response=1, usage=Usage(total=2)),
    )
    t = Transcript(id="codex-buffer", items=items)
    c = turns(replay(t, "codex-token-budget", profile="64k", usage="recorded-always"))[1].true_tokens
    options = {"model_auto_compact_token_limit": c - 10, "auto_compact_fallback_prompt": "Wrap up now.",
               "auto_compact_fallback_buffer_tokens": 100}
    result = replay(t, "codex-token-budget", profile="64k", usage="recorded-always", options=options)
    second = turns(result)[1]
    assert not result.compactions
    assert second.true_tokens == c and second.estimate_tokens is not None and second.estimate_tokens < c - 10
    assert not estimate_error(second).missed_trigger
    assert second.threshold == c + 90


def _downshift(total: int) -> Transcript:
    # old window 128,000; new 64,000: auto limit 57,600, usable 60,800 (§1.1)
    items = (
        Item("m0", "marker", meta={"event": "model_switch", "model": "o3", "context_window": 128_000}),
        _codex_item("u1", "user", "hello", turn=0),
        _codex_item("a1", "assistant", "hi", turn=0, response=0, usage=Usage(total=total)),
        Item("m1", "marker", meta={"event": "model_switch", "model": "o4-mini", "context_window": 64_000}),
        _codex_item("u2", "user", "next", turn=1),
        _codex_item("a2", "assistant", "ok", turn=1, response=1, usage=Usage(total=100)),
    )
    return Transcript(id="codex-downshift", items=items)


def test_codex_downshift_is_strict_on_the_new_auto_limit_and_reports_it():
    # §1.4 item 3: a downshift compacts when `active > new auto limit || active >= new usable window`, strict on
    # the auto limit; the status check that follows with the new model is `active >= auto limit` (§1.2). At
    # 57,600 the downshift does not fire and the status check does, reporting 57,600 itself; at 57,601 the
    # downshift fires, on the new model's limit: it reports 57,601, and its context (a few true tokens) was
    # far under it, so it was premature.
    (status,) = replay(_downshift(57_600), "codex-remote-v2", profile="128k", usage="recorded").compactions
    assert (status.trigger, status.details["reason"]) == ("pre-turn", "ContextLimit")
    assert status.estimate_tokens == status.threshold == 57_600
    (compaction,) = replay(_downshift(57_601), "codex-remote-v2", profile="128k", usage="recorded").compactions
    assert (compaction.trigger, compaction.details["reason"]) == ("model-switch", "ModelDownshift")
    assert compaction.estimate_tokens == compaction.threshold == 57_601
    assert premature(compaction)


def test_codex_body_after_prefix_scope_reports_no_threshold():
    # §1.2: in `body_after_prefix` scope the limit applies to the active count less the window's prefill
    # (the first response's input, §1.5), not to the whole context whose true count a record holds. The
    # second response adds 1,000 to the prefill of 5,000: the body reaches the limit of 1,000 and the next turn
    # compacts, while the whole-context count (6,000) says nothing of that limit.
    items = (
        _codex_item("u1", "user", "hello", turn=0),
        _codex_item("a1", "assistant", "hi", turn=0, response=0, usage=Usage(input=5_000, total=5_000)),
        _codex_item("u2", "user", "more", turn=1),
        _codex_item("a2", "assistant", "ok", turn=1, response=1, usage=Usage(input=5_900, total=6_000)),
        _codex_item("u3", "user", "again", turn=2),
        _codex_item("a3", "assistant", "fine", turn=2, response=2, usage=Usage(input=100, total=100)),
    )
    t = Transcript(id="codex-body", items=items)
    options = {"model_auto_compact_token_limit": 1_000, "auto_compact_token_limit_scope": "body_after_prefix"}
    result = replay(t, "codex-local", profile="64k", usage="recorded", options=options)
    assert [(c.trigger, c.details["reason"]) for c in result.compactions] == [("pre-turn", "ContextLimit")]
    assert result.compactions[0].threshold is None
    assert all(r.threshold is None for r in turns(result))


# ----------------------------------------------------------------------------- Aider (done messages only, §3)
def test_aider_limit_on_done_messages_gives_no_premature_verdict():
    # `too_big` sums `len(encode(json.dumps(message)))` over the done messages (§3, §4) and compares it with
    # 1,024 (8k window). Short messages cost more as JSON than on the wire, so the done messages' JSON count
    # passes 1,024 while the whole context, by its true count, is still under it: a comparison of that whole
    # context with 1,024 would call premature a compaction that the rule made on its own, exactly counted
    # quantity. No threshold, no estimate: no verdict.
    s = Session()
    for n in range(30):
        s.user(f"fix {n}")
        s.assistant(f"ok {n}")
        s.items.append(Item(id=f"out{n}", kind="marker", text=f"Applied edit to f{n}.py", meta={"event": "aider-output"}))
    s.user("last")
    s.assistant("bye")
    # §2.1/§1: after turn n's reply, `cur` (its two messages) joins `done`, then `too_big(done)` is asked, then the
    # pair "I updated the files." / "Ok." is appended (no commit line: the no-repo message, §2.4)
    encoding = get_encoding("o200k_base")  # the 64k profile's tokenizer

    def json_tokens(role: str, content: str) -> int:
        return len(encoding.encode(json.dumps({"role": role, "content": content})))

    done, n = 0, 0
    while True:
        if n:
            done += json_tokens("user", "I updated the files.") + json_tokens("assistant", "Ok.")
        done += json_tokens("user", f"fix {n}") + json_tokens("assistant", f"ok {n}")
        if done > 1_024:
            break
        n += 1
    result = replay(s.transcript(), "aider", profile=small_profile(8_000), options={"applied": True})
    first = next(c for c in result.compactions if c.trigger == "threshold")
    assert first.step == n + 1  # the summary of turn n's snapshot is applied at the next request (§2.3)
    assert first.tokens_before < 1_024  # the whole context, by the true count, is under the limit
    assert not premature(first)
    assert first.threshold is None and first.estimate_tokens is None
