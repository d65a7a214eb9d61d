"""Claude Code's client-side compaction as strategies (docs/specs/claude-code.md).

`claude-code` follows BASE, Claude Code 2.0.57, the version that wrote the corpus sessions:

- §2.1 window `W` (the profile's), reserve `R = min(CLAUDE_CODE_MAX_OUTPUT_TOKENS‖32,000 capped at
  64,000, the model's output cap)`, threshold `T = W − R − 13,000`, the lower-only
  `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`; compaction iff enabled and `count ≥ T`; `R` is also the
  request's `max_tokens`;
- §2.2 the count: `in + cache_creation + cache_read + out` of the newest assistant response that is
  not synthetic or an interrupt placeholder, nothing added for later messages, 0 after a boundary;
- §2.3 the check before every request, microcompact first; a failed compaction sends the
  original messages, no retry and no breaker;
- §5 microcompact: eligible tools, the newest 3 protected, oldest cleared while more than 40,000
  estimated result tokens remain, applied only at the warning line (`T − 20,000`) and when it
  frees ≥ 20,000; cleared ids stay cleared;
- §3 the summary request: everything since the last boundary plus the nine-section prompt with
  `<analysis>` (its instruction list numbered 1–6, 6, 7, 8 as 2.0.57's is, its example answer 1–9,
  §3.2), the summariser system prompt, at most 20,000 output tokens;
- §4 the new context: the summary message (prefix, `Analysis:`/`Summary:` formatting, trailing
  ".", the continuation sentence for auto only), then up to 5 recently read files (≤ 5,000 tokens
  each, ≤ 50,000 in all, a path-only note otherwise; the current agent's plan and todo files and the
  memory files of `KV5` left out, §4.2) and the todo list the TodoWrite tool stored (none when every
  item is completed); no verbatim tail;
- §2.4 a manual `/compact [instructions]` where the recording has a manual `compact_boundary`
  (threshold ignored), its instructions read from the recorded command line (§1.2 item 3);
- §3.1 the messages as the API normaliser (`BZ`) sends them: the blocks of one API response are one
  assistant message, two responses two messages (`ResponseHistory`).

`claude-code-2.1` applies §8 (2.1.112): reserve `min(max output, 20,000)` while the request asks for
the whole max output (upstream `Z97`), an optional auto-compact window, the count plus a chars/4
estimate of every message after the newest response's first line (§8.2), the consecutive-failure
and rapid-refill breakers, which live for one user prompt (the tripped rapid-refill breaker ends the prompt's
query: the request it trips on is refused, as is every later one of that prompt the check would trip on again),
and the prompt-too-long retry that drops the oldest API rounds (§8.3), the new wrapper without the analysis and
with the transcript path (§8.5), the text-only prompt numbered 1–9 (§8.4, §7.2), the summary asked first of a fork of the turn's
request that reads the cached prefix and caches nothing past the turn's messages (`skipCacheWrite`), the summariser's own
request only when the fork gives no summary (§8.4), files but no todo list after a compaction (§8.5), no
count-based microcompact (§8.6), the API rounds of `AR6` (one per response) for the retry, and the blocking
limit (§8.1, 2.0.77+): a request the check did not compact whose count is at or over `E − 3,000` is not sent
("Prompt is too long", auto-compact on or off; BASE has no such limit).

Not reproduced: hooks (PreCompact/SessionStart output is not in the transcripts), the plan-file
attachment, the 2.1 skill/task/plan-mode/tool attachments (their state is not in the transcripts).
Re-read files are the newest content the transcript shows for that path (a whole-file Read result or a
Write's content, an Edit applied to it): the file system of the session is not available. BASE keeps a
file's own text (read back from a Read result's numbered lines) and shows it as 2.0.57's Read tool shows
a whole file (`number_lines`, then the reminder the session's own Read results end with), which reproduces
86 of the 86 whole-file Read results of the recorded 2.0.57 sessions byte for byte.

Requests are views of one append-only log of wire messages (compaction_bench.log_view) that starts
anew only at a compaction, a clearing or a late system message, so a request costs what it adds; a
context that did not change since it was last built (a compaction's `after`, then the request) is the
same object, and so is a summary message whose text the summarizer gave last time.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from compaction_bench.llm import LLMResult
from compaction_bench.log_view import LogView
from compaction_bench.profiles import ModelProfile, strips_earlier_thinking
from compaction_bench.provider import ProviderError
from compaction_bench.request import Message, Request
from compaction_bench.strategies.components import chars_div4, usage_context_tokens
from compaction_bench.strategies.history import FoldMemo, ItemHistory
from compaction_bench.strategy import CONTEXT_WINDOW, TOKEN_COUNT, Range, Strategy, StrategyContext, SummaryOverflow
from compaction_bench.transcript import Item, Usage

#: §4.1 wrapper prefix (BASE) and the auto-only continuation sentence: protocol strings.
SUMMARY_PREFIX = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The conversation is summarized below:"
)
CONTINUE_SENTENCE = (
    "Please continue the conversation from where we left it off without asking the user any further questions. "
    "Continue with the last task that you were asked to work on."
)
#: §8.5 wrapper of 2.1.x; the continuation paragraph is in our words.
SUMMARY_PREFIX_LATER = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The summary below covers the earlier portion of the conversation."
)
CONTINUE_LATER = (
    "Carry on with the work directly from where it stopped. Do not acknowledge this summary or recap it, "
    "and do not ask the user anything first."
)
#: §8.5 the paragraph `b18` adds with the session's transcript path (upstream `bY()` always gives one,
#: so it is always there although the spec calls it optional); in our words.
TRANSCRIPT_NOTE = (
    "Should you need exact details from before this compaction (code snippets, error messages, text you wrote), "
    "the complete transcript can be read at: {path}"
)
#: What 2.1.86+ answers to a Read of a file it read before and that did not change since (2.1.112 `z44`, and `Y44`
#: behind a flag), instead of the file: the read cache keeps its entry (the content read earlier), and a compaction
#: re-reads the file from disk, never this text.
UNCHANGED_READS = ("File unchanged since last read.", "Wasted call — file unchanged since your last Read.")
#: §5 microcompact placeholder.
CLEARED_RESULT = "[Old tool result content cleared]"
#: §3.4, §8.1 what Claude Code answers for a prompt over a limit (`cI`): a summary starting with it failed, and the
#: blocking limit refuses a turn with it.
PROMPT_TOO_LONG = "Prompt is too long"
#: §8.3 the opening words of the error 2.1.112 ends a query with when the rapid-refill breaker trips (`okK`, cc@2.1.112
#: cli.js L4996), which refuses a turn with them.
AUTOCOMPACT_THRASHING = "Autocompact is thrashing"
#: §8.3 marker put in front of a retried summary input that would start with an assistant turn.
PTL_RETRY_MARKER = "[earlier conversation truncated for compaction retry]"
#: §2.2 interrupt and rejection placeholders (set `K00`): responses starting with these do not count.
INTERRUPT_TEXTS = frozenset(
    {
        "[Request interrupted by user]",
        "[Request interrupted by user for tool use]",
        "The user doesn't want to take this action right now. STOP what you are doing and wait for the user to tell you how to proceed.",
        "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user to tell you how to proceed.",
        "No response requested.",
    }
)
#: §2.1 per-model output caps of BASE, first lower-cased substring match wins.
MODEL_OUTPUT_CAPS = (
    ("3-5", 8_192),
    ("claude-3-opus", 4_096),
    ("claude-3-sonnet", 8_192),
    ("claude-3-haiku", 4_096),
    ("opus-4-5", 64_000),
    ("opus-4", 32_000),
    ("sonnet-4", 64_000),
    ("haiku-4", 64_000),
)
#: §8.1 2.1.112's per-model `(default, upper limit)` of the max output (`wa`; upstream wins: the spec
#: names only `maxOutput(model)`), first lower-cased substring match wins; otherwise 32,000 / 128,000.
#: `lc(model)` is CLAUDE_CODE_MAX_OUTPUT_TOKENS capped at the upper limit, else the default.
LATER_OUTPUT_LIMITS = (
    ("opus-4-7", 64_000, 128_000),
    ("sonnet-4-6", 32_000, 128_000),
    ("opus-4-6", 64_000, 128_000),
    ("opus-4-5", 32_000, 64_000),
    ("sonnet-4", 32_000, 64_000),
    ("haiku-4", 32_000, 64_000),
    ("opus-4", 32_000, 32_000),
    ("claude-3-opus", 4_096, 4_096),
    ("claude-3-sonnet", 8_192, 8_192),
    ("claude-3-haiku", 4_096, 4_096),
    ("3-5-sonnet", 8_192, 8_192),
    ("3-5-haiku", 8_192, 8_192),
    ("3-7-sonnet", 32_000, 64_000),
)
#: §4.2 `KV5`: the managed memory file of each platform (`hw()` + CLAUDE.md; the platform is not recorded).
MANAGED_MEMORY = frozenset(
    {"/etc/claude-code/CLAUDE.md", "/Library/Application Support/ClaudeCode/CLAUDE.md", "C:\\ProgramData\\ClaudeCode\\CLAUDE.md"}
)
#: §8.3 the excess a prompt-too-long error reports (`UF1`): "prompt is too long: N tokens > M maximum".
TOO_LONG = re.compile(r"prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)", re.I)
#: §13 the error of a request whose input fits but whose input and `max_tokens` do not (Claude before 4.5), which the
#: API call's retry loop parses (2.0.57 `TS2`, 2.1.112 `JbK`).
MAX_TOKENS_EXCEEDED = re.compile(r"input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+)")
#: §13 litellm's names of the APIs on which 2.1.112 sends the context-management beta: Anthropic's own, and Azure AI
#: Foundry (`$Q`); Bedrock and Vertex AI never get it.
ANTHROPIC_API, FOUNDRY_API = "anthropic", "azure_ai"
#: §13 the fewest output tokens that retry asks for (2.0.57 `M60`, 2.1.112 `$A7`: FLOOR_OUTPUT_TOKENS), and what it
#: leaves free below the context limit.
FLOOR_OUTPUT_TOKENS = 3_000
MAX_TOKENS_MARGIN = 1_000
READ_TOOLS = frozenset({"Read"})
WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
TODO_TOOL = "TodoWrite"
#: §4.2 rendering of restored files and the todo list (short protocol strings, nudges in our words).
FILE_CALL = "Called the Read tool with the following input: "
FILE_RESULT = "Result of calling the Read tool: "
#: 2.1.112 (`h98`): the Read result's text itself after a line break, not its JSON string.
FILE_RESULT_LATER = "Result of calling the Read tool:\n"
#: A line of the Read tool's numbered output (2.0.57 `ml`): the line number right-aligned in six columns, "→", the line.
NUMBERED_LINE = re.compile(r" *(\d+)→(.*)")
#: The reminder the Read tool puts after a text file's numbered lines (2.0.57 `J45`; each version words it its own
#: way): the replay takes it from the session's own Read results, never from this project's text.
TRAILING_REMINDER = re.compile(r"\n\n<system-reminder>\n.*\n</system-reminder>\n?\Z", re.S)
#: 2.0.57 `Y22`: a file whose chars/4 estimate is at most this share of the token limit passes without a count.
ESTIMATE_SHARE = 4
FILE_REFERENCE = (
    "Note: {path} was read before the conversation was summarized, but it is too large to include here. "
    "Use the Read tool if you need it again."
)
TODO_REMINDER = (
    "Your todo list has changed. DO NOT mention this explicitly to the user. Here are the latest contents of your todo list:"
)
TODO_NUDGE = "Go on with the tasks in the list where they apply."
#: the runs of blank lines `format_summary` collapses (a run of two stays as it is).
BLANK_RUN = re.compile(r"\n\n+")


@cache
def model_output_cap(model: str) -> int:
    """§2.1 `cap(model)` (per model name once per process: every replay asks it for its model)."""
    lowered = model.lower()
    return next((cap for key, cap in MODEL_OUTPUT_CAPS if key in lowered), 32_000)


def lowered_max_tokens(error: str) -> int | None:
    """§13 the `max_tokens` Claude Code retries a call with after `MAX_TOKENS_EXCEEDED` (2.0.57 off 8451280, 2.1.112 off
    10049723): what the context limit leaves after the input and a 1,000-token margin (upstream takes the largest of
    that, `FLOOR_OUTPUT_TOKENS` and a thinking budget + 1; no thinking budget is modelled); None for any other error,
    or when less than the floor is left, where upstream gives up and the call fails."""
    found = MAX_TOKENS_EXCEEDED.search(error)
    if found is None:
        return None
    available = max(0, int(found.group(3)) - int(found.group(1)) - MAX_TOKENS_MARGIN)
    return None if available < FLOOR_OUTPUT_TOKENS else available


def env_max_output(value: int | None, default: int = 32_000, ceiling: int = 64_000) -> int:
    """§2.1 validated `CLAUDE_CODE_MAX_OUTPUT_TOKENS`: unset or ≤ 0 → 32,000; above 64,000 → 64,000."""
    if value is None or value <= 0:
        return default
    return min(value, ceiling)


@cache
def later_max_output(model: str, env: int | None) -> int:
    """§8.1 2.1.112 `lc(model)`: CLAUDE_CODE_MAX_OUTPUT_TOKENS (unset or ≤ 0 → the model's default) capped
    at the model's upper limit (`LATER_OUTPUT_LIMITS`)."""
    lowered = model.lower()
    default, upper = next(((d, u) for key, d, u in LATER_OUTPUT_LIMITS if key in lowered), (32_000, 128_000))
    return env_max_output(env, default, upper)


def project_dir_name(cwd: str) -> str:
    """2.1.112 `AP`: the folder of a working directory under `<config>/projects/`: every UTF-16 code unit
    but an ASCII letter or digit becomes "-"; a name over 200 units is cut there and gets "-" and the
    base-36 absolute value of the 32-bit string hash (`N16`: `h = h·31 + unit`) of the directory."""
    data = cwd.encode("utf-16-le", "surrogatepass")
    units = [int.from_bytes(data[n : n + 2], "little") for n in range(0, len(data), 2)]
    name = "".join(chr(u) if chr(u).isascii() and chr(u).isalnum() else "-" for u in units)
    if len(name) <= 200:
        return name
    value = 0
    for unit in units:
        value = (value * 31 + unit) & 0xFFFFFFFF
    value = abs(value - (1 << 32) if value >= 1 << 31 else value)
    digits = ""
    while True:
        value, digit = divmod(value, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + digits
        if not value:
            return f"{name[:200]}-{digits}"


def auto_compact_threshold(effective: int, buffer: int, pct_override: float | None) -> int:
    """§2.1 `T = E − 13,000`, or `min(floor(E·p/100), E − 13,000)` for `0 < p ≤ 100`, in JavaScript's arithmetic:
    `Math.floor(E * (p / 100))` (2.0.57 and 2.1.112), so E = 180,000 and p = 70 give 125,999 (70 / 100 is a
    little under 0.7), not 126,000."""
    threshold = effective - buffer
    if pct_override is not None and 0 < pct_override <= 100:
        threshold = min(math.floor(effective * (pct_override / 100)), threshold)
    return threshold


def format_summary(text: str, *, keep_analysis: bool = True) -> str:
    """§4.1 `format()`: `<analysis>` → `Analysis:`, `<summary>` → `Summary:`, blank-line runs collapsed.
    With `keep_analysis=False` (2.1.69+, §8.5) the analysis block is removed."""
    text = _replace_block(text, "analysis", "Analysis:\n" if keep_analysis else None)
    text = _replace_block(text, "summary", "Summary:\n")
    if "\n\n\n" in text:
        text = BLANK_RUN.sub("\n\n", text)
    return text.strip()


def _replace_block(text: str, tag: str, heading: str | None) -> str:
    """`re.sub(r"<tag>(.*?)</tag>", heading + group(1).strip(), text, count=1, flags=re.S)` (removed for
    `heading=None`), by two searches: the leftmost match opens at the first `<tag>` and closes at the first
    `</tag>` after it, and when that opening has no closing after it no later one has. The regular
    expression tried the lazy group at every opening, each time to the end of the text: a summary that
    quotes its prompt ("inside <summary> tags") without closing it cost a scan per `<tag>` it holds.

    Upstream writes the block's text into the replacement string of JavaScript's `String.prototype.replace`
    (2.0.57 `tF5`, 2.1.112 `d0z`: `` `Summary:\n${content.trim()}` ``), so its `$` patterns are read as such
    (`_js_replacement`)."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    start = text.find(opening)
    if start < 0:
        return text
    end = text.find(closing, start + len(opening))
    if end < 0:
        return text
    stop = end + len(closing)
    block = "" if heading is None else _js_replacement(heading + text[start + len(opening) : end].strip(), text, start, stop)
    return text[:start] + block + text[stop:]


#: A replacement pattern of `String.prototype.replace` whose regular expression has no groups: `$$`, `$&`, `` $` ``, `$'`.
_JS_PATTERN = re.compile(r"\$[$&`']")


def _js_replacement(replacement: str, text: str, start: int, stop: int) -> str:
    """`replacement` as JavaScript's `replace` inserts it for the match `text[start:stop]` of a regular expression
    without groups: `$$` is `$`, `$&` the match, `` $` `` the text before it, `$'` the text after it; any other
    `$` stays (ECMA-262 GetSubstitution)."""
    if "$" not in replacement:
        return replacement
    parts = {"$$": "$", "$&": text[start:stop], "$`": text[:start], "$'": text[stop:]}
    return _JS_PATTERN.sub(lambda m: parts[m.group()], replacement)


@cache
def tool_names(listed: str) -> frozenset[str]:
    """The tool names of a comma-separated option (`microcompact_tools`), read once per process."""
    return frozenset(t.strip() for t in listed.split(",") if t.strip())


@dataclass(frozen=True)
class ClaudeCodeOptions:
    """Upstream defaults of 2.0.57 (§2.1, §3.1, §4.2, §5); environment settings by their variable."""

    #: CLAUDE_CODE_MAX_OUTPUT_TOKENS (None: unset)
    max_output_tokens_env: int | None = None
    #: CLAUDE_AUTOCOMPACT_PCT_OVERRIDE (lower-only)
    autocompact_pct_override: float | None = field(default=None, metadata={"range": Range(0, 100, low_open=True, what="a percentage of the effective window")})
    #: global config autoCompactEnabled
    auto_compact: bool = True
    #: DISABLE_COMPACT (auto and manual)
    disable_compact: bool = False
    #: DISABLE_MICROCOMPACT
    disable_microcompact: bool = False
    #: the model for the output cap; None: the profile's model
    model: str | None = None
    #: the window W; None: the profile's window (200,000 for the Claude profiles, as upstream)
    context_window: int | None = field(default=None, metadata={"range": CONTEXT_WINDOW})
    #: Auto-compact fires at T = E - this tokens, E the effective window W - R (`b00`; §2.1, §8.1).
    autocompact_buffer: int = field(default=13_000, metadata={"range": TOKEN_COUNT})
    #: Microcompact runs only at or above the warning line, T - this (E - this with auto-compact off); 2.0.57 only
    #: (§2.1, §5).
    warning_buffer: int = field(default=20_000, metadata={"range": TOKEN_COUNT})
    #: CLAUDE_CODE_MAX_OUTPUT_TOKENS value taken when it is unset or ≤ 0, before the per-model cap of the output
    #: reserve R; 2.0.57 only (§2.1).
    default_max_output: int = field(default=32_000, metadata={"range": Range(0, what="a number of output tokens")})
    #: Upper clamp of CLAUDE_CODE_MAX_OUTPUT_TOKENS in the output reserve R; 2.0.57 only (§2.1).
    max_output_ceiling: int = field(default=64_000, metadata={"range": Range(0, what="a number of output tokens")})
    #: max_tokens of the summary request (`o_A`, §3.1); 2.1 sends min(this, the model's max output) (§8.4).
    summary_max_output: int = field(default=20_000, metadata={"range": Range(0, what="a number of output tokens")})
    #: Microcompact never clears the results of the newest this many eligible tool calls (`zV5`, §5).
    microcompact_keep_recent: int = field(default=3, metadata={"range": Range(0, what="a number of tool results")})
    #: Microcompact clears the oldest eligible results while more than this many estimated tokens of them would
    #: remain (`EV5`, §5).
    microcompact_keep_tokens: int = 40_000
    #: Microcompact applies only when it would clear at least this many estimated tokens (`CV5`, §5).
    microcompact_min_saving: int = field(default=20_000, metadata={"range": TOKEN_COUNT})
    #: Tokens an image in a tool result counts in microcompact's result sizes (§5).
    microcompact_image_tokens: int = 2_000
    #: Comma-separated tool names whose results microcompact may clear (`UV5`, §5).
    microcompact_tools: str = "Read,Bash,Grep,Glob,WebSearch,WebFetch,Edit,Write"
    #: After a compaction, re-read at most this many recently read files, newest first; 0 restores none (`IV5`, §4.2).
    restore_max_files: int = field(default=5, metadata={"range": Range(0, what="a number of files")})
    #: A restored file over this many chars/4 tokens is attached as a path-only reference instead (`JV5`, §4.2).
    restore_file_tokens: int = 5_000
    #: Restored-file attachments are added while their chars/4 total stays ≤ this; one that would pass it is skipped
    #: (`YV5`, §4.2).
    restore_total_tokens: int = 50_000
    #: replay option: a manual /compact where the recording has a manual compact_boundary
    manual_compact_at_recorded: bool = True
    #: the session's original working directory, where the Project and Local memory files lie (§4.2); None:
    #: the transcript's (`source.cwd`) when it records one, else unknown: then every CLAUDE.md and
    #: CLAUDE.local.md counts as one of them
    cwd: str | None = None
    #: CLAUDE_CONFIG_DIR (the User memory file, §4.2; the transcript folder, §8.5); "~" stands for any home
    config_dir: str = "~/.claude"
    #: the session's slug, which names its plan file `<config_dir>/plans/<slug>.md` (§4.2); None: the one the
    #: transcript records (Claude Code 2.0+ lines' `slug`), else none: then no file read is the plan file
    slug: str | None = None


@dataclass(frozen=True)
class ClaudeCode21Options(ClaudeCodeOptions):
    """§8 (2.1.112): reserve cap 20,000, auto-compact window, breakers, prompt-too-long retries."""

    #: Cap of the output reserve in the threshold: R = min(the model's max output, this) (§8.1).
    reserve_cap: int = field(default=20_000, metadata={"range": TOKEN_COUNT})
    #: CLAUDE_CODE_AUTO_COMPACT_WINDOW / autoCompactWindow (None: unset), clamped to 100,000–1,000,000
    auto_compact_window: int | None = field(default=None, metadata={"range": CONTEXT_WINDOW})
    #: the breakers (§8.3): 0 failures stop auto-compaction before its first try (the requests go out uncompacted)
    max_consecutive_failures: int = field(default=3, metadata={"range": Range(0, what="a number of failures")})
    #: An auto-compaction fewer than this many turns (API requests) after the previous one in the same query is a
    #: rapid refill (§8.3).
    refill_turns: int = field(default=3, metadata={"range": Range(0, what="a number of turns")})
    #: At this many rapid refills in a row the query ends ("Autocompact is thrashing"): its requests at or over the
    #: threshold are refused until the next user prompt (§8.3); 0: from its first check at or over the threshold.
    max_rapid_refills: int = field(default=3, metadata={"range": Range(0, what="a number of refills")})
    #: Retries of a summary request refused as prompt-too-long, each dropping the oldest API rounds; 0 = none
    #: (`qLK`, §8.3).
    ptl_retries: int = field(default=3, metadata={"range": Range(0, what="a number of retries")})
    #: Share of the API rounds (at least one) a retry drops when the error does not say by how much the prompt is over
    #: (§8.3).
    ptl_drop_fraction: float = 0.2
    #: Tokens an image counts in 2.1's chars/4 estimates: the count's tail and the retry's rounds (§8.2).
    image_tokens: int = 2_000
    #: The remote flag `tengu_compact_cache_prefix` (default on, §8.4): the summary is first asked of a fork of the
    #: turn's request, which reads its prefix from the cache and writes nothing past the turn's messages; off, or
    #: when the fork gives no summary, the summariser's own request with its prompt-too-long retries.
    compact_cache_prefix: bool = True
    #: A request the check did not compact is not sent when its count is at least E − this (§8.1, `e_7`).
    blocking_buffer: int = field(default=3_000, metadata={"range": TOKEN_COUNT})
    #: CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE (None: unset): the count at which a request is not sent, instead of
    #: E − `blocking_buffer` (§8.1).
    blocking_limit_override: int | None = field(default=None, metadata={"range": Range(1, what="a token count")})
    #: §8.5 the transcript path the summary message names; None: where Claude Code keeps the replayed
    #: session's, `<config_dir>/projects/<project folder of cwd>/<session id>.jsonl` (an unknown cwd as "/")
    transcript_path: str | None = None


class ResponseHistory(ItemHistory):
    """The history as Claude Code's API normaliser sends it (2.0.57 `BZ`, cc@2.0.57 cli.js L4125; 2.1.112 `K0`,
    cc@2.1.112 cli.js L5262): the content blocks of one API response (the lines sharing a `message.id`) are
    one assistant message, and two responses are two assistant messages even when nothing stands between
    them. Upstream, an assistant line looks back over the assistant and tool-result messages already built
    and merges into the one with its `message.id` (`ky3`/`HNY`: the blocks concatenated); 2.0.57 stops at
    an assistant of another id (`break`), 2.1.112 looks past it (`continue`) — the same for the responses
    of a transcript, whose blocks arrive together. `ItemHistory`'s generic fold differs twice: it folds a
    tool call into the assistant message before it whatever response that was, and never folds a text that
    follows a text or a tool call of the same response.

    Here the text and tool calls of one response (`on_response`'s batch, `response_of`) fold into one
    message, their texts joined by a line break as `merge_assistant` joins them; a thinking block stays
    its own `reasoning` message (the provider-neutral form of a thinking block), which ends a fold as
    before. 2.1.112 (`drop_blank_text`) also drops whitespace-only text blocks from a merged message
    unless nothing else is left (`HNY`). Items of no known response fold as `ItemHistory` folds them."""

    def __init__(self, response_of: dict[str, int], *, drop_blank_text: bool = False) -> None:
        super().__init__()
        self._response_of = response_of
        self._drop_blank = drop_blank_text
        #: the response of the open group's first item
        self._open_response: int | None = None
        self._folds = FoldMemo(self._combine)  # `ItemHistory`'s memo of folds, with this fold

    def _joins(self, first: Message, first_response: int | None, message: Message, item: Item) -> bool:
        """Whether `item`'s message joins the open group that starts with `first`."""
        if message.role != "assistant" or first.role != "assistant":
            return False
        response = self._response_of.get(item.id)
        if response is None or first_response is None:
            return bool(message.tool_calls)
        return response == first_response

    def _combine(self, group: Sequence[Message]) -> Message:
        """One response's messages as one: texts joined by a line break (2.1: whitespace-only ones dropped)."""
        texts = [m.content for m in group if m.content]
        if self._drop_blank:
            solid = [t for t in texts if t.strip()]
            if solid or any(m.tool_calls for m in group):
                texts = solid
        return replace(
            group[0],
            content="\n".join(texts),
            tool_calls=tuple(c for m in group for c in m.tool_calls),
            item_ids=tuple(i for m in group for i in m.item_ids),
            attachments=tuple(a for m in group for a in m.attachments),
        )

    def render(
        self,
        items: Sequence[Item] | None = None,
        replacements: Mapping[str, str] | None = None,
        cleared_inputs: Mapping[str, str] | None = None,
    ) -> list[Message]:
        """`ItemHistory.render` with this fold."""
        if items is None and not replacements and not cleared_inputs:
            return self._render_all()
        out: list[Message] = []
        group: list[Message] = []
        first_response: int | None = None
        for item in self.items if items is None else items:
            message = self.edited(item, (replacements or {}).get(item.id), (cleared_inputs or {}).get(item.id))
            if group and self._joins(group[0], first_response, message, item):
                group.append(message)
                continue
            if group:
                out.append(self._folds.fold(group))
            group, first_response = [message], self._response_of.get(item.id)
        if group:
            out.append(self._folds.fold(group))
        return out

    def _advance(self) -> None:
        """`ItemHistory._advance` with this fold."""
        if self.items is not self._seen_list or len(self.items) < self._seen:
            self._seen_list, self._seen, self._closed, self._open, self._index = self.items, 0, [], [], {}
            self._open_response = None
        group = self._open
        for n in range(self._seen, len(self.items)):
            item = self.items[n]
            message = self.message(item)
            if group and self._joins(group[0], self._open_response, message, item):
                group.append(message)
                continue
            if group:
                self._closed.append(self._folds.fold(group))
            group = [message]
            self._open_response = self._response_of.get(item.id)
            if message.role != "assistant":
                self._index[item.id] = (-1 if item.id in self._index else len(self._closed), item)
        self._open, self._seen = group, len(self.items)


@dataclass
class _File:
    path: str
    #: when the file was last read or written (the replay's own clock)
    order: int
    content: str | None
    #: whether `content` is the file's own text (a Write's, or BASE's read back from a Read result), not a Read result as
    #: recorded (2.1's, numbered lines)
    raw: bool = False
    #: when the session last wrote or edited it (the same clock; 0: never, its modification time is older than the
    #: session): the read cache's timestamp is the file's mtime, which a Read does not change
    modified: int = 0
    #: §4.2 how it is restored (whether it fits its own budget, its size in the total budget, its messages),
    #: built once per file version: a file kept by one compaction is restored by the next with the same messages
    restored: tuple[bool, int, tuple[Message, ...]] | None = field(default=None, compare=False, repr=False)


class MemoryFiles:
    """The files a compaction never restores (`ClaudeCode._memory_files`): `exact` paths, and the paths the
    pattern `source` matches whole. Each of the pattern's alternatives ends with a literal text (`tails`), so a
    path that ends with none of them is not matched, and the pattern, different in every session (it names
    the session's files), is compiled only when a path could match it: compiling it cost 0.14 ms a session,
    0.16 s over the Aider file's 1,134 sessions, most of which never read such a file."""

    def __init__(self, exact: frozenset[str], tails: tuple[str, ...], source: str) -> None:
        self.exact, self.tails, self.source = exact, tails, source
        self._pattern: re.Pattern[str] | None = None

    def holds(self, path: str) -> bool:
        """Whether `path` (as read, or normalized) is one of the files."""
        normal = posixpath.normpath(path) if path else path
        if normal in self.exact or path in self.exact:
            return True
        if not normal.endswith(self.tails):
            return False
        if self._pattern is None:
            self._pattern = re.compile(self.source)
        return self._pattern.fullmatch(normal) is not None


class ClaudeCode(Strategy):
    name = "claude-code"
    description = "Claude Code 2.0.57: W − R − 13,000 on the last usage, microcompact, nine-section summary + restored files and todos"
    spec = "docs/specs/claude-code.md §1-§5, §9, §11"
    Options = ClaudeCodeOptions
    sends_inputs_verbatim = True
    #: 2.1.69+ drops the analysis from the stored summary; 2.1.90+ asks for text only.
    later = False
    #: whether the read cache keeps a file's own text (BASE: a Read result's numbered lines read back, §4.2), so
    #: that every Edit applies to it; 2.1 keeps a Read result as recorded (its re-read format is not traced)
    plain_files = True
    #: the reminder the session's Read results end with (`TRAILING_REMINDER`), for BASE's re-reads
    _read_reminder = ""

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        o = self.options
        self.window = o.context_window or ctx.profile.context_window
        model = o.model or ctx.profile.model
        self.reserve = self._reserve(model)
        #: the `max_tokens` of a turn request (§2.1: `R` in BASE; §8.1: 2.1.112 asks for the whole max output)
        self.max_tokens = self._max_tokens(model)
        self.effective = self.window - self.reserve
        self.threshold = auto_compact_threshold(self._compact_window() - self.reserve, o.autocompact_buffer, o.autocompact_pct_override)
        self.system: list[Item] = []
        #: the serial number of the response each model-output item came in (`on_response`), which the
        #: history's fold (`ResponseHistory`) and the API-round groups of the 2.1 retry (`_rounds`) read
        self._response_of: dict[str, int] = {}
        self._responses = 0
        self.history = self._new_history()
        #: renders the system items (the same messages for the whole replay: `history` starts anew at each compaction)
        self._system_messages = ItemHistory()
        self.prefix: list[Message] = []
        self.last_usage: int = 0
        self.last_response_at: int | None = None
        self.cleared: set[str] = set()
        self.files: dict[str, _File] = {}
        self.todos: list[Any] = []
        self._clock = 0
        self._calls: dict[str, Item] = {}
        #: the last turn request built, and its retry with a lower `max_tokens` when the provider refused it (§13)
        self._sent: Request | None = None
        self._retry: Request | None = None
        self._marker: Item | None = None
        self.eligible = tool_names(o.microcompact_tools)
        # What the recording says of the session: its id and working directory.
        session = ctx.session
        recorded_cwd = session.get("cwd")
        self.cwd: str | None = o.cwd or (recorded_cwd if isinstance(recorded_cwd, str) and recorded_cwd else None)
        self.session_id = str(session.get("session_id") or session.get("id") or "session")
        #: §4.2 the session's plan-file name and the sub-agent's id (None: the main thread), as recorded
        recorded_slug, recorded_agent = session.get("slug"), session.get("agent_id")
        self.slug: str | None = o.slug or (recorded_slug if isinstance(recorded_slug, str) and recorded_slug else None)
        self.agent_id: str | None = recorded_agent if isinstance(recorded_agent, str) and recorded_agent else None
        self._memory = self._memory_files()
        # Each tool call with the first result of its id (§5 caches a result's size per `tool_use_id`), kept up to
        # date by `_sync` from the items appended since its last call (and started over when a compaction
        # replaces the history):
        self._synced_items: list[Item] | None = None
        self._synced = 0
        #: the first result of each call id (the one §5 sizes, as it caches a size per `tool_use_id`), every result
        #: of each call id (a cleared id's are all replaced: the edit matches results by `tool_use_id`), and the ids
        #: of the calls
        self._results: dict[str, Item] = {}
        self._answers: dict[str, list[Item]] = {}
        self._call_ids: set[str] = set()
        #: §5 candidates: the eligible calls whose id is not cleared, in order, how many per id, and the sum
        #: of their results' sizes (0 while unanswered)
        self._live: list[Item] = []
        self._live_ids: Counter[str | None] = Counter()
        self._live_total = 0
        self._sizes: dict[str, int] = {}
        #: the results of the calls whose id is cleared (they carry `CLEARED_RESULT`), by item id
        self._replacements: dict[str, Item] = {}
        #: `messages()` as the view of an append-only log: the system messages, the prefix, then the history's
        #: closed message groups (`ItemHistory.view()`) with the placeholders; copied from `_log_source` up to
        #: `_log_copied`, for `_log_system` system items and the prefix `_log_prefix`. `_log_stale`: a result
        #: already copied got its placeholder (the log starts anew, as a new list: earlier views keep theirs).
        self._log: list[Message] = []
        self._log_source: list[Message] | None = None
        self._log_copied = 0
        self._log_system = 0
        self._log_prefix: list[Message] | None = None
        self._log_stale = False
        #: the last view `messages()` returned, and the history list and length it was built from: returned again
        #: while nothing changed (the same context, the same object)
        self._view: LogView | None = None
        self._view_of: tuple[list[Item], int] = ([], -1)
        #: the summarizer's last text, its trigger and the §4.1 summary message built from them (`_summary_message`)
        self._summary: tuple[str, bool, Message] | None = None
        #: the todo list whose §4.2 message was built last, and that message
        self._todo_message: tuple[list[Any], Message] | None = None
        #: the rendered summary system prompt and instructions, by instructions (`summary_request`)
        self._prompts: dict[str | None, tuple[Message, Message]] = {}

    # ------------------------------------------------------------ limits (§2.1, §8.1)
    def _reserve(self, model: str) -> int:
        o = self.options
        return min(env_max_output(o.max_output_tokens_env, o.default_max_output, o.max_output_ceiling), model_output_cap(model))

    def _max_tokens(self, model: str) -> int:
        return self.reserve

    def _compact_window(self) -> int:
        return self.window

    @property
    def enabled(self) -> bool:
        return self.options.auto_compact and not self.options.disable_compact

    # ------------------------------------------------------------ observing
    def on_user_turn(self, item: Item) -> None:
        self.history.append(item)

    def on_input(self, item: Item) -> None:
        if item.kind == "system":
            self.system.append(item)
            return
        self.history.append(item)
        if item.kind == "tool_result" and not item.is_error:
            call = self._calls.get(item.call_id or "")
            if call is not None and call.tool_name in READ_TOOLS and not item.text.startswith(UNCHANGED_READS):
                args = _arguments(call)
                # §4.2 the restore re-reads the whole file: a Read of a part of it (an offset or a limit) does not
                # show what that re-read would (2.0.57 `FV5` calls the Read tool with neither)
                whole = args.get("offset") is None and args.get("limit") is None
                content = self._read_content(item.text) if whole else None
                self._touch_file(args.get("file_path"), content, raw=self.plain_files)
            elif call is not None and call.tool_name == TODO_TOOL and isinstance(todos := _arguments(call).get("todos"), list):
                self.todos = stored_todos(todos)

    def on_marker(self, item: Item) -> None:
        if item.meta.get("event") != "compaction":
            return
        self._marker = item
        if item.meta.get("trigger") == "manual" and self.options.manual_compact_at_recorded and not self.options.disable_compact:
            self._microcompact()
            # §2.4 the text typed after `/compact` (the importer puts it on the boundary's marker)
            self._compact("manual", str(item.meta.get("instructions") or "").strip() or None)

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        self._responses += 1
        for item in items:
            self._response_of[item.id] = self._responses
        self.history.extend(items)
        self._marker = None
        first_text = next((i.text for i in items if i.kind == "assistant"), None)
        synthetic = usage is not None and usage.input == 0 and usage.output == 0
        if usage is not None and not synthetic and first_text not in INTERRUPT_TEXTS:
            self.last_usage = usage_context_tokens(usage)
            # §8.2 (2.1.112 `vJ`): the estimate starts after the response's first line (content block), so
            # its other blocks (a tool call's input, later text) are estimated too; BASE adds nothing.
            self.last_response_at = len(self.history.items) - len(items) + (1 if items else 0)
        for item in items:
            if item.kind != "tool_call":
                continue
            self._calls[item.call_id or ""] = item
            # the arguments are read only for the tools whose input the compaction uses (a read's at its result)
            if item.tool_name in WRITE_TOOLS:
                args = _arguments(item)
                if not isinstance(path := args.get("file_path"), str):
                    continue
                if item.tool_name == "Write":
                    content = args.get("content") if isinstance(args.get("content"), str) else None
                    self._touch_file(path, content, raw=True, written=True)
                else:
                    known = self.files.get(path)
                    edited = _edited(known.content, known.raw, item.tool_name, args) if known is not None else None
                    self._touch_file(path, edited, raw=known is not None and known.raw, written=True)

    def _touch_file(self, path: Any, content: str | None, raw: bool = False, *, written: bool = False) -> None:
        """§4.2 the read cache: a file read or written (`path` from the call's input; anything but a string is
        ignored), with what a re-read would show where that is known (None: restored as a reference to read it).
        `written`: a Write or an Edit, which sets the file's modification time."""
        if not isinstance(path, str):
            return
        self._clock += 1
        known = self.files.get(path)
        modified = self._clock if written else known.modified if known is not None else 0
        self.files[path] = _File(path, self._clock, content, raw, modified)

    def _new_history(self) -> ResponseHistory:
        """The history as the API normaliser sends it (`ResponseHistory`): 2.1.112 also drops blank text blocks."""
        return ResponseHistory(self._response_of, drop_blank_text=self.later)

    # ------------------------------------------------------------ count (§2.2)
    def count(self) -> int:
        return self.last_usage

    # ------------------------------------------------------------ context
    def messages(self) -> Sequence[Message]:
        """The system messages, the prefix (summary and attachments), then the history with the results of
        cleared calls replaced by `CLEARED_RESULT`: a `LogView` of `_log`, which is extended by the groups
        the history closed since the last call and started anew only when the history, the system messages
        or the prefix changed, or a result it holds was cleared. While none of these changed and no item was
        appended, it is the last view returned (the same context as the same object)."""
        items = self.history.items
        last = self._view
        if (
            last is not None and not self._log_stale and self._view_of[0] is items and self._view_of[1] == len(items)
            and self.prefix is self._log_prefix and len(self.system) == self._log_system
        ):
            return last
        self._sync()
        view = self.history.view()
        if (
            self._log_stale or view.log is not self._log_source
            or len(self.system) != self._log_system or self.prefix is not self._log_prefix
        ):
            self._log = [*self._system_messages.render(self.system), *self.prefix]
            self._log_source, self._log_copied, self._log_system, self._log_prefix = view.log, 0, len(self.system), self.prefix
            self._log_stale = False
        log, new, tail = self._log, view.log[self._log_copied : view.length], view.tail
        if self._replacements:
            new, tail = [*map(self._placeholder, new)], tuple(map(self._placeholder, tail))
        log.extend(new)
        self._log_copied = view.length
        self._view, self._view_of = LogView(log, len(log), tail), (items, len(items))
        return self._view

    def _placeholder(self, message: Message) -> Message:
        """A history message, or its `CLEARED_RESULT` edit when it is a cleared result (`ItemHistory.render`
        with the replacements: a result is never folded, so its message holds that one item, whose id no
        other item of a transcript has)."""
        if message.role == "assistant" or not message.item_ids:
            return message
        result = self._replacements.get(message.item_ids[0])
        return message if result is None else self.history.edited(result, CLEARED_RESULT, None)

    def _sync(self) -> None:
        """Read the items appended to the history since the last call into the pairing state (from the
        start when the history was replaced): each item read once, not on every request."""
        items = self.history.items
        if items is not self._synced_items:
            self._synced_items, self._synced = items, 0
            self._results, self._answers, self._call_ids, self._sizes, self._replacements = {}, {}, set(), {}, {}
            self._live, self._live_ids, self._live_total = [], Counter(), 0
        for n in range(self._synced, len(items)):
            item = items[n]
            call_id = item.call_id
            if item.kind == "tool_call":
                if call_id:
                    self._call_ids.add(call_id)
                if item.tool_name in self.eligible and call_id not in self.cleared:
                    self._live.append(item)
                    self._live_ids[call_id] += 1
                    self._live_total += self._size(call_id)
                if call_id in self.cleared:
                    for result in self._answers.get(call_id or "", ()):
                        if result.id not in self._replacements:
                            self._replacements[result.id] = result
                            self._log_stale = True  # a result before its call: it may be in the log already
            elif item.kind == "tool_result" and call_id:
                self._answers.setdefault(call_id, []).append(item)
                if call_id not in self._results:
                    self._results[call_id] = item
                    if self._live_ids[call_id]:
                        self._live_total += self._live_ids[call_id] * self._size(call_id)
                if call_id in self._call_ids and call_id in self.cleared:
                    self._replacements[item.id] = item  # not in the log yet: `messages()` syncs before it copies
        self._synced = len(items)

    def _size(self, call_id: str | None) -> int:
        """§5 size of the result answering a call (0 while unanswered), estimated once per result."""
        result = self._results.get(call_id or "")
        if result is None:
            return 0
        size = self._sizes.get(result.id)
        if size is None:
            size = self._sizes[result.id] = self._result_tokens(result)
        return size

    def request(self) -> Request:
        """§2.3 the check before the request (microcompact first), then the request.

        `meta["count"]` is the count the check decided on. `estimate_tokens` is what Claude Code believes of
        the messages it sends: that count, unless the check compacted them, and then the count of its own
        estimator over the new context, which upstream's next check would compute on it (`count()`): BASE's
        `AK` finds no response with usage after the boundary and gives 0 (as for the request after a manual
        `/compact`, whose check reads that 0); 2.1.112's `vJ` gives the chars/4 estimate of the summary and
        attachments (§8.2). Never None: both estimators always give a number. `threshold` is None on that
        request: upstream checks once per request, and the compacted messages go out unchecked (§2.3 step 5),
        so no count of them can be a missed trigger (the compaction record keeps the threshold it fired on); nor
        on any request with auto-compact off (`auto_compact=false`, `DISABLE_COMPACT`), which nothing checks."""
        if self._retry is not None:  # the retry of the call that failed (`on_overflow`)
            retry, self._retry = self._retry, None
            return retry
        self._on_request()
        marker = self._marker
        self._microcompact()
        count = self.count()
        meta: dict[str, Any] = {"count": count}
        # `enabled && tokens >= T` (§2.1 "Above threshold", cli.js L1921 `L1A`; §8.1 changes 2.1's `T`, not the
        # comparison), not strict: `T` itself is the smallest count that compacts, the threshold reported
        # (`Request.threshold`). The count is the whole context's (§2.2, §8.2), as the true count is.
        threshold: int | None = self.threshold if self.enabled else None  # auto-compact off: no check, no threshold
        checked = self._auto_compact(meta) if self.enabled and count >= self.threshold else False
        if checked:
            count, threshold = self.count(), None
        elif checked is None:  # §8.3 the query ends before the model is called (2.1.112 cli.js L4538)
            self.ctx.refuse_request(AUTOCOMPACT_THRASHING)
        elif (limit := self._blocking_limit()) is not None and count >= limit:
            meta["blocking_limit"] = limit
            self.ctx.refuse_request(PROMPT_TOO_LONG)
        if marker is not None:
            meta["after_recorded_compaction"] = marker.id
        self._sent = Request(self.messages(), estimate_tokens=count, threshold=threshold, max_output_tokens=self.max_tokens, meta=meta)
        return self._sent

    def on_overflow(self, error: ProviderError) -> bool:
        """§13: the API call retries itself with a lower `max_tokens` when only the input and `max_tokens` together
        are over the limit (`lowered_max_tokens`): the same messages, sent again at once (no check runs between). Any
        other overflow ends the turn's call with the error, as before."""
        lowered = self.retry_max_tokens(error)
        if lowered is None or self._sent is None:
            return False
        self._retry = replace(self._sent, max_output_tokens=lowered, meta={**self._sent.meta, "max_tokens_override": lowered})
        return True

    def _on_request(self) -> None:
        """Hook for the 2.1 refill breaker."""

    def _blocking_limit(self) -> int | None:
        """The count at which a request the check did not compact is not sent: none in 2.0.57 (§7.1: 2.0.77+)."""
        return None

    def _auto_compact(self, meta: dict[str, Any]) -> bool | None:
        """§2.3 steps 4-6: compact; on failure the original messages go out, no retry and no breaker. True when
        it compacted, False when the original messages go out; None when the check ends the user's query instead
        and the request is not sent (2.1's rapid-refill breaker; never in BASE)."""
        return self._compact("auto")

    # ------------------------------------------------------------ microcompact (§5)
    def _result_tokens(self, result: Item) -> int:
        return chars_div4(result.text) + self.options.microcompact_image_tokens * sum(1 for a in result.attachments if a.is_image)

    def _microcompact(self) -> None:
        o = self.options
        if o.disable_microcompact or self.later:
            return
        # the threshold when auto-compact is on in the settings, else the effective window: DISABLE_COMPACT does not
        # move it (2.0.57 `L1A`: `O1A() ? T : E`, `O1A` reading `autoCompactEnabled` alone)
        warning_line = (self.threshold if o.auto_compact else self.effective) - o.warning_buffer
        # applied only at or above the warning line (§5 step 4, `tokens >= B - 20,000`, §2.1 `OV5`): not strict,
        # so the line itself is the threshold its record reports
        if self.count() < warning_line:
            return
        # The eligible calls not cleared yet (`_live`, with the sum of their results' sizes), oldest first
        # but the newest `keep_recent`, are marked while more than `keep_tokens` would remain: a prefix.
        self._sync()
        total = self._live_total
        marked, cleared = [], 0
        for n in range(len(self._live) - o.microcompact_keep_recent):
            if total - cleared <= o.microcompact_keep_tokens:
                break
            call = self._live[n]
            marked.append(call.call_id or "")
            cleared += self._size(call.call_id)
        if not marked or cleared < o.microcompact_min_saving:
            return
        before = self.messages()
        self.cleared.update(marked)
        for call_id in marked:
            for result in self._answers.get(call_id, ()):
                self._replacements[result.id] = result
                self._log_stale = True
        self._live = [c for c in self._live if c.call_id not in self.cleared]
        self._live_ids = Counter(c.call_id for c in self._live)
        self._live_total = sum(self._size(c.call_id) for c in self._live)
        self._prune_read_cache(set(marked))
        self.ctx.record_compaction(
            trigger="microcompact", before=before, after=self.messages(), summary=None,
            estimate_tokens=self.count(), threshold=warning_line, details={"cleared_calls": marked, "cleared_tokens": cleared},
        )

    def _prune_read_cache(self, cleared_now: set[str]) -> None:
        """§5 (2.0.57 `$i`): a path leaves the read cache when this pass cleared a Read of it and no other Read of it
        is in the messages (one cleared by an earlier pass still is: its call stays); an Edit or a Write of the file
        keeps nothing."""
        dropped: set[str] = set()
        kept: set[str] = set()
        for item in self.history.items:
            if item.kind == "tool_call" and item.tool_name in READ_TOOLS:
                path = _arguments(item).get("file_path")
                if isinstance(path, str):
                    (dropped if item.call_id in cleared_now else kept).add(path)
        for path in dropped - kept:
            self.files.pop(path, None)

    # ------------------------------------------------------------ compaction (§3, §4)
    def summary_request(self, messages: Sequence[Message], instructions: str | None) -> Request:
        system, prompt = self._summary_prompts(instructions)
        return Request([system, *messages, prompt], kind="summary", max_output_tokens=self._summary_max_output())

    def _summary_prompts(self, instructions: str | None) -> tuple[Message, Message]:
        """The summariser's system message and the compaction prompt (§3.1, §3.2), rendered once per
        instructions: the same variables give the same text."""
        prompts = self._prompts.get(instructions)
        if prompts is None:
            system = self.ctx.render_prompt("claude_code_system.j2")
            prompt = self.ctx.render_prompt("claude_code_summary.j2", instructions=instructions, text_only=self.later)
            prompts = self._prompts[instructions] = (Message("system", system), Message("user", prompt))
        return prompts

    def _summary_max_output(self) -> int:
        return self.options.summary_max_output

    def _summary_text(self, before: Sequence[Message], body: Sequence[Message], instructions: str | None) -> str | None:
        """The summary of a compaction of the context `before`, whose messages after the system prompt are `body`;
        None when it failed (§3.4). BASE asks the summariser once, with `body` (§3.1)."""
        return self._summary_of(self.summary_request(body, instructions))

    def _summary_of(self, request: Request) -> str | None:
        """§3.4 one summary call: its text, or None when the request did not fit or the answer is no summary (no
        text, an API error, or `PROMPT_TOO_LONG`)."""
        try:
            result = self._summarize(request)
        except SummaryOverflow:
            return None
        text = result.text.strip()
        if not text or text.startswith("API Error") or text.startswith(PROMPT_TOO_LONG):
            return None
        return text

    def retry_max_tokens(self, error: ProviderError) -> int | None:
        """§13 the API call's retry with a lower `max_tokens` (`lowered_max_tokens`)."""
        return lowered_max_tokens(error.message)

    def _summarize(self, request: Request) -> LLMResult:
        """One summary call through the API call's retry (§13): a request refused because its input and `max_tokens`
        together are over the limit is sent again at once with the lower `max_tokens` (`lowered_max_tokens`); any
        other refusal, or one that leaves less than the floor, is the call's `SummaryOverflow`."""
        try:
            return self.ctx.summarize(request)
        except SummaryOverflow as overflow:
            lowered = lowered_max_tokens(overflow.error.message)
            if lowered is None:
                raise
            return self.ctx.summarize(replace(request, max_output_tokens=lowered, meta={**request.meta, "max_tokens_override": lowered}))

    def _compact(self, trigger: str, instructions: str | None = None) -> bool:
        """§3, §4: one compaction (`instructions`: a manual /compact's, §2.4); False when it failed. The 2.1
        breakers see only the auto path's outcome (`_auto_compact`): upstream changes them in `QkK` alone."""
        before = self.messages()
        body = before[len(self.system):]
        if not body:
            return False  # "No messages to compact" / "Not enough messages to compact." (§2.4)
        count = self.count()
        text = self._summary_text(before, body, instructions)
        if text is None:
            return False
        summarized = [i for m in body for i in m.item_ids]
        message = self._summary_message(text, auto=trigger == "auto")
        summary = message.content
        attachments, restored = self._attachments()
        todos = len(self.todos) if self._todo_attachment() is not None else 0
        marker = self._marker
        self.prefix = [message, *attachments]
        self.history = self._new_history()
        self.last_usage = 0
        self.last_response_at = None
        details: dict[str, Any] = {"count": count, "restored_files": restored, "todos": todos}
        if instructions is not None:
            details["instructions"] = instructions
        if marker is not None:
            details["recorded"] = {
                "id": marker.id, "trigger": marker.meta.get("trigger"), "preTokens": marker.meta.get("preTokens"),
            }
        self.ctx.record_compaction(
            trigger=trigger, before=before, after=self.messages(), summary=summary, summarized_ids=summarized,
            estimate_tokens=count, threshold=self.threshold, details=details,
        )
        return True

    def _summary_message(self, text: str, *, auto: bool) -> Message:
        """§4.1 the summary message of a summarizer's text (`wrap_summary`): the last one again, the same
        object, when the text and the trigger are the last ones (a session that summarizes before every
        request often gets the same summary back)."""
        last = self._summary
        if last is None or last[1] != auto or last[0] != text:
            last = self._summary = (text, auto, Message("user", self.wrap_summary(text, auto=auto)))
        return last[2]

    def wrap_summary(self, text: str, *, auto: bool) -> str:
        """§4.1 the summary message."""
        content = f"{SUMMARY_PREFIX}\n{format_summary(text)}."
        return f"{content}\n{CONTINUE_SENTENCE}" if auto else content

    def _memory_files(self) -> MemoryFiles:
        """§4.2 the files a compaction never restores (BASE `KV5`, cc@2.0.57 cli.js L1921): the current agent's
        todo file (`Ci(agentId)`: `<config>/todos/<session id>-agent-<agent id>.json`, the main thread's agent id
        being the session id), the current agent's plan file (`bU(agentId)`: `<config>/plans/<slug>.md`, a
        sub-agent's `<slug>-agent-<agent id>.md`), and the User (`<config>/CLAUDE.md`), Project
        (`<cwd>/CLAUDE.md`), Local (`<cwd>/CLAUDE.local.md`) and Managed memory files, by path: another
        session's plan or todo file, or a CLAUDE.md anywhere else (a sub-folder's), is restored like any file
        (§4.2 says "the plan file"; upstream wins: `KV5` compares with this one path, not with the plans
        folder or other sessions' plans). 2.1.112
        (`xDY`, cc@2.1.112 cli.js L4994) leaves out the same plan file (`eW(agentId)`), the same memory files
        and the auto-memory file (`<config>/projects/<project>/memory/MEMORY.md`), not the todo file. The slug
        is the one the recorded lines carry (option `slug`); with none recorded upstream names a new plan file
        (`o95` picks a name no file has), so no file read in the session is the plan file. With the working
        directory unknown, every CLAUDE.md and CLAUDE.local.md is taken for the Project or Local one."""
        config = self.options.config_dir
        # "~" stands for any home folder: the one of the recording is not known.
        head = ".*" + re.escape(config[1:]) if config == "~" or config.startswith("~/") else re.escape(posixpath.normpath(config))
        agent = self.agent_id
        # each alternative with the literal text it ends with (`MemoryFiles.tails`)
        under = [(r"CLAUDE\.md", "CLAUDE.md")]
        if self.slug is not None:
            plan = f"{self.slug}.md" if agent is None else f"{self.slug}-agent-{agent}.md"
            under.append(("plans/" + re.escape(plan), plan))
        if self.later:
            under.append((r"projects/[^/]+/memory/MEMORY\.md", "/memory/MEMORY.md"))
        else:
            todo = f"{self.session_id}-agent-{agent or self.session_id}.json"
            under.append(("todos/" + re.escape(todo), todo))
        patterns = [f"{head}/(?:{'|'.join(p for p, _ in under)})"]
        tails = [tail for _, tail in under]
        exact = set(MANAGED_MEMORY)
        if self.cwd is not None:
            exact.update(posixpath.join(posixpath.normpath(self.cwd), name) for name in ("CLAUDE.md", "CLAUDE.local.md"))
        else:
            patterns.append(r".*/CLAUDE(?:\.local)?\.md|CLAUDE(?:\.local)?\.md")
            tails.append("CLAUDE.local.md")
        return MemoryFiles(frozenset(exact), tuple(tails), "|".join(f"(?:{p})" for p in patterns))

    def _restorable(self, path: str) -> bool:
        return not self._memory.holds(path)

    def _attachments(self) -> tuple[list[Message], list[str]]:
        """§4.2: the newest files within their budgets (then the read cache holds only them), the todo list;
        the messages and the restored paths."""
        o = self.options
        files = sorted((f for f in self.files.values() if self._restorable(f.path)), key=_newest_first)
        out: list[Message] = []
        kept: dict[str, _File] = {}
        total = 0
        for f in files[: o.restore_max_files]:
            if f.restored is None:
                f.restored = self._restored(f)
            fits, size, messages = f.restored
            if total + size > o.restore_total_tokens:
                continue
            total += size
            out.extend(messages)
            if fits:
                kept[f.path] = f
        self.files = kept
        todos = self._todo_attachment()
        if todos is not None:
            out.append(todos)
        return out, [f.path for f in kept.values()]

    def _todo_attachment(self) -> Message | None:
        """§4.2 (`VV5`) the todo list the TodoWrite tool stored, when it is not empty; `JSON.stringify` of it."""
        if not self.todos:
            return None
        if self._todo_message is None or self._todo_message[0] is not self.todos:
            body = f"{TODO_REMINDER}\n\n{_js_json(self.todos)}. {TODO_NUDGE}"
            self._todo_message = (self.todos, Message("user", _reminder(body)))
        return self._todo_message[1]

    def _restored(self, f: _File) -> tuple[bool, int, tuple[Message, ...]]:
        """§4.2 whether a file fits its own budget, its size in the total budget and its messages: the
        re-read (call and result) when it fits, else a note naming it."""
        fits = f.content is not None and self._fits(f.content)
        payload = {"type": "file", "filename": f.path, "content": f.content} if fits else {"type": "compact_file_reference", "filename": f.path}
        size = chars_div4(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
        if fits:
            # A re-read, not the transcript item: the messages carry no item id.
            return True, size, (
                Message("user", _reminder(FILE_CALL + _js_json({"file_path": f.path}))),
                Message("user", _reminder(self._file_result(f.content or ""))),
            )
        return False, size, (Message("user", _reminder(FILE_REFERENCE.format(path=f.path))),)

    def _fits(self, content: str) -> bool:
        """§4.2 the per-file limit (2.0.57 `Y22`, `maxTokens` 5,000): a file whose chars/4 estimate is at most a
        quarter of it fits; a larger one is counted (the API's `countTokens`; here the provider's count of its text)."""
        limit = self.options.restore_file_tokens
        return chars_div4(content) <= limit // ESTIMATE_SHARE or self.ctx.count_tokens([Message("user", content)]) <= limit

    def _read_content(self, result: str) -> str | None:
        """§4.2 what the read cache keeps of a whole-file Read: BASE the file's text (`plain_text` of its numbered
        lines), which a Write gives as it is and an Edit changes, and a re-read shows as the Read tool does, with the
        reminder the session's Read results end with (the last one seen; none before any)."""
        reminder = TRAILING_REMINDER.search(result)
        if reminder is not None:
            self._read_reminder = reminder.group(0)
        return plain_text(result)

    def _file_result(self, content: str) -> str:
        """§4.2 BASE (`KSA`): the Read result as its JSON string: the file's lines numbered, then the tool's reminder
        (2.0.57 `ml` + `J45`), as a whole-file Read returns them."""
        return FILE_RESULT + _js_json(number_lines(content) + self._read_reminder)


def number_lines(text: str) -> str:
    """2.0.57 `ml`: each line (split at `\r?\n`) after its number, right-aligned in six columns, and "→"."""
    if not text:
        return ""
    return "\n".join(f"{n:>6}→{line}" for n, line in enumerate(re.split(r"\r?\n", text), start=1))


def plain_text(result: str) -> str | None:
    """A file's text from a whole-file Read result (`number_lines` then the tool's reminder, `TRAILING_REMINDER`):
    None when the result is not that (an empty file's notice, an error, lines not numbered 1, 2, 3, …)."""
    body = TRAILING_REMINDER.sub("", result, count=1)
    lines = []
    for n, line in enumerate(body.split("\n"), start=1):
        found = NUMBERED_LINE.fullmatch(line)
        if found is None or int(found.group(1)) != n:
            return None
        lines.append(found.group(2))
    return "\n".join(lines)


def _edited(content: str | None, raw: bool, tool: str, args: dict[str, Any]) -> str | None:
    """What a re-read shows after an Edit or MultiEdit (§4.2: the restore reads the file from disk, so after the
    edit): each `old_string` replaced by its `new_string` (every occurrence with `replace_all`). None where that
    is not known: no content, a NotebookEdit, an edit that does not apply (its text absent, or found twice
    without `replace_all`), or one that adds or removes lines of a Read result kept as recorded (2.1's: not `raw`),
    whose line numbers would move."""
    edits = [args] if tool == "Edit" else args.get("edits") if tool == "MultiEdit" else None
    if content is None or not isinstance(edits, list):
        return None
    for edit in edits:
        old, new = (edit.get("old_string"), edit.get("new_string")) if isinstance(edit, dict) else (None, None)
        if not isinstance(old, str) or not isinstance(new, str) or not old or (not raw and ("\n" in old or "\n" in new)):
            return None
        found = content.count(old)
        if found == 0 or (found > 1 and edit.get("replace_all") is not True):
            return None
        content = content.replace(old, new) if edit.get("replace_all") is True else content.replace(old, new, 1)
    return content


def _reminder(text: str) -> str:
    return f"<system-reminder>\n{text}\n</system-reminder>"


def _js_json(value: Any) -> str:
    """`JSON.stringify(value)`: no spaces after the separators, characters beyond ASCII as they are."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _images_as_text(message: Message) -> Message:
    """`message` with each image attachment turned into a text block "[image]" (2.1.112 `Ar1`; the transcripts of
    Claude Code carry no other attachment kind); the same message when it has none."""
    if not message.attachments:  # most messages: no look at each (a summary request turns every message of the context)
        return message
    images = sum(1 for a in message.attachments if a.is_image)
    if not images:
        return message
    text = "\n".join([message.content] * bool(message.content) + ["[image]"] * images)
    others = tuple(a for a in message.attachments if not a.is_image)
    return replace(message, content=text, attachments=others)


def _newest_first(file: _File) -> tuple[int, int]:
    """§4.2 the restore's order, "newest timestamp first" (2.0.57 `FV5`, 2.1.112 `Nx8`): the read cache's timestamp
    is the file's modification time (`Math.ceil(statSync(path).mtimeMs)` in 2.0.57, `Math.floor` in 2.1.112, stored
    by Read, Edit and Write alike), so the files the session wrote or edited come first, the last written first.
    A file it only read keeps the modification time it had before the session, which no transcript records: those
    come after, the last read first (a stand-in for their order on disk)."""
    return -file.modified, -file.order


def _js_arguments(arguments: str) -> str:
    """A tool call's recorded arguments as `JSON.stringify` writes their value (`_js_json`); text that is not JSON as it is."""
    try:
        return _js_json(json.loads(arguments or "{}"))
    except json.JSONDecodeError:
        return arguments


def stored_todos(todos: list[Any]) -> list[Any]:
    """The list the TodoWrite tool stores (2.0.57 `call`): empty when every item is completed, else the
    items as its schema parsed them (`content`, `status`, `activeForm`, in that order, nothing else)."""
    if all(isinstance(t, dict) and t.get("status") == "completed" for t in todos):
        return []
    return [{k: t[k] for k in ("content", "status", "activeForm") if k in t} if isinstance(t, dict) else t for t in todos]


def _arguments(item: Item) -> dict[str, Any]:
    try:
        value = json.loads(item.arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class ClaudeCode21(ClaudeCode):
    name = "claude-code-2.1"
    description = "Claude Code 2.1.112: reserve ≤ 20,000, usage + chars/4 tail, breakers, prompt-too-long retries, new wrapper"
    spec = "docs/specs/claude-code.md §8"
    Options = ClaudeCode21Options
    later = True
    plain_files = False

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        # §8.3 the breakers' state (upstream `autoCompactTracking`), started anew by every user prompt; `_thrashing`:
        # the rapid-refill breaker tripped and ended the prompt's query
        self._failures = 0
        self._refills = 0
        self._turns_since: int | None = None
        self._thrashing = False
        #: `_estimates` of the history list `_sums_items`; the prefix list whose chars/4 sum was taken last
        self._sums_items: list[Item] | None = None
        self._sums: list[int] = [0]
        self._prefix_tokens: tuple[list[Message] | None, int] = (None, 0)
        super().__init__(ctx, options)

    @classmethod
    def keeps_thinking(cls, profile: ModelProfile) -> bool:
        """§13 (2.1.112 `C85`): a request with thinking on asks to keep every turn's thinking (`clear_thinking_20251015`
        with `keep: "all"`) whenever it carries the context-management beta. That beta is added only on Anthropic's own
        API and its kin (`$Q`: first party, Foundry, anthropicAws, mantle), for any model without "claude-3-" in its
        name on Anthropic's API and any model on Foundry (`iO_`); never on Bedrock or Vertex AI. BASE sends the edit only
        behind a remote flag that is off by default (§6)."""
        if profile.provider == FOUNDRY_API:
            return True
        return profile.provider == ANTHROPIC_API and "claude-3-" not in profile.model.lower()

    def _later_max_output(self, model: str) -> int:
        return later_max_output(model, self.options.max_output_tokens_env)

    def _reserve(self, model: str) -> int:
        """§8.1 (`Yn`): `min(lc(model), 20,000)`."""
        return min(self._later_max_output(model), self.options.reserve_cap)

    def _max_tokens(self, model: str) -> int:
        """The `max_tokens` of a turn request: 2.1.112 sends `Z97(model)`, which is `lc(model)` (the 20,000
        cap is only the threshold's reserve; upstream wins where §8.1 does not say)."""
        return self._later_max_output(model)

    def _blocking_limit(self) -> int | None:
        """§8.1 (2.1.112 `UM6`, `e_7=3000`): `E − 3,000`, E the effective window of the auto-compact window (`Yn` of
        `Jn()`, the window the threshold starts from: `Wac − R`), or CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE where set.
        The query loop applies it whether auto-compact is on or off, to a request the check did not compact."""
        return self.options.blocking_limit_override or self._compact_window() - self.reserve - self.options.blocking_buffer

    def _compact_window(self) -> int:
        configured = self.options.auto_compact_window
        if configured is None or configured <= 0:
            return self.window
        return min(self.window, max(100_000, min(configured, 1_000_000)))

    def _summary_max_output(self) -> int:
        """§8.4 `min(20,000, lc(model))`."""
        return min(self.options.summary_max_output, self.max_tokens)

    # §8.2: the usage plus an estimate of everything after the newest response's first line
    def _estimate(self, item: Item) -> int:
        if item.kind == "tool_call":
            # `round(len(name + JSON.stringify(input)) / 4)`: the input as JavaScript writes it, without spaces
            return chars_div4((item.tool_name or "") + _js_arguments(item.arguments or ""))
        return chars_div4(item.text) + self.options.image_tokens * sum(1 for a in item.attachments if a.is_image)

    def count(self) -> int:
        start = self.last_response_at if self.last_response_at is not None else 0
        sums = self._estimates()
        extra = sums[-1] - sums[start]
        if self.last_response_at is None:
            prefix, tokens = self._prefix_tokens
            if prefix is not self.prefix:
                self._prefix_tokens = (self.prefix, tokens := sum(chars_div4(m.content) for m in self.prefix))
            extra += tokens
        return self.last_usage + extra

    def _estimates(self) -> list[int]:
        """Running sums of `_estimate` over the history (element n: the first n items), extended by the
        items appended since the last call (started over when the history was replaced)."""
        items = self.history.items
        if items is not self._sums_items:
            self._sums_items, self._sums = items, [0]
        sums = self._sums
        for n in range(len(sums) - 1, len(items)):
            sums.append(sums[-1] + self._estimate(items[n]))
        return sums

    # §8.3 the breakers (2.1.112 `QkK` and the query loop `vXY`)
    def on_user_turn(self, item: Item) -> None:
        """A user prompt starts a new query (2.1.112 `vXY`), whose tracking starts empty (`autoCompactTracking:
        void 0`): the failure count, the refill count and the turns since the last compaction start over.
        Upstream wins over §8.3's "no more auto-compaction in the session": the state lives in the query."""
        self._failures, self._refills, self._turns_since, self._thrashing = 0, 0, None, False
        super().on_user_turn(item)

    def _on_request(self) -> None:
        # A "turn" of the rapid-refill breaker is one pass of the query loop (one API request): upstream counts
        # it after the tools of the request that followed the compaction ran, before the next check. A query the
        # breaker ended runs no more passes: its count stays.
        if self._turns_since is not None and not self._thrashing:
            self._turns_since += 1

    def _auto_compact(self, meta: dict[str, Any]) -> bool | None:
        """`QkK` (cc@2.1.112 cli.js L4996): nothing after 3 consecutive failures in this query; the refill count is
        taken before compacting (one more when the previous compaction of this query is < 3 turns old, else 0), and
        at 3 nothing is compacted: the query loop returns before calling the model (`{reason: "rapid_refill_breaker"}`,
        L4538) with the "Autocompact is thrashing" error, so the request is refused (None, `meta["autocompact_thrashing"]`
        the refill count). The recording goes on in that prompt; upstream's query has ended, so its state stays as
        it was (`_on_request` counts no more turns), and each later request of the prompt whose count is still at or
        over T trips the same check again and is refused too. The next user prompt starts a new query with no
        tracking (`autoCompactTracking: void 0`): its first check at or over T compacts. True when it compacted."""
        o = self.options
        if self._failures >= o.max_consecutive_failures:
            return False
        refills = self._refills + 1 if self._turns_since is not None and self._turns_since < o.refill_turns else 0
        if refills >= o.max_rapid_refills:
            self._thrashing = True
            meta["autocompact_thrashing"] = refills
            return None
        if self._compact("auto"):
            self._failures, self._refills, self._turns_since = 0, refills, 0
            return True
        self._failures += 1
        return False

    def _summary_text(self, before: Sequence[Message], body: Sequence[Message], instructions: str | None) -> str | None:
        """§8.3, §8.4: the prompt-too-long retry loop (`vI6`, cc@2.1.112 cli.js L4991) around one summary call each
        time (`ALK`, L4994). With `compact_cache_prefix` on, a call is first a fork of the request the turn would send
        (`_forked_summary`); when the fork gives no summary, the summariser's own request follows (the BASE-style
        call). A prompt-too-long answer of that one (its request did not fit, or its text says so) drops the oldest
        API rounds and tries again, up to `ptl_retries` times, the fork first again on the shortened messages.
        Any other answer without text, or an API error, fails the compaction."""
        system = tuple(before[: len(before) - len(body)])
        current: Sequence[Message] = body
        for attempt in range(self.options.ptl_retries + 1):
            if self.options.compact_cache_prefix:
                text = self._forked_summary(before if current is body else (*system, *current), instructions)
                if text is not None:
                    return text
            try:
                result = self._summarize(self.summary_request(current, instructions))
            except SummaryOverflow as overflow:
                if MAX_TOKENS_EXCEEDED.search(overflow.error.message):
                    return None  # not prompt-too-long: `max_tokens` that cannot be lowered enough, an API error (§13)
                too_long = overflow.error.message
            else:
                text = result.text.strip()
                if not text or text.startswith("API Error"):
                    return None
                if not text.startswith(PROMPT_TOO_LONG):
                    return text
                too_long = text
            if attempt == self.options.ptl_retries:
                return None
            trimmed = self._drop_oldest_rounds(list(current), too_long)
            if trimmed is None:
                return None
            current = trimmed
        return None

    def summary_request(self, messages: Sequence[Message], instructions: str | None) -> Request:
        """§8.4 the summariser's own request (`ALK`'s standard call) sends each image as the text "[image]" (`Ar1`,
        cc@2.1.112 cli.js L4989); the fork sends them as the turn does. It also turns thinking off (`thinkingConfig:
        {type: "disabled"}`, off 9632872), so it asks to keep no thinking (§13): on a model that drops earlier turns'
        thinking, all of it goes (it all comes before the request's last user message, the compaction prompt). Its
        messages are left without it: the same count, and its own system prompt shares no cached prefix with a turn."""
        kept = [_images_as_text(m) for m in messages]
        if strips_earlier_thinking(self.ctx.profile):
            kept = [m for m in kept if m.role != "reasoning"]
        return super().summary_request(kept, instructions)

    def _forked_summary(self, context: Sequence[Message], instructions: str | None) -> str | None:
        """§8.4 the fork (`tengu_compact_cache_prefix`): the turn's system prompt, tools and messages (`context`),
        then the compaction prompt, at most `min(20,000, lc(model))` output tokens, `skipCacheWrite`: it reads the
        main conversation's cached prefix and writes nothing past the turn's messages. None when its answer is not a summary
        (no text, an API error, or `PROMPT_TOO_LONG`, as when its request does not fit)."""
        prompt = self._summary_prompts(instructions)[1]
        messages = context.followed_by(prompt) if isinstance(context, LogView) else (*context, prompt)
        return self._summary_of(Request(
            messages, kind="summary", max_output_tokens=self._summary_max_output(), meta={"fork": "compact"}, skip_cache_write=True,
        ))

    def _drop_oldest_rounds(self, body: list[Message], too_long: str) -> list[Message] | None:
        """§8.3 `KLK`: a leading retry marker (the previous retry's) is taken off first, then the rest is cut
        into API rounds; the oldest rounds go whose chars/4 estimates (`qT`) reach the excess the error
        reports ("N tokens > M"), else the oldest 20% (at least one); one round always stays. The marker goes
        back in front when what is left starts with an assistant turn."""
        if body and body[0].role == "user" and body[0].content == PTL_RETRY_MARKER:
            body = body[1:]
        groups = _rounds(body, self._response_of)
        if len(groups) < 2:
            return None
        reported = TOO_LONG.search(too_long)
        excess = int(reported.group(1)) - int(reported.group(2)) if reported else 0
        if excess > 0:
            drop = freed = 0
            for group in groups:
                freed += sum(self._message_estimate(m) for m in group)
                drop += 1
                if freed >= excess:
                    break
        else:
            drop = max(1, int(len(groups) * self.options.ptl_drop_fraction))
        drop = min(drop, len(groups) - 1)
        rest = [m for g in groups[drop:] for m in g]
        if rest and rest[0].role in ("assistant", "reasoning"):
            rest = [Message("user", PTL_RETRY_MARKER), *rest]
        return rest

    def _message_estimate(self, message: Message) -> int:
        """§8.2 `qT` of one wire message: its text, each tool call's name and input (as JavaScript writes it, as
        `_estimate` reads it), 2,000 per image."""
        calls = sum(chars_div4(c.name + _js_arguments(c.arguments)) for c in message.tool_calls)
        images = self.options.image_tokens * sum(1 for a in message.attachments if a.is_image)
        return chars_div4(message.content) + calls + images

    def wrap_summary(self, text: str, *, auto: bool) -> str:
        """§8.5 `b18`: the prefix and the summary without its analysis, a blank line apart; then, after a
        blank line, the paragraph naming the session's transcript (always: `bY()` always gives a path); for
        auto only the continuation paragraph after a single line break (upstream writes "\n" there)."""
        content = f"{SUMMARY_PREFIX_LATER}\n\n{format_summary(text, keep_analysis=False)}"
        content += "\n\n" + TRANSCRIPT_NOTE.format(path=self.transcript_path())
        return f"{content}\n{CONTINUE_LATER}" if auto else content

    def transcript_path(self) -> str:
        """§8.5 the path `bY()` gives: `<config>/projects/<AP(original cwd)>/<session id>.jsonl`, for the
        replayed session (its recorded id; an unknown working directory is written as "/"). The file system
        path of the replayed file is not used: it is where the corpus is kept, not where the session was."""
        if self.options.transcript_path:
            return self.options.transcript_path
        config = self.options.config_dir.rstrip("/") or "/"
        return f"{config}/projects/{project_dir_name(self.cwd or '/')}/{self.session_id}.jsonl"

    def _todo_attachment(self) -> Message | None:
        """§8.5: 2.1.112's compaction (`vI6`) adds no todo list."""
        return None

    def _file_result(self, content: str) -> str:
        """2.1.112 (`h98`): a string result as it is, after "Result of calling the Read tool:" and a line break."""
        return FILE_RESULT_LATER + content

    def _read_content(self, result: str) -> str | None:
        """2.1: a Read result as recorded (the re-read format of 2.1.112 is not traced)."""
        return result

    def _fits(self, content: str) -> bool:
        """2.1: the per-file limit on the chars/4 estimate of what is restored (2.1.112's `Y22` is not traced)."""
        return chars_div4(content) <= self.options.restore_file_tokens


def _rounds(messages: Sequence[Message], response_of: Mapping[str, int]) -> list[list[Message]]:
    """API-round groups (2.1.112 `AR6`, cc@2.1.112 cli.js L2271; §8.3 names them without saying where one
    ends, upstream wins): a new group starts at each assistant message
    (a thinking block's `reasoning` message included: upstream it is a block of the assistant message) whose
    response differs from the last assistant's, and holds the results and user text after it; the messages
    before the first assistant are the first group. So two responses in a row are two rounds, and a
    response's thinking block and its text are one; an assistant message of no known response is a
    response of its own."""
    groups: list[list[Message]] = []
    current: list[Message] = []
    last: object = None
    for message in messages:
        assistant = message.role in ("assistant", "reasoning")
        if assistant:
            response = response_of.get(message.item_ids[0]) if message.item_ids else None
            key: object = response if response is not None else object()
            if key != last and current:
                groups.append(current)
                current = []
            last = key
        current.append(message)
    if current:
        groups.append(current)
    return groups
