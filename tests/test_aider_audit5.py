"""The fifth audit of `aider` and the Aider importer (`Aider-AI/aider@5dc9490b`; the corpus's Aider, 2024-08-15, is
`23f89f1d`): edits made through a shell, failed SEARCH/REPLACE blocks, `/web` and clipboard images, `####` lines
inside replies, a reply logged after another session's header, unreadable token counts, the weak model's summaries.
(`--cache-prompts`'s mark at the end of `done` is not here: the simulated provider takes no per-request position.)"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from compaction_bench.importing import load_transcript, load_transcripts
from compaction_bench.llm import CallSettings, LLMClient
from compaction_bench.profiles import get_profile
from compaction_bench.replay import replay, summary_profile
from compaction_bench.strategies.aider import NO_EDITS_MESSAGE, NO_REPO_MESSAGE, OK, UNLOGGED_COMMIT, Aider
from compaction_bench.tokens import shared_counter
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA
from tests.pi_builders import Session, small_profile
from tests.test_import_audit_aider import AiderLog
from tests.test_import_audit_aider_edit_errors import PARSE_ERROR, ErrorLog, no_match

AIDER_CORPUS = CORPORA / "aider-chat-history-md/Aider-AI__aider/chat-history.md"
MONOTOBA_11_01 = CORPORA / "codex-rollout-jsonl/Monotoba__OpenPrintKit/rollout-2025-11-01T11-34-37-97b66f6c-a160-40e0-bd0f-1fdcbbb9498b.jsonl"

# ---------------------------------------------------------------- F1: edits through a shell, edit receipts

#: Codex CLI 0.34's edit as the OpenPrintKit rollouts record it: `shell` running `apply_patch` in a here-document.
SHELL_PATCH = {"command": ["bash", "-lc", "apply_patch << 'PATCH'\n*** Begin Patch\n*** Add File: opk/core/__init__.py\n+x = 1\n*** End Patch\nPATCH"]}
RECEIPT = "Success. Updated the following files:\nA opk/core/__init__.py\n"


def _codex_turn(arguments: dict, result: str, tool: str = "shell") -> list[str]:
    """The final context of one turn: a call, its result, the closing reply, then a question."""
    s = Session()
    s.user("add the core package")
    s.assistant("adding it", calls=[("c1", tool, arguments)])
    s.result("c1", result, name=tool)
    s.assistant("added")
    s.user("next question")
    s.assistant("an answer")
    return [m.content for m in replay(s.transcript(), "aider", profile=small_profile(64_000)).final.messages]


def test_a_shell_call_running_apply_patch_is_an_edited_turn():
    """§1 `if edited:` moves `cur` to `done` with the commit pair: only an edit tool's *name* counted, so on Codex 0.34
    transcripts (every edit is `shell` running `apply_patch`) `aider` never summarised."""
    contents = _codex_turn(SHELL_PATCH, RECEIPT)
    assert contents.index(NO_REPO_MESSAGE) == 4 and contents[5] == OK  # after the turn's four messages, before the next
    # the patch given to `apply_patch` as its argument, as Codex's exec form sends it
    assert NO_REPO_MESSAGE in _codex_turn({"command": ["apply_patch", "*** Begin Patch\n*** End Patch"]}, "", tool="exec")
    # Gemini CLI's edit tool, `replace` (base-declarations.ts@5411f113 L65), which no part of an edit tool's name matched
    assert NO_REPO_MESSAGE in _codex_turn({"file_path": "a.py", "old_string": "x", "new_string": "y"}, "Successfully modified file: a.py", tool="replace")


def test_an_edit_receipt_marks_the_turn_edited_whatever_ran_it():
    """Codex's `apply_patch` summary (`Success. Updated the following files:` and `A|M|D path` lines), also after bash's
    here-document warning: the files were edited, whatever the call's name or arguments."""
    warning = "bash: line 30: warning: here-document at line 1 delimited by end-of-file (wanted `PATCH')\n"
    assert NO_REPO_MESSAGE in _codex_turn({"script": "patch.sh"}, warning + "Success. Updated the following files:\nM a.py\n")


def test_a_shell_call_that_only_names_apply_patch_edits_nothing():
    for arguments, result in (({"command": ["bash", "-lc", "grep -rn apply_patch src"]}, "src/x.py: apply_patch"),
                              ({"command": ["bash", "-lc", "ls"]}, "Success. Updated the following files: none")):
        contents = _codex_turn(arguments, result)
        assert NO_REPO_MESSAGE not in contents and OK not in contents, arguments


@pytest.mark.corpora
def test_aider_summarises_the_openprintkit_codex_rollout():
    """The audit's measure on the 11-01 rollout at `64k` (329 `shell` calls, 159 running `apply_patch`): no edited turn
    was seen, so no compaction, and `aider@applied=true` overflowed 292 of its 380 turn requests."""
    transcript = load_transcript(MONOTOBA_11_01)
    transcript = transcript[0] if isinstance(transcript, list) else transcript
    applied = replay(transcript, "aider", profile="64k", options={"applied": True})
    turns = [r for r in applied.requests if r.kind == "turn"]
    assert collections.Counter(c.trigger for c in applied.compactions) == {"threshold": 37}
    assert len(turns) == 380 and sum(r.overflow for r in turns) == 0
    as_run = replay(transcript, "aider", profile="64k")
    assert collections.Counter(c.trigger for c in as_run.compactions) == {"discarded-summary": 45}


# ---------------------------------------------------------------- F3: failed SEARCH/REPLACE blocks are an edited turn


def _failed_edit_context(folder: Path, error: str, banner: str = "Git repo: .git with 12 files") -> list[str]:
    """The final context of a session whose reply's blocks fail (`error` is what the coder raised), logged as the
    corpus's Aider logs it, then answered and followed by a question."""
    log = ErrorLog()
    log.start("2024-08-05 20:40:10")
    log.tool_output("Aider v0.49.2-dev")
    log.tool_output(banner)
    log.user_input("use y")
    log.ai_output("app.py\n```\n<<<<<<< SEARCH\n    return x\n=======\n    return y\n>>>>>>> REPLACE\n```")
    log.tool_output("Tokens: 1,000 sent, 20 received.")
    log.edit_error(error)
    log.ai_output("Sorry, the line has trailing spaces.")
    log.tool_output("Tokens: 1,100 sent, 30 received.")
    path = folder / f"{len(list(folder.iterdir()))}.aider.chat.history.md"
    path.write_text(log.text, encoding="utf-8")
    (transcript,) = load_transcripts(path)
    return [m.content for m in replay(transcript, "aider", profile=small_profile(64_000)).final.messages]


def test_a_reply_whose_blocks_failed_to_match_moves_cur_before_the_error_is_sent_back(tmp_path: Path):
    """`apply_updates` returns the dry run's paths when `apply_edits` raises (`base_coder.py@5dc9490b` L2296-2316), so
    `send_message` commits and moves `cur` to `done` (L1586-1594) before `run_one` sends the error: nothing changed, so
    the pair is `files_content_gpt_no_edits` (L2391)."""
    contents = _failed_edit_context(tmp_path, no_match())
    assert contents[:2] == ["use y", "app.py\n```\n<<<<<<< SEARCH\n    return x\n=======\n    return y\n>>>>>>> REPLACE\n```"]
    assert contents[2:5] == [NO_EDITS_MESSAGE, OK, no_match()]  # the pair, then the error Aider sent back
    assert contents[5] == "Sorry, the line has trailing spaces."


def test_the_pair_is_a_commit_when_other_blocks_applied_and_no_repo_says_it_updated_the_files(tmp_path: Path):
    assert _failed_edit_context(tmp_path, no_match(passed=1))[2:4] == [UNLOGGED_COMMIT, OK]  # the applied blocks were committed
    assert _failed_edit_context(tmp_path, no_match(), banner="Git repo: none")[2:4] == [NO_REPO_MESSAGE, OK]  # `auto_commit` returns None


def test_a_parse_error_is_no_edited_turn(tmp_path: Path):
    """`get_edits` raises before the dry run: `edited` stays empty and nothing moves."""
    contents = _failed_edit_context(tmp_path, PARSE_ERROR)
    assert OK not in contents and contents[2] == PARSE_ERROR


# ---------------------------------------------------------------- F5: `/web` and clipboard images send a message


def _imported(folder: Path, log: AiderLog) -> list[Transcript]:
    path = folder / f"{len(list(folder.iterdir()))}.aider.chat.history.md"
    path.write_text(log.text, encoding="utf-8")
    return load_transcripts(path)


def _banner(log: AiderLog, when: str = "2024-08-09 08:00:55") -> None:
    log.start(when)
    log.tool_output("/Users/me/.venv/bin/aider")
    log.tool_output("Aider v0.48.2-dev")
    log.tool_output("Git repo: .git with 303 files")


def test_web_sends_the_page_as_the_users_message(tmp_path: Path):
    """`cmd_web` returns `f"{url}:\\n\\n" + page` and `run_one` sends it (`commands.py@23f89f1d` L128-149,
    `base_coder.py@23f89f1d` L712-734): the reply answers it, and its request held no message before."""
    log = AiderLog()
    _banner(log)
    log.user_input("/web https://aider.chat")
    log.tool_output("Scraping https://aider.chat...")
    log.tool_output("... done.")
    log.ai_output("The page describes Aider.")
    log.tool_output("Tokens: 3,751 sent, 12 received.")
    log.user_input("/web https://example.com")  # interrupted: the request went, its reply was not recorded
    log.tool_output("Scraping https://example.com...")
    log.tool_output("... done.")
    log.tool_output("^C again to exit")
    log.tool_output("Tokens: 1,000 sent, 0 received.")
    log.user_input("/web https://example.org")  # another message came before any request: nothing was sent
    log.user_input("thanks")
    (transcript,) = _imported(tmp_path, log)
    users = [(i.text, i.synthetic, i.meta.get("approximate")) for i in transcript.items if i.kind == "user"]
    page = "the page's text is not in the log"
    assert users == [("/web https://aider.chat", False, None), ("https://aider.chat:\n\n", True, page),
                     ("/web https://example.com", False, None), ("https://example.com:\n\n", True, page),
                     ("/web https://example.org", False, None), ("thanks", False, None)]
    turns = [r for r in replay(transcript, "aider", profile=small_profile(64_000)).requests if r.kind == "turn"]
    assert [[m.content for m in r.messages] for r in turns] == [
        ["https://aider.chat:\n\n"], ["https://aider.chat:\n\n", "The page describes Aider.", "https://example.com:\n\n"]]


def test_a_clipboard_image_sends_added_files_with_its_path(tmp_path: Path):
    """`/add-clipboard-image` and `/clipboard` returned `prompts.added_files` with the saved image's path from
    `73bf90f00` (2024-08-01) to `985a9136f` (2024-08-09 15:09), which sends nothing; the path is in the log."""
    image = "/private/var/folders/49/T/tmp151af4ht/clipboard_image.png"
    log = AiderLog()
    _banner(log)
    log.user_input("/clip")
    log.tool_output(f"Added clipboard image to the chat: {image}")
    log.ai_output("Thank you for providing the image.")
    log.tool_output("Tokens: 797 sent, 74 received.")
    log.user_input("/add-clipboard-image")
    log.tool_output("No image found in clipboard.")
    log.user_input("/ex")
    (transcript,) = _imported(tmp_path, log)
    sent = [i for i in transcript.items if i.synthetic]
    assert [(i.text, i.meta["event"], i.meta["files"]) for i in sent] == [
        (f"I added these files to the chat: {image}\nLet me know if there are others we should add.", "aider-clipboard-image", (image,))]
    assert "approximate" not in sent[0].meta


@pytest.mark.corpora
def test_no_aider_request_of_the_corpus_is_empty_after_a_web_page_or_an_image():
    """The audit's 12 turn requests of 0 messages that only `aider` had (10 after `/web`, 2 after a clipboard image)
    hold the message Aider sent; left: session 460 (a reply logged after the user's `/ex`, which `aider` drops). The
    headerless start and session 30 open with a reply (session 30's after another Aider's banner): no request is made
    for it in any strategy (`compaction_bench.replay`; before, `none` sent them empty too)."""
    transcripts = load_transcripts(AIDER_CORPUS)
    events = collections.Counter(i.meta.get("event") for t in transcripts for i in t.items if i.synthetic)
    assert (events["aider-web-page"], events["aider-clipboard-image"]) == (11, 2)
    empty = {}
    for strategy in ("aider", "none"):
        empty[strategy] = [t.id for t in transcripts if t.steps()
                           for r in replay(t, strategy, profile="32k").requests if r.kind == "turn" and not r.messages]
    assert empty == {"aider": ["chat-history:460"], "none": []}


# ---------------------------------------------------------------- F6: `####` lines inside a reply


REPLY_WITH_HEADINGS = ("Here's a high-level example:\n\n#### `InputOutput` Class\n\n```python\nclass InputOutput:\n    pass\n```\n\n"
                       "#### `Coder` Class\n\nModify the `Coder` class.\n\nmodes.md\n```markdown\n<<<<<<< SEARCH\n\n\n"
                       "#### /help How do I use ollama?\n=======\n#### /code Add a function\n>>>>>>> REPLACE\n```")


def test_a_heading_or_a_quoted_chat_line_inside_a_reply_is_reply_text(tmp_path: Path):
    """Aider logs each user line with two trailing spaces (`user_input`, `append_chat_history(linebreak=True)`,
    `io.py@23f89f1d` L330-345, L419-427) two blank lines after a reply (`ai_output`, L349-351), and a reply as written:
    a `####` line without the spaces after at most one blank line, or inside an open fence, is the reply's."""
    log = AiderLog()
    _banner(log)
    log.user_input("make it a web app")
    log.ai_output(REPLY_WITH_HEADINGS)
    log.tool_output("Tokens: 15,221 sent, 902 received.")
    log.user_input("thanks")
    (transcript,) = _imported(tmp_path, log)
    assert [i.text for i in transcript.items if i.kind == "user"] == ["make it a web app", "thanks"]
    assert [i.text for i in transcript.items if i.kind == "assistant"] == [REPLY_WITH_HEADINGS]
    assert [s.usage.input for s in transcript.steps()] == [15_221]


@pytest.mark.corpora
def test_the_corpus_replies_keep_their_headings():
    """The audit's seven `####` lines without Aider's two spaces, all inside replies of sessions 117, 236 and 437, made
    7 fake user messages and 7 extra requests; line 99942 (after two blank lines) stays the user's message."""
    transcripts = load_transcripts(AIDER_CORPUS)
    headings = (10709, 10736, 14870, 14905, 42880, 42889, 42894)
    users = {i.meta["line"] for t in transcripts for i in t.items if i.kind == "user" and not i.synthetic}
    assert not users & set(headings) and 99942 in users
    assert [len(transcripts[n].steps()) for n in (117, 236, 437)] == [3, 2, 3]  # 5, 4 and 6 before
    assert sorted(reply_headings(AIDER_CORPUS.read_text(encoding="utf-8").split("\n"))) == list(headings)


def reply_headings(lines: list[str]) -> list[int]:
    """The file lines that start with `####` but are reply text by Aider's writer: no two trailing spaces, and not
    after the two blank lines a reply ends with (`raw_aider`'s count of user messages leaves them out)."""
    return [n + 1 for n, line in enumerate(lines)
            if line.startswith("####") and not line.endswith("  ") and not (n >= 2 and not lines[n - 1].strip() and not lines[n - 2].strip())]


def raw_command_messages(lines: list[str]) -> int:
    """How many `/web URL` and clipboard-image commands a request followed before the next user line (a `Tokens:`
    line, or a reply: text after a blank line after a line Aider closed with two spaces, `ai_output`), the image's
    having been added: each sent a message (`raw_aider` adds them)."""
    sent = 0
    for n, line in enumerate(lines):
        word = line[5:].split(" ", 1)[0].rstrip() if line.startswith("#### /") else ""
        web = word == "/web" and len(line[5:].split()) > 1
        if not (web or word in ("/clip", "/clipboard", "/add-clipboard-image")):
            continue
        end = next((m for m in range(n + 1, len(lines)) if lines[m].startswith("#### ")), len(lines))
        after = range(n + 1, end)
        added = web or any(lines[m].startswith("> Added clipboard image to the chat: ") for m in after)
        replied = any(lines[m].strip() and not lines[m].startswith((">", "#")) and not lines[m - 1].strip()
                      and lines[m - 2].endswith("  ") for m in after)
        sent += added and (replied or any(lines[m].startswith("> Tokens: ") for m in after))
    return sent


# ---------------------------------------------------------------- F7: a reply logged after another session's header


def test_a_reply_after_another_sessions_header_answers_the_session_that_asked(tmp_path: Path):
    """Another Aider wrote its header while the first waited for the model: the reply, its `Tokens:` line and the
    output after it, up to the next user line, are the first session's, with a problem naming both lines."""
    log = AiderLog()
    _banner(log, "2024-08-09 08:06:56")
    log.user_input("add cmd_map that prints out the current repomap")
    log.start("2024-08-09 08:07:07")
    log.ai_output("I'll add a `cmd_map` command.")
    log.tool_output("Tokens: 13,830 sent, 851 received.")
    log.tool_output("Applied edit to aider/commands.py")
    log.user_input("/diff")
    _banner(log, "2024-08-09 08:07:43")
    log.ai_output("A reply after a banner stays where it is.")
    log.tool_output("Tokens: 100 sent, 9 received.")
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(log.text, encoding="utf-8")
    first, second, third = load_transcripts(path)
    assert [(i.kind, i.text) for i in first.items if i.kind != "marker"] == [
        ("user", "add cmd_map that prints out the current repomap"), ("assistant", "I'll add a `cmd_map` command.")]
    assert [s.usage.input for s in first.steps()] == [13_830]
    lines = log.text.split("\n")
    header, reply = lines.index("# aider chat started at 2024-08-09 08:07:07") + 1, lines.index("I'll add a `cmd_map` command.") + 1
    assert first.meta["problems"] == (f"{path}:{reply}: model output logged after the session header at line {header}, before that "
                                      "session's launch banner or first message: it answers this session's last message",)
    assert [(i.kind, i.text) for i in second.items if i.kind != "marker"] == [("user", "/diff")]
    assert [i.meta["line"] for i in first.items if i.kind == "assistant"] == [reply]  # every line keeps its number
    assert [i.text for i in third.items if i.kind == "assistant"] == ["A reply after a banner stays where it is."]


@pytest.mark.corpora
def test_the_corpus_sessions_whose_reply_was_logged_after_a_header_get_it_back():
    """Sessions 244 ("add cmd_map …", 13,830 sent) and 953 ("hi", 9,921 sent, interrupted) had no response, and 245 and
    954 started with it; session 111's `/run` started an Aider whose header came before the run's output and reply."""
    transcripts = load_transcripts(AIDER_CORPUS)
    assert [[s.usage.input for s in transcripts[n].steps()] for n in (244, 953)] == [[13_830], [9_921]]
    assert [len(transcripts[n].steps()) for n in (245, 954)] == [0, 0]
    moved = [n for n, t in enumerate(transcripts) if any("after the session header" in p for p in t.meta.get("problems", ()))]
    assert moved == [111, 244, 953]


# ---------------------------------------------------------------- F8: an unreadable token count


def test_an_unreadable_token_count_is_a_problem_naming_its_line(tmp_path: Path):
    """Chosen: a problem, and that request's usage unknown, as the Codex importer does for a count that is no token
    count; an exception (naming the file, not the line) lost the file's other sessions."""
    log = AiderLog()
    _banner(log)
    log.user_input("hi")
    log.ai_output("Hello.")
    log.tool_output("Tokens: 1.2.3k sent, 5 received.")
    log.user_input("again")
    log.ai_output("Hello again.")
    log.tool_output("Tokens: 1,300 sent, 6 received.")
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(log.text, encoding="utf-8")
    (transcript,) = load_transcripts(path)
    line = log.text.split("\n").index("> Tokens: 1.2.3k sent, 5 received.  ") + 1
    assert transcript.meta["problems"] == (
        f"{path}:{line}: unreadable token count in 'Tokens: 1.2.3k sent, 5 received.': the usage of that request is unknown",)
    assert [s.usage.input if s.usage else None for s in transcript.steps()] == [None, 1_300]


# ---------------------------------------------------------------- F2: the weak model summarises


def test_aiders_weak_model_is_the_settings_files_for_the_built_in_profiles():
    """`weak_model_name` in `aider/resources/model-settings.yml@5dc9490b`: `gpt-5` → `gpt-5-nano` (L2166-2168),
    `claude-sonnet-4-5` → `claude-haiku-4-5` (L1909-1911); `claude-opus-4-5` has no entry and the generic settings
    name none (`models.py` L531-545), so it summarises itself (L608-610): the session's model, None."""
    default = Aider.parse_options({})
    models = {name: Aider.summary_model(default, get_profile(name)) for name in ("gpt-5", "64k", "32k", "claude-sonnet", "claude-opus")}
    assert models == {"gpt-5": "gpt-5-nano", "64k": "gpt-5-nano", "32k": "gpt-5-nano", "claude-sonnet": "claude-haiku-4-5",
                      "claude-opus": None}
    assert Aider.summary_model(Aider.parse_options({"weak_model": "gpt-4o-mini"}), get_profile("claude-opus")) == "gpt-4o-mini"
    assert Aider.summary_model(Aider.parse_options({"weak_model": "gpt-5"}), get_profile("64k")) is None  # `--weak-model` = main


def test_an_offline_summarizer_stands_in_for_the_model_the_strategy_names_and_a_named_one_is_kept():
    session = get_profile("64k")
    nano = summary_profile(LLMClient("offline/extractive"), session, "gpt-5-nano")
    assert nano is not None and (nano.model, nano.context_window) == ("gpt-5-nano", 272_000)
    assert summary_profile(LLMClient("offline/extractive"), session, "gpt-5") is None  # the session's own model
    named = summary_profile(LLMClient("anthropic/claude-haiku-4-5", CallSettings(use_cache=False)), session, "gpt-5-nano")
    assert named is not None and named.model == "claude-haiku-4-5"


def _weak_model_replay():
    """`aider@applied=true` at `64k` on a turn of about 70,000 tokens whose edit moves it to `done`, then one more turn:
    its history is summarized once."""
    s = Session()
    s.user("rewrite the module: " + " ".join(f"w{k}" for k in range(70_000)))
    s.assistant("rewritten")
    s.items.append(Item(id="out0", kind="marker", text="Applied edit to m.py\nCommit abc1234 feat: rewrite", meta={"event": "aider-output"}))
    s.user("thanks")
    s.assistant("you are welcome")
    return replay(s.transcript(), "aider", profile="64k", options={"applied": True, "summarizer_max_input_tokens": 200_000})


def test_aiders_summary_requests_are_sized_by_the_weak_model():
    """At `64k` (GPT-5 in a 64,000-token window) a summary request of about 70,000 tokens fits gpt-5-nano's 272,000:
    sent to the session's model it overflowed, twice (`[weak, main]`), and the summary failed."""
    result = _weak_model_replay()
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert [r.overflow for r in summaries] == [False] and summaries[0].true_tokens > 64_000
    assert [c.trigger for c in result.compactions] == ["threshold"]


def test_aiders_summary_requests_are_priced_as_the_weak_models_and_stored_so():
    """The summary call of the session above at `64k` costs what gpt-5-nano's prices in litellm's map make of its
    tokens (counted by the provider, o200k_base; no cache read or write on a first request), not GPT-5's; a run's
    stored rows give the same dollars when measured again (`bench score`)."""
    import litellm

    from compaction_bench.metrics.measure import measure_cell
    from compaction_bench.records import from_rows, to_rows

    result = _weak_model_replay()
    summary = next(r for r in result.requests if r.kind == "summary")
    assert summary.cached_tokens == summary.cache_write_tokens == 0
    nano = litellm.model_cost["gpt-5-nano"]
    output = shared_counter("o200k_base").count(summary.llm_call.text)
    expected = summary.true_tokens * nano["input_cost_per_token"] + output * nano["output_cost_per_token"]
    rows = measure_cell(result, [], answerer=None).compactions
    assert rows[0]["llm_cost_usd"] == pytest.approx(expected, rel=1e-9)
    stored = to_rows(result)
    again = from_rows(result.transcript, result.profile, stored["messages"], stored["requests"], stored["replay"])
    assert again.summary_profile is not None and again.summary_profile.model == "gpt-5-nano"
    assert measure_cell(again, [], answerer=None).compactions[0]["llm_cost_usd"] == pytest.approx(expected, rel=1e-9)
