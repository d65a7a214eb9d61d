"""`aider` against docs/specs/aider.md: the history limit, the upstream split vector, and the two modes
(as run: the summary is discarded; `applied=true`: it replaces the history)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from compaction_bench.profiles import ModelProfile, get_profile
from compaction_bench.replay import replay
from compaction_bench.strategies.aider import COMMIT_MESSAGE, OK, SUMMARY_PREFIX, Aider, ChatMessage
from compaction_bench.tokens import get_encoding
from compaction_bench.transcript import Item
from tests.pi_builders import Session, small_profile


def test_history_limit_from_window():
    # §3: min(max(window / 16, 1024), 8192)
    def limit(window: int) -> float:
        result = replay(_edited_session(1, 10).transcript(), "aider", profile=small_profile(window))
        return result.requests[0].meta["history_limit"]

    assert limit(8_000) == 1_024
    assert limit(32_000) == 2_000.0
    assert limit(128_000) == 8_000.0
    assert limit(400_000) == 8_192


@dataclass
class EngineSide:
    """The engine's side of the protocol, for calling Aider's parts directly: every template renders as
    `prompt`, and no model is reachable."""

    profile: ModelProfile
    prompt: str = ""

    def summarize(self, request: Any, *, purpose: str = "summary") -> Any:
        raise AssertionError("no summary call in this test")

    def render_prompt(self, template: str, **variables: Any) -> str:
        return self.prompt


class _WordCountAider(Aider):
    """The upstream test's set-up: tokens = words of the content, `summarize_all` returns "Summary"."""

    def __init__(self) -> None:
        super().__init__(EngineSide(get_profile("64k")), self.parse_options({"max_chat_history_tokens": 100, "summarizer_max_input_tokens": 4096}))
        self.calls: list[int] = []

    def token_count(self, message: ChatMessage) -> int:
        return len(message.content.split())

    def summarize_all(self, messages):  # type: ignore[override]
        self.calls.append(len(messages))
        return [ChatMessage("user", "Summary")]


def test_split_reproduces_the_upstream_vector():
    # tests/basic/test_history.py: 200 messages of 2 tokens, max 100 → tail of 24 (48 < 50), split 176.
    aider = _WordCountAider()
    messages = [ChatMessage(role, f"{text} {i}") for i in range(100) for role, text in (("user", "Message"), ("assistant", "Response"))]
    out = aider.summarize(messages)
    assert aider.calls == [176]
    assert len(out) == 25
    assert out[0].content == "Summary" and out[1].content == "Message 88" and out[-1].content == "Response 99"
    assert out[-1].role == "assistant"  # no "Ok." appended


def _edited_session(turns: int, words: int) -> Session:
    s = Session()
    for n in range(turns):
        s.user(f"change number {n}: " + " ".join(f"word{n}x{k}" for k in range(words)))
        s.assistant(f"edit for change {n} " + " ".join(f"reply{n}y{k}" for k in range(words)))
        s.items.append(Item(id=f"out{n}", kind="marker", text=f"Applied edit to f{n}.py\nCommit abc{n:04d} feat: change {n}",
                            meta={"event": "aider-output"}))
    s.user("last question")
    s.assistant("last answer")
    return s


def test_as_run_discards_every_summary_and_history_keeps_growing():
    # 8k window → limit 1,024; every edited turn adds ~600 tokens to done.
    result = replay(_edited_session(6, 150).transcript(), "aider", profile=small_profile(8_000))
    triggers = [c.trigger for c in result.compactions]
    assert triggers and set(triggers) == {"discarded-summary"}
    assert sum(1 for r in result.requests if r.kind == "summary") >= len(triggers)
    final = result.final.messages
    assert not any(m.content.startswith(SUMMARY_PREFIX) for m in final)
    assert final[0].content.startswith("change number 0")  # nothing was ever replaced
    assert sum(1 for m in final if m.content == OK) == 6


def test_applied_replaces_done_and_loses_the_pair_after_the_snapshot():
    result = replay(_edited_session(6, 150).transcript(), "aider", profile=small_profile(8_000), options={"applied": True})
    applied = [c for c in result.compactions if c.trigger == "threshold"]
    assert applied
    first = applied[0]
    assert first.details["lost_after_snapshot"] == 2 and not first.details["snapshot_equal"]
    assert first.after[0].role == "user" and first.after[0].content.startswith(SUMMARY_PREFIX)
    # The commit message of the turn that started the summary was appended after the snapshot: gone.
    step_commit = COMMIT_MESSAGE.format(hash=f"abc{first.step - 1:04d}", message=f"feat: change {first.step - 1}")
    assert all(m.content != step_commit for m in first.after)
    summary_request = next(r for r in result.requests if r.kind == "summary")
    assert summary_request.messages[0].role == "system"
    assert summary_request.messages[1].content.startswith("# USER\nchange number 0")
    assert "# ASSISTANT\nedit for change 0" in summary_request.messages[1].content


class _FixedSummaryContext:
    """The engine's side for calling the split directly: every summary call answers `text`."""

    def __init__(self, text: str, profile: str = "64k") -> None:
        self.profile = get_profile(profile)  # 64k: o200k_base, the tokenizer of litellm's `gpt-4o`
        self.text = text
        self.calls = 0

    def summarize(self, request: Any, *, purpose: str = "summary") -> Any:
        self.calls += 1
        return SimpleNamespace(text=self.text)

    def render_prompt(self, template: str, **variables: Any) -> str:
        return ""


def test_the_summary_is_measured_as_a_message_list():
    # history.py L90 `token_count(summary)` on a one-message list: litellm.token_counter (§4, models.py
    # L650-656), not the tokens of json.dumps(message) the per-message sizes use. A summary full of “”, —
    # and newlines costs far more as JSON (escapes). Counted independently here with tiktoken and litellm.
    import litellm

    text = "\n".join(f"— the “strict” mode of parse_config() failed on line {i} — fixed" for i in range(20))
    messages = [ChatMessage(role, f"{word} {i}") for i in range(50) for role, word in (("user", "Message"), ("assistant", "Response"))]
    encoding = get_encoding("o200k_base")
    sizes = [len(encoding.encode(json.dumps(m.as_dict()))) for m in messages]
    assert set(sizes) == {14}  # 100 messages, 1,400 tokens
    # max 1,000: half 500, so the tail is the newest 35 messages (490 < 500, 36 would make 504), and
    # the head must end with an assistant message: split 64, a tail of 36 messages (504 tokens)
    tail = 504
    summary = {"role": "user", "content": SUMMARY_PREFIX + text}
    as_list = litellm.token_counter(model="gpt-4o", messages=[summary])
    as_json = len(encoding.encode(json.dumps(summary)))
    assert as_list + tail < 1_000 <= as_json + tail  # accepted as a list; as JSON it would recurse
    ctx = _FixedSummaryContext(text)
    out = Aider(ctx, Aider.parse_options({"max_chat_history_tokens": 1_000})).summarize(messages)
    assert ctx.calls == 1  # accepted at depth 0, no second summary
    assert len(out) == 37 and out[0].content == SUMMARY_PREFIX + text and out[1].content == "Message 32"


def _after_command(command: str):
    s = Session()
    s.user("change foo")
    s.assistant("edit for foo")
    s.items.append(Item(id="o0", kind="marker", text="Applied edit to f.py\nCommit abc1234 feat: foo", meta={"event": "aider-output"}))
    s.user(command)
    s.user("new topic")
    s.assistant("answer")
    return replay(s.transcript(), "aider", profile=small_profile(64_000))


def test_reset_and_the_prefixes_aider_runs_as_clear_empty_the_history():
    """Aider runs a prefix no other command shares (`Commands.run`), and `/reset` clears the history too
    (`commands.py@5dc9490b` L439-443); only the exact `/clear` did here (6 of the 68 clears of the Aider corpus file
    were missed: `/reset` 3, `/clea` 2, `/cle` 1), and the old history stayed in the context."""
    for command in ("/clear", "/reset", "/clea", "/cle", "/res", "/reset --all"):
        result = _after_command(command)
        assert [c.trigger for c in result.compactions] == ["clear"], command
        assert [m.content for m in result.final.messages if m.role != "system"] == ["new topic", "answer"], command
    for command in ("/cl", "/re", "/code", "/clearly not a command"):  # ambiguous, another command, or no command
        assert not [c for c in _after_command(command).compactions if c.trigger == "clear"], command


def test_a_to_do_list_tool_is_not_a_file_edit():
    """A turn whose only tool call was TodoWrite counted as an edited turn: `cur` moved to `done` with a made-up
    "I updated the files." / "Ok." pair, which Aider only adds after an edit (§1)."""
    for tool in ("TodoWrite", "todowrite", "write_todos"):
        s = Session()
        s.user("plan the work")
        s.assistant("planning", calls=[("t1", tool, {"todos": []})])
        s.result("t1", "ok", name=tool)
        s.assistant("planned")
        result = replay(s.transcript(), "aider", profile=small_profile(64_000))
        contents = [m.content for m in result.final.messages]
        assert "I updated the files." not in contents and OK not in contents, tool
    s = Session()
    s.user("fix it")
    s.assistant("editing", calls=[("e1", "Edit", {"file_path": "a.py"})])
    s.result("e1", "ok", name="Edit")
    s.assistant("fixed")
    assert "I updated the files." in [m.content for m in replay(s.transcript(), "aider", profile=small_profile(64_000)).final.messages]


def test_a_message_is_counted_as_litellm_encode_counts_it():
    """§4: `token_count(dict)` is `len(litellm.encode(model, json.dumps(msg)))`, and `encode` counts with litellm's
    default encoding (cl100k_base) for every model it maps to no tokenizer of its own, GPT-5 and Gemini included,
    while the message list (`token_counter`) uses the model's own (o200k_base for GPT-5). Counted by litellm itself
    here. (Claude 4 and DeepSeek get Hugging Face tokenizers there, approximated offline by cl100k_base.)"""
    import litellm

    message = ChatMessage("user", "Résumé: the “strict” parser — ünïcödé 🤖 façade déjà vu; " * 12)
    text = json.dumps(message.as_dict())
    for profile, model in (("gpt-5", "gpt-5"), ("64k", "gpt-5"), ("gemini-2.5-pro", "gemini/gemini-2.5-pro")):
        aider = Aider(_FixedSummaryContext("", profile), Aider.parse_options({}))
        assert aider.token_count(message) == len(litellm.encode(model=model, text=text)), profile
    assert len(get_encoding("o200k_base").encode(text)) != len(get_encoding("cl100k_base").encode(text))  # the test can tell


def test_done_is_counted_up_to_the_limit_and_the_split_reads_only_its_ends():
    """§3 `too_big` and §5. As run, `done` only grows, so once its total is over the limit it is over at every later
    check: a request's meta holds the total (each message's JSON counted with cl100k_base, §4) while it is within
    the limit, and `done_over_limit` from then on. The split reads the tail from the end, up to half the limit, and
    the head up to the summariser's window less 512, so the first questions of a long edited turn, once past the
    head, are never counted."""
    counted: list[str] = []

    class Counting(Aider):
        def token_count(self, message: ChatMessage) -> int:
            counted.append(message.content)
            return super().token_count(message)

    s = Session()
    for n in range(30):  # each edited turn follows five questions, all moved to `done` with it (§1)
        for q in range(5):
            s.user(f"question {n}.{q}: " + " ".join(f"word{n}x{q}x{k}" for k in range(10)))
            s.assistant(f"answer {n}.{q}: " + " ".join(f"reply{n}y{q}y{k}" for k in range(10)))
        s.user(f"change number {n}")
        s.assistant(f"edit for change {n}")
        s.items.append(Item(id=f"out{n}", kind="marker", text=f"Applied edit to f{n}.py\nCommit abc{n:04d} feat: change {n}",
                            meta={"event": "aider-output"}))
    result = replay(s.transcript(), Counting, profile=small_profile(16_000), options={"summarizer_max_input_tokens": 2_000})
    encoding = get_encoding("cl100k_base")

    def tokens(role: str, content: str) -> int:
        return len(encoding.encode(json.dumps({"role": role, "content": content})))

    users = [i.text for i in s.items if i.kind == "user"]
    replies = [i.text for i in s.items if i.kind == "assistant"]
    done_after = [0]  # done's total after each edited turn: its six pairs and the commit pair (§2.4)
    for n in range(30):
        commit = COMMIT_MESSAGE.format(hash=f"abc{n:04d}", message=f"feat: change {n}")
        pairs = sum(tokens("user", u) + tokens("assistant", a) for u, a in zip(users[6 * n : 6 * n + 6], replies[6 * n : 6 * n + 6], strict=True))
        done_after.append(done_after[-1] + pairs + tokens("user", commit) + tokens("assistant", OK))
    within = [t for t in done_after if t <= 1_024]  # 16k window: the limit is 1,024 (§3)
    assert len(within) == 2  # one edited turn within the limit, then over
    metas = [r.meta for r in result.requests if r.kind != "summary"]
    assert sorted({m["done_tokens"] for m in metas if "done_tokens" in m}) == within
    first_over = next(n for n, m in enumerate(metas) if m.get("done_over_limit"))
    assert all("done_tokens" in m for m in metas[:first_over]) and all(m.get("done_over_limit") for m in metas[first_over:])
    assert result.compactions and {c.trigger for c in result.compactions} == {"discarded-summary"}
    assert users[0] in counted and replies[-1] in counted  # the head's first message, the last tail's
    firsts = [users[6 * n] for n in range(10, 30)]  # the first question of each later edited turn
    assert not any(u in counted for u in firsts)  # the middle of a growing `done` is never read
