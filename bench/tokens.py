"""Token counting: true counts with tiktoken encodings loaded offline, and the upstream estimators.

True counts use o200k_base or cl100k_base built from the BPE files that litellm ships
(sha256-checked; docs/specs/environment.md §1, "Route D"), so no code path reaches the network.

The estimators are the upstream systems' own heuristics, named after them:
- Codex: ``ceil(utf8_bytes / 4)`` (docs/specs/codex.md §6)
- Pi: ``ceil(utf16_units / 4)`` (docs/specs/pi.md §2.5)
- OpenCode: ``round_half_up(utf16_units / 4)`` (docs/specs/opencode.md §2.4)

Tokens a request carries that its messages do not show (`HiddenTokens`): an encrypted reasoning
item (Codex; visible thinking is counted as its text) costs what the recording says its response reasoned (the rollout's `reasoning_output_tokens`,
shared by the response's reasoning items), else Codex's estimate from the encrypted length
(`max(0, len * 3/4 - 650)` bytes, /4; docs/specs/codex.md §6). The provider bills only the
reasoning items after the last real user message (earlier turns' reasoning is dropped server-side,
which is why Codex adds it back on top of server usage; docs/specs/codex.md §1.3). A Claude model
older than Opus 4.5 and Sonnet 4.6 drops the visible thinking of earlier turns the same way (see
`compaction_bench.profiles.strips_earlier_thinking`): there a thinking message is billed as hidden
tokens are (`HiddenTokens.thinking`), its visible count 0, after the last user message of any kind
that is not a tool result. The system
prompt and tool schemas that a transcript does not record are estimated once per session from
the first recorded request (`unrecorded_tokens`) and reported separately, never added to counts.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import tiktoken

from compaction_bench.log_view import common_prefix_length

if TYPE_CHECKING:
    from compaction_bench.request import Message
    from compaction_bench.transcript import Transcript

#: encoding -> (file name in litellm's bundle = sha1 of the public URL, sha256 tiktoken expects)
ENCODING_FILES = {
    "cl100k_base": (
        "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        "fb374d419588a4632f3f557e76b4b70aebbca790",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}


class TokenizerError(RuntimeError):
    """An encoding that cannot be loaded offline."""


def bundled_tokenizer_dir() -> Path:
    """litellm's folder of tiktoken BPE files, found without importing litellm."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerError("litellm is not installed; it carries the offline tokenizer files")
    return Path(spec.submodule_search_locations[0]) / "litellm_core_utils" / "tokenizers"


@cache
def get_encoding(name: str) -> tiktoken.Encoding:
    """A tiktoken encoding built from the local, hash-checked BPE file (never downloads)."""
    if name not in ENCODING_FILES:
        raise TokenizerError(f"unknown encoding {name!r}; available offline: {', '.join(ENCODING_FILES)}")
    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext import openai_public

    file_name, sha256 = ENCODING_FILES[name]
    path = bundled_tokenizer_dir() / file_name
    if not path.is_file():
        raise TokenizerError(f"{name}: {path} is missing; the installed litellm no longer bundles it")
    ranks = load_tiktoken_bpe(str(path), expected_hash=sha256)
    # Reuse tiktoken's own pattern and special tokens for the encoding, with our ranks.
    original = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *args, **kwargs: ranks
    try:
        constructor = getattr(openai_public, name)
        params = constructor()
    finally:
        openai_public.load_tiktoken_bpe = original
    return tiktoken.Encoding(**params)


def utf8_len(text: str) -> int:
    """UTF-8 bytes of `text`. A lone UTF-16 surrogate (which a hand-built text can hold; the loaders
    replace one with U+FFFD) counts 3 bytes, as the U+FFFD a Rust `String` holds in its place does:
    "surrogatepass" writes it as a 3-byte sequence, at no cost to text without one."""
    return len(text.encode("utf-8", "surrogatepass"))


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, as JavaScript's `String.length` counts it."""
    # One pass in C: two bytes per code unit (a lone surrogate, which JSON allows, is one unit).
    return len(text) if text.isascii() else len(text.encode("utf-16-le", "surrogatepass")) // 2


def codex_estimate(text: str) -> int:
    """Codex: ceil(utf8 bytes / 4)."""
    return (utf8_len(text) + 3) // 4


def codex_estimate_bytes(n_bytes: int) -> int:
    """Codex's ceil(bytes / 4) for a byte count."""
    return (n_bytes + 3) // 4


def pi_estimate_units(n_units: int) -> int:
    """Pi's ceil(units / 4) for a count of UTF-16 code units."""
    return (n_units + 3) // 4


def pi_estimate(text: str) -> int:
    """Pi: ceil(utf16 code units / 4)."""
    return pi_estimate_units(utf16_len(text))


def opencode_estimate(text: str) -> int:
    """OpenCode: round half up of (utf16 code units / 4), i.e. JavaScript's Math.round."""
    return opencode_estimate_units(utf16_len(text))


def opencode_estimate_units(units: int) -> int:
    """OpenCode's estimate for a text of `units` UTF-16 code units: floor(units / 4 + 0.5)."""
    return (units + 2) // 4


#: A text this long is counted by its paragraphs (`TokenCounter.count`).
PARAGRAPHS_FROM = 8192
#: Cut points that are always boundaries of tiktoken's pre-tokenization pieces in o200k_base and
#: cl100k_base: right after a blank line ("\n\n") when the next character is neither whitespace nor
#: "/" (no piece of either encoding's pattern continues past a newline into such a character: letter,
#: number and contraction pieces never contain a newline, punctuation pieces end in newlines or "/",
#: whitespace pieces in whitespace). BPE merges never cross pieces, so a text's count is the sum of
#: its parts' counts (tests/test_tokens.py checks it on the corpora and on random text).
PARAGRAPH_CUT = re.compile(r"(?<=\n\n)(?=[^\s/])")
#: Boundaries too after a single newline (`TokenCounter.common_prefix` reads one line around a difference).
LINE_CUT = re.compile(r"(?<=\n)(?=[^\s/])")
#: A text this long that is not in the memo is counted from its lines (`TokenCounter._count_by_lines`).
LINES_FROM = 1024
#: How many characters of each end of a long text's rest after its first line `TokenCounter._count_long_text` reads to
#: tell whether it met that rest before (with its length): only a rest met again is copied and memoized.
REST_ENDS = 64
#: How many lines' token ids `TokenCounter.common_prefix` keeps (cleared when full).
LINES_KEPT = 4096
#: Where a long line is cut into chunks, each memoized (`TokenCounter._count_long_line`): between the
#: comma and the space of a ", " (`CHUNK_SEPARATOR`). A space after a character that is not whitespace
#: always starts a piece in both encodings (letter, number and contraction pieces hold no space,
#: punctuation pieces end in punctuation, newlines or "/", whitespace pieces hold no other character), so
#: a line's count is its chunks' sum. A chunk ends at the first separator at least `CHUNK_MIN` characters
#: after its start, so a line that holds another (a tool call's arguments serialized behind a prefix, as
#: summary prompts write them) is cut the same way inside it from the first separator both take on.
#: Found with `str.find` (a literal: a regex led by a character class costs half of tiktoken's own time).
CHUNK_SEPARATOR = ", "
#: The fewest characters in a chunk but the last (a dense run of separators is not cut into tiny encodes).
CHUNK_MIN = 64


#: A newline right before a `LINE_CUT` (the cut is where it ends). Led by a literal, so the search jumps from
#: newline to newline in C (`LINE_CUT`'s look-behind is tried at every position, several times slower).
LINE_END = re.compile(r"\n(?=[^\s/])")
#: The blank line right before a `PARAGRAPH_CUT` (the cut is where it ends), searched as `LINE_END` is.
PARAGRAPH_END = re.compile(r"\n\n(?=[^\s/])")


def _slices(text: str, cuts: Iterable[int]) -> list[str]:
    """`text` cut at `cuts` (increasing positions): one slice of `text` per piece."""
    pieces: list[str] = []
    start = 0
    for cut in cuts:
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def _chunk_cuts(text: str, start: int = 0, end: int | None = None) -> Iterator[int]:
    """The cuts that chunk `text[start:]`, in order: after the comma of each `CHUNK_SEPARATOR` that begins
    `CHUNK_MIN` characters or more after the last cut (or `start`) and ends before `end`."""
    comma = text.find(CHUNK_SEPARATOR, start + CHUNK_MIN, end)
    while comma >= 0:
        yield comma + 1
        comma = text.find(CHUNK_SEPARATOR, comma + 1 + CHUNK_MIN, end)


def chunk_pieces(line: str) -> list[str]:
    """`line` cut at its `_chunk_cuts`: one slice of `line` per chunk."""
    return _slices(line, _chunk_cuts(line))


def line_pieces(text: str) -> list[str]:
    """`LINE_CUT.split(text)`: a cut follows each newline whose next character is neither whitespace nor "/"
    (found with `LINE_END`). Each piece is one slice of `text`."""
    return _slices(text, map(re.Match.end, LINE_END.finditer(text)))


def paragraph_pieces(text: str) -> list[str]:
    """`PARAGRAPH_CUT.split(text)`: the cuts of `line_pieces` that follow an empty line (found with `PARAGRAPH_END`)."""
    return _slices(text, map(re.Match.end, PARAGRAPH_END.finditer(text)))


class TokenCounter:
    """True token counts with one encoding, memoized per text (items repeat across requests).

    A long text is counted as the sum of its paragraphs (`PARAGRAPH_CUT`), each memoized, and the
    whole text too (a text met again is not split again): a summary request that serializes a
    conversation into one new text costs the tokenizer only the paragraphs it has not seen, and the
    count is the same as the whole text's; what follows its first line, when that line is short and the
    rest is met again, is memoized too and looked up first (`_count_long_text`). A new text of a few
    lines or more is counted from its lines (`_count_by_lines`): a summary wrapped into the next
    request is one new text made of the summary's lines, counted before. A line of `LINES_FROM`
    characters or more is counted from its chunks (`chunk_pieces`): a tool call's arguments, counted
    when the model wrote them, are counted again only around their ends when a summary prompt
    serializes the call onto one line behind a prefix."""

    def __init__(self, encoding: str = "o200k_base", memo_limit: int = 500_000) -> None:
        self.encoding_name = encoding
        self.encoding = get_encoding(encoding)
        self._memo: dict[str, int] = {}
        self._memo_limit = memo_limit
        self._lines: dict[str, list[int]] = {}
        #: the hashes of the lengths and ends of long texts' rests after their first line (`_count_long_text`)
        self._rest_ends: set[int] = set()

    def count(self, text: str) -> int:
        if not text:
            return 0
        memo = self._memo
        cached = memo.get(text)
        if cached is None:
            if len(text) >= PARAGRAPHS_FROM:
                cached = self._count_long_text(text)
            else:
                cached = self._count_by_lines(text) if len(text) >= LINES_FROM else len(self.encode(text))
            self._remember(text, cached)  # (a text met again is not split again)
        return cached

    def _count_long_text(self, text: str) -> int:
        """A new text of `PARAGRAPHS_FROM` characters or more: the sum of its paragraphs' counts (each memoized), or
        its lines' (`_count_by_lines`) when it has one paragraph. Behind a first line shorter than `LINES_FROM`, the
        rest is looked up first: a text that differs from one counted before only in that line
        (Gemini CLI names a truncated output's saved file by a new number at every request, over the same cut
        body) is neither split again nor tokenized but for the line. Only a rest whose length and ends (`REST_ENDS`)
        it met before is copied out of its text and memoized: a text a strategy writes once (a summary request's
        serialized history, behind its opening tag) costs no copy; a repeated one is remembered from its second
        count (the ends decide only what is remembered: a count is read from the memo of the rest itself)."""
        cut = _first_cut(text)
        rest = None
        if 0 < cut < LINES_FROM:
            ends = hash((len(text) - cut, text[cut : cut + REST_ENDS], text[-REST_ENDS:]))
            if ends in self._rest_ends:
                rest = text[cut:]
                known = self._memo.get(rest)
                if known is not None:
                    return self._first_line(text[:cut]) + known
            else:
                if len(self._rest_ends) >= self._memo_limit:
                    self._rest_ends.clear()
                self._rest_ends.add(ends)
        parts = paragraph_pieces(text)
        if len(parts) == 1:
            return self._count_by_lines(text, cut)
        total = sum(map(self.count, parts))
        if rest is not None:
            self._remember(rest, total - self._first_line(text[:cut]))
        return total

    def _first_line(self, line: str) -> int:
        """The count of a text's first line: from the memo, else `_encode_line` (which memoizes a long one)."""
        counted = self._memo.get(line)
        return self._encode_line(line) if counted is None else counted

    def _count_by_lines(self, text: str, cut: int | None = None) -> int:
        """A new text's count from its lines (`line_pieces`; `cut`: its `_first_cut`, when known). Its first line apart: the rest is
        memoized on its own, for texts that differ only in their first line (a header with a file
        name, an opening tag before a conversation). In the rest, a line counted before (a summary's
        lines are, by the model that wrote it) is read from the memo, a line of `LINES_FROM` characters
        or more is encoded on its own and memoized (as is such a first line), and each run of the other
        lines is encoded at once, so a text with no known line costs two encodes where it would cost one."""
        if cut is None:
            cut = _first_cut(text)
        if not cut:
            return self._count_long_line(text)
        memo, encode = self._memo, self.encode
        first, rest = text[:cut], text[cut:]
        head = self._first_line(first)
        known = memo.get(rest)
        if known is not None:
            return head + known  # its lines are not split
        total = position = 0
        run = -1  # where the current run of unknown lines starts in `rest`
        for line in line_pieces(rest):  # `line_pieces(text)[1:]`: `rest` begins at a cut
            counted = memo.get(line)
            if counted is None and len(line) >= LINES_FROM:
                counted = self._encode_line(line)  # encoded on its own: the run before it ends here
            if counted is None:
                if run < 0:
                    run = position
            else:
                if run >= 0:
                    total += len(encode(rest[run:position]))
                    run = -1
                total += counted
            position += len(line)
        total += len(encode(rest[run:])) if run >= 0 else 0
        self._remember(rest, total)
        return head + total

    def _encode_line(self, line: str) -> int:
        """A line's count, memoized when it has `LINES_FROM` characters or more (a file read whole, a long
        call): the next text that holds it reads it from the memo."""
        if len(line) >= LINES_FROM:
            tokens = self._count_long_line(line)
            self._remember(line, tokens)
            return tokens
        return len(self.encode(line))

    def _count_long_line(self, line: str) -> int:
        """A long line's count as the sum of its chunks' (`chunk_pieces`), each read from the memo or encoded
        and memoized: a line that holds one counted before (a tool call's arguments, then the same call
        serialized into a summary prompt) is encoded only in the chunks around it."""
        memo, encode = self._memo, self.encode
        total = 0
        for chunk in chunk_pieces(line):
            counted = memo.get(chunk)
            if counted is None:
                counted = len(encode(chunk))
                self._remember(chunk, counted)
            total += counted
        return total

    def _remember(self, text: str, tokens: int) -> None:
        memo = self._memo
        if len(memo) >= self._memo_limit:
            memo.clear()
        memo[text] = tokens

    def encode(self, text: str) -> list[int]:
        """The text's token ids, special-token text read as ordinary text: `encode(text, disallowed_special=())`,
        which tiktoken documents `encode_ordinary` to equal, without its search for special tokens."""
        return self.encoding.encode_ordinary(text)

    def common_prefix(self, a: str, b: str) -> int:
        """How many leading token ids `encode(a)` and `encode(b)` share, tokenizing only from the line
        (`LINE_CUT`) in which the texts first differ, and in that line from the last end of its chunks
        (`chunk_pieces`) before the difference: the text before it is the same in both and is counted
        (memoized by paragraph, line and chunk). From there each side is encoded a piece at a time, up to
        its next cut (a `LINE_CUT`, or inside a `CHUNK_SEPARATOR`; each piece memoized: a rewritten message
        meets its former self again), only while the ids still agree."""
        if a == b:
            return self.count(a)
        differ = common_prefix_length(a, b)
        line = _last_cut_before(a, differ)
        start = _last_chunk_cut(a, line, differ)  # in a long line, the last of its chunks' ends before the difference
        texts, at = (a, b), [start, start]
        ids: tuple[list[int], list[int]] = ([], [])
        same = 0
        while True:
            grown = False
            for side in (0, 1):
                text, pos = texts[side], at[side]
                if len(ids[side]) == same and pos < len(text):
                    end = _next_cut(text, (differ if pos == start else pos) + 1)
                    ids[side].extend(self._line_ids(text[pos:end]))
                    at[side], grown = end, True
            same = _common_length(ids[0], ids[1], same)
            if not grown or same < min(len(ids[0]), len(ids[1])):
                return self.count(a[:line]) + (self._count_long_line(a[line:start]) if start > line else 0) + same

    def _line_ids(self, line: str) -> list[int]:
        lines = self._lines
        ids = lines.get(line)
        if ids is None:
            ids = self.encode(line)
            if len(lines) >= LINES_KEPT:
                lines.clear()
            lines[line] = ids
        return ids


def _first_cut(text: str) -> int:
    """The first `LINE_CUT` position of `text`, where `line_pieces(text)[1]` begins (0 if none: one piece)."""
    newline = text.find("\n")
    while 0 <= newline < len(text) - 1:
        cut = newline + 1
        if not text[cut].isspace() and text[cut] != "/":
            return cut
        newline = text.find("\n", cut)
    return 0


def _next_cut(text: str, at: int) -> int:
    """The first cut of `text` at `at` or after it, a `LINE_CUT` or inside a `CHUNK_SEPARATOR`, else `len(text)`."""
    line = LINE_CUT.search(text, at)
    comma = text.find(CHUNK_SEPARATOR, max(at - 1, 0))
    return min(line.start() if line else len(text), comma + 1 if comma >= 0 else len(text))


def _last_chunk_cut(text: str, start: int, end: int) -> int:
    """The last of the `_chunk_cuts` of `text[start:]` whose separator ends before `end` (`start` if none):
    a cut of every text that begins with `text[:end]`."""
    return max(_chunk_cuts(text, start, end), default=start)  # the cuts increase: the largest is the last


def _last_cut_before(text: str, end: int) -> int:
    """The last `LINE_CUT` position below `end` (0 if none): a cut of every text that begins with `text[:end]`."""
    newline = text.rfind("\n", 0, max(end - 1, 0))
    while newline >= 0:
        cut = newline + 1
        if not text[cut].isspace() and text[cut] != "/":
            return cut
        newline = text.rfind("\n", 0, newline)
    return 0


def _common_length(left: Sequence[int], right: Sequence[int], start: int = 0) -> int:
    """How many leading ids the two lists share, given that the first `start` are known to be equal."""
    same, end = start, min(len(left), len(right))
    while same < end and left[same] == right[same]:
        same += 1
    return same


#: litellm's `token_counter(messages=...)` for an OpenAI-tokenizer model (litellm 1.110,
#: litellm_core_utils/token_counter.py `_MessageCountParams`, `_count_messages`, `_count_extra`,
#: `_get_tiktoken_count_function`): 3 tokens per message, each string value of a message counted (1 more
#: for a `name`), 3 for the reply primer, and every string encoded in slices of 1,024 characters whose
#: counts are summed (`TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS`). Not reproduced: the `gpt-3.5-turbo-0301`
#: constants (4 and -1), tools, list contents, and the sampling of a string over 4,000,000 characters.
LITELLM_TOKENS_PER_MESSAGE = 3
LITELLM_TOKENS_PER_NAME = 1
LITELLM_REPLY_PRIMER = 3
LITELLM_CHUNK_CHARS = 1_024


def litellm_messages_tokens(counter: TokenCounter, messages: Sequence[Mapping[str, str]]) -> int:
    """`litellm.token_counter(model=..., messages=messages)` with `counter`'s encoding (see the constants)."""
    total = LITELLM_REPLY_PRIMER
    for message in messages:
        total += LITELLM_TOKENS_PER_MESSAGE
        for key, value in message.items():
            total += sum(counter.count(value[i : i + LITELLM_CHUNK_CHARS]) for i in range(0, len(value), LITELLM_CHUNK_CHARS))
            total += LITELLM_TOKENS_PER_NAME if key == "name" else 0
    return total


@cache
def shared_counter(encoding: str) -> TokenCounter:
    """The process's memoizing counter for an encoding: every cell and metric counts the same texts."""
    return TokenCounter(encoding)


def encrypted_reasoning_estimate(encrypted_len: int) -> int:
    """Tokens of an encrypted reasoning item from its length: Codex's byte estimate (codex.md §6), /4."""
    return codex_estimate_bytes(max(0, encrypted_len * 3 // 4 - 650))


@dataclass(frozen=True)
class HiddenTokens:
    """Per session: what each reasoning item costs when billed, and which items are real user messages.

    `thinking`, when set, is the count of a visible thinking (`reasoning`) message on a model that drops earlier
    turns' thinking: it bills only after the last user message (`last_user`), as encrypted reasoning does (the
    counter that sets it counts such a message's visible tokens as 0, `compaction_bench.provider.MessageCounter`)."""

    reasoning: Mapping[str, int]
    user_ids: frozenset[str]
    recorded: int = 0  # reasoning items whose cost the recording gives
    estimated: int = 0  # reasoning items estimated from their encrypted length
    thinking: Callable[[Message], int] | None = None

    @property
    def bills(self) -> bool:
        """Whether any message can bill hidden tokens (none do when there is no reasoning and no stripped thinking)."""
        return bool(self.reasoning) or self.thinking is not None

    @classmethod
    def of(cls, transcript: Transcript) -> HiddenTokens:
        reasoning: dict[str, int] = {}
        recorded = estimated = 0
        for step in transcript.steps():
            # Only encrypted reasoning is hidden; visible thinking (Anthropic, Pi) is counted as its text.
            items = [i for i in step.items if i.kind == "reasoning" and i.meta.get("encrypted_len")]
            total = step.usage.reasoning if step.usage is not None else 0
            for n, item in enumerate(items):
                if total:
                    share = total // len(items) + (1 if n < total % len(items) else 0)
                    reasoning[item.id] = share
                    recorded += 1
                else:
                    reasoning[item.id] = encrypted_reasoning_estimate(int(item.meta["encrypted_len"]))
                    estimated += 1
        user_ids = frozenset(i.id for i in transcript.items if i.is_real_user)
        return cls(reasoning, user_ids, recorded, estimated)

    def per_message(self, messages: Sequence[Message]) -> list[int]:
        """Billed hidden tokens of each message (`billed`)."""
        if not self.bills:
            return [0] * len(messages)
        return self.billed(messages, 0, self.last_user(messages))

    def total(self, messages: Sequence[Message]) -> int:
        """Billed hidden tokens of a whole request (`billed`), reading only the messages after its last user message (`last_user`)."""
        if not self.bills:
            return 0
        after = self.last_user(messages) + 1
        return sum(self.billed(messages[after:], after, after - 1))

    def billed(self, messages: Sequence[Message], start: int, last_user: int) -> list[int]:
        """The hidden tokens each of `messages` bills, the first of them at index `start` of a request
        whose last user message (`last_user`) is at `last_user`: its reasoning after that message, nothing
        before it (earlier turns' reasoning is dropped server-side, docs/specs/codex.md §1.3; earlier turns'
        thinking on the Claude models that drop it, docs/specs/anthropic-context-management.md §3)."""
        before = min(max(last_user + 1 - start, 0), len(messages))
        return [0] * before + [self.of_message(m) for m in messages[before:]]

    def last_user(self, messages: Sequence[Message]) -> int:
        """Index of the request's last message that holds a real user message (-1: none); only the
        messages after it bill their reasoning. Found from the end (only the tail is read). Where earlier
        turns' thinking is dropped (`thinking`), Anthropic's rule: any user message that is not a tool result,
        an agent's own (a reminder, a summary) included ("a non-tool-result user block causes prior thinking
        blocks to be stripped", Anthropic's prompt-caching guide)."""
        if self.thinking is not None:
            return last_user_message(messages)
        users = self.user_ids
        for n in range(len(messages) - 1, -1, -1):
            if not users.isdisjoint(messages[n].item_ids):
                return n
        return -1

    def of_message(self, message: Message) -> int:
        """The hidden reasoning a message carries, billed when it comes after the last user message (`last_user`):
        its encrypted reasoning's, and a thinking message's own count where earlier turns' thinking is dropped."""
        reasoning, ids = self.reasoning, message.item_ids
        if len(ids) == 1:  # most messages come from one item
            hidden = reasoning.get(ids[0], 0)
        else:
            hidden = sum(reasoning.get(i, 0) for i in ids) if reasoning else 0
        if self.thinking is not None and message.role == "reasoning":
            hidden += self.thinking(message)
        return hidden


def last_user_message(messages: Sequence[Message]) -> int:
    """Index of the last user-role message of a request (-1: none), found from the end: where a Claude model drops
    earlier turns' thinking, the thinking before it is gone (a tool result, role `tool`, starts no turn)."""
    for n in range(len(messages) - 1, -1, -1):
        if messages[n].role == "user":
            return n
    return -1


def unrecorded_tokens(recorded_input: int, counted: int) -> int:
    """The system prompt and tool schemas a transcript does not record, from its first recorded
    request: the provider's input minus this project's count of the same request (never negative)."""
    return max(0, recorded_input - counted)
