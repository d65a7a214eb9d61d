"""What a remote Codex compaction carries to the next one, against the straightforward computation.

- `RetainedRun` (§4.3's retention kept from one compaction to the next: the retained run plus the
  candidates that came after it) against the spec's walk one candidate at a time over the whole
  history (`_retain_one_by_one`), over sequences of compactions whose histories are the previous
  retained run, its compaction item and new items, or now and then a history unrelated to it; its
  messages, estimates and ids against those read from the kept items;
- `PromptView.adopt` and `ActiveTerms.adopt` (a compaction's new history taken from what the caller
  holds) against a fresh view and fresh terms over that history, also after items are appended;
- whole replays of `codex-remote-v1`/`-v2` on the synthetic shapes, with and without the carry
  (every compaction starting from the whole history), also with compactions that fail: every
  request and compaction equal.
"""

from __future__ import annotations

import random
from collections import Counter

from compaction_bench.replay import ReplayResult, replay
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.strategies.codex import CodexCompactionFailed, CodexRemoteV1, CodexRemoteV2
from compaction_bench.strategies.codex_components import (
    ActiveTerms,
    CodexItem,
    ItemConverter,
    PromptView,
    RetainedRun,
    for_prompt,
    remote_candidates,
    render,
)
from compaction_bench.strategies.history import FoldMemo
from compaction_bench.transcript import Attachment
from tests.test_speed_codex_memo import _retain_one_by_one
from tests.test_speed_codex_opencode import _codex_item

IMAGE = Attachment(mime="image/png")


def _new_item(rng: random.Random, n: int) -> CodexItem:
    """A user, agent, contextual or assistant message (some with images, some empty), or another item."""
    text = "é" * rng.choice([0, 1, 3, 50, 400, 3_000]) + f" {n}"[: rng.choice([0, 9])]
    kind = rng.random()
    if kind < 0.5:
        images = (IMAGE,) if rng.random() < 0.1 else ()
        return CodexItem(type="message", role="user", text=text, images=images, contextual=rng.random() < 0.1, item_ids=(f"u{n}",))
    if kind < 0.7:
        prefix = "Message Type: FINAL_ANSWER\n" if rng.random() < 0.2 else ""
        return CodexItem(type="agent_message", text=prefix + text, item_ids=(f"a{n}",))
    if kind < 0.8:
        return CodexItem(type="message", role="assistant", text=text, item_ids=(f"m{n}",))
    return _codex_item(rng, n)


def test_carried_retention_keeps_what_the_walk_over_the_whole_history_keeps():
    truncated = skipped = carried = restarted = 0
    for seed in range(120):
        rng = random.Random(seed)
        budget, max_agent = rng.choice([0, 1, 10, 300, 2_000, 64_000]), rng.choice([100, 10_000])
        run, history, n, length = RetainedRun(), [], 0, 0
        for step in range(rng.randrange(1, 40)):
            if step and rng.random() < 0.1:  # a history that is not the previous compaction's
                history, restart = [_new_item(rng, n + k) for k in range(rng.randrange(0, 30))], True
            else:  # the previous compaction's history, then new items
                restart = not step
                history = [*history, *(_new_item(rng, n + k) for k in range(rng.randrange(0, 12)))]
            n += 100
            if restart:
                run.restart(remote_candidates(history, max_agent))
                restarted += 1
            else:
                run.extend(remote_candidates(history[length:], max_agent))
                carried += 1
            kept = run.retain(budget)
            expected = _retain_one_by_one(history, budget, max_agent)
            assert [(k.item_ids, k.text, k.images) for k in kept] == [(k.item_ids, k.text, k.images) for k in expected]
            assert run.items[run.start :] == kept
            assert run.messages[run.start :] == [k.message for k in kept]
            assert run.estimates[-1] - run.estimates[run.start] == sum(k.estimate for k in kept)
            assert run.retained_ids == [i for k in kept for i in k.item_ids]
            texts = {i.item_ids: i.text for i in history}
            truncated += any(k.text != texts[k.item_ids] for k in kept)
            # an agent message that did not fit, with an older message kept after it
            kept_at = [m for m, i in enumerate(history) if i.item_ids in {k.item_ids for k in kept}]
            skipped += any(i.type == "agent_message" and not i.text.startswith("Message") and i.estimate <= max_agent
                           and m not in kept_at and kept_at and kept_at[0] < m for m, i in enumerate(history))
            # the next history: the retained run and a compaction item
            history = [*kept, CodexItem(type="compaction", text=f"summary {step}", encrypted_len=1_000)]
            length = len(history)
    assert truncated > 50 and skipped > 20 and carried > 1_000 and restarted > 200


def test_carried_retention_forgets_what_it_no_longer_retains():
    """Thousands of compactions over one-token messages: the run drops the candidates before it (the
    sums stay absolute) and still keeps what the walk keeps."""
    run, history, shrunk = RetainedRun(), [], 0
    for step in range(3_000):
        history = [*history, CodexItem(type="message", role="user", text=f"u{step % 10}", item_ids=(f"u{step}", f"v{step}"))]
        run.extend(remote_candidates(history[-1:], 10_000))
        before = len(run.items)
        kept = run.retain(300)
        shrunk += len(run.items) < before
        assert kept == _retain_one_by_one(history, 300, 10_000)
        assert run.retained_ids == [i for k in kept for i in k.item_ids]
        assert run.costs[-1] - run.costs[run.start] == sum(k.retention_cost for k in kept)
        history = kept
    assert shrunk > 0


def test_adopted_views_equal_fresh_views_of_the_new_history():
    make = ItemConverter().make
    for seed in range(150):
        rng = random.Random(seed)
        base = rng.choice(["", "base instructions"])
        view, terms = PromptView(make, FoldMemo()), ActiveTerms()
        history = [_codex_item(rng, n) for n in range(rng.randrange(0, 30))]
        view.update(history, base)
        terms.of(history)
        # a remote compaction's new history: plain messages (some with images), then the compaction item
        plain = [_new_item(rng, 100 + n) for n in range(rng.randrange(0, 30))]
        new = [i for i in plain if not i.is_tool and not i.encrypted_reasoning]
        new.append(CodexItem(type="compaction", text="summary", encrypted_len=rng.choice([0, 2_000])))
        view.adopt(new, base if rng.random() < 0.9 else "other", [i.message for i in new], sum(i.estimate for i in new))
        terms.adopt(new)
        fresh_view, fresh_terms = PromptView(make, FoldMemo()), ActiveTerms()
        for _ in range(3):
            assert list(view.messages(new, base)) == list(fresh_view.messages(new, base)) == render(for_prompt(new, make), base)
            assert view.items == fresh_view.items
            assert (view.items_estimate, view.history_estimate) == (fresh_view.items_estimate, fresh_view.history_estimate)
            assert view.normalized_as_is == fresh_view.normalized_as_is
            assert terms.of(new) == fresh_terms.of(new) == ActiveTerms().of(new)
            new.extend(_codex_item(rng, 200 + n) for n in range(rng.randrange(0, 20)))


class _Counted:
    """Counts the compactions that carried the previous one's retention (`builds[True]`) or not."""

    builds: Counter[bool] = Counter()

    def build(self, phase, limits):
        _Counted.builds[self.run.follows(self.history)] += 1
        return super().build(phase, limits)


class _CarriedV1(_Counted, CodexRemoteV1):
    pass


class _CarriedV2(_Counted, CodexRemoteV2):
    pass


class _PlainV1(CodexRemoteV1):
    """Nothing carried: every compaction starts from the whole history, the views start again."""

    def installed(self, built, history):
        self._built = None


class _PlainV2(CodexRemoteV2):
    def installed(self, built, history):
        self._built = None


class _Failing:
    """Every third compaction fails before it retains anything (as a summary request that overflows)."""

    def build(self, phase, limits):
        self.attempts = getattr(self, "attempts", 0) + 1
        if self.attempts % 3 == 0:
            raise CodexCompactionFailed("the third compaction fails")
        return super().build(phase, limits)


class _FailingCarriedV1(_Failing, _CarriedV1):
    pass


class _FailingPlainV1(_Failing, _PlainV1):
    pass


def _digest(result: ReplayResult) -> list[object]:
    out: list[object] = []
    for q in result.requests:
        out.append((q.kind, q.true_tokens, q.estimate_tokens, q.threshold, q.overflow, q.meta,
                    [(m.role, m.content, m.item_ids, m.tool_calls, m.tool_call_id, m.attachments) for m in q.messages]))
    for c in result.compactions:
        out.append((c.trigger, c.tokens_before, c.tokens_after, c.summary, c.summarized_ids, tuple(c.kept_ids), c.dropped_ids,
                    c.details))
    return out


def test_replays_with_and_without_the_carry_are_equal():
    _Counted.builds.clear()
    compactions = failures = 0
    for shape, size, budget, (carry, plain) in (
        ("short-turns", 200_000, 4_000, (_CarriedV1, _PlainV1)),
        ("aborted-calls", 150_000, 2_000, (_CarriedV1, _PlainV1)),
        ("images", 150_000, 2_000, (_CarriedV2, _PlainV2)),
        ("parallel-calls", 150_000, 20_000, (_CarriedV2, _PlainV2)),
        ("huge-output", 150_000, 4_000, (_FailingCarriedV1, _FailingPlainV1)),
    ):
        # seed 3 of huge-output: a compaction succeeds after the failed one (after some failures Codex's
        # usage reads 0 and it never compacts again, §1.3, so which seeds show a retry depends on the summaries)
        transcript = generate(shape, seed=3 if shape == "huge-output" else 1, target_tokens=size).transcript
        options = {"retained_message_token_budget": budget}
        with_carry = replay(transcript, carry, profile="32k@8000", options=options)
        assert _digest(with_carry) == _digest(replay(transcript, plain, profile="32k@8000", options=options))
        compactions += len(with_carry.compactions)
        failures += sum(len(c.details["failed_attempts"]) for c in with_carry.compactions)
    assert compactions > 100 and _Counted.builds[True] > compactions / 2 and failures > 0
