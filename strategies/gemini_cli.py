"""Gemini CLI's chat compression and tool-output masking as the `gemini-cli` strategy
(docs/specs/gemini-cli.md, upstream `google-gemini/gemini-cli@5411f113`).

- §1 the history as Gemini `Content`s: user text, model text + `functionCall` parts, and user
  contents of `functionResponse` parts (results of one step together), consecutive contents of one role
  merged into one (`coalesceConsecutiveRoles`, `geminiChat.ts@5411f113 L1722-1749`, since `3ff5ba20fc`):
  the split, the truncation and masking read `getHistory(true)` / `getHistory()` (`chatCompressionService.ts
  L249`, `client.ts L699`), which coalesce for the default model and every non-Gemini one (`geminiChat.ts
  L1113-1128`), and the request sent is coalesced (L818-824). So a user text sent with tool results (a
  steering hint, which upstream puts in the function-response message, `useGeminiStream.ts@5411f113
  L2134-2142`) or a synthetic user context item is no clean user content; a new user message after a tool
  turn that got no answer (a response that brought nothing, or a turn the user interrupted, whose
  responses upstream adds to the history unsent) follows the model placeholder
  `closeUnansweredToolResponseTurn` inserts when it sends (`geminiChat.ts L450-458, L768-784`, since
  `56f9688b30`), so it stays one. The spec's §1 and §4 miss both;
- §2 before every request, before the pending input (new user text or tool results) joins the
  history: compress when `lastPromptTokenCount ≥ 0.5 × tokenLimit`; the count is the previous
  response's prompt tokens, or the local estimate after the history was replaced; §2.3 the failure
  latch: after an automatic inflated result only truncation runs, until a compression succeeds;
- §3 reverse-budget truncation of function responses (50,000 estimated tokens, newest first, head
  20 % / tail 80 % of `min(40,000, 4 × remaining)` characters, with the header and omission lines); the
  remaining window is `tokenLimit − uiTelemetryService.getLastPromptTokenCount()` (`config.ts@5411f113
  L3794-3801`), a copy of the chat's count taken on each streamed event of a request (`client.ts L838`) and
  when a compression or §7 truncation replaced the history (L1237, L1245): the count the last request was
  sent with, one response behind the chat's (`ui_prompt_tokens`; the spec's §3 takes it for the same value);
- §4 the split on the truncated contents' compact-JSON lengths at fraction 0.7, only at user
  contents without function responses, "compress everything" after a final model text;
- §5 two summariser calls (the `<state_snapshot>` request with the anchor, then the verification
  pass), the original slice when its estimate fits the window, else the truncated one; a call that fails
  (`SummaryOverflow`) is thrown out of `tryCompressChat` and `processTurn` (`client.ts@5411f113 L689, L1206`;
  `baseLlmClient.ts L395-421`, a 400 is not retried, §5.1): the turn fails before masking and before its
  request is sent (`StrategyContext.refuse_request`), and no latch is set;
- §6 the new history `[summary, "Got it. Thanks for the additional context!", ...truncated tail]`
  and the inflation check (`new estimate > old count` fails);
- §7 the truncation-only path of the latch;
- §8 tool-output masking after every check (newest content protected, 50,000 protected tokens,
  30,000 minimum batch, exempt tools, `<tool_output_masked>` snippet, kept only if it saves tokens);
- §9 truncation of shell outputs and of MCP tools' one-text-part results when the tool runs (at the §3 threshold,
  from the same lagging count); §10.2 the estimator; §10.4 the pre-check (`client.ts@5411f113 L696-715`): after the
  check, `remaining = tokenLimit − lastPromptTokenCount` before masking, and a request whose message (the pending
  user contents) is estimated above it (`calculateRequestTokenCount`, `tokenCalculation.ts L154-186`: the
  provider's count when a part is a file) is not sent (`ContextWindowWillOverflow`, refused by the agent);
- a function response is named by its call (`functionResponse.name`, `tool-executor.ts@5411f113 L213-253`): a
  transcript's result without a tool name (Claude Code's, Codex's, mini-swe-agent's) takes its call's, by call id;
- a failed tool's response is `{error: message}` (`ToolExecutor.createErrorResult`, `tool-executor.ts@5411f113
  L148-166, L451-476`; the transcript's error flag stands for `toolResult.error`): no nested parts and no §9
  truncation; §3 reads it as `JSON.stringify(response, null, 2)` and, once past the budget, rewrites it as
  `{output: ...}` even when short (`chatCompressionService.ts@5411f113 L155-208`); §8's preview is that JSON, or
  empty for the shell tool (no `output`, `toolOutputMaskingService.ts@5411f113 L292-309`). Not in the spec;
  upstream followed;
- the saved outputs' paths, which the truncated and masked texts name (`saveTruncatedToolOutput`,
  `packages/core/src/utils/fileUtils.ts@5411f113 L731-755`; `ToolOutputMaskingService.mask`,
  `packages/core/src/context/toolOutputMaskingService.ts@5411f113 L163-188`): all in
  `<home>/.gemini/tmp/<project slug>/tool-outputs` (`gemini_dir`, `project_slug`); §3 (`truncateHistoryToBudget`,
  `chatCompressionService.ts@5411f113 L189-194`) names a file `<tool>_<n>.txt` in that folder, `n` from the
  session's `compressionTruncationCounter`, which only §3 advances (`config.ts@5411f113 L3812-3814`); §9
  (`ToolExecutor.truncateOutputIfNeeded`, `tool-executor.ts@5411f113 L222-228`) names it by the call id, in the
  `session-<session id>` folder; §8 `<tool>_<call id>_<random>.txt` in that folder (`masked_output_path`).

A tool result's attachments are the `functionResponse`'s nested parts (as upstream builds them for
gemini-3 models): counted by the estimate (3,000 per image), kept by §3 and §8, which replace only the
response; audio and video are stripped with upstream's note, and a result of attachments alone says how
many (`tool_output`). A user message's attachments are `inlineData` parts of its content, sent with it.
Every length upstream compares or cuts by is JavaScript's `length` and `slice`, in UTF-16 code units
(`js_slice`), and §3's threshold is not clamped (negative once the last prompt is over the window). Where
the spec and upstream differ or the spec is silent, upstream is followed (noted where it matters).

The window defaults to the profile's (upstream's `tokenLimit` is 1,048,576 for every Gemini model);
transcripts hold no environment-context message, so none is re-inserted after a compression; the
system prompt items stay in front. Reasoning items are not replayed (Gemini keeps thought text out
of the curated history).

Each part and content is measured once, and the history is indexed as it grows (running sums of the
estimate units, compact-JSON lengths and maskable tokens, the clean user contents, and per threshold
the running sums of what §3's cut changes, `CutChanges`): a §3 plan costs the responses it walks
within the budget and builds no text (the older ones it cuts are differences of sums, their files'
numbers counted by digit length), the §4 split is a bisection over the clean user contents, the §8
check is a binary search, and of a truncation only what is sent or kept is built.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import json
import math
import posixpath
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any, NamedTuple

from compaction_bench.log_view import LogView
from compaction_bench.request import Message, Request, ToolCall
from compaction_bench.strategy import Range, Strategy, StrategyContext, SummaryOverflow
from compaction_bench.transcript import Attachment, Item, Usage

#: §10.2 fixed estimates of an image and a PDF (upstream `tokenCalculation.ts` L21, L24).
IMAGE_TOKENS = 3_000
PDF_TOKENS = 25_800
#: §6 the model's acknowledgement after the summary (protocol string).
ACK = "Got it. Thanks for the additional context!"
#: `INTERRUPTED_RESPONSE_PLACEHOLDER`, the model content `closeUnansweredToolResponseTurn` puts between function
#: responses that got no answer and a new user message (protocol string, `geminiChat.ts@5411f113 L116-117, L768-784`).
INTERRUPTED_RESPONSE = "[The previous response was interrupted before it completed.]"
#: The markers of a turn the user interrupted: the synthetic scenarios' `aborted`, Codex's `turn_aborted`.
INTERRUPT_EVENTS = frozenset({"aborted", "turn_aborted"})
MASKED_TAG = "<tool_output_masked"
SNAPSHOT_TAG = "<state_snapshot>"
#: `TOOL_OUTPUTS_DIR`, the folder of saved outputs in the project's temp folder (`fileUtils.ts@5411f113 L729`).
TOOL_OUTPUTS_DIR = "tool-outputs"
#: How many §3 thresholds' cut changes the index keeps (the threshold follows the last prompt's count).
CUT_THRESHOLDS_KEPT = 8


def _base36(value: int, width: int) -> str:
    """`value` in base 36 (JavaScript's `toString(36)` digits), `width` digits with leading zeros."""
    out = ""
    for _ in range(width):
        value, digit = divmod(value, 36)
        out = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + out
    return out


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _compact(value: Any) -> str:
    """`JSON.stringify(value)`: compact separators, non-ASCII unescaped."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def js_slice(text: str, start: int, end: int | None = None) -> str:
    """JavaScript's `text.slice(start, end)`: the offsets are UTF-16 code units, a negative one counts from
    the end, both are clamped to the text (as Python's slice does: `slice(-0)` is the whole text), and an
    end at or before the start gives "". Where an offset falls inside a surrogate pair (a character outside
    the BMP, an emoji) JavaScript keeps the lone half; a text here must stay encodable as UTF-8, so the half
    becomes U+FFFD, as the importers do with lone surrogates (`transcript.scrub_surrogates`). It counts as
    one non-ASCII unit like the half (the §10.2 estimate is the same); only §4's JSON lengths differ, by 5
    (`JSON.stringify` escapes a lone surrogate as `\\udXXX`, 6 characters; U+FFFD is 1)."""
    if text.isascii() or max(text) <= "\uffff":
        return text[start:end]  # one code unit per character
    data = text.encode("utf-16-le", "surrogatepass")
    first, stop, _ = slice(start, end).indices(len(data) // 2)
    piece = data[2 * first:2 * stop].decode("utf-16-le", "surrogatepass") if stop > first else ""
    return _LONE_SURROGATE.sub("\ufffd", piece)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class TextMeasure(NamedTuple):
    """What §3, §4 and §10.2 read of a text, measured once: its UTF-16 length (JavaScript's `length`,
    every length upstream compares or cuts by), its ASCII characters and the UTF-16 length of its
    JSON-escaped form (without quotes).

    Each is a sum over the text's characters, so the measure of a concatenation is the sum of its
    pieces' (`+`)."""

    units: int
    ascii: int
    escaped: int

    @classmethod
    def of(cls, text: str) -> TextMeasure:
        escaped = encode_basestring(text)  # what `json.dumps(text, ensure_ascii=False)` returns
        if text.isascii():
            return cls(len(text), len(text), len(escaped) - 2)
        return cls(_utf16(text), len(text.encode("ascii", "ignore")), _utf16(escaped) - 2)

    def __add__(self, other: object) -> TextMeasure:
        if not isinstance(other, TextMeasure):
            return NotImplemented
        return TextMeasure(self.units + other.units, self.ascii + other.ascii, self.escaped + other.escaped)

    @property
    def text_units(self) -> float:
        """§10.2 text part: len/4 above 100,000, else 0.25 per ASCII and 1.5 per other UTF-16 unit. `len` is
        JavaScript's `text.length` both times, UTF-16 units (upstream `tokenCalculation.ts` L41)."""
        if self.units > 100_000:
            return self.units / 4
        return 0.25 * self.ascii + 1.5 * (self.units - self.ascii)


class PartMeasure(NamedTuple):
    """A part's measures (`Part.measure`): its compact-JSON length (§4), its §10.2 estimate units,
    its text's measure, and whether its text holds the masking tag (§8) or a state snapshot (§5)."""

    json_length: int
    units: float
    text: TextMeasure
    masked: bool
    snapshot: bool


class PartCut(NamedTuple):
    """A response part's §3 cut at a threshold, its file in a folder (`Part._cut_at`): the body
    (`truncation_body`), the measure of the cut text without the file's number, how much that changes the
    text's escaped length, the header before and after the file's number, and the tool's file name part when
    it is all digits ("" else): a number that starts with it names the file alone (`saved_output_name`)."""

    threshold: int
    directory: str
    body: str
    numberless: TextMeasure
    change: int
    before: str
    after: str
    digit_tool: str


# ----------------------------------------------------------------- contents (§1)
@dataclass
class Part:
    """One part of a Content: text, a function call, a function response, or inline data.

    A part is never changed once built (a mask or a truncation builds a new one), so its measures
    are computed once, on first use (`measure`)."""

    kind: str  # text | call | response | data
    text: str = ""
    name: str = ""
    call_id: str = ""
    args: Any = None
    item_id: str | None = None
    mime: str = ""
    is_error: bool = False
    attachments: tuple[Attachment, ...] = ()
    #: a failed tool's response, `{error: message}` (`error_response`); §3 and §8 rewrite it as `{output: ...}`
    error_response: bool = False
    _measure: PartMeasure | None = field(default=None, init=False, repr=False, compare=False)
    #: §3's measure of the response's string (`source_measure`), for an error response
    _source: TextMeasure | None = field(default=None, init=False, repr=False, compare=False)
    #: the text's cut at the last threshold and folder asked (`_cut_at`)
    _cut: PartCut | None = field(default=None, init=False, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The part as upstream holds it. A response's attachments are nested `inlineData` parts of the
        `functionResponse`, as `convertToFunctionResponse` builds them for the default model (gemini-3-*,
        which takes multimodal function responses: upstream `generateContentResponseUtilities.ts` L151-160;
        older models get them as sibling parts, which §3 and §8 keep too). The transcript does not hold the
        base64 `data`, so the JSON leaves it out."""
        if self.kind == "text":
            return {"text": self.text}
        if self.kind == "call":
            return {"functionCall": {"name": self.name, "args": self.args, "id": self.call_id}}
        if self.kind == "response":
            response: dict[str, Any] = {"name": self.name, "response": {self.response_key: self.text}, "id": self.call_id}
            if self.attachments:
                response["parts"] = [_inline_data(a.mime) for a in self.attachments]
            return {"functionResponse": response}
        return _inline_data(self.mime)

    @property
    def response_key(self) -> str:
        """The key of a function response's one field: `error` for a failed tool, else `output`."""
        return "error" if self.error_response else "output"

    @property
    def key_change(self) -> int:
        """How much rewriting the response as `{output: ...}` lengthens its JSON by the key alone."""
        return len("output") - len("error") if self.error_response else 0

    def source_text(self) -> str:
        """§3's `contentStr` (`chatCompressionService.ts@5411f113 L155-179`): `response.output` when it is a
        string, else (an error response) `JSON.stringify(response, null, 2)`."""
        if self.error_response:
            return json.dumps({"error": self.text}, indent=2, ensure_ascii=False)
        return self.text

    def source_measure(self) -> TextMeasure:
        """The measure of `source_text`."""
        if not self.error_response:
            return self.measure().text
        if self._source is None:
            self._source = TextMeasure.of(self.source_text())
        return self._source

    def measure(self) -> PartMeasure:
        """The part's measures (a truncated part gets them from its source's, `truncated`)."""
        if self._measure is None:
            self._measure = self._compute(TextMeasure.of(self.text))
        return self._measure

    def _compute(self, text: TextMeasure) -> PartMeasure:
        if self.kind in ("text", "response"):
            # the text appears once in the JSON, escaped character by character
            json_length = _utf16(_compact(replace_text(self, "").to_json())) + text.escaped
        else:
            json_length = _utf16(_compact(self.to_json()))
        if self.kind == "text":
            units = text.text_units
        elif self.kind == "response":
            # name/4 + JSON.stringify({output: text})/4, and the nested parts' estimate, floored on its own
            # (a recursive estimateTokenCountSync, upstream `tokenCalculation.ts` L101-110)
            units = _utf16(self.name) / 4 + (_RESPONSE_JSON[self.response_key] + text.escaped) / 4
            if self.attachments:
                units += math.floor(sum(media_units(a.mime) for a in self.attachments))
        elif self.kind == "data":
            units = media_units(self.mime)
        else:
            units = json_length / 4
        return PartMeasure(json_length, units, text, MASKED_TAG in self.text, SNAPSHOT_TAG in self.text)

    def truncated_text(self, number: int, threshold: int, directory: str) -> TextMeasure | None:
        """The measure of `format_truncated_output(source_text, truncation_path(directory, name, number), threshold)`,
        None when the part stays as it is (a short output), without building it: the header's measure without
        the number is known per threshold, folder and tool, the number is ASCII digits (1 in every measure per
        digit), the body's measure is known per threshold (`_cut_at`). A short error response is rewritten as
        `{output: source_text}` (L202-208)."""
        source = self.source_measure()
        if source.units <= threshold:
            return source if self.error_response else None
        cut = self._cut_at(threshold, directory)
        if cut.digit_tool and str(number).startswith(cut.digit_tool):
            return TextMeasure.of(self.cut_text(number, threshold, directory))  # the file is named by the number alone
        digits = len(str(number))
        return cut.numberless + TextMeasure(digits, digits, digits)

    def cut_change(self, threshold: int, directory: str) -> tuple[int, str, bool] | None:
        """How §3's cut at `threshold` changes the response's escaped length (its text's and its key's),
        whatever the file's number: `(change, digit_tool, numbered)`; a numbered cut's number's digits add to
        `change` (`truncated_text(number, threshold, directory).escaped - measure().text.escaped + key_change`
        is `change + len(str(number))`), less `len(digit_tool) + 1` when the number starts with `digit_tool`
        (`PartCut.digit_tool`); a short error response's rewrite names no file; None when the part stays as
        it is (a short output: the rewritten response is the same, its nested parts kept)."""
        source = self.source_measure()
        if source.units <= threshold:
            return (source.escaped - self.measure().text.escaped + self.key_change, "", False) if self.error_response else None
        cut = self._cut_at(threshold, directory)
        return cut.change, cut.digit_tool, True

    def _cut_at(self, threshold: int, directory: str) -> PartCut:
        """The cut at `threshold`, its file in `directory`, of a text longer than the threshold (`_cut`)."""
        cut = self._cut
        if cut is None or cut.threshold != threshold or cut.directory != directory:
            body = truncation_body(self.source_text(), threshold)
            tool = file_tool_name(self.name)
            numberless = _numberless_header(threshold, directory, tool) + TextMeasure.of(body)
            safe = sanitize_filename_part(tool).lower()
            change = numberless.escaped - self.measure().text.escaped + self.key_change
            cut = self._cut = PartCut(threshold, directory, body, numberless, change,
                                      *_header_around_number(threshold, directory, tool), safe if safe.isdigit() else "")
        return cut

    def cut_text(self, number: int, threshold: int, directory: str) -> str:
        """`format_truncated_output(text, truncation_path(directory, name, number), threshold)` from its pieces:
        the header around the file's number (per threshold, folder and tool) and the body (per threshold)."""
        cut = self._cut
        if cut is None or cut.threshold != threshold or cut.directory != directory:
            if self.source_measure().units <= threshold:
                return self.source_text()
            cut = self._cut_at(threshold, directory)
        if cut.digit_tool and str(number).startswith(cut.digit_tool):
            return truncation_header(truncation_path(directory, self.name, number), threshold) + cut.body
        return f"{cut.before}{number}{cut.after}{cut.body}"

    def truncated(self, number: int, threshold: int, directory: str) -> Part:
        """A response part with `format_truncated_output(text, truncation_path(directory, name, number),
        threshold)` as its text (§3): the part itself when the text is short. The attachments stay: upstream
        rewrites only `response` and spreads the rest of the `functionResponse`, nested parts included
        (`chatCompressionService.ts` L202-208). Its measures follow from this part's and the pieces'
        (`truncated_text`)."""
        measure = self.measure()
        cut = self.truncated_text(number, threshold, directory)
        if cut is None:
            return self
        out = replace_text(self, self.cut_text(number, threshold, directory), output=True)
        # the text (and the key) appear once in the response's JSON and in JSON.stringify({output}) (§10.2)
        delta = cut.escaped - measure.text.escaped + self.key_change
        out._measure = PartMeasure(measure.json_length + delta, measure.units + delta / 4, cut, MASKED_TAG in out.text,
                                   SNAPSHOT_TAG in out.text)
        return out


#: `convertToFunctionResponse`'s tools whose audio and video go to the next turn (protocol strings below).
READ_FILE_TOOLS = ("read_file", "read_many_files")


def tool_output(tool: str, text: str, attachments: tuple[Attachment, ...]) -> tuple[str, tuple[Attachment, ...]]:
    """A tool result's `functionResponse` output and nested parts, as `convertToFunctionResponse` builds them
    (`generateContentResponseUtilities.ts@5411f113 L48-188`). A result without attachments was a string,
    kept as it is; one with attachments was a list of parts, its text (if not empty) the text parts:

    - audio and video are stripped (not sent, L93-129): a note naming their types goes before the text,
      for `read_file` / `read_many_files` the "read successfully" one (upstream then re-sends them in two
      synthetic turns, a model thought and a user content of the data, `geminiChat.ts` L518-558, which are
      not replayed), for any other tool the "[SYSTEM: … stripped …]" one;
    - the other attachments stay nested parts; with no text and no note the output says how many
      (L174-184: "Binary content provided (N item(s))."). Every attachment is taken for `inlineData`."""
    if not attachments:
        return text, attachments
    stripped = tuple(a for a in attachments if a.mime.startswith(("audio/", "video/")))
    kept = tuple(a for a in attachments if not a.mime.startswith(("audio/", "video/"))) if stripped else attachments
    if stripped:
        mimes = ", ".join(dict.fromkeys(a.mime for a in stripped))
        note = (f"Binary content ({mimes}) read successfully. Content will be injected for analysis in the next sequence."
                if tool in READ_FILE_TOOLS else f"[SYSTEM: Binary content ({mimes}) stripped from response due to protocol limitations.]")
        text = f"{note}\n{text}" if text else note
    elif not text:
        text = f"Binary content provided ({len(kept)} item(s))."
    return text, kept


def response_message(part: Part, text: str, attachments: tuple[Attachment, ...]) -> Message:
    """The wire message of a function response part with `text` and `attachments` (`GeminiCli.render`)."""
    # positional: role, content, tool_calls, tool_call_id, item_ids, attachments, name, is_error
    return Message("tool", text, (), part.call_id, (part.item_id,) if part.item_id else (), attachments, part.name, part.is_error)


def replace_text(part: Part, text: str, *, output: bool = False) -> Part:
    """A response or text part like `part` with another text (its attachments kept); `output`: as the
    response `{output: text}` (§3, §8), else with the same key."""
    return Part(part.kind, text=text, name=part.name, call_id=part.call_id, item_id=part.item_id, is_error=part.is_error,
                attachments=part.attachments, error_response=part.error_response and not output)


def _inline_data(mime: str) -> dict[str, Any]:
    return {"inlineData": {"mimeType": mime}}


def media_units(mime: str) -> float:
    """§10.2 a media part (upstream `tokenCalculation.ts` L62-77, L136-143): 3,000 for `image/*`, 25,800 for
    a type starting `application/pdf`, else `JSON.stringify(part).length / 4` as for any other part."""
    if mime.startswith("image/"):
        return IMAGE_TOKENS
    if mime.startswith("application/pdf"):
        return PDF_TOKENS
    return _utf16(_compact(_inline_data(mime))) / 4


#: `JSON.stringify({<key>: ""}).length` of a function response's object (`Part.response_key`)
_RESPONSE_JSON = {key: len(_compact({key: ""})) for key in ("output", "error")}


@dataclass
class Content:
    role: str  # user | model
    parts: list[Part] = field(default_factory=list)
    #: the rendered messages (`GeminiCli.render`) for the parts they were built from (kept alive here)
    _rendered: tuple[tuple[Part, ...], list[Message]] | None = field(default=None, init=False, repr=False, compare=False)
    #: (number of parts, compact-JSON length, estimate units) as measured: parts are only appended
    #: (while the content is pending) or replaced through `replace_part`, which drops the measures
    _measured: tuple[int, int, float] | None = field(default=None, init=False, repr=False, compare=False)

    def measure(self) -> tuple[int, float]:
        """The content's compact-JSON length (§4: its parts', the commas between them and the role's
        frame) and the sum of its parts' estimate units (§10.2), measured once for the parts it holds."""
        parts = self.parts
        hit = self._measured
        if hit is None or hit[0] != len(parts):
            json_length = _frame_length(self.role) + sum(p.measure().json_length for p in parts) + max(len(parts) - 1, 0)
            hit = self._measured = (len(parts), json_length, sum(p.measure().units for p in parts))
        return hit[1], hit[2]

    def replace_part(self, index: int, part: Part) -> None:
        self.parts[index] = part
        self._measured = None

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "parts": [p.to_json() for p in self.parts]}

    @property
    def has_response(self) -> bool:
        return any(p.kind == "response" for p in self.parts)

    @property
    def has_call(self) -> bool:
        return any(p.kind == "call" for p in self.parts)


def coalesced(first: Content, second: Content) -> Content:
    """Two consecutive contents of one role as one (`coalesceConsecutiveRoles`, `geminiChat.ts@5411f113 L1722-1749`)."""
    return Content(first.role, [*first.parts, *second.parts])


def compact_json_length(content: Content) -> int:
    """`JSON.stringify(content).length`: compact separators, non-ASCII unescaped, UTF-16 units (§4)."""
    return content.measure()[0]


@functools.cache
def _frame_length(role: str) -> int:
    return _utf16(_compact({"role": role, "parts": []}))


def estimate_parts(parts: Sequence[Part]) -> int:
    """`estimateTokenCountSync(parts)` (§10.2), floored once. Every part's units are a multiple of
    0.25 far below 2**50, so the float sum is exact in any order."""
    return math.floor(sum(p.measure().units for p in parts))


def estimate_contents(contents: Sequence[Content]) -> int:
    """`estimate_parts` of all the contents' parts (the sum is exact in any grouping)."""
    return math.floor(sum(c.measure()[1] for c in contents))


def find_split_point(contents: Sequence[Content], fraction: float) -> int:
    """§4 `findCompressSplitPoint`: the index of the oldest kept content."""
    clean = [i for i, c in enumerate(contents) if is_clean_user(c)]
    before = list(itertools.accumulate((compact_json_length(c) for c in contents), initial=0))
    return split_at(clean, before, fraction, compress_everything(contents))


def is_clean_user(content: Content) -> bool:
    """§4: a split may fall only at a user content without function responses."""
    return content.role == "user" and not content.has_response


def compress_everything(contents: Sequence[Content]) -> bool:
    """§4: after a final model text (no function call) everything may be compressed."""
    return bool(contents) and contents[-1].role == "model" and not contents[-1].has_call


def _unchanged(index: int) -> int:
    return 0


def split_at(clean: Sequence[int], before: Sequence[int], fraction: float, everything: bool,
             shift: Callable[[int], int] = _unchanged) -> int:
    """The walk of §4 `findCompressSplitPoint` over the clean user contents only (`clean`, ascending):
    `before[i]` is the compact-JSON length of the contents before content i (`before[-1]` of all),
    `shift(i)` how much a truncation not built yet changes it. Only a clean user content can end the
    walk, at the first whose length before it reaches the target; those lengths never decrease
    along the contents, so the first is found by bisection."""
    if fraction <= 0 or fraction >= 1:
        raise ValueError("fraction must be between 0 and 1")
    target = (before[-1] + shift(len(before) - 1)) * fraction
    first = bisect.bisect_left(clean, target, key=lambda i: before[i] + shift(i))
    if first < len(clean):
        return clean[first]
    return len(before) - 1 if everything else (clean[-1] if clean else 0)


def _head_tail(threshold: int) -> tuple[int, int]:
    """`headChars = Math.floor(maxChars * 0.2)` and `tailChars = maxChars - headChars` (negative for a
    negative threshold: -2 and -8 at -10)."""
    head = math.floor(0.2 * threshold)
    return head, threshold - head


def truncation_header(path: str, threshold: int) -> str:
    """The first line of `formatTruncatedToolOutput` (§3), with the newline after it."""
    head, tail = _head_tail(threshold)
    return f"Output too large. Showing first {head:,} and last {tail:,} characters. For full output see: {path}\n"


def truncation_body(text: str, threshold: int) -> str:
    """The rest of `formatTruncatedToolOutput` (§3, `fileUtils.ts@5411f113 L711-723`): head 20 %, omission
    marker, tail 80 %, with JavaScript's lengths and `slice` (`js_slice`). `contentStr.slice(-tailChars)`
    with no tail (a threshold of 0 or -1) is `slice(-0)`, the whole text; a negative threshold (a last prompt
    over the window, `getTruncateToolOutputThreshold` is not clamped) gives a negative head, which
    `slice(0, head)` counts from the end, and a negative tail, which `slice(-tail)` counts from the start; the
    omitted count is then larger than the text."""
    head, tail = _head_tail(threshold)
    omitted = _utf16(text) - head - tail
    return f"{js_slice(text, 0, head)}\n\n... [{omitted:,} characters omitted] ...\n\n{js_slice(text, -tail)}"


_UNSAFE_FILENAME = re.compile(r"[^a-zA-Z0-9_-]")


def sanitize_filename_part(part: str) -> str:
    """`sanitizeFilenamePart` (`fileUtils.ts@5411f113 L696-698`): `part.replace(/[^a-zA-Z0-9_-]/g, '_')`. The regular
    expression has no `u` flag, so it replaces each UTF-16 code unit: a character outside the BMP becomes two."""
    return _UNSAFE_FILENAME.sub(lambda m: "_" if m.group() <= "\uffff" else "__", part)


def saved_output_name(tool: str, output_id: int | str) -> str:
    """The file name `saveTruncatedToolOutput` (`fileUtils.ts@5411f113 L731-755`) gives a saved output::

        const safeToolName = sanitizeFilenamePart(toolName).toLowerCase();
        const safeId = sanitizeFilenamePart(id.toString()).toLowerCase();
        const fileName = safeId.startsWith(safeToolName) ? `${safeId}.txt` : `${safeToolName}_${safeId}.txt`;

    (a call id `<tool>-<time>-<random>` names the file alone). What is left is ASCII, so `lower` is JavaScript's
    `toLowerCase`."""
    safe_tool = sanitize_filename_part(tool).lower()
    safe_id = sanitize_filename_part(str(output_id)).lower()
    return f"{safe_id}.txt" if safe_id.startswith(safe_tool) else f"{safe_tool}_{safe_id}.txt"


def file_tool_name(name: str) -> str:
    """The tool name a saved output's file is named by: the function response's, `'unknown_tool'` for none
    (`part.functionResponse.name ?? 'unknown_tool'`, `chatCompressionService.ts@5411f113 L191`; `name ||
    'unknown_tool'`, `toolOutputMaskingService.ts@5411f113 L181`). A transcript's result without a tool name has ""."""
    return name or "unknown_tool"


def project_slug(cwd: str | None) -> str:
    """The project's short id, which names its temp folder: `ProjectRegistry.claimNewSlug` (`projectRegistry.ts@5411f113
    L304-320`) slugifies `path.basename` of the resolved project root (L95-101, L414-422): lower case, every
    UTF-16 unit outside a-z0-9 a "-", runs of "-" folded, a leading and a trailing one dropped, "project" when
    nothing is left. It is the first project of that name the registry sees (a later one gets "-1", "-2", …).
    Unknown (None): the slug of a root without a name, "project"."""
    base = posixpath.basename(posixpath.normpath(cwd)) if cwd else ""
    folded = re.sub("-+", "-", _NOT_SLUG.sub("-", base.lower()))
    return folded.removeprefix("-").removesuffix("-") or "project"


_NOT_SLUG = re.compile("[^a-z0-9]")


def truncation_path(directory: str, tool: str, number: int | str) -> str:
    """Where §3 saves the `number`-th truncated output (`saveTruncatedToolOutput(contentStr, name ?? 'unknown_tool',
    config.getNextCompressionTruncationId(), projectTempDir)`, `chatCompressionService.ts@5411f113 L189-194`): the
    project's `tool-outputs` folder (`directory`) itself, no session folder."""
    return f"{directory}/{saved_output_name(file_tool_name(tool), number)}"


@functools.lru_cache(maxsize=1024)
def _header_around_number(threshold: int, directory: str, tool: str) -> tuple[str, str]:
    """`truncation_header(truncation_path(directory, tool, number), threshold)` is `before + str(number) + after`
    (for a number the file is not named by alone, `saved_output_name`)."""
    path = f"{directory}/{sanitize_filename_part(file_tool_name(tool)).lower()}_\0.txt"
    before, _, after = truncation_header(path, threshold).rpartition("\0")
    return before, after


@functools.lru_cache(maxsize=1024)
def _numberless_header(threshold: int, directory: str, tool: str) -> TextMeasure:
    """The measure of `truncation_header` of a `tool` output at `threshold` without the file's number."""
    return TextMeasure.of("".join(_header_around_number(threshold, directory, tool)))


def format_truncated_output(text: str, path: str, threshold: int) -> str:
    """`formatTruncatedToolOutput` (§3): header, head 20 %, omission marker, tail 80 %; a text of at most
    `threshold` UTF-16 units (`contentStr.length`) stays as it is."""
    if _utf16(text) <= threshold:
        return text
    return truncation_header(path, threshold) + truncation_body(text, threshold)


class CutChanges:
    """`Part.cut_change(threshold, directory)` of a history's response parts, oldest first, with running sums
    of the changes without the files' numbers, of the cuts whose number's digits add to them, and of the
    cuts: §3's cut of every response older than the budget reached is a difference of sums (`delta`)."""

    def __init__(self, threshold: int, directory: str) -> None:
        self.threshold = threshold
        self.directory = directory
        self.changes: list[tuple[int, str, bool] | None] = []
        self.base = [0]
        self.digits = [0]
        self.cuts = [0]
        #: the cut responses whose tool's file name part is all digits, (index, that part): a number that starts
        #: with it names the file alone, `len(part) + 1` shorter (`saved_output_name`)
        self.digit_tools: list[tuple[int, str]] = []

    def extend(self, contents: Sequence[Content], responses: Sequence[tuple[int, int]], stop: int) -> CutChanges:
        """Measure the response parts `responses[:stop]` ((content index, part index)) not measured yet."""
        base, digits, cuts = self.base, self.digits, self.cuts
        for ci, pi in responses[len(self.changes):stop]:
            change = contents[ci].parts[pi].cut_change(self.threshold, self.directory)
            if change is not None and change[1]:
                self.digit_tools.append((len(self.changes), change[1]))
            self.changes.append(change)
            base.append(base[-1] + (change[0] if change else 0))
            digits.append(digits[-1] + (change is not None and change[2]))
            cuts.append(cuts[-1] + (change is not None))
        return self

    def delta(self, start: int, stop: int, top: int) -> int:
        """The change of the escaped lengths of responses `[start:stop]` cut, response j's output saved
        as file `top - j`: the changes without the numbers, and each digit length's count of cuts
        that take the number times that length."""
        total = self.base[stop] - self.base[start]
        digits, length, low = self.digits, 1, 1
        while low <= top - start:  # the numbers of `length` digits are low .. 10 * low - 1
            first, last = max(start, top - 10 * low + 1), min(stop, top - low + 1)
            if first < last:
                total += length * (digits[last] - digits[first])
            length, low = length + 1, 10 * low
        if self.digit_tools:  # rare: a tool named by digits alone
            tools = self.digit_tools
            for j, tool in tools[bisect.bisect_left(tools, (start,)):bisect.bisect_left(tools, (stop,))]:
                if str(top - j).startswith(tool):
                    total -= len(tool) + 1
        return total


class Truncation:
    """`truncateHistoryToBudget` (§3) of contents, planned without building the truncated texts: the
    response parts it changes (each with the number of the output file it was given) and how each
    changes its content's compact-JSON length and the estimate. Only what is sent (`messages`) or
    kept (`contents`) is built."""

    def __init__(self, source: Sequence[Content], threshold: int, units: float, directory: str) -> None:
        self.source = source
        self.threshold = threshold
        #: the folder the truncated outputs are saved in (`truncation_path`)
        self.directory = directory
        #: the source's estimate units
        self.units = units
        #: the parts cut one by one, in the order of §3 (newest first): (content index, part index, the
        #: number of its output file, how much the cut changes the text's escaped length)
        self.cuts: list[tuple[int, int, int, int]] = []
        #: the sum of those changes: the text appears once in the response's JSON and in
        #: JSON.stringify({output}) (§10.2), so it is the change of both
        self.delta = 0
        #: the responses cut all at once (`cut_all`): the source's response parts, the position of each
        #: one's message among its content's, their `CutChanges`, how many of the oldest are cut, and the
        #: number of the oldest one's file (`top - j` for response j)
        self._responses: Sequence[tuple[int, int]] = ()
        self._positions: Sequence[int] = ()
        self._changes = CutChanges(threshold, directory)
        self._left = 0
        self._top = 0

    def cut(self, ci: int, pi: int, number: int) -> TextMeasure:
        """Record the cut of `source[ci].parts[pi]`, its output saved as file `number`; the measure of
        its text after the cut (for the counter)."""
        part = self.source[ci].parts[pi]
        cut = part.truncated_text(number, self.threshold, self.directory)
        if cut is None:
            return part.source_measure()  # the part stays as it is
        change = cut.escaped - part.measure().text.escaped + part.key_change
        self.cuts.append((ci, pi, number, change))
        self.delta += change
        return cut

    def cut_all(self, responses: Sequence[tuple[int, int]], positions: Sequence[int], changes: CutChanges, left: int,
                number: int) -> None:
        """Record the cuts of the `left` oldest of the source's response parts (`responses`, oldest
        first, with their messages' `positions` in their contents', measured in `changes`), past the
        budget, their outputs saved as files `number`, `number + 1`, … from the newest of them on.
        Nothing is built, or walked: the cuts' changes are differences of `changes`' sums."""
        self._responses, self._positions, self._changes = responses, positions, changes
        self._left, self._top = left, number + left - 1
        self.delta += changes.delta(0, left, self._top)

    def cuts_anything(self) -> bool:
        """Whether any part is cut."""
        return bool(self.cuts) or self._changes.cuts[self._left] > 0

    def _shift(self, ci: int) -> int:
        """How much the cuts change the compact-JSON length of the source's contents before content `ci`."""
        below = min(bisect.bisect_left(self._responses, (ci,)), self._left)
        return self._changes.delta(0, below, self._top) + sum(change for c, _, _, change in self.cuts if c < ci)

    def split(self, fraction: float, clean: Sequence[int], before: Sequence[int]) -> int:
        """§4 `findCompressSplitPoint` of the truncated contents (`split_at`): `clean` and `before` are
        the source's clean user contents and running compact-JSON lengths."""
        return split_at(clean, before, fraction, compress_everything(self.source), self._shift)

    def estimate(self) -> int:
        """`estimate_contents` of the truncated contents (every unit a multiple of 0.25: exact)."""
        return math.floor(self.units + self.delta / 4)

    def _cuts_in(self, start: int, stop: int) -> Iterator[tuple[int, int, int, int]]:
        """The cuts of contents `[start:stop]` as (content index, part index, file number, the position of
        its message among the content's)."""
        source = self.source
        for ci, pi, number, _ in self.cuts:
            if start <= ci < stop:
                yield ci, pi, number, response_position(source[ci].parts, pi)
        responses, positions, changes, top = self._responses, self._positions, self._changes.changes, self._top
        first = bisect.bisect_left(responses, (start,), 0, self._left)
        for j in range(first, bisect.bisect_left(responses, (stop,), first, self._left)):
            if changes[j] is not None:
                ci, pi = responses[j]
                yield ci, pi, top - j, positions[j]

    def contents(self, start: int = 0, stop: int | None = None) -> list[Content]:
        """The truncated contents `[start:stop]`; a content without cuts is the source's own."""
        stop = len(self.source) if stop is None else stop
        by_content: dict[int, list[tuple[int, int]]] = {}
        for ci, pi, number, _ in self._cuts_in(start, stop):
            by_content.setdefault(ci, []).append((pi, number))
        out = []
        for ci in range(start, stop):
            content = self.source[ci]
            cuts = by_content.get(ci)
            if cuts is None:
                out.append(content)
                continue
            parts = list(content.parts)
            for pi, number in cuts:
                parts[pi] = parts[pi].truncated(number, self.threshold, self.directory)
            out.append(Content(content.role, parts) if any(a is not b for a, b in zip(parts, content.parts, strict=True)) else content)
        return out

    def messages(self, log: list[Message], at: Sequence[int], stop: int) -> list[Message]:
        """The truncated contents `[:stop]` rendered, without building them, from the source's rendered
        messages (content i's are `log[at[i]:at[i + 1]]`): a cut response's message gets its truncated
        text and keeps its attachments (`Part.truncated`)."""
        out = log[at[0]:at[stop]]
        source, threshold, first = self.source, self.threshold, at[0]
        for ci, pi, number, position in self._cuts_in(0, stop):
            part = source[ci].parts[pi]
            out[at[ci] - first + position] = response_message(part, part.cut_text(number, threshold, self.directory), part.attachments)
        return out


#: The section lines of the shell tool's output (upstream `toolOutputMaskingService.ts` L302-303: a
#: multiline `^`, which JavaScript also matches after "\r", U+2028 and U+2029).
SHELL_SECTION = re.compile("(?:^|(?<=[\r\u2028\u2029]))(Output|Error|Exit Code|Signal|Background PIDs|Process Group PGID): ", re.M)
#: JavaScript's `String.prototype.trim` characters (WhiteSpace and LineTerminator), which differ from
#: Python's `str.strip` (U+FEFF in, U+001C-U+001F and U+0085 out).
JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


def simple_preview(text: str) -> str:
    """§8 `formatSimplePreview`: over 20 lines, the first 10, the omission line and the last 10."""
    lines = text.split("\n")
    if len(lines) <= 20:
        return text
    return "\n".join(lines[:10]) + f"\n\n... [{len(lines) - 20} lines omitted] ...\n\n" + "\n".join(lines[-10:])


def shell_preview(text: str) -> str:
    """§8 `formatShellPreview` (upstream `toolOutputMaskingService.ts` L292-348): the output split at its
    section lines (`SHELL_SECTION`); the text before the first section and the `Output` section get the
    simple preview, the other sections are kept whole; without two sections, the simple preview of it all.
    The response holds only `output`, so the root-level `exitCode` / `error` notes never apply."""
    pieces = SHELL_SECTION.split(text)
    if len(pieces) < 3:
        return simple_preview(text)
    out = []
    if pieces[0].strip(JS_WHITESPACE):
        out.append(simple_preview(pieces[0].strip(JS_WHITESPACE)))
    for i in range(1, len(pieces), 2):
        name, section = pieces[i], pieces[i + 1].strip(JS_WHITESPACE)
        out.append(f"Output: {simple_preview(section)}" if name == "Output" else f"{name}: {section}")
    return "\n".join(out)


def response_position(parts: Sequence[Part], index: int) -> int:
    """The position of response part `parts[index]`'s message among its content's: a user content's messages
    are one per function response in order, then its text (`GeminiCli.render`)."""
    return sum(1 for p in parts[:index] if p.kind == "response")


@dataclass(frozen=True)
class GeminiCliOptions:
    """Upstream defaults at BASE (§2.2, §3, §4, §8, §9)."""

    #: `model.compressionThreshold`, a fraction of `tokenLimit(model)` (§2.2; 0 is "unset" upstream)
    compression_threshold: float = field(default=0.5, metadata={"range": Range(0, 1, low_open=True, what="a fraction of the window")})
    #: Share of the history kept verbatim: the split is the first clean user message at or after (1 - this) of the
    #: contents' JSON characters (§4).
    preserve_fraction: float = 0.3
    #: `COMPRESSION_FUNCTION_RESPONSE_TOKEN_BUDGET`: walking newest first, a function response that would take the
    #: running estimate past this many tokens is truncated and saved to a file (§3).
    function_response_token_budget: int = 50_000
    #: characters; 0 turns the truncation at tool execution off (§9)
    truncate_tool_output_threshold: int = field(default=40_000, metadata={"range": Range(0, what="a number of characters")})
    #: `tokenLimit(model)`; None: the profile's window (upstream 1,048,576 for Gemini models)
    token_limit: int | None = None
    #: `protectionThresholdTokens`: the newest this many estimated tokens of tool output are never masked; the part
    #: that crosses it and every older one may be (§8).
    mask_protection_tokens: int = 50_000
    #: `minPrunableThresholdTokens`: mask only when the maskable tool output adds up to at least this many estimated
    #: tokens (§8).
    mask_min_prunable_tokens: int = 30_000
    #: `protectLatestTurn`: the newest content is never masked (the walk starts at the one before it) (§8).
    mask_protect_latest_turn: bool = True
    #: Comma-separated tool names whose outputs are never masked (§8).
    mask_exempt_tools: str = "activate_skill,ask_user,enter_plan_mode,exit_plan_mode"
    #: tools whose output is truncated when it runs (§9) and gets the line preview when masked (§8)
    shell_tools: str = "run_shell_command,Bash,bash,shell,exec_command"
    #: Comma-separated name prefixes of MCP tools, whose result of one text part is truncated when it runs like a
    #: shell's (§9); the convention of the recorded agents (Claude Code's and Codex's `mcp__server__tool`).
    mcp_tool_prefixes: str = "mcp__"
    #: the global Gemini folder, `<home>/.gemini` (`Storage.getGlobalGeminiDir`, `storage.ts@5411f113 L54-60`), which
    #: holds the projects' temp folders and so the saved outputs' paths; "~" stands for the recording's home
    #: folder, which is not known
    gemini_dir: str = "~/.gemini"
    #: the project root, whose base name names the project's temp folder (`project_slug`); None: the
    #: transcript's working directory (`source.cwd`) when it records one, else unknown ("project")
    cwd: str | None = None


class GeminiCli(Strategy):
    name = "gemini-cli"
    description = "Gemini CLI: 0.5 × window on the last prompt count, keep 30 % split at clean user turns, state snapshot + verify, masking"
    spec = "docs/specs/gemini-cli.md §1-§10, §15"
    Options = GeminiCliOptions
    sends_inputs_verbatim = True

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        o = self.options
        self.limit = o.token_limit or ctx.profile.context_window
        self.system: list[Item] = []
        self.history: list[Content] = []
        self.pending: list[Content] = []
        self.last_prompt_tokens = 0
        #: `uiTelemetryService.getLastPromptTokenCount()`, which §3's and §9's threshold read: the chat's count as it was
        #: when the last request was sent or a compression or §7 truncation replaced the history (module docstring)
        self.ui_prompt_tokens = 0
        self.failed_latch = False
        #: the tool each call id was made to (`_model`): a function response's name (`tool_name`)
        self._call_tools: dict[str, str] = {}
        self.exempt = {t.strip() for t in o.mask_exempt_tools.split(",") if t.strip()}
        self.shell = {t.strip() for t in o.shell_tools.split(",") if t.strip()}
        self.mcp_prefixes = tuple(t.strip() for t in o.mcp_tool_prefixes.split(",") if t.strip())
        # Where the outputs are saved (`saveTruncatedToolOutput`, `fileUtils.ts@5411f113 L731-755`;
        # `toolOutputMaskingService.ts@5411f113 L163-172`): `<projectTempDir>/tool-outputs` (§3), and its
        # `session-<id>` folder (§8, §9), the session being the recording's.
        session = ctx.session
        recorded_cwd = session.get("cwd")
        cwd = o.cwd or (recorded_cwd if isinstance(recorded_cwd, str) and recorded_cwd else None)
        self.session_id = str(session.get("session_id") or session.get("id") or "session")
        temp = posixpath.normpath(posixpath.join(o.gemini_dir, "tmp", project_slug(cwd)))
        self.outputs_dir = f"{temp}/{TOOL_OUTPUTS_DIR}"
        self.session_outputs_dir = f"{self.outputs_dir}/session-{sanitize_filename_part(self.session_id)}"
        #: `compressionTruncationCounter` (`config.ts@5411f113 L906, L3812-3814`): §3's files are numbered by it; only
        #: §3 advances it (once per response over the budget), and only a new session id resets it (L1849)
        self._truncation_ids = 0
        #: the outputs masked so far (the seed of each masked file's random part, `masked_output_path`)
        self._masked_files = 0
        self._system_messages: dict[str, Message] = {}
        self._prompts: dict[tuple[Any, ...], Message] = {}
        #: the system messages and the history's rendered, as an append-only log shared by the requests'
        #: views (compaction_bench.log_view): the history list it renders, how many system items it holds,
        #: where each content's messages start in it (`_log_at[i]`; `_log_at[-1]`: the log's end). A new
        #: log starts when the history is replaced or masked (`_log_of` None)
        self._log: list[Message] = []
        self._log_of: list[Content] | None = None
        self._log_system = 0
        self._log_at: list[int] = [0]
        #: the history indexed (`_index`), extended as it grows, rebuilt when it is replaced or masked
        #: (`_index_of` None): its response parts as (content index, part index), oldest first, with the
        #: position of each one's message among its content's (`render`) and the running sums of their
        #: texts' estimates (`_text_tokens[j]`: of the first j; §3 measures a response's text as a text
        #: part); the running sums of its contents' estimate units and compact-JSON lengths (`_units[i]`, `_json[i]`: of the
        #: first i); its clean user contents (§4); the first content with a state snapshot in a text part
        #: (§5.2); the running sums over the response parts of the tokens masking may take (§8: 0 for an
        #: exempt tool or a masked output)
        self._index_of: list[Content] | None = None
        self._responses: list[tuple[int, int]] = []
        self._positions: list[int] = []
        self._text_tokens: list[int] = [0]
        self._units: list[float] = [0.0]
        self._json: list[int] = [0]
        self._clean: list[int] = []
        self._first_snapshot: int | None = None
        self._maskable: list[int] = [0]
        #: per §3 threshold, each response part's `Part.cut_change` (aligned with `_responses`, extended
        #: as they are; the last few thresholds asked are kept, all dropped with the index)
        self._cut_changes: dict[int, CutChanges] = {}

    # ------------------------------------------------------------ observing
    def on_user_turn(self, item: Item) -> None:
        self._user_text(item)

    def on_input(self, item: Item) -> None:
        if item.kind == "system":
            self.system.append(item)
        elif item.kind == "tool_result" and item.is_error:
            # A failed tool (`ToolExecutor.createErrorResult`, `tool-executor.ts@5411f113 L148-166, L451-476`): the
            # response is `{error: message}` alone, no nested parts and no §9 truncation (only a success's
            # output is truncated, L371-376); the transcript's error flag stands for `toolResult.error`
            self._response(item, item.text, (), error=True)
        elif item.kind == "tool_result":
            name = self.tool_name(item)
            text, attachments = tool_output(name, item.text, item.attachments)
            if (name in self.shell or name.startswith(self.mcp_prefixes)) and not item.attachments:
                # §9 (`tool-executor.ts@5411f113 L217-290`): a shell tool's string output, or an MCP tool's result of
                # exactly one text part (a result with attachments was a list of parts), when `threshold > 0` and
                # its length is over it
                threshold = min(4 * (self.limit - self.ui_prompt_tokens), self.options.truncate_tool_output_threshold)
                if threshold > 0 and _utf16(text) > threshold:
                    text = format_truncated_output(text, self._executor_path(name, item.call_id or ""), threshold)
            self._response(item, text, attachments, error=False)
        elif item.kind == "user":
            self._user_text(item)
        elif item.is_model_output:
            self._model([item])

    def tool_name(self, item: Item) -> str:
        """The tool a result answers: its own tool name, else its call's (upstream names every function response by
        the tool called, `tool-executor.ts@5411f113 L213-253`; some importers name only the call), else ""."""
        return item.tool_name or self._call_tools.get(item.call_id or "", "")

    def _response(self, item: Item, text: str, attachments: tuple[Attachment, ...], *, error: bool) -> None:
        """A function response part, with the other results of its step in one user content."""
        part = Part("response", text=text, name=self.tool_name(item), call_id=item.call_id or "", item_id=item.id,
                    is_error=item.is_error, attachments=attachments, error_response=error)
        self._add_pending(Content("user", [part]))

    def _user_text(self, item: Item) -> None:
        # the user's files are `inlineData` parts after the text (sent, and rendered on the user message)
        parts = [Part("text", text=item.text, item_id=item.id)]
        parts += [Part("data", mime=a.mime, item_id=item.id, attachments=(a,)) for a in item.attachments]
        self._add_pending(Content("user", parts))

    def _model(self, items: Sequence[Item]) -> None:
        parts = []
        for item in items:
            if item.kind == "assistant" and item.text:
                parts.append(Part("text", text=item.text, item_id=item.id))
            elif item.kind == "tool_call":
                try:
                    args = json.loads(item.arguments or "{}")
                except json.JSONDecodeError:
                    args = {"raw": item.arguments}
                parts.append(Part("call", name=item.tool_name or "", call_id=item.call_id or "", args=args, item_id=item.id))
                if item.call_id and item.tool_name:
                    self._call_tools[item.call_id] = item.tool_name
        if parts:
            self._add_pending(Content("model", parts))

    def _add_pending(self, content: Content) -> None:
        """`content` after the pending ones, merged into the last when its role is the same (§1 coalescing): the
        parts of one request's message are one content (a steering hint rides in the function responses'), and
        so are a model output item's and the response's. The pending contents are not indexed yet, so the last
        one grows in place (its measures and messages follow its parts)."""
        if self.pending and self.pending[-1].role == content.role:
            self.pending[-1].parts.extend(content.parts)
        else:
            self.pending.append(content)

    def on_marker(self, item: Item) -> None:
        """The user's interruption of a turn (`INTERRUPT_EVENTS`): the cancelled turn's function responses join the
        history unsent (`useGeminiStream.ts@5411f113 L2063-2099`), so that a new message follows the placeholder
        (`_close_unanswered_turn`) rather than riding in their content as a steering hint would."""
        if item.meta.get("event") in INTERRUPT_EVENTS and self.pending and self.pending[-1].has_response:
            self._commit_pending()

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        self._model(items)
        self._commit_pending()
        if usage is not None:
            self.last_prompt_tokens = usage.input

    def _commit_pending(self) -> None:
        """The pending contents join the history, coalesced (§1): the first merges into the last content when their
        roles are the same; that indexed content is then replaced, so the log and the index start anew."""
        pending, self.pending = self.pending, []
        if pending and self.history and self.history[-1].role == pending[0].role:
            self.history[-1] = coalesced(self.history[-1], pending.pop(0))
            self._log_of = self._index_of = None
        self.history.extend(pending)

    def _next_truncation_id(self) -> int:
        """`config.getNextCompressionTruncationId()`: the number of §3's next saved output."""
        self._truncation_ids += 1
        return self._truncation_ids

    def _executor_path(self, tool: str, call_id: str) -> str:
        """Where §9 saves a tool's output when it runs: `saveTruncatedToolOutput(content, toolName, callId,
        projectTempDir, this.context.promptId)` (`tool-executor.ts@5411f113 L222-228`), whose last argument, the
        session folder's id, is the interactive CLI's `config.promptId`, the session id (`config.ts@5411f113
        L1740-1742`; `useToolScheduler.ts` passes the config as the context). Named by the call id, no counter."""
        return f"{self.session_outputs_dir}/{saved_output_name(tool, call_id)}"

    def masked_output_path(self, part: Part) -> str:
        """Where §8 saves a masked output (`toolOutputMaskingService.ts@5411f113 L163-188`)::

            const toolName = part.functionResponse.name || 'unknown_tool';
            const callId = part.functionResponse.id || Date.now().toString();
            const fileName = `${safeToolName}_${safeCallId}_${Math.random().toString(36).substring(7)}.txt`;

        in the session folder (always joined, without `saveTruncatedToolOutput`'s rule for an id that starts
        with the tool's name). The random part is six base-36 digits, the length it has 70 % of the time (5 in
        26 %, 7 in 2 %, any other under 1 %: 200,000 draws on Node 20), and a missing call id a 13-digit time,
        both drawn from a hash of the session, the call and the count of masked outputs, so that a replay is
        deterministic."""
        self._masked_files += 1
        seed = hashlib.blake2b(f"{self.session_id}\0{part.call_id}\0{self._masked_files}".encode(), digest_size=16).digest()
        value = int.from_bytes(seed, "big")
        suffix = _base36(value % 36**6, 6)
        call_id = part.call_id or str(1_700_000_000_000 + (value >> 64) % 100_000_000_000)
        tool = sanitize_filename_part(file_tool_name(part.name)).lower()
        return f"{self.session_outputs_dir}/{tool}_{sanitize_filename_part(call_id).lower()}_{suffix}.txt"

    # ------------------------------------------------------------ rendering
    def render(self, contents: Sequence[Content]) -> list[Message]:
        """Wire messages for contents; each content's messages are built once for the parts it holds
        (a content whose parts change, by a new function response or a mask, is rendered anew)."""
        out: list[Message] = []
        for content in contents:
            out += self._content_messages(content)
        return out

    def _content_messages(self, content: Content) -> list[Message]:
        parts = tuple(content.parts)
        hit = content._rendered
        if hit is None or hit[0] != parts:
            hit = content._rendered = (parts, self._render_content(content))
        return hit[1]

    @staticmethod
    def _render_content(content: Content) -> list[Message]:
        out: list[Message] = []
        if content.role == "model":
            text = "\n".join(p.text for p in content.parts if p.kind == "text")
            calls = tuple(ToolCall(p.call_id, p.name, json.dumps(p.args, ensure_ascii=False)) for p in content.parts if p.kind == "call")
            ids = tuple(dict.fromkeys(p.item_id for p in content.parts if p.item_id))
            out.append(Message("assistant", text, tool_calls=calls, item_ids=ids))
            return out
        for p in content.parts:
            if p.kind == "response":
                out.append(response_message(p, p.text, p.attachments))
        # a message per text part (a coalesced content holds several, each its own part upstream), with the
        # `inlineData` parts of its item, the user's files, as the request carries them
        for p in content.parts:
            if p.kind == "text":
                files = tuple(a for q in content.parts if q.kind == "data" and q.item_id == p.item_id for a in q.attachments)
                out.append(Message("user", p.text, item_ids=(p.item_id,) if p.item_id else (), attachments=files))
        return out

    def _sync_log(self) -> list[Message]:
        """The log of the system messages and the history's, extended by the contents appended since
        the last call."""
        from compaction_bench.request import message_from_item

        if self._log_of is not self.history or self._log_system != len(self.system) or len(self._log_at) - 1 > len(self.history):
            self._log = [self._system_messages.get(i.id) or self._system_messages.setdefault(i.id, message_from_item(i))
                         for i in self.system]
            self._log_of, self._log_system, self._log_at = self.history, len(self.system), [len(self._log)]
        log, at = self._log, self._log_at
        for content in self.history[len(at) - 1:]:
            log += self._content_messages(content)
            at.append(len(log))
        return log

    def messages(self) -> LogView:
        """The system messages, the history and the pending contents rendered: a view of the log of
        the first two and the pending ones. A pending content of the history's last role is sent merged into
        the last content (§1, the request is coalesced), as the history holds the two once they join it."""
        log = self._sync_log()
        pending = self.pending
        if pending and self.history and self.history[-1].role == pending[0].role:
            return LogView(log, self._log_at[-2], tuple(self.render([coalesced(self.history[-1], pending[0]), *pending[1:]])))
        return LogView(log, len(log), tuple(self.render(pending)))

    # ------------------------------------------------------------ the check (§2)
    def request(self) -> Request:
        threshold = self._reported_threshold()
        count = self.last_prompt_tokens
        fired = bool(self.history) and count >= self.options.compression_threshold * self.limit
        sent = True
        try:
            if fired and self.failed_latch:
                self._truncate_only(count)
            elif fired:
                self._compress(count, force=False)
        except SummaryOverflow as error:
            # The summariser's error is thrown out of `processTurn` (§5.1): the turn fails before masking, unsent
            self.ctx.refuse_request(f"chat compression failed, the turn is not sent: {error}")
            sent = False
        if sent:
            remaining = self.limit - self.last_prompt_tokens  # §10.4: after the check, before masking
            self._mask()
            sent = self._fits(remaining)
        if sent:
            self.ui_prompt_tokens = self.last_prompt_tokens  # copied on every streamed event (`client.ts@5411f113 L838`)
        self._close_unanswered_turn()
        # The count upstream holds when it sends (`lastPromptTokenCount`, §10.1): the previous response's
        # prompt tokens, or, once a compression, a truncation (§7) or a mask (§8) replaced the history, the
        # estimate of the new history (`setHistory`, a new chat), never the count the check read before.
        # The check runs once per request (§2.1): once it fired, no count compacts this request again, so it
        # reports no threshold (the compaction it recorded reports the one it fired on)
        return Request(self.messages(), estimate_tokens=self.last_prompt_tokens, threshold=None if fired else threshold)

    def _fits(self, remaining: int) -> bool:
        """§10.4 the overflow pre-check (`client.ts@5411f113 L696-715`): the message sent, the pending user contents'
        parts, estimated (`calculateRequestTokenCount`, `tokenCalculation.ts@5411f113 L154-186`: the provider's count
        when a part is a file, `inlineData`) and compared with what the window has left; over it, the agent does not
        send the request (`ContextWindowWillOverflow`)."""
        message = [c for c in self.pending if c.role == "user"]
        if any(p.kind == "data" for c in message for p in c.parts):
            estimate = self.ctx.count_tokens(self.render(message))
        else:
            estimate = estimate_contents(message)
        if estimate > remaining:
            self.ctx.refuse_request(f"ContextWindowWillOverflow: the request's estimated {estimate:,} tokens are more than "
                                    f"the {remaining:,} the window has left")
            return False
        return True

    def _close_unanswered_turn(self) -> None:
        """`closeUnansweredToolResponseTurn` (`geminiChat.ts@5411f113 L450-458, L768-784`): a message without function
        responses sent after function responses that got no answer (the history ends on them) follows a model
        placeholder, so that it is no part of their content (§1) and stays a clean user content (§4). Upstream a turn
        that fails before it is sent records neither; the replay keeps its message, and so the placeholder too."""
        message = [p for c in self.pending if c.role == "user" for p in c.parts]
        if (message and not any(p.kind == "response" for p in message) and self.history
                and self.history[-1].role == "user" and self.history[-1].has_response and self.pending[0].role == "user"):
            self.pending.insert(0, Content("model", [Part("text", text=INTERRUPTED_RESPONSE)]))

    def _reported_threshold(self) -> int:
        """The smallest count that compresses (`Request.threshold`): the check goes on unless `originalTokenCount
        < threshold * tokenLimit(model)` (§2.2 step 4, "compression starts at `>=`"), a float product, so the
        smallest whole count at or above it, its ceiling (a floor would be one short whenever the product has a
        fraction, e.g. an odd limit at 0.5). Python's product is the same double as JavaScript's."""
        return math.ceil(self.options.compression_threshold * self.limit)

    # ------------------------------------------------------------ truncation (§3)
    def _index(self) -> None:
        if self._index_of is not self.history or len(self._units) - 1 > len(self.history):
            self._index_of, self._responses, self._positions, self._text_tokens = self.history, [], [], [0]
            self._units, self._json = [0.0], [0]
            self._clean, self._first_snapshot, self._maskable, self._cut_changes = [], None, [0], {}
        for ci in range(len(self._units) - 1, len(self.history)):
            content = self.history[ci]
            json_length, units = content.measure()
            self._units.append(self._units[-1] + units)
            self._json.append(self._json[-1] + json_length)
            if is_clean_user(content):
                self._clean.append(ci)
            first_response = len(self._responses)
            for pi, part in enumerate(content.parts):
                if part.kind == "response":
                    self._positions.append(len(self._responses) - first_response)
                    self._responses.append((ci, pi))
                    measure = part.measure()
                    self._text_tokens.append(self._text_tokens[-1] + math.floor(part.source_measure().text_units))
                    maskable = not measure.masked and part.name not in self.exempt
                    self._maskable.append(self._maskable[-1] + (math.floor(measure.units) if maskable else 0))
                elif part.kind == "text" and self._first_snapshot is None and part.measure().snapshot:
                    self._first_snapshot = ci

    def plan_truncation(self) -> Truncation:
        """The history's truncation: newest first, each function response's text estimated as a text
        part; past the budget a response is truncated, with a new output path. The counter only
        grows: once it is over the budget every older response is cut, whatever its size."""
        o = self.options
        # `getTruncateToolOutputThreshold` (config.ts@5411f113 L3794-3801) on the UI's count (`ui_prompt_tokens`), not
        # clamped: negative once that prompt was over the window (`truncation_body` cuts as JavaScript's `slice` then does)
        threshold = min(4 * (self.limit - self.ui_prompt_tokens), o.truncate_tool_output_threshold)
        budget = o.function_response_token_budget
        self._index()
        contents, responses, text_tokens = self.history, self._responses, self._text_tokens
        plan = Truncation(contents, threshold, self._units[-1], self.outputs_dir)
        # the newest responses whose texts fit the budget together are counted, not cut: `left` is the
        # oldest of them (the first with text_tokens[left] >= all - budget; the sums never decrease)
        left = len(responses) if budget < 0 else bisect.bisect_left(text_tokens, text_tokens[-1] - budget)
        counter = text_tokens[-1] - text_tokens[left]  # the responses not walked yet: responses[:left]
        while left and counter <= budget:
            left -= 1
            ci, pi = responses[left]
            tokens = text_tokens[left + 1] - text_tokens[left]
            if counter + tokens > budget:
                counter += math.floor(plan.cut(ci, pi, self._next_truncation_id()).text_units)
            else:
                counter += tokens
        if left:
            plan.cut_all(responses, self._positions, self._changes_at(threshold, left), left, self._truncation_ids + 1)
        self._truncation_ids += left
        return plan

    def _changes_at(self, threshold: int, stop: int) -> CutChanges:
        """The `CutChanges` at `threshold` of the history's response parts, measured at least up to `stop`
        (kept for the last few thresholds)."""
        changes = self._cut_changes.get(threshold)
        if changes is None:
            if len(self._cut_changes) >= CUT_THRESHOLDS_KEPT:
                self._cut_changes.clear()
            changes = self._cut_changes[threshold] = CutChanges(threshold, self.outputs_dir)
        return changes.extend(self.history, self._responses, stop)

    def _truncate_only(self, count: int) -> None:
        """§7: the failed-compression path."""
        plan = self.plan_truncation()
        if plan.estimate() < count:
            # CONTENT_TRUNCATED: the chat's count is the estimate, copied to the UI's (`client.ts@5411f113 L1240-1246`)
            self.last_prompt_tokens = self.ui_prompt_tokens = plan.estimate()
            if not plan.cuts_anything():
                return  # the truncated history is the history: nothing else changes
            truncated = plan.contents()
            before = self.messages()
            self.history = truncated
            after = self.messages()
            if after != before:
                self.ctx.record_compaction(trigger="truncate", before=before, after=after, summary=None, estimate_tokens=count,
                                           details={"status": "CONTENT_TRUNCATED"})

    # ------------------------------------------------------------ compression (§4-§6)
    def _prompt(self, role: str, template: str, **variables: Any) -> Message:
        """The message of a prompt, rendered once per template and variables (the same object each time)."""
        key = (role, template, *sorted(variables.items()))
        message = self._prompts.get(key)
        if message is None:
            message = self._prompts[key] = Message(role, self.ctx.render_prompt(template, **variables))
        return message

    def _compress(self, count: int, *, force: bool) -> None:
        o = self.options
        plan = self.plan_truncation()
        split = plan.split(1 - o.preserve_fraction, self._clean, self._json)
        if split == 0:
            return
        # the original slice when its estimate fits, else the truncated one; truncation changes no text
        # part, so a state snapshot is in either or in neither
        log, at = self._sync_log(), self._log_at
        body = log[at[0]:at[split]] if math.floor(self._units[split]) < self.limit else plan.messages(log, at, split)
        previous = self._first_snapshot is not None and self._first_snapshot < split
        system = self._prompt("system", "gemini_compression_system.j2", plan_path=None)
        ask = self._prompt("user", "gemini_compression_request.j2", previous=previous)
        # A call that fails raises `SummaryOverflow` out of here: upstream the summariser's error is thrown
        # (`baseLlmClient.ts@5411f113 L395-421`; a 400 is not retried) and nothing in `compress` or `tryCompressChat`
        # catches it (`client.ts@5411f113 L1206`): nothing changes, no latch, and `request` fails the turn (§5.1)
        first = self.ctx.summarize(Request([system, *body, ask], kind="summary"))
        verify = self._prompt("user", "gemini_compression_verify.j2")
        second = self.ctx.summarize(Request([system, *body, Message("assistant", first.text), verify], kind="summary"),
                                    purpose="verify")
        final = (second.text.strip() or first.text).strip()
        if not final:
            return
        new_history = [Content("user", [Part("text", text=final)]), Content("model", [Part("text", text=ACK)]), *plan.contents(split)]
        new_tokens = estimate_contents(new_history)
        if new_tokens > count:
            # COMPRESSION_FAILED_INFLATED_TOKEN_COUNT: nothing changes; an automatic attempt latches (§2.3).
            self.failed_latch = self.failed_latch or not force
            self.ctx.record_compaction(trigger="inflated", before=self.messages(), after=self.messages(), summary=None,
                                       estimate_tokens=count, details={"new_tokens": new_tokens}, probe=False)
            return
        before = self.messages()
        self.history = new_history
        self.failed_latch = False
        # the new chat's count is the estimate, copied to the UI's (`client.ts@5411f113 L1236-1237`)
        self.last_prompt_tokens = self.ui_prompt_tokens = new_tokens
        self.ctx.record_compaction(
            trigger="manual" if force else "threshold", before=before, after=self.messages(), summary=final,
            summarized_ids=[i for m in body for i in m.item_ids], estimate_tokens=count,
            threshold=self._reported_threshold(),
            details={"split": split, "kept_contents": len(plan.source) - split, "new_tokens": new_tokens, "anchored": previous},
        )

    # ------------------------------------------------------------ masking (§8)
    def _preview(self, part: Part) -> str:
        if part.name in self.shell:
            # `formatShellPreview` (toolOutputMaskingService.ts@5411f113 L292-309) reads `response.output`: an error
            # response has none, and the empty text returns before the root `error` is looked at
            return "" if part.error_response else shell_preview(part.text)
        # toolOutputMaskingService.ts@5411f113 L205-212: JSON.stringify(response, null, 2), UTF-16 lengths
        content = json.dumps({part.response_key: part.text}, indent=2, ensure_ascii=False)
        if _utf16(content) > 500:
            return js_slice(content, 0, 250) + "\n... [TRUNCATED] ...\n" + js_slice(content, -250)
        return content

    def _prunable_tokens(self, start: int) -> int:
        """The tokens §8 may mask in `history[:start + 1]`, from the running sums (`_maskable`): the
        window closes at the newest part that takes the protected sum (of that part and every newer
        one) over `mask_protection_tokens`; that part and every older one are prunable."""
        self._index()
        maskable = self._maskable
        walked = bisect.bisect_right(self._responses, start, key=lambda response: response[0])
        over = maskable[walked] - self.options.mask_protection_tokens
        if over <= 0:
            return 0  # the window never closes
        # maskable[j + 1] - maskable[j] are part j's tokens: the closing part j is the newest with
        # maskable[walked] - maskable[j] > protection, that is maskable[j] < over <= maskable[j + 1]
        return maskable[bisect.bisect_left(maskable, over, 0, walked)]

    def _mask(self) -> None:
        o = self.options
        start = len(self.history) - (2 if o.mask_protect_latest_turn else 1)
        if self._prunable_tokens(start) < o.mask_min_prunable_tokens:
            return
        protected = 0
        window_closed = False
        prunable: list[tuple[int, int, int]] = []
        total = 0
        for ci in range(start, -1, -1):
            content = self.history[ci]
            for pi in range(len(content.parts) - 1, -1, -1):
                part = content.parts[pi]
                if part.kind != "response" or part.name in self.exempt:
                    continue
                measure = part.measure()
                if measure.masked:
                    continue
                tokens = math.floor(measure.units)
                if not window_closed:
                    protected += tokens
                    if protected <= o.mask_protection_tokens:
                        continue
                    window_closed = True
                prunable.append((ci, pi, tokens))
                total += tokens
        if total < o.mask_min_prunable_tokens:
            return
        before = self.messages()
        masked = []
        for ci, pi, tokens in prunable:
            part = self.history[ci].parts[pi]
            path = self.masked_output_path(part)
            snippet = f"<tool_output_masked>\n{self._preview(part)}\n\nOutput too large. Full output available at: {path}\n</tool_output_masked>"
            # only `response` is replaced: the nested parts stay (upstream `toolOutputMaskingService.ts` L224-231)
            new = replace_text(part, snippet, output=True)
            if estimate_parts([new]) < tokens:
                self.history[ci].replace_part(pi, new)
                masked.append(part.call_id)
        if masked:
            self._log_of = self._index_of = None  # contents changed in place: the log and the index start anew
            self.last_prompt_tokens = estimate_contents(self.history)
            self.ctx.record_compaction(trigger="masking", before=before, after=self.messages(), summary=None,
                                       details={"masked": masked}, probe=False)
