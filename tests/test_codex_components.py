"""Unit tests of the shared Codex components (docs/specs/codex.md §1, §2.1, §3.1, §4.3, §6, §9).

Expected values are worked out by hand from the spec's formulas, not from the code under test.
"""

from __future__ import annotations

import json

from compaction_bench.strategies.codex_components import (
    CodexItem,
    ContextLimits,
    ContextWindows,
    ModelState,
    RetainedRun,
    TokenAccount,
    TruncationPolicy,
    encrypted_length,
    for_prompt,
    insert_initial_context,
    model_switch_reason,
    pretrim_tool_outputs,
    remote_candidates,
    remove_first_item,
    select_user_messages,
    truncate_middle,
)
from compaction_bench.transcript import Attachment, Usage


def retain_for_remote(items: list[CodexItem], *, budget: int, max_agent_message_tokens: int) -> list[CodexItem]:
    """§4.3 steps 1-3 over a whole history: the strategy's candidates and retention (`RetainedRun`) started from `items`."""
    run = RetainedRun()
    run.restart(remote_candidates(items, max_agent_message_tokens))
    return run.retain(budget)


def user(text: str, id: str, **kw) -> CodexItem:
    return CodexItem(type="message", role="user", text=text, item_ids=(id,), **kw)


def call(call_id: str, id: str) -> CodexItem:
    return CodexItem(type="function_call", name="shell", arguments="{}", call_id=call_id, item_ids=(id,))


def output(call_id: str, text: str, id: str) -> CodexItem:
    return CodexItem(type="function_call_output", call_id=call_id, text=text, item_ids=(id,))


# --------------------------------------------------------------------------- §9 truncation
def test_truncate_middle_keeps_head_and_tail_halves_with_token_marker():
    # 10 bytes, budget 4: head 2 bytes, tail 2 bytes, n = ceil((10-4)/4) = 2
    assert truncate_middle("abcdefghij", 4) == "ab…2 tokens truncated…ij"
    assert truncate_middle("abcdefghij", 10) == "abcdefghij"


def test_truncate_middle_respects_utf8_boundaries_and_bytes_mode():
    # "ééé" is 6 bytes; budget 3 → head floor(1.5)=1 byte falls inside "é" → empty head;
    # tail 2 bytes → the last "é"; token marker n = ceil(3/4) = 1; chars mode removes 2 characters.
    assert truncate_middle("ééé", 3) == "…1 tokens truncated…é"
    assert truncate_middle("ééé", 3, unit="bytes") == "…2 chars truncated…é"
    assert truncate_middle("abcdefgh", 0) == "…2 tokens truncated…"


def test_history_truncation_budget_is_policy_times_1_2():
    assert TruncationPolicy("tokens", 10_000).history_budget_bytes(1.2) == 48_000
    assert TruncationPolicy("bytes", 10_000).history_budget_bytes(1.2) == 12_000
    text = "x" * 50_000
    truncated = TruncationPolicy("tokens", 10_000).truncate_for_history(text, 1.2)
    assert truncated == "x" * 24_000 + "…500 tokens truncated…" + "x" * 24_000


# --------------------------------------------------------------------------- §6 estimator
def test_item_estimate_is_ceil_of_compact_json_bytes_over_4():
    wire = '{"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]}'
    assert user("hello", "u").estimate == -(-len(wire) // 4)
    out = '{"type":"function_call_output","call_id":"c1","output":"ok"}'
    assert output("c1", "ok", "o").estimate == -(-len(out) // 4)


def test_encrypted_reasoning_and_image_estimates():
    # (1000*3//4 - 650) = 100 bytes → 25 tokens; (900*3//4 - 650) = 25 bytes → 7 tokens
    assert CodexItem(type="reasoning", encrypted_len=1000).estimate == 25
    assert CodexItem(type="reasoning", encrypted_len=900).estimate == 7
    assert CodexItem(type="reasoning", encrypted_len=800).estimate == 0
    plain = user("look", "u")
    with_image = user("look", "u", images=(Attachment("image/png", size=99_999),))
    image_part = ',{"type":"input_image","image_url":"data:image/png;base64,"}'
    wire = len('{"type":"message","role":"user","content":[{"type":"input_text","text":"look"}]}') + len(image_part) + 7373
    assert with_image.estimate == -(-wire // 4)
    assert with_image.estimate > plain.estimate + 1800


def test_emulated_compaction_item_counts_its_text():
    text = "s" * 4000
    item = CodexItem(type="compaction", text=text, encrypted_len=encrypted_length(text, 650))
    assert item.estimate == 1000


# --------------------------------------------------------------------------- §1.1 limits
def test_limits_for_272k_and_configured_limits():
    limits = ContextLimits(272_000)
    assert (limits.usable, limits.auto_limit) == (258_400, 244_800)
    assert ContextLimits(272_000, configured_limit=200_000).auto_limit == 200_000
    assert ContextLimits(272_000, configured_limit=300_000).auto_limit == 244_800
    assert ContextLimits(272_000, configured_limit=300_000, scope="body_after_prefix").scope_limit == 300_000


# --------------------------------------------------------------------------- §1.3 accountant
def test_active_tokens_add_tail_after_last_model_item_and_old_encrypted_reasoning():
    r_old = CodexItem(type="reasoning", encrypted_len=1000)  # 25, before the last user boundary
    r_new = CodexItem(type="reasoning", encrypted_len=2000)  # after it: not added
    tail = output("c2", "new output", "o2")
    items = [user("first", "u1"), r_old, user("second", "u2"), r_new, call("c2", "c2"), tail]
    account = TokenAccount()
    account.observe(Usage(input=900, output=100, total=1000))
    assert account.active(items) == 1000 + tail.estimate + 25
    assert TokenAccount(reasoning_included=True, last_total=1000).active(items) == 1000 + tail.estimate


def test_active_tokens_without_model_items_have_no_local_tail():
    items = [user("q1", "u1"), user("q2", "u2")]
    assert TokenAccount(last_total=500).active(items) == 500


def test_fill_to_context_window_zero_quirk():
    account = TokenAccount()
    account.observe(Usage(total=200_000))
    account.observe(Usage(total=100_000))  # cumulative 300,000 > 258,400
    account.fill_to_context_window(258_400)
    assert account.last_total == 0
    assert account.cumulative_total == 258_400
    short = TokenAccount()
    short.observe(Usage(total=100_000))
    short.fill_to_context_window(258_400)
    assert short.last_total == 158_400


def test_status_uses_ge_and_body_after_prefix_baseline():
    limits = ContextLimits(1000)  # usable 950, auto 900
    assert TokenAccount(last_total=899).status([], limits).limit_reached is False
    status = TokenAccount(last_total=900).status([], limits)
    assert status.limit_reached and status.remaining == 0
    body = ContextLimits(1000, configured_limit=300, scope="body_after_prefix")
    account = TokenAccount()
    account.observe(Usage(input=600, output=50, total=650))  # prefill = 600
    status = account.status([], body)
    assert (status.scope_tokens, status.limit_reached, status.remaining) == (50, False, 250)


def test_rebase_after_compaction_sets_estimate_and_prefill():
    account = TokenAccount()
    account.observe(Usage(input=10, total=20))
    account.rebase(123)
    assert (account.last_total, account.prefill, account.prefill_observed) == (123, 123, False)
    account.observe(Usage(input=400, total=450))
    assert account.prefill == 400


def test_window_counter_advances_ids():
    windows = ContextWindows(seed="t")
    first = windows.current_id
    windows.advance()
    assert windows.number == 1 and windows.previous_id == first and windows.first_id == first
    assert windows.current_id != first and windows.current_id[14] == "7"  # UUIDv7 layout
    assert windows.request_id == "t:1"


# --------------------------------------------------------------------------- §1.4 model switch
def test_model_switch_reasons():
    big, small = ContextLimits(272_000), ContextLimits(128_000)  # new auto 115,200, usable 121,600
    assert model_switch_reason(ModelState("gpt-5.5", "2911", big), ModelState("gpt-5.6-sol", "3000", big), 10) == "CompHashChanged"
    assert model_switch_reason(ModelState("gpt-5.4", "2911", big), ModelState("gpt-5.5", "2911", big), 10) is None
    assert model_switch_reason(ModelState("a", None, big), ModelState("b", None, small), 115_201) == "ModelDownshift"
    assert model_switch_reason(ModelState("a", None, big), ModelState("b", None, small), 115_200) is None
    body = ContextLimits(128_000, scope="body_after_prefix")
    assert model_switch_reason(ModelState("a", None, big), ModelState("b", None, body), 115_201) is None
    assert model_switch_reason(ModelState("a", None, big), ModelState("b", None, body), 121_600) == "ModelDownshift"


# --------------------------------------------------------------------------- §2.1 normalization
def test_for_prompt_adds_aborted_output_and_drops_orphans():
    items = [user("go", "u"), call("c1", "c1"), output("zz", "orphan", "oz"), call("c2", "c2"), output("c2", "done", "o2")]
    out = for_prompt(items)
    assert [(i.type, i.call_id, i.text) for i in out] == [
        ("message", None, "go"),
        ("function_call", "c1", ""),
        ("function_call_output", "c1", "aborted"),
        ("function_call", "c2", ""),
        ("function_call_output", "c2", "done"),
    ]


def test_remove_first_item_takes_the_partner():
    items = [call("c1", "c1"), user("x", "u"), output("c1", "o", "o1"), call("c2", "c2")]
    removed = remove_first_item(items)
    assert [i.item_ids[0] for i in removed] == ["c1", "o1"]
    assert [i.item_ids[0] for i in items] == ["u", "c2"]


# --------------------------------------------------------------------------- §2.2 selection
def test_twenty_k_selection_truncates_the_crossing_message_in_the_middle():
    m1 = user("H" * 16_000 + "T" * 16_000, "m1")  # 8,000 tokens
    m2 = user("b" * 24_000, "m2")  # 6,000 tokens
    m3 = user("c" * 40_000, "m3")  # 10,000 tokens
    kept = select_user_messages([m1, m2, m3], 20_000)
    # newest first: m3 (10,000 left), m2 (4,000 left), m1 → 4,000 tokens = 16,000 bytes,
    # head 8,000 + tail 8,000 bytes, marker ceil((32,000-16,000)/4) = 4,000 tokens
    assert [k.item_ids for k in kept] == [("m1",), ("m2",), ("m3",)]
    assert kept[0].text == "H" * 8000 + "…4000 tokens truncated…" + "T" * 8000
    assert kept[1].text == m2.text and kept[2].text == m3.text


def test_twenty_k_selection_stops_when_budget_is_exactly_spent():
    older, exact = user("a" * 40, "old"), user("b" * 80_000, "exact")  # exactly 20,000 tokens
    assert [k.item_ids for k in select_user_messages([older, exact], 20_000)] == [("exact",)]


def test_initial_context_goes_before_the_last_real_user_message():
    dev = CodexItem(type="message", role="developer", text="dev", contextual=True, item_ids=("dev",))
    summary = user("S", "s", summary=True)
    history = [user("one", "u1"), user("two", "u2"), summary]
    assert [i.item_ids for i in insert_initial_context(history, [dev])] == [("u1",), ("dev",), ("u2",), ("s",)]
    assert [i.item_ids for i in insert_initial_context([summary], [dev])] == [("dev",), ("s",)]
    assert [i.item_ids for i in insert_initial_context([], [dev])] == [("dev",)]


def test_initial_context_goes_before_a_later_agent_message_but_not_a_final_answer():
    """compact.rs L559-614 (and its tests L563-704): a non-final agent message counts as the last user
    turn; a `FINAL_ANSWER` completion is skipped; an empty agent message is not final."""
    dev = CodexItem(type="message", role="developer", text="dev", contextual=True, item_ids=("dev",))
    compaction = CodexItem(type="compaction", text="c", item_ids=("c",))
    progress = CodexItem(type="agent_message", text="Message Type: PROGRESS\nhalfway", item_ids=("am",))
    final = CodexItem(type="agent_message", text="Message Type: FINAL_ANSWER\nPayload:\ndone", item_ids=("final",))
    empty = CodexItem(type="agent_message", text="", item_ids=("task",))
    summary = user("S", "s", summary=True)

    def ids(history):
        return [i.item_ids[0] for i in insert_initial_context(history, [dev])]

    assert ids([user("one", "u1"), progress, compaction]) == ["u1", "dev", "am", "c"]
    assert ids([progress, user("two", "u2"), compaction]) == ["am", "dev", "u2", "c"]
    assert ids([user("older", "u1"), user("latest", "u2"), final, summary]) == ["u1", "dev", "u2", "final", "s"]
    assert ids([empty, compaction]) == ["dev", "task", "c"]
    assert ids([final, compaction]) == ["final", "dev", "c"]


# --------------------------------------------------------------------------- §3.1 pre-trim
def test_pretrim_rewrites_only_the_trailing_output_run():
    big = "z" * 4000
    items = [
        user("go", "u"),
        call("c1", "c1"),
        output("c1", big, "o1"),
        call("c2", "c2"),
        call("c3", "c3"),
        output("c2", big, "o2"),
        output("c3", big, "o3"),
    ]
    rewritten, estimate = pretrim_tool_outputs(items, sum(i.estimate for i in items), usable=100, placeholder="TRIMMED")
    assert estimate == sum(i.estimate for i in items)  # the estimate of the rewritten items
    # newest first: o3, o2 rewritten; c3 is not an output → stop although still over 100
    assert rewritten == ["o3", "o2"]
    assert [i.text for i in items if i.is_tool_output] == [big, "TRIMMED", "TRIMMED"]
    assert sum(1 for i in items if i.is_call) == 3


def test_pretrim_stops_once_the_estimate_fits():
    big = "z" * 4000
    items = [user("go", "u"), call("c2", "c2"), call("c3", "c3"), output("c2", big, "o2"), output("c3", big, "o3")]
    fits_after_one = sum(i.estimate for i in items) - items[-1].estimate + 30
    rewritten, estimate = pretrim_tool_outputs(items, sum(i.estimate for i in items), usable=fits_after_one, placeholder="TRIMMED")
    assert rewritten == ["o3"] and estimate == sum(i.estimate for i in items) <= fits_after_one


# --------------------------------------------------------------------------- §4.3 retention
def test_v2_budget_skips_oversized_agent_message_without_zeroing():
    old = user("o" * 400, "old")  # cost 100
    agent = CodexItem(type="agent_message", text="a" * 1600, item_ids=("agent",))  # full estimate > 400
    new = user("n" * 1200, "new")  # cost 300
    assert agent.estimate == -(-len(json.dumps({"type": "agent_message", "message": "a" * 1600}, separators=(",", ":"))) // 4)
    kept = retain_for_remote([old, agent, new], budget=500, max_agent_message_tokens=10_000)
    assert [k.item_ids for k in kept] == [("old",), ("new",)]
    assert kept[0].text == old.text


def test_v2_budget_truncates_the_crossing_message_and_then_zeroes():
    oldest, crossing, new = user("x" * 40, "oldest"), user("c" * 2000, "cross"), user("n" * 1200, "new")
    kept = retain_for_remote([oldest, crossing, new], budget=500, max_agent_message_tokens=10_000)
    # new costs 300 → 200 left; crossing (500) truncated to 200 tokens = 800 bytes; then nothing more
    assert [k.item_ids for k in kept] == [("cross",), ("new",)]
    assert kept[0].text == "c" * 400 + "…300 tokens truncated…" + "c" * 400


def test_v2_filters_drop_final_answers_large_agent_messages_contextual_and_assistant():
    items = [
        user("<environment_context>x</environment_context>", "env", contextual=True),
        CodexItem(type="message", role="assistant", text="answer", item_ids=("a",)),
        CodexItem(type="agent_message", text="Message Type: FINAL_ANSWER\nok", item_ids=("final",)),
        CodexItem(type="agent_message", text="q" * 50_000, item_ids=("huge",)),
        CodexItem(type="agent_message", text="progress", item_ids=("agent",)),
        user("real", "u"),
    ]
    kept = retain_for_remote(items, budget=64_000, max_agent_message_tokens=10_000)
    assert [k.item_ids for k in kept] == [("agent",), ("u",)]


def test_a_configured_tool_output_token_limit_is_four_bytes_a_token_in_bytes_mode():
    """§9: config `tool_output_token_limit` N overrides a model's policy as N tokens, or 4N bytes for a bytes-mode
    model (gpt-5.2); without it the policy is the model's own, 10,000 in its unit. It was read as N bytes."""
    assert TruncationPolicy.of("bytes", 2_500).history_budget_bytes(1.2) == 12_000  # Bytes(10,000) × 1.2
    assert TruncationPolicy.of("tokens", 2_500).history_budget_bytes(1.2) == 12_000  # Tokens(3,000) = 12,000 bytes
    assert TruncationPolicy.of("bytes", None) == TruncationPolicy("bytes", 10_000)
    assert TruncationPolicy.of("tokens", None) == TruncationPolicy("tokens", 10_000)
