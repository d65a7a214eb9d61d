"""Importer for Aider chat histories (`.aider.chat.history.md`, MANIFEST "aider-chat-history-md").

Owns the Markdown log rules: `# aider chat started at ...` starts a session (one transcript per
session; text before the first header is a session of its own, flagged `meta["headerless"]`; when a session ends
on the user's message and the next one logs model output, a reply or a `Tokens:` line, before any launch banner or
user message, that output up to the next banner or user message is the first session's (another Aider wrote its
header while the first waited for the model), with a problem naming the output's line and the header's);
consecutive `#### ` lines are one user message (Aider writes each with two trailing spaces, two blank lines after a
reply: a `####` line without them inside a reply, after at most one blank line or in an open code fence, is the
reply's, a Markdown heading or a quoted chat log); consecutive `> ` lines (and bare `>`) are tool/UI output (launch
banner, command and lint output, commits), kept as `aider-output` markers. Aider writes a multi-line
output with `> ` before its first line only and two spaces after its last (`append_chat_history` with
`blockquote` and `linebreak`), and what it writes next starts with a blank line or `>`: so a `> ` line
that does not end that way continues, through blank and unprefixed lines, up to the first line with
text that does (repo maps, `--verbose` settings, pytest output, diffs, commit bodies, a confirmation's
answer); when no such line comes before the next `####` line, the `> ` line stands alone. A CRLF line end is read as LF. Everything else is
assistant reply text, one model response per reply; a `> Tokens: N sent, M received.` line (also with
`cached` / `cache write` / `cache hit` parts; `input` is the whole prompt, `tokens_usage`) is the usage of the reply before it (a token line
with no unreported reply before it is a request whose reply was not recorded: an empty response) (`1.2k`-style
counts are expanded; the raw line is kept in the marker; a count Aider never writes, `1.2.3k`, is a problem naming
its line, and that request's usage is unknown, as the Codex importer leaves one). The model comes from the banner's `Model:` / `Models:` / `Main model:` line (without the `⚡` of prompt caching).

Command output the model saw. From 2023-06-23 (`f9599f87a`) to 2024-08-27 Aider's `cmd_run` (`/run X`,
`!X`) logs the command's output as one tool message and asks "Add the output to the chat?", logged with
the answer: until 2024-07-28 through `confirm_ask` (an answer starting with `y` adds), then through
`prompt_ask` with one of the prompts `(y/n/instructions):`, `\n(y/n/instructions)`, `\n(Y/n/instructions)`,
`\n[Y/n/instructions]` (`y`/`yes` adds, `n`/`no` does not, case-insensitive; any other answer, empty
included, adds with the answer as instructions). `/test X` (from 2024-01-22) runs the same code without
asking and adds the output when the command fails. An added output is logged again line by line (each
line stripped) and the message
`prompts.run_output` (`I ran this command:\n\n{command}\n\nAnd got this output:\n\n{output}\n`, with
the instructions and a blank line before it) is sent to the model as a user message, answered by the
model (no `Ok.`): it is imported as a synthetic user item (`meta["event"] = "aider-run-output"`; every such
message Aider composed itself, this one and those below, has `meta["from_agent"]`: no user wrote it) after
the logged copy, its output the first logging (which keeps indentation; Aider strips the output's ends
when logging it, so they cannot be restored). `{command}` is the text after `/run` or `/test` with its
leading space (`Commands.matching_commands` keeps it), the text after `!`. A declined output stays a
marker only. A `/test` whose output is not logged again was not added. Later Aider versions log the
output only line by line (2024-08-31) or not at all (`run_cmd` prints it), and reply `Ok.` themselves
(late 2024): their prompts are not recognised, and such outputs stay markers.

Messages Aider sends itself. After a reply, a "yes" to one of three `confirm_ask` questions makes Aider send
its own user message (`reflected_message`, sent by `run_one` unless "Only N reflections allowed, stopping."
follows); the model answers it. `confirm_ask` logs the question and the answer (the raw answer until
2024-08-08, a yes being one starting with `y`; `y`/`n` after; ` [Y/n]` after the question from 2024-08-21).
The wording below holds from v0.47.0 to 2024-08-22 (`8c47b5e63` reorders the checks, not the messages); each
is imported as a synthetic user item after its question, `meta["line"]` the question's line:
- "Attempt to fix lint errors?" (`event` "aider-lint-errors"): the message is `lint_edited`'s text, one
  `Linter.lint` result (from `# Fix any errors below, if possible.`) between newlines per file, which
  `tool_error` logged one stripped line at a time: it is rebuilt from those lines, so each line's leading
  and trailing spaces are lost (`meta["approximate"]`). When a session header comes between the errors and
  the question (another Aider logged to the file meanwhile), the errors are taken from before it.
- "Attempt to fix test errors?" (`--auto-test`, "aider-test-errors"): `prompts.run_output` of the test
  command and its output, taken as for `/test` (ends stripped). The command is `--test-cmd` in the
  session's launch line, which is `sys.argv` joined by spaces: read as the words up to the next `--`
  option (approximate); when the launch line has none (a config file), it is empty and a problem says so.
- "Add these files to the chat?" ("aider-added-files") after a reply: `prompts.added_files`, "I added
  these files to the chat: {names}\nLet me know if there are others we should add.", the names joined by
  `, ` in the order they were logged just before the question (one line each; one message from 2024-08-21).
  The files' contents are not in the message: Aider puts them in the chat-files part of every later
  prompt, which the log does not record, and neither does this import. The same question right after the
  user's message (files the user named) adds the files and sends nothing.
- A reply whose edit blocks do not parse or match (`apply_updates` catching the coder's `ValueError`): Aider
  logs "The LLM did not conform to the edit format.", the troubleshooting URL and the error text (`tool_error(
  str(err), strip=False)`: each line quoted as written, a one-line text stripped), and the error text is the
  `reflected_message`, sent without a question ("aider-edit-format-error", `meta["line"]` the notice's line).
  It is the quoted lines after the URL up to what Aider logs next (a stripped blank line of a `^C` notice,
  the reflection limit, a `Tokens:` line, or the reply). `splitlines` drops its last line break: the
  SEARCH/REPLACE failure text (`# N SEARCH/REPLACE block(s) failed to match!` ...) ends with one, a parse
  error (`^^^ ...` last) and the whole-file coder's "No filename provided before ``` in file listing" with
  none; any other text is marked `meta["approximate"]`.
  Not sent: when the limit line follows, and under `--apply` in the launch line (`main` applies the file's
  edits and exits). A sent error whose request was interrupted has no reply after it.
- A command whose returned text `run_one` sent as the user's message, when a request follows it before the next
  user line (a reply, or a `Tokens:` line): `/web URL`, `{url}:\n\n` and the page from 2024-02-08 to 2024-11-08
  ("aider-web-page"; the page is not in the log: `meta["approximate"]`); a clipboard image (`/add-clipboard-image`,
  `/clipboard`) until 2024-08-09 15:09, `added_files` with the logged path of the saved image
  ("aider-clipboard-image"). Both after the command's output, before the reply (`_sent_by_command`).
Other messages Aider sends itself (URLs added to the user's message, the text of a clipboard, `/add`'s
`added_files` before 2024-08-09, `/web`'s page with Aider's `Ok.` from 2024-11-08) are not imported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure
from compaction_bench.scenarios.builder import TranscriptBuilder
from compaction_bench.scenarios.readers import read_text
from compaction_bench.transcript import Transcript, Usage

FORMAT = "aider"
#: A line that opens or closes a code fence in a reply: ``` (with or without a language), `<source …>`, `</source>`.
FENCE_RE = re.compile(r"^\s*(```|<source|</source>)")
SESSION_RE = re.compile(r"^# aider chat started at (.*)$")
TOKENS_RE = re.compile(r"^> Tokens: (.*?\breceived)")
TOKEN_PART_RE = re.compile(r"([\d.,]+k?) (sent|cached|cache write|cache hit|received)")
#: The launch banner's version line (`Aider v0.48.2-dev`), the first Aider logs after its command line.
BANNER_RE = re.compile(r"^> Aider v\d")
#: The banner's model, without the `⚡` Aider appends when prompt caching is on (`4d36518de`).
MODEL_RE = re.compile(r"^> (?:Main model|Models?): ([^\s⚡]+)")
#: `cmd_run`'s question as logged with its answer: `confirm_ask`'s (no options), then the four `prompt_ask` prompts.
RUN_PROMPT_RE = re.compile(
    r"^Add the output to the chat\?(?P<options> \(y/n/instructions\):|\n[(\[]y/n/instructions[)\]])?(?: (?P<answer>.*))?$", re.I
)
#: `aider/prompts.py` `run_output`: the user message that carries a command's output to the model.
RUN_OUTPUT = "I ran this command:\n\n{command}\n\nAnd got this output:\n\n{output}\n"
LINT_QUESTION = "Attempt to fix lint errors?"
TEST_QUESTION = "Attempt to fix test errors?"
FILES_QUESTION = "Add these files to the chat?"
#: `confirm_ask`'s log line for the questions whose "yes" makes Aider send its own user message (`reflected_message`).
REFLECTION_RE = re.compile(
    rf"^(?P<question>{re.escape(LINT_QUESTION)}|{re.escape(TEST_QUESTION)}|{re.escape(FILES_QUESTION)})(?: \[[yY]/[nN]\])?(?: (?P<answer>.*))?$"
)
#: `run_one` when the reflection budget is spent: the accepted message is not sent.
REFLECTION_LIMIT_RE = re.compile(r"^Only \d+ reflections allowed, stopping\.$")
#: `Linter.lint`'s first line, per file with errors.
LINT_HEADER = "# Fix any errors below, if possible."
#: `aider/prompts.py` `added_files`.
ADDED_FILES = "I added these files to the chat: {fnames}\nLet me know if there are others we should add."
#: `cmd_add_clipboard_image` / `cmd_clipboard`'s log line for the image it saved and added.
CLIPBOARD_IMAGE_RE = re.compile(r"^Added clipboard image to the chat: (?P<path>.+)$")
#: `apply_updates`'s notice when a reply's edit blocks raise `ValueError`, and `urls.edit_errors` logged after it.
EDIT_FORMAT_NOTICE = "The LLM did not conform to the edit format."
EDIT_ERRORS_URL = "https://aider.chat/docs/troubleshooting/edit-errors.html"
#: `EditBlockCoder.apply_edits`'s first line: its text ends with a line break, which the log loses.
SEARCH_REPLACE_FAILED_RE = re.compile(r"^# \d+ SEARCH/REPLACE blocks? failed to match!$")
#: `WholeFileCoder.get_edits`'s one-line error (no line break, no spaces at its ends).
NO_FILENAME_RE = re.compile(r"^No filename provided before \S+ in file listing$")
#: `--apply FILE` in the launch line: `main` applies the file's edit blocks and exits, sending nothing.
APPLY_RE = re.compile(r"^> \S*aider(?: .*)? --apply ")
#: `--test-cmd` in the launch line (`" ".join(sys.argv)`): its words up to the next option.
TEST_CMD_RE = re.compile(r"^> \S*aider(?: .*?)? --test-cmd (?P<command>.+?)(?= --[a-z]| *$)")


def token_count(text: str) -> int:
    """`5,244` → 5244, `12k` → 12000, `1.2k` → 1200."""
    text = text.replace(",", "")
    if text.endswith("k"):
        return round(float(text[:-1]) * 1000)
    return int(float(text))


def tokens_usage(report: str, model: str | None = None) -> Usage:
    """Usage from `N sent[, C cached | W cache write, H cache hit], M received`: `input` is the whole prompt,
    with `cached_input` and `cache_write` in it (`_sent_is_whole` says whether "sent" already holds them)."""
    parts = {name: token_count(number) for number, name in TOKEN_PART_RE.findall(report)}
    hit = parts.get("cached", 0) + parts.get("cache hit", 0)
    write = parts.get("cache write", 0)
    sent = parts.get("sent", 0)
    whole = sent if _sent_is_whole(parts, model) else sent + hit + write
    return Usage(input=whole, cached_input=hit, cache_write=write, output=parts.get("received", 0))


def _sent_is_whole(parts: dict[str, int], model: str | None) -> bool:
    """Whether Aider's "sent" already counts the cache hits and writes (`parts`: the token line's numbers by name).

    - `C cached` (Aider's reporting of August 2024, `0f2211c32`): "sent" is the API's `prompt_tokens`. DeepSeek's
      holds the hits (prompt_cache_hit_tokens + prompt_cache_miss_tokens, as Aider's `compute_costs_from_tokens`
      notes); Anthropic's, through litellm then, did not (`492 sent, 1,278 cached` in Aider's own chat history).
    - `W cache write` / `H cache hit` (from `4c2c0ac87`, v0.51.0): Aider makes "sent" the whole prompt, adding the
      hits and writes to Anthropic's `prompt_tokens` (`base_coder.py@v0.51.0` L1489-1496; from `2e97fcc47`, v0.63.0,
      the writes only, litellm's `prompt_tokens` then holding the hits); DeepSeek's is whole already. The lines its
      development wrote before that (`194 sent, 9,474 cache write`) left them out, which a "sent" smaller than its
      cache parts shows. (Where v0.51–v0.62 ran on a litellm whose `prompt_tokens` held the hits, "sent" counted
      them twice, which `2e97fcc47` fixed; the log cannot show it.)"""
    if "cached" in parts:
        return "deepseek" in (model or "").lower()
    return parts.get("sent", 0) >= parts.get("cache hit", 0) + parts.get("cache write", 0)


def _inside_reply(reply: list[str], line: str) -> bool:
    """Whether a `####` line met after the lines `reply` of a reply (its blank lines included) is reply text (a
    Markdown heading, a quoted chat log), not the user's next message. Aider logs every user line with two trailing
    spaces (`user_input` and `append_chat_history(linebreak=True)`, `io.py@23f89f1d` L330-345, L419-427), and a reply
    as written (`ai_output`, L349-351), two blank lines before what comes next (its closing `"\n\n"` and the
    user line's leading `"\n"`): a `####` line without those spaces is reply text inside an open code fence, or after
    at most one blank line."""
    if line.endswith("  "):
        return False
    blank = 0  # the blank lines that end the reply so far
    while blank < len(reply) and not reply[-1 - blank].strip():
        blank += 1
    return blank <= 1 or _fence_open(reply)


def _fence_open(lines: list[str]) -> bool:
    """Whether `lines` leave a code fence open: a ``` line opens or closes one, `<source>` and `</source>` (Aider's
    other fence in the corpus's replies) open and close theirs."""
    fence: str | None = None
    for line in lines:
        opening = FENCE_RE.match(line)
        if opening is None:
            continue
        mark = opening.group(1)
        if fence is None and mark != "</source>":
            fence = mark
        elif (fence == "```" and mark == "```") or (fence == "<source" and mark == "</source>"):
            fence = None
    return fence is not None


def _kind(line: str) -> str:
    if line.startswith("####"):
        return "user"
    if line.startswith("> ") or line.rstrip() == ">":
        return "output"
    return "assistant"


class AiderImporter(Importer):
    format = FORMAT
    description = "Aider chat history Markdown (.aider.chat.history.md), one transcript per session"
    suffixes = (".md",)
    priority = 20

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        return bool(re.search(r"^# aider chat started at ", head, re.M))

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        text, problems = read_text(path)
        sessions: list[tuple[int, str | None, list[str]]] = []
        lines = [line.removesuffix("\r") for line in text.split("\n")]
        for number, line in enumerate(lines, start=1):
            match = SESSION_RE.match(line.rstrip())
            if match:
                sessions.append((number, match.group(1), []))
            else:
                if not sessions:
                    sessions.append((1, None, []))
                sessions[-1][2].append(line)
        if all(started is None for _, started, _ in sessions) and not any(line.startswith("#### ") for line in lines):
            # Forced onto a file that is not a chat history: nothing here is Aider's, so nothing is imported.
            raise ImportFailure(f"{path}: no Aider chat content (no '# aider chat started at' line and no '#### ' user line)")
        reattached = _reattach_replies(sessions)
        out = []
        # What an Aider started on the screen can end after a session header: another Aider logged to the same file.
        carry = _Carry()
        for index, (start, started, body) in enumerate(sessions):
            if started is None and not any(line.strip() for line in body):
                continue
            out.append(self._session(path, index, start, started, body, problems, carry, reattached.get(index)))
        return out

    def _session(
        self, path: Path, index: int, start: int, started: str | None, body: list[str], problems: list[str], carry: _Carry,
        reattached: tuple[int, int] | None,
    ) -> Transcript:
        """One session's transcript; `carry` holds what is still waiting when it ends (read and updated); `reattached`
        the lines of the output given back to it from after the next session's header, and of that header."""
        builder = TranscriptBuilder(path, FORMAT)
        if reattached is not None:
            builder.problem(f"model output logged after the session header at line {reattached[1]}, before that session's"
                            " launch banner or first message: it answers this session's last message", reattached[0])
        test_cmd = next((m["command"] for line in body if (m := TEST_CMD_RE.match(line))), None)
        applying = any(APPLY_RE.match(line) for line in body)
        builder.problems.extend(p for p in problems if start <= _line_of(p, path) <= start + len(body))
        first = start + 1 if started is not None else start
        response: int | None = None
        blocks: list[tuple[str, int, list[str]]] = []
        closed = True
        continued = _continuations(body)
        verbatim: set[tuple[int, int]] = set()  # (block, line) positions of continued output lines, kept as written
        for offset, line in enumerate(body):
            if offset in continued:
                verbatim.add((len(blocks) - 1, len(blocks[-1][2])))
                # the line that closes the output loses the two spaces of its line break, no more
                blocks[-1][2].append(line if offset + 1 in continued else line.removesuffix("  "))
                continue
            if not line.strip():
                # A user message is consecutive `####` lines; blank lines belong to replies and output.
                if blocks and blocks[-1][0] != "user":
                    blocks[-1][2].append(line)
                closed = True
                continue
            kind = _kind(line)
            if kind == "user" and blocks and blocks[-1][0] == "assistant" and _inside_reply(blocks[-1][2], line):
                kind = "assistant"
            if not blocks or blocks[-1][0] != kind or (kind == "user" and closed):
                blocks.append((kind, first + offset, []))
            blocks[-1][2].append(line)
            closed = False
        for position, (kind, number, block) in enumerate(blocks):
            if kind == "user":
                # Aider ends every logged line with two spaces (a Markdown line break): not user text.
                text = "\n".join((line[5:] if line.startswith("#### ") else line[4:]).removesuffix("  ") for line in block)
                builder.add("user", text, meta={"line": number})
                carry.command = _command_of(text, number)
                carry.sent = _sent_by_command(text, number)
                carry.lint_errors, carry.after_reply = None, False
                response = None
            elif kind == "assistant":
                _send_command_message(builder, carry)
                response = builder.new_response()
                builder.add("assistant", "\n".join(block).strip("\n"), response=response, meta={"line": number})
                carry.lint_errors, carry.after_reply = None, True
            else:
                kept = {n for b, n in verbatim if b == position}
                lines = [line if n in kept else _unquote(line) for n, line in enumerate(block)]
                if carry.sent is not None and carry.sent.text is None:
                    carry.sent.image(lines)
                if response is None and any(TOKENS_RE.match(f"> {line}") for line in lines):
                    _send_command_message(builder, carry)  # a request whose reply was not recorded
                messages = _messages(block, kept)
                events = self._reflections(builder, number, lines, messages, carry, test_cmd)
                if not applying:
                    events += _edit_format_errors(number, block, kept)
                command = carry.command
                added = _command_output(command, lines, messages) if command else None
                if command and added is not None:
                    carry.command = None  # its output is met: a command's output is asked about once
                    if added.message is not None:
                        meta = {"event": "aider-run-output", "line": number + added.output_offset, "command_line": added.command_line, "answer": added.answer}
                        events.append((added.end, added.message, meta))
                        if not command.args.strip():
                            builder.problem(f"/{command.name} without a command: the command that ran is not in the log", added.command_line)
                done = 0
                for end, message, meta in sorted(events, key=lambda event: event[0]):
                    self._output(builder, number + done, lines[done:end], response)
                    builder.add("user", message, synthetic=True, meta={**meta, "from_agent": True})
                    done, response = end, None
                if not done or any(line.strip() for line in lines[done:]):
                    self._output(builder, number + done, lines[done:], response)
                response = None
        return builder.finish(
            f"{path.stem}:{index}",
            source={"session": index, "line": start, "started": started},
            meta={"headerless": True} if started is None else {},
        )

    @staticmethod
    def _reflections(
        builder: TranscriptBuilder, number: int, lines: list[str], messages: list[tuple[int, int]], carry: _Carry,
        test_cmd: str | None,
    ) -> list[tuple[int, str, dict[str, Any]]]:
        """The messages Aider sent as the user after a "yes" to one of its own questions in an output block
        starting at file line `number`: (block line they follow, text, meta). Lint errors logged without
        their question are left in `carry` for the block that asks it."""
        texts = ["\n".join(lines[begin:end]) for begin, end in messages]
        events: list[tuple[int, str, dict[str, Any]]] = []
        lint_from: int | None = None  # the message that starts lint errors not yet asked about
        for n, text in enumerate(texts):
            if text == LINT_HEADER and lint_from is None:
                lint_from = n - 1 if n and texts[n - 1] == "" else n
            asked = REFLECTION_RE.match(text)
            if not asked:
                continue
            question_line = number + messages[n][0]
            errors = texts[lint_from:n] if lint_from is not None else carry.lint_errors
            lint_from, carry.lint_errors = None, None
            limited = n + 1 < len(texts) and REFLECTION_LIMIT_RE.match(texts[n + 1])
            if not (asked["answer"] or "").strip().lower().startswith("y") or limited:
                continue
            meta: dict[str, Any] = {"line": question_line}
            if asked["question"] == LINT_QUESTION:
                if errors is None:
                    builder.problem("lint errors accepted but not in the log: the message the model got is unknown", question_line)
                    continue
                # tool_error logged each line stripped: indentation and trailing spaces are lost.
                message = "\n".join(errors) + "\n"
                meta |= {"event": "aider-lint-errors", "approximate": "each line stripped"}
            elif asked["question"] == TEST_QUESTION:
                output = next((j for j in range(n - 1, -1, -1) if _copy_end(texts, j + 1, texts[j]) == n), None)
                if output is None:
                    builder.problem("test errors accepted but their output is not in the log", question_line)
                    continue
                message = RUN_OUTPUT.format(command=test_cmd or "", output=texts[output])
                meta |= {"event": "aider-test-errors", "output_line": number + messages[output][0], "approximate": "output ends stripped"}
                if test_cmd is None:
                    builder.problem("auto-test errors sent, but the test command is not in the session's launch line", question_line)
                else:
                    meta["approximate"] += "; command from the space-joined launch line"
            else:
                if not carry.after_reply:
                    continue  # files named in the user's own message are added, and nothing is sent
                names: list[str] = []
                for previous in reversed(texts[:n]):
                    if not previous or any(not line.strip() or len(line.split()) > 1 for line in previous.split("\n")):
                        break
                    names[:0] = [line.strip() for line in previous.split("\n")]
                message = ADDED_FILES.format(fnames=", ".join(names))
                meta |= {"event": "aider-added-files", "files": names}
            events.append((messages[n][1], message, meta))
        if lint_from is not None:
            carry.lint_errors = texts[lint_from:]
        return events

    @staticmethod
    def _output(builder: TranscriptBuilder, number: int, block: list[str], response: int | None) -> None:
        text = "\n".join(block)
        meta: dict[str, Any] = {"event": "aider-output", "line": number}
        for offset, line in enumerate(block):
            model = MODEL_RE.match(f"> {line}")
            if model and builder.model is None:
                builder.model = model.group(1)
            tokens = TOKENS_RE.match(f"> {line}")
            if not tokens:
                continue
            if response is None:
                # A request whose reply was not recorded (API error, interrupt, a retry): an empty response.
                response = builder.new_response()
                builder.add("assistant", "", response=response, meta={"no_reply": True, "line": number + offset})
            try:
                usage = tokens_usage(tokens.group(1), builder.model)
            except ValueError:  # a number Aider never writes (`1.2.3k`, `,`): that request's usage is unknown
                builder.problem(f"unreadable token count in {line.strip()!r}: the usage of that request is unknown", number + offset)
            else:
                builder.set_usage(response, usage)
            meta.setdefault("tokens_lines", []).append(line.strip())
            response = None
        builder.add("marker", text.strip("\n"), meta=meta)


@dataclass
class _Carry:
    """What a session leaves waiting: a command whose output is still to come, a command whose text Aider sends as the
    user's message once a reply comes, lint errors whose question is still to come, and whether the last model input
    was answered by a reply (Aider asks about files a reply names)."""

    command: _Command | None = None
    sent: _CommandMessage | None = None
    lint_errors: list[str] | None = None
    after_reply: bool = False


@dataclass
class _CommandMessage:
    """The user message a command sent (`preproc_user_input` returns the command's value and `run_one` sends it,
    `base_coder.py@23f89f1d` L712-734): `text` once the log has told it (None: not yet), and the item's meta."""

    text: str | None
    meta: dict[str, Any]

    def image(self, lines: list[str]) -> None:
        """The clipboard image's message, from the output lines that name the file it was saved to."""
        added = next((m for line in lines if (m := CLIPBOARD_IMAGE_RE.match(line))), None)
        if added is not None:
            self.text = ADDED_FILES.format(fnames=added["path"])
            self.meta["files"] = [added["path"]]


def _send_command_message(builder: TranscriptBuilder, carry: _Carry) -> None:
    """A request follows: the message of the command waiting in `carry` (`_sent_by_command`), if its text is known,
    is what it sent (a synthetic user item); no later request sends it."""
    if carry.sent is not None and carry.sent.text is not None:
        builder.add("user", carry.sent.text, synthetic=True, meta={**carry.sent.meta, "from_agent": True})
    carry.sent = None


def _sent_by_command(text: str, line: int) -> _CommandMessage | None:
    """The message a user's command line sends once a request follows it (a reply, a `Tokens:` line): `/web URL` sends `{url}:\n\n` and the page
    (`cmd_web`, `commands.py@23f89f1d` L128-149, from `efff174f9`, 2024-02-08, to `77cb64958`, 2024-11-08, which adds
    the page to the chat without a request); the page is not in the log, so only its heading is known. A clipboard
    image (`/add-clipboard-image` from `73bf90f00`, 2024-08-01, `/clipboard` from 2024-08-09) sent `added_files` with
    the image's path until `985a9136f` (2024-08-09 15:09), which logs it ("Added clipboard image to the chat: …")."""
    word, _, args = text.partition(" ")
    if word == "/web" and args.strip():
        url = args.strip()
        meta = {"event": "aider-web-page", "line": line, "url": url, "approximate": "the page's text is not in the log"}
        return _CommandMessage(f"{url}:\n\n", meta)
    if word == "/add-clipboard-image" or (len(word) >= len("/cli") and "/clipboard".startswith(word)):
        return _CommandMessage(None, {"event": "aider-clipboard-image", "line": line})
    return None


@dataclass(frozen=True)
class _Command:
    """A logged `/run X`, `!X` or `/test X` user message (`name` "run" or "test"; `args` as `cmd_run` got them)."""

    name: str
    args: str
    line: int


@dataclass(frozen=True)
class _AddedOutput:
    """A command's output event in an output block: it ends before line `end` of the block; `message` is what
    the model got (None: the output was not added); `output_offset` is the block line the output starts on;
    `command_line` the file line of the command."""

    end: int
    message: str | None
    output_offset: int
    answer: str | None
    command_line: int


def _reattach_replies(sessions: list[tuple[int, str | None, list[str]]]) -> dict[int, tuple[int, int]]:
    """Give back to a session the reply another Aider's session header interrupted (read and updated in place): when a
    session ends on the user's message and the next one logs model output (a reply, a `Tokens:` line) before any
    launch banner or user message, those lines up to the next banner or user message are the first Aider's: they
    move to its body after a blank line that stands for the header, and are blanked where they were, so every line
    keeps its number. Returns the file lines of the moved output and of the header, by the index of the session that
    got them."""
    out: dict[int, tuple[int, int]] = {}
    for index in range(1, len(sessions)):
        previous = sessions[index - 1][2]
        start, _, body = sessions[index]
        last = next((line for line in reversed(previous) if line.strip()), "")
        spill = _spilled_output(body) if last.startswith("####") else None
        if spill is None:
            continue
        first, end = spill
        previous.extend(["", *body[:end]])
        body[:end] = [""] * end
        out[index - 1] = (start + 1 + first, start)
    return out


def _spilled_output(body: list[str]) -> tuple[int, int] | None:
    """Where a session's body starts with model output before any launch banner (`Aider v…`) or user message: the
    offset of its first line and the offset the banner or user message starts at (the body's end without one);
    None when a banner or user message comes first."""
    continued = _continuations(body)
    first: int | None = None
    for offset, line in enumerate(body):
        if not line.strip() or offset in continued:
            continue
        if line.startswith("####") or BANNER_RE.match(line):
            return None if first is None else (first, offset)
        if first is None and (_kind(line) == "assistant" or TOKENS_RE.match(line)):
            first = offset
    return None if first is None else (first, len(body))


def _edit_format_errors(number: int, block: list[str], kept: set[int]) -> list[tuple[int, str, dict[str, Any]]]:
    """The edit-format errors an output block starting at file line `number` sent back to the model:
    (block line they follow, text, meta). `block` holds the lines as written (`kept`: continuation lines)."""
    events: list[tuple[int, str, dict[str, Any]]] = []
    for n, line in enumerate(block):
        if n in kept or _unquote(line) != EDIT_FORMAT_NOTICE or n + 1 >= len(block) or _unquote(block[n + 1]) != EDIT_ERRORS_URL:
            continue
        end = n + 2
        # The error's lines were logged unstripped: a stripped blank (`>  `) or the limit is Aider's next message.
        while end < len(block) and block[end].startswith("> ") and block[end] != ">  " and end not in kept:
            if REFLECTION_LIMIT_RE.match(_unquote(block[end])) or TOKENS_RE.match(block[end]):
                break
            end += 1
        if end == n + 2 or (end < len(block) and REFLECTION_LIMIT_RE.match(_unquote(block[end]))):
            continue  # nothing logged to send, or the reflection budget is spent: not sent
        error = [line[2:].removesuffix("  ") for line in block[n + 2 : end]]
        meta: dict[str, Any] = {"event": "aider-edit-format-error", "line": number + n}
        text = "\n".join(error)
        if SEARCH_REPLACE_FAILED_RE.match(error[0]):
            text += "\n"
        elif not (error[-1].startswith("^^^ ") or NO_FILENAME_RE.match(text)):
            meta["approximate"] = "final line break unknown" + ("; ends stripped" if len(error) == 1 else "")
        events.append((end, text, meta))
    return events


def _command_of(text: str, line: int) -> _Command | None:
    """The command a user message runs: `!X` runs X; `/run X` and `/test X` get X with its leading space
    (`Commands.matching_commands` cuts the first word off and strips nothing)."""
    if text.startswith("!"):
        return _Command("run", text[1:], line)
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    if first in ("/run", "/test"):
        return _Command(first[1:], text[len(first) :], line)
    return None


def _messages(block: list[str], kept: set[int]) -> list[tuple[int, int]]:
    """The (start, end) line ranges of the tool messages of an output block: a quoted line and the
    continuation lines kept with it; blank separator lines belong to none."""
    out: list[tuple[int, int]] = []
    for n, line in enumerate(block):
        if n in kept and out:
            out[-1] = (out[-1][0], n + 1)
        elif line.strip():
            out.append((n, n + 1))
    return out


def _copy_end(texts: list[str], start: int, output: str) -> int | None:
    """The message index after Aider's line-by-line copy of `output` (`tool_output(line, log_only=True)`
    per line, each stripped) when it starts at `start` (blank lines around it allowed), else None."""
    lines = [line.strip() for line in output.split("\n")] if output else []
    n = start
    while n < len(texts) and not texts[n]:
        n += 1
    if not lines or texts[n : n + len(lines)] != lines:
        return None
    n += len(lines)
    while n < len(texts) and not texts[n]:
        n += 1
    return n


def _command_output(command: _Command, lines: list[str], messages: list[tuple[int, int]]) -> _AddedOutput | None:
    """The output event of `command` in an output block (`lines` unquoted), or None when the block holds
    none (a `/run` whose question is not in it)."""
    texts = ["\n".join(lines[start:end]) for start, end in messages]
    if command.name == "test":
        if not texts:
            return None
        copied = _copy_end(texts, 1, texts[0])
        if copied is None:  # passed: `cmd_run(args, add_on_nonzero_exit=True)` adds a failure only
            return _AddedOutput(messages[0][1], None, messages[0][0], None, command.line)
        message = RUN_OUTPUT.format(command=command.args, output=texts[0])
        return _AddedOutput(messages[copied - 1][1], message, messages[0][0], None, command.line)
    asked = next(((n, match) for n, text in enumerate(texts) if (match := RUN_PROMPT_RE.match(text))), None)
    if asked is None:
        return None
    n, match = asked
    answer = (match["answer"] or "").strip()
    if match["options"] is None:  # confirm_ask: an answer starting with "y" adds, nothing else
        added, instructions = answer.lower().startswith("y"), ""
    else:
        added, instructions = answer.lower() not in ("n", "no"), "" if answer.lower() in ("y", "yes") else answer
    output, output_offset = (texts[n - 1], messages[n - 1][0]) if n else ("", messages[n][0])
    if not added:
        return _AddedOutput(messages[n][1], None, output_offset, answer, command.line)
    message = RUN_OUTPUT.format(command=command.args, output=output)
    if instructions:
        message = f"{instructions}\n\n{message}"
    copied = _copy_end(texts, n + 1, output)
    return _AddedOutput(messages[(copied or n + 1) - 1][1], message, output_offset, answer, command.line)


def _unquote(line: str) -> str:
    """An output line without its `> ` (a bare `>` is an empty line)."""
    return line[2:].rstrip() if line.startswith("> ") else line.lstrip(">").rstrip()


def _closes_output(body: list[str], offset: int) -> bool:
    """Whether the line at `offset` can be the last line of an output Aider wrote: text, then the two
    spaces of its Markdown line break, then what Aider writes next (a blank line, a `>` line, the end)."""
    line = body[offset]
    after = body[offset + 1] if offset + 1 < len(body) else ""
    return line.endswith("  ") and bool(line.strip()) and (not after.strip() or after.startswith(">"))


def _continuations(body: list[str]) -> set[int]:
    """Offsets of the lines that continue a multi-line output: after a `> ` line that cannot close
    it, up to and including the first line that can (`_closes_output`); none when a `####` line
    comes first."""
    out: set[int] = set()
    offset = 0
    while offset < len(body):
        start = offset
        offset += 1
        if not body[start].startswith("> ") or _closes_output(body, start):
            continue
        for end in range(offset, len(body)):
            if body[end].startswith("####"):
                break
            if _closes_output(body, end):
                out.update(range(offset, end + 1))
                offset = end + 1
                break
    return out


def _line_of(problem: str, path: Path) -> int:
    """The line number of a `path:N: ...` problem (0 when it names no line)."""
    head = problem.removeprefix(f"{path}:").split(":", 1)[0]
    return int(head) if head.isdigit() else 0
