"""The deterministic offline models: `offline/extractive` (summarizer) and `offline/reader` (answerer).

They make the whole benchmark run with no network and no weights, and they are honest baselines
for what a model could keep: the summarizer copies salient lines verbatim, the reader quotes the
best-matching span.

- extractive: scores every line of the conversation by salience (`SALIENCE`: user requests and
  constraints, errors, decisions, paths, next steps, progress; newer lines a little more) and
  keeps the best that fit its output budget (a line's categories are its patterns' matches, the four
  word-bounded ones found in one scan, `BOUNDED_WORDS`): the strategy's own summary limit (the request's
  max_tokens) capped at `SUMMARY_TARGET_TOKENS` (about a real model's summary length; `bench
  calibrate` compares it with the real summaries in the corpora). The selection never looks at the
  template's section titles: they only decide the layout (a line goes under the first heading
  whose title fits its category, else the first), so headings renamed to titles of the same
  length and section rule change no summary of a whole replay (tests/test_offline_summarizer.py).
  Two things of a title do count: its characters take their share of the budget (a shorter title
  leaves room for a line more, which a session that compacts many times carries on), and in
  update mode a previous summary's lines are scored by their section's rule. It cannot read instructions beyond headings (an instruction to drop everything or to
  be vague has no effect), which is why `bench gate` refuses template-only comparisons with it.
  The request's last user message and its system messages are instructions; a tag block in them holds
  conversation unless the prompt names its tag in a sentence ("inside <summary> tags"): then it is an
  example of the answer, whose headings are the sections, as a `<template>` block's are (`_tag_blocks`).
  A line is read without its list markers (the summary lists every line it keeps as one "- " item).
  In update mode (a ``<previous-summary>`` block, an earlier summary in the conversation found by
  `SUMMARY_MARKERS`, or one of its own summaries however a strategy words the message around it,
  `_OwnSummaries`, or what a tag block that ends with the start of one shows of it, as OpenHands'
  ~500-character event previews do, `_OwnSummaries.preview`) the previous summary's lines compete
  with the conversation's as its oldest lines, scored by their words and section
  (`_earlier_lines`), so what still matters stays and new salient
  lines replace the least salient old ones, instead of a full previous summary leaving no room for
  anything new. Its reading is
  memoized per process by message text, by paragraph of a serialized conversation (a new text in
  each request, made of earlier ones' paragraphs) and by line of a previous summary, and the lines
  it carries from a previous summary by that summary's text; `compaction_bench.llm` hands it a
  request as the `Reading`s of runs of messages, each read once per process. It chooses without
  scoring and sorting every line: the candidate lines of the last request are kept by salience
  (`_Chain`), a request that shares its parts costs the lines of its new ones, and the buckets are
  merged by score until the budget is spent (`_select`), so a request costs the lines new in it and
  the lines it looks at to choose, plus passes in C over its parts. A request that shares runs with
  the last one takes their content parts and earlier summaries from the last request's `Split`
  (`split_readings` with `Shared`), reading only the runs around them.
- reader: splits the context into lines and returns the line (with its neighbour when short) that
  shares the most informative words with the question. Each distinct message text is indexed once
  per process (`ReaderContext`), so many questions about overlapping contexts cost little.

Both read a tool output in a Codex JSON envelope as a model reads it, its string escapes undone
(`wire.readable_output`), not as one escaped line.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import heapq
import itertools
import math
import operator
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from compaction_bench.log_view import common_prefix_length
from compaction_bench.wire import readable_output

HEADING_PATTERNS = (
    re.compile(r"^\s{0,3}#{1,4}\s+(?P<title>[^#\n]{2,80}?)\s*#*\s*$"),
    re.compile(r"^\s*\d+[.)]\s+\*\*(?P<title>[^*\n]{2,80})\*\*"),
    # a numbered title ending in a colon, with or without its description after it (Claude Code's nine sections)
    re.compile(r"^\s*\d+[.)]\s+(?P<title>[A-Z][\w ,&/'-]{1,60}?):(?:\s|$)"),
    re.compile(r"^\s*\*\*(?P<title>[^*\n]{2,60})\*\*:?\s*$"),
    re.compile(r"^\s*<(?P<title>[a-z][a-z_-]{2,40})>\s*$"),
)
#: A tag's name: a word, or two (OpenHands V0's `<PREVIOUS SUMMARY>`); an opening tag may have attributes
#: (OpenHands V0's `<EVENT id=12>`).
TAG_NAME = r"[a-zA-Z][\w-]{1,40}(?: [a-zA-Z][\w-]{1,40})?"
TAG_ATTRIBUTES = r"""(?:\s+[\w-]+=(?:"[^"<>]*"|'[^'<>]*'|[^\s"'<>]*))*"""
TAG_BLOCK = re.compile(rf"<(?P<tag>{TAG_NAME}){TAG_ATTRIBUTES}>\n?(?P<body>.*?)\n?</(?P=tag)>", re.S)
#: The opening and closing tags of a `TAG_BLOCK` (`tag_blocks` pairs them without the pattern's lazy scan).
OPENING_TAG = re.compile(rf"<({TAG_NAME}){TAG_ATTRIBUTES}>")
CLOSING_TAG = re.compile(rf"</({TAG_NAME})>")
PREVIOUS_SUMMARY_TAGS = ("previous-summary", "previous_summary", "previous-summaries", "previous summary")
INSTRUCTION_TAGS = ("template",)
SUMMARY_MARKERS = ("<summary>", "summary of the conversation so far", "another language model started to solve")

#: A path (needs a "/") or a file name (needs a "."): `_has_path` searches only the alternatives a line can match.
SLASHED_PATH = re.compile(r"(?:[\w.-]+/)+[\w.-]+")
FILE_EXTENSIONS = "py|ts|js|tsx|rs|go|md|json|yaml|yml|toml|txt|cfg|sh|java|c|h|cpp|rb|sql"
FILE_NAME = re.compile(rf"\b[\w-]+\.(?:{FILE_EXTENSIONS})\b")
#: The end of a `FILE_NAME` match (its "." and extension, then a word boundary): where there is none, `FILE_NAME`
#: matches nowhere, and looking for it is a scan for "." where `FILE_NAME` tries a name at every word.
FILE_EXTENSION = re.compile(rf"\.(?:{FILE_EXTENSIONS})\b")
PATH = re.compile(f"{SLASHED_PATH.pattern}|{FILE_NAME.pattern}")
#: Where `SLASHED_PATH` matches: a "/" between two of its characters (its last "/" has them on both sides, and
#: such a "/" is a match). Found without the pattern's backtracking through every run of them that has no "/".
PATH_SLASH = re.compile(r"[\w.-]/[\w.-]")
ERROR = re.compile(r"(error|exception|traceback|failed|failure|fatal|assert|exit code [1-9]|not found|denied|panic)", re.I)
CONSTRAINT = re.compile(r"\b(must|never|don't|do not|always|only|should not|shouldn't|avoid|required?|prefer)\b", re.I)
DECISION = re.compile(r"\b(decided|decision|chose|choose|instead|because|since|so that|we'll use|will use|went with|opted)\b", re.I)
PROGRESS = re.compile(r"\b(done|fixed|created|added|updated|implemented|passed|passing|completed|wrote|changed|removed|renamed)\b", re.I)
NEXT = re.compile(r"\b(next|todo|to do|remaining|then|plan|will|pending|still need|afterwards)\b", re.I)
WORD = re.compile(r"[A-Za-z0-9_./-]+")
#: A line's own list markers ("- ", "* ", "• ", nested or not): the summary lists every line it keeps as a
#: "- " item, so a line quoted from a list (or from an earlier summary read as conversation) is kept
#: without them, and is the same line however deep it was nested.
LIST_MARKERS = re.compile(r"^(?:[-*•]\s+)+")
LIST_MARKER_STARTS = "-*•"
#: ERROR, CONSTRAINT, DECISION, PROGRESS and NEXT (in that order), and the same compiled case-sensitively for text
#: lowered first: their words are lower case ASCII, and lowering a text without `LOWERING_DIFFERS` changes no length
#: and no word boundary and turns exactly the characters that match a letter case-insensitively into that letter,
#: so they match the same lines, several times faster (the engine can skip ahead to the words' first letters).
CASELESS = (ERROR, CONSTRAINT, DECISION, PROGRESS, NEXT)
LOWERED = tuple(re.compile(p.pattern, p.flags & ~re.I) for p in CASELESS)
#: The characters for which that does not hold, found over every code point (tests/test_speed_summarizer.py): "İ"
#: lowers to two characters, and "ı" and "ſ" match "i" and "s" case-insensitively but lower to themselves.
LOWERING_DIFFERS = re.compile("[\u0130\u0131\u017f]")
#: The word-bounded patterns (each a word boundary, an alternation of words, a word boundary) by category, caseless and
#: lowered: `_bounded_categories` finds all four in one scan of a line (`BOUNDED_WORDS`) instead of four.
BOUNDED = (("constraint", CONSTRAINT, LOWERED[1]), ("decision", DECISION, LOWERED[2]), ("progress", PROGRESS, LOWERED[3]), ("next", NEXT, LOWERED[4]))
#: A character a word boundary (`\b`) counts as part of a word.
WORD_CHARACTER = re.compile(r"\w")


def _bounded_words(pattern: re.Pattern[str]) -> tuple[str, ...]:
    """The texts the words of a word-bounded pattern match: each word is literal but for an optional last
    letter ("required?" is "require" or "required")."""
    words = pattern.pattern.removeprefix(r"\b(").removesuffix(r")\b").split("|")
    return tuple(form for word in words for form in ((word[:-2], word[:-1]) if word.endswith("?") else (word,)))


def _word_categories() -> dict[str, frozenset[str]]:
    """`WORD_CATEGORIES`: each word's categories, with those of the words that begin it and end at a word
    boundary inside it."""
    own: dict[str, set[str]] = {}
    for category, _, lowered in BOUNDED:
        for word in _bounded_words(lowered):
            own.setdefault(word, set()).add(category)
    return {
        word: frozenset().union(*(said for other, said in own.items() if word == other or (word.startswith(other) and WORD_CHARACTER.match(word, len(other)) is None)))
        for word in own
    }


#: What each word the scan can report says. The scan reports only the longest word starting at a place, so a
#: word counts the categories of the shorter words bounded there too ("will use" is a decision and, by "will",
#: a next step).
WORD_CATEGORIES = _word_categories()


def longest_first(words: Iterable[str]) -> str:
    """An alternation that matches the same texts as the `words` (literals), written as their trie: at each
    character the branches that continue a word, each tried before the word that ends there (a greedy
    optional tail), so the longest word that lets the rest of the pattern match is taken, as an alternation
    of the words sorted longest first takes it. At each place the engine follows one branch per character
    instead of trying every word."""
    trie: dict[str, Any] = {}  # a character's node, "" where a word ends
    for word in words:
        node = trie
        for character in word:
            node = node.setdefault(character, {})
        node[""] = {}

    def branches(node: dict[str, Any]) -> str:
        alternatives = [re.escape(character) + branches(child) for character, child in sorted(node.items()) if character]
        if len(alternatives) == 1:
            return f"(?:{alternatives[0]})?" if "" in node else alternatives[0]
        group = f"(?:{'|'.join(alternatives)})" if alternatives else ""
        return f"{group}?" if group and "" in node else group

    return branches(trie)


#: At every word boundary of a lowered line, the longest of the word-bounded patterns' words that starts there
#: and ends at a word boundary (zero-width, so words that overlap are all found): a pattern matches a line
#: exactly where the scan reports one of its words or a longer word that begins with one (`WORD_CATEGORIES`).
BOUNDED_WORDS = re.compile(r"\b(?=(" + longest_first(WORD_CATEGORIES) + r")\b)")

STOPWORDS = frozenset(
    "a an the of to in on at for and or is are was were be been what which who whom whose when where why how "
    "did does do that this these those it its with by from as into about after before during exact exactly "
    "first last session user assistant please tell me you your we our i my any all there their".split()
)

SECTION_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("constraint", "preference", "requirement", "rule", "instruction"), "constraint"),
    (("error", "problem", "issue", "fail", "bug", "blocker"), "error"),
    (("decision", "rationale", "choice"), "decision"),
    (("file", "artifact", "code", "path", "read", "modified"), "artifact"),
    (("next", "todo", "pending", "remaining", "plan", "follow"), "next"),
    (("progress", "done", "completed", "accomplished", "state", "status", "work"), "progress"),
    (("goal", "objective", "task", "request", "intent", "purpose", "overview", "context"), "goal"),
)

CHARS_PER_TOKEN = 3  # conservative: the output stays within max_tokens for code-heavy text
#: The summarizer writes about as much as a real model does (a few thousand tokens), never more
#: than the request's max_tokens. Filling a 32k-token allowance with copied lines would make
#: summaries no model writes, and strategies that allow such budgets would compact in a loop.
SUMMARY_TARGET_TOKENS = 2_000


def _text_of(message: Mapping[str, Any]) -> str:
    """A wire message's text as the offline models read it: its content (a tool output in a Codex JSON envelope read
    as a model reads it, `wire.readable_output`), then each call's name and arguments."""
    content = message.get("content")
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping)]
        content = "\n".join(parts)
    text = str(content or "")
    if message.get("role") == "tool":
        text = readable_output(text)
    for call in message.get("tool_calls") or ():
        function = call.get("function", call) if isinstance(call, Mapping) else {}
        text += f"\n{function.get('name', '')} {function.get('arguments', '')}"
    return text


@functools.lru_cache(maxsize=1 << 10)
def _section_titles(instructions: str) -> tuple[str, ...]:
    """Section headings a prompt asks for, in order, without duplicates (memoized per process: a strategy
    sends the same template with every summary request)."""
    titles: list[str] = []
    seen = set(PREVIOUS_SUMMARY_TAGS)  # lowered titles already taken, and the tags that are never titles
    for line in instructions.splitlines():
        if line.strip().startswith("```"):  # a code fence is never a heading
            continue
        title = _heading(line)
        if title is not None and title.lower() not in seen:
            titles.append(title)
            seen.add(title.lower())
    return tuple(titles)


def _heading(line: str) -> str | None:
    """The title of a heading line (the first of `HEADING_PATTERNS` that matches it), else None."""
    for pattern in HEADING_PATTERNS:
        match = pattern.match(line)
        if match:
            return match.group("title").strip()
    return None


@functools.lru_cache(maxsize=1 << 8)
def _rule_category(title: str) -> str | None:
    """The category of the first of `SECTION_RULES` whose words a section title holds, else None."""
    lowered = title.lower()
    return next((category for words, category in SECTION_RULES if any(w in lowered for w in words)), None)


def _category(title: str) -> str:
    """The category of a section title (`_rule_category`; "goal" when no rule says)."""
    return _rule_category(title) or "goal"


@functools.lru_cache(maxsize=1 << 16)
def _categories(text: str, role: str) -> tuple[str, ...]:
    """A line's salience categories (memoized per process: later summaries of a session read the
    same lines again)."""
    lowered = text.isascii() or LOWERING_DIFFERS.search(text) is None
    subject, error = (text.lower(), LOWERED[0]) if lowered else (text, ERROR)
    categories = []
    # a line of an earlier summary has no speaker: it is what its words say (its section adds the rest, `_earlier_lines`)
    summary = role == SUMMARY_ROLE
    spoken = role == "assistant" or summary
    said = _bounded_categories(subject, lowered) if spoken or role == "user" else frozenset()
    if role == "user":
        categories.append("goal")
    if (role == "user" or summary) and "constraint" in said:
        categories.insert(0, "constraint")
    if (role in ("tool", "user", "assistant") or summary) and error.search(subject):
        categories.append("error")
    if spoken and "decision" in said:
        categories.append("decision")
    if _has_path(text):
        categories.append("artifact")
    if spoken and "next" in said:
        categories.append("next")
    if spoken and "progress" in said:
        categories.append("progress")
    return tuple(categories)


def _bounded_categories(subject: str, lowered: bool) -> frozenset[str]:
    """The categories of the word-bounded patterns (`BOUNDED`) that match `subject`: a lowered line in one
    scan (`BOUNDED_WORDS`), else by the caseless patterns."""
    if lowered:
        found = BOUNDED_WORDS.findall(subject)
        return frozenset().union(*map(WORD_CATEGORIES.__getitem__, found)) if found else frozenset()
    return frozenset(category for category, caseless, _ in BOUNDED if caseless.search(subject))


def _has_path(text: str) -> bool:
    """Whether `PATH` matches in `text`: a `SLASHED_PATH` (`PATH_SLASH`) or a `FILE_NAME`."""
    if "/" in text and PATH_SLASH.search(text) is not None:
        return True
    return "." in text and FILE_EXTENSION.search(text) is not None and FILE_NAME.search(text) is not None


#: Salience weight of each line category (`_categories`); a line scores the sum of its categories.
SALIENCE = {"constraint": 4.0, "goal": 3.0, "error": 2.5, "decision": 2.0, "artifact": 1.5, "next": 1.5, "progress": 1.0}
#: Newer lines score up to this much more (the end of the span is what the next model continues from).
RECENCY = 1.0
#: The role `_categories` reads a line of an earlier summary as.
SUMMARY_ROLE = "summary"
#: What a summary lists under a section it has no line for (never a line of it when read back).
EMPTY_SECTION = "(none)"


@dataclass(frozen=True)
class _Part:
    """The summarizable lines of one text: every line stripped, at least 4 characters, cut at 400,
    takes one position (`size` of them); `candidates` are the lines with salience categories, as
    (line number within the text, line, salience of its categories, categories)."""

    size: int
    candidates: tuple[tuple[int, str, float, tuple[str, ...]], ...]


@functools.lru_cache(maxsize=1 << 16)
def _part(text: str, role: str) -> _Part:
    """A message's (or a paragraph's) lines as the summarizer reads them (without their list markers), with `role` their speaker
    ("conversation": each line's own prefix says, `_speaker`). Memoized per process: the same
    messages, and the same paragraphs of serialized conversations, are in many summary requests."""
    size = 0
    candidates = []
    for raw in text.splitlines():
        line = raw.strip()
        if line[:1] in LIST_MARKER_STARTS:
            line = LIST_MARKERS.sub("", line, count=1)
        if len(line) < 4:
            continue
        line = line[:400]
        categories = _categories(line, _speaker(line) if role == "conversation" else role)
        if categories:
            candidates.append((size, line, sum(SALIENCE[c] for c in dict.fromkeys(categories)), categories))
        size += 1
    return _Part(size, tuple(candidates))


def _conversation_parts(text: str) -> list[_Part]:
    """A serialized conversation's lines by paragraph (a new text in every request, made of the
    paragraphs of earlier ones). Cutting at blank lines keeps every non-blank line whole."""
    return [_part(paragraph, CONVERSATION_ROLE) for paragraph in text.split("\n\n")]


class TagReading(NamedTuple):
    """An instruction text (a system message, or the request's last user message) read by its tag blocks."""

    #: the last previous-summary block's body, or None
    previous: str | None
    #: the bodies of the blocks that hold conversation, in order
    bodies: tuple[str, ...]
    #: the text outside those blocks, with the blocks of instruction and layout tags unwrapped
    outside: str
    #: the bodies of its layout blocks (`_layout_tags`: the examples of the answer it shows) and of its
    #: `INSTRUCTION_TAGS` blocks (the template of the answer), joined; "" without any
    layout: str


#: Stands in for the "<" of a tag named inside a sentence while `_tag_blocks` pairs tags: a naming opens no block.
NAMING_MASK = "\ue000"


@functools.lru_cache(maxsize=1 << 6)
def _tag_blocks(text: str) -> TagReading:
    """`text` read by its tag blocks (`TagReading`; memoized: the same template comes with every request).
    A tag named inside a sentence ("inside <analysis> tags": words before and after it on its line, `_namings`) opens no block:
    paired with the next closing tag of its name, it made one block of everything up to the example of
    the answer the prompt shows later."""
    namings = _namings(text)
    if namings and NAMING_MASK not in text:
        # the mask stands in for one character: the blocks of the masked text are at the same places in `text`
        cuts = [0, *(at for at, _ in namings), len(text)]
        spans = tag_spans(NAMING_MASK.join(text[a + (k > 0) : b] for k, (a, b) in enumerate(itertools.pairwise(cuts))))
    else:
        spans = tag_spans(text)
    blocks = [(tag, text[start:end], text[body:body_end]) for tag, start, end, body, body_end in spans]
    layout = _layout_tags(text, blocks, namings)
    previous = None
    bodies = []
    examples = []
    pieces = []  # the text outside the blocks, and the bodies of instruction and layout blocks in their place
    cursor = 0
    for (tag, start, end, _, _), (_, _, body) in zip(spans, blocks, strict=True):
        tag = tag.lower()
        pieces.append(text[cursor:start])
        cursor = end
        if tag in PREVIOUS_SUMMARY_TAGS:
            previous = body
        elif tag in INSTRUCTION_TAGS or tag in layout:
            # A layout the summary must follow: its headings are the sections, not conversation (a heading in
            # text around it, such as a file quoted in OpenCode V2's recent text, is none of them).
            pieces.append(body)
            examples.append(body)
        else:
            bodies.append(body)
    pieces.append(text[cursor:])
    outside = "".join(pieces)
    return TagReading(previous, tuple(bodies), outside, "\n".join(examples))


def _namings(text: str) -> list[tuple[int, str]]:
    """(position, lowered tag) of each opening tag in `text` named inside a sentence: with words before it
    and more after it on its line ("inside <analysis> tags", "called <state_snapshot>."; "Here is the
    conversation: <conversation>" at a line's end opens a block), before any conversation serialized in
    it (`_spoken`: a tag a speaker names, such as code's `Promise<void> {`, is the speaker's own words).
    A previous-summary tag always opens a block."""
    namings = []
    conversation = [m.start() for m in (next(_line_starts(p, text), None) for p in (SPEAKER_HEADING_TEXT, LABELLED_TURN_TEXT)) if m is not None]
    for match in OPENING_TAG.finditer(text, 0, min(conversation, default=len(text))):
        line_end = text.find("\n", match.end())
        after = text[match.end() : len(text) if line_end < 0 else line_end]
        before = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
        tag = match.group(1).lower()
        if before.strip() and after.strip() and tag not in PREVIOUS_SUMMARY_TAGS:
            namings.append((match.start(), tag))
    return namings


def _layout_tags(text: str, blocks: Sequence[tuple[str, str, str]], namings: Sequence[tuple[int, str]]) -> set[str]:
    """The tags an instruction text names as the layout of its answer: named inside a sentence
    (`namings`: "inside <analysis> tags", "a record called <state_snapshot>", "inside <summary></summary>
    tags") outside its blocks (`blocks`, in order) or inside a block of a tag already found so. Such a tag's
    blocks are an example of the answer, instructions like `INSTRUCTION_TAGS`; a block of a tag never named
    so holds conversation (a tag named only in the conversation is the conversation's own words). A
    previous-summary tag is never named so (`_namings`: its block is the summary to update)."""
    starts: list[int] = []
    ends: list[int] = []
    cursor = 0
    for _, whole, _ in blocks:  # in order and apart, so a naming's block is found by bisection
        starts.append(text.find(whole, cursor))
        cursor = starts[-1] + len(whole)
        ends.append(cursor)
    # each naming with the tag of the block it is inside (None: outside every block, or opening one)
    inside = []
    for at, tag in namings:
        k = bisect.bisect_right(starts, at) - 1
        inside.append((tag, blocks[k][0].lower() if k >= 0 and starts[k] < at < ends[k] else None))
    layout: set[str] = set()
    found = {tag for tag, block in inside if block is None}
    while found - layout:  # a layout block may name further ones (an example of <summary> inside the one of <analysis>)
        layout |= found
        found = {tag for tag, block in inside if block in layout}
    return layout


#: A speaker's heading in a conversation serialized as Aider serializes one for its summary request
#: ("# USER" or "# ASSISTANT" on a line of its own, then the message; aider.md §6).
SPEAKER_HEADING = re.compile(r"^# (USER|ASSISTANT)$", re.M)
#: A line that starts a turn of a conversation serialized with speaker labels, as Pi (pi.md, the
#: serializer) and OpenCode V2 (opencode.md, V2 core: appended to its prompt, in no tag) write one.
LABELLED_TURN = re.compile(
    r"^\[(?:User|Assistant|Assistant (?:thinking|reasoning|tool calls?)|Tool (?:result|error)|System update|Synthetic context|Shell)\]: ",
    re.M,
)
#: The role `_spoken` gives a labelled conversation: read by paragraph, each line's label its speaker (`_conversation_parts`).
CONVERSATION_ROLE = "conversation"
#: `SPEAKER_HEADING` and `LABELLED_TURN` without their "^": a pattern that starts with "^" has the engine try
#: every position of a long prompt, one that starts with "# " or "[" only where those are (`_line_starts`).
SPEAKER_HEADING_TEXT = re.compile(SPEAKER_HEADING.pattern.removeprefix("^"), re.M)
LABELLED_TURN_TEXT = re.compile(LABELLED_TURN.pattern.removeprefix("^"), re.M)


def _line_starts(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """The matches of `pattern` in `text` that begin a line: those the pattern finds with "^" before it in
    multi-line mode. (No match holds a newline, so one that begins no line hides none that does.)"""
    return (match for match in pattern.finditer(text) if not match.start() or text[match.start() - 1] == "\n")


@functools.lru_cache(maxsize=1 << 6)
def _spoken(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(the text before a serialized conversation in it, the conversation as (role, text) pairs) of an
    instruction text: conversation, not instructions, and its headings not the summary's sections.
    Aider's request is its prompt as the system message and the conversation as the one user message,
    each message under a `SPEAKER_HEADING` (a pair per message); OpenCode V2 appends its labelled
    conversation to its prompt (from the first `LABELLED_TURN` on: one pair, `CONVERSATION_ROLE`).
    Memoized: the same text is read apart in every request."""
    headings = list(_line_starts(SPEAKER_HEADING_TEXT, text))
    if headings:
        ends = [h.start() for h in headings[1:]] + [len(text)]
        said = tuple((h.group(1).lower(), text[h.end() : end].removeprefix("\n")) for h, end in zip(headings, ends, strict=True))
        return text[: headings[0].start()], said
    turn = next(_line_starts(LABELLED_TURN_TEXT, text), None)
    if turn is not None:
        return text[: turn.start()], ((CONVERSATION_ROLE, text[turn.start() :]),)
    return text, ()


def tag_blocks(text: str) -> list[tuple[str, str, str]]:
    """(tag, whole block, body) of each match of `TAG_BLOCK.finditer(text)`, in order (`tag_spans`)."""
    return [(tag, text[start:end], text[body:body_end]) for tag, start, end, body, body_end in tag_spans(text)]


def tag_spans(text: str) -> list[tuple[str, int, int, int, int]]:
    """(tag, start, end, body start, body end) of each match of `TAG_BLOCK.finditer(text)`, in order. The
    pattern's lazy body scans to the end of the text from every opening tag that is never closed (code's
    `Promise<void>`, hundreds in a summary prompt); here each opening tag is paired with the first closing
    tag of its name after it, found by bisection among that name's closing positions, and the optional
    newlines inside the tags are taken as the pattern takes them."""
    closings: dict[str, list[int]] = {}
    for match in CLOSING_TAG.finditer(text):
        closings.setdefault(match.group(1), []).append(match.start())
    spans: list[tuple[str, int, int, int, int]] = []
    position = 0
    while closings and (opening := OPENING_TAG.search(text, position)) is not None:
        tag = opening.group(1)
        body = opening.end() + (text.startswith("\n", opening.end()))
        starts = closings.get(tag)
        k = bisect.bisect_left(starts, body) if starts else 0
        if not starts or k == len(starts):
            position = opening.start() + 1  # no block starts here: the pattern tries the next position
            continue
        close = starts[k]
        end = close + len(tag) + 3
        body_end = close - 1 if close > body and text[close - 1] == "\n" else close
        spans.append((tag, opening.start(), end, body, body_end))
        position = end
    return spans


#: How many of its latest summaries the offline summarizer recognises in a later request (`_OwnSummaries`).
OWN_SUMMARIES_KEPT = 1024
#: Its summaries are looked up by at most this many of their first characters (each begins with a "## " heading line).
OWN_SIGNATURE = 160
_HEADING_START = re.compile(r"^## ", re.M)
#: Where a preview of an earlier summary may start (`_OwnSummaries.preview`): a line's start, or a speaker's prefix on it.
_PREVIEW_START = re.compile(r"^(?:[ \t]*[A-Za-z]+: )?(## )", re.M)


class _OwnSummaries:
    """The offline summarizer's latest summaries, to recognise one inside a later request's message.

    Strategies hand a summary back to the model in their own wording (a hand-over note before it, a
    request to continue after it) or as an opaque Codex compaction item, where no `SUMMARY_MARKERS`
    phrase is found; a model reads its own earlier summary there all the same. So does this one: a
    user message that holds one of these texts from the start of one of its lines is an earlier
    summary, and that text (without the strategy's words around it) is the previous summary. Without
    this the summarizer read each earlier summary as the user's own lines and listed them again, one
    more "- " deeper at every compaction. Newest last; a summary given again (a memoized request)
    moves last, so a session's latest summaries are always known."""

    def __init__(self) -> None:
        self.texts: dict[str, None] = {}  # oldest first
        self.by_signature: dict[str, list[str]] = {}  # by `_signature` (their heading and its first line)
        self.lock = threading.Lock()

    def remember(self, summary: str) -> None:
        """Remember `summary` as the newest."""
        with self.lock:
            known = summary in self.texts
            if known:
                del self.texts[summary]
            self.texts[summary] = None
            if known:
                return
            self.by_signature.setdefault(_signature(summary, 0), []).append(summary)
            if len(self.texts) > OWN_SUMMARIES_KEPT:
                oldest = next(iter(self.texts))
                del self.texts[oldest]
                bucket = self.by_signature[_signature(oldest, 0)]
                bucket.remove(oldest)
                if not bucket:
                    del self.by_signature[_signature(oldest, 0)]

    def find(self, text: str) -> str | None:
        """The longest remembered summary that `text` holds from the start of one of its lines, or None."""
        if not self.by_signature or "## " not in text:
            return None
        found: str | None = None
        with self.lock:
            for heading in _HEADING_START.finditer(text):
                at = heading.start()
                for summary in self.by_signature.get(_signature(text, at), ()):
                    if text.startswith(summary, at) and (found is None or len(summary) > len(found)):
                        found = summary
        return found

    def preview(self, text: str) -> str | None:
        """What `text` shows of a remembered summary when it ends with the start of one (a display preview:
        OpenHands lists an earlier summary among its events cut to about 500 characters, openhands.md §4.5):
        from a "## " heading at the start of a line or after a speaker's prefix ("  user: "), up to the
        text's end or a clip marker ("...", "[...]") there; without its last line when the clip cut that
        line. None unless such a start is found and is at least the summary's first two lines."""
        if not self.by_signature or "## " not in text:
            return None
        for start in _PREVIEW_START.finditer(text):
            at = start.start(1)
            with self.lock:
                summaries = list(self.by_signature.get(_signature(text, at), ()))
            if not summaries:
                continue  # (the rest of the text is copied only where a summary starts: a long text has many headings)
            shown = text[at:].rstrip().removesuffix("[...]").removesuffix("...")
            for summary in summaries:
                if summary.startswith(shown) and len(shown) >= len(_signature(summary, 0)):
                    whole_line = len(shown) == len(summary) or summary[len(shown)] == "\n"
                    return shown if whole_line else shown[: shown.rfind("\n")]
        return None


def _signature(text: str, at: int) -> str:
    """What a summary is looked up by: the first two lines of text[at:] (its heading and the heading's
    first line), at most `OWN_SIGNATURE` characters."""
    first = text.find("\n", at)
    second = text.find("\n", first + 1) if first >= 0 else -1
    return text[at : min(len(text) if second < 0 else second, at + OWN_SIGNATURE)]


_OWN_SUMMARIES = _OwnSummaries()


@functools.lru_cache(maxsize=1 << 12)
def _earlier_summary(text: str) -> str | None:
    """The earlier summary a user message is, if it is one: one of the summarizer's own (`_OwnSummaries`),
    else the whole message if it has one of `SUMMARY_MARKERS`. A message that holds one of its own
    summaries is only ever built after that summary was made, so the memo never holds a stale None."""
    own = _OWN_SUMMARIES.find(text)
    if own is not None:
        return own
    lowered = text.lower()
    return text if any(marker in lowered for marker in SUMMARY_MARKERS) else None


class Reading:
    """What the summarizer reads in a run of wire messages: each message's (role, text), and, unless
    `special` (it holds a system or developer message, whose reading depends on where it stands), its
    content parts and its first earlier summary in order, read when first asked for (the run's last
    user message may be a request's last, read as instructions instead) and then plain attributes
    (a request reads them of every run it holds, `split_readings`, in C). A request read as several
    runs (`split_readings`) is read as the whole payload is (`read_payload`): only system and
    developer messages and the request's last user message are read apart from their run, and those
    are read from `entries`."""

    def __init__(self, entries: tuple[tuple[str, str], ...]) -> None:
        self.entries = entries
        self.size = len(entries)
        self.special = any(role in ("system", "developer") for role, _ in entries)
        self.last_user = max((n for n, (role, _) in enumerate(entries) if role == "user"), default=-1)

    @functools.cached_property
    def parts(self) -> tuple[_Part, ...]:
        """The content parts of a run that is not `special`, in order."""
        return tuple(
            _part(text, "tool" if role == "tool" else role) for role, text in self.entries if not (role == "user" and _earlier_summary(text))
        )

    @functools.cached_property
    def summary(self) -> str | None:
        """The first earlier summary among the user messages of a run that is not `special`."""
        return next((summary for role, text in self.entries if role == "user" and (summary := _earlier_summary(text))), None)


def read_payload(messages: Sequence[Mapping[str, Any]]) -> Reading:
    """A run of wire messages as the summarizer reads it (`Reading`)."""
    return Reading(tuple((str(m.get("role", "user")), _text_of(m)) for m in messages))


class Split(NamedTuple):
    """A summary request's `split_readings`: (the summary's section titles, content lines in order,
    previous summary), and what a later request needs to take the content of the runs it shares with
    this one without reading them: its runs' readings, the content parts added by each run read apart
    (by the run's index) and the indices of the runs read whole that hold an earlier summary, in order."""

    titles: tuple[str, ...]
    content: list[_Part]
    previous: str
    readings: Sequence[Reading]
    apart: dict[int, int]
    summaries: list[int]


class Shared(NamedTuple):
    """The runs a request shares with an earlier one: its readings[where:where + length] are the earlier
    request's readings[first:first + length], and `earlier` is that request's `Split`."""

    earlier: Split
    where: int
    first: int
    length: int


def split_readings(readings: Sequence[Reading], shared: Shared | None = None) -> Split:
    """(the summary's section titles, content lines in order, previous summary) of a summary request read as runs
    of its messages (`Reading`): the request's last user message and every system or developer
    message are instructions or tag blocks, an earlier summary (the first, unless a
    previous-summary block says otherwise) is the previous summary, the rest is content.

    With `shared`, the shared runs that both requests read whole (none of them read apart in either)
    are not read again: their content parts are a slice of the earlier request's content, found by
    counting the parts of the earlier request's other runs, and their summaries are the earlier
    request's, so a request costs the runs around them (a remote Codex compaction sends the last one's
    retained messages less the oldest few, then a few new ones). Otherwise, or if the shared runs hold
    a run read apart in either request, every run is read."""
    size = len(readings)
    last = next((k for k in range(size - 1, -1, -1) if readings[k].last_user >= 0), -1)
    block = None  # (where, end, the earlier content's slice, the earlier summaries' indices here)
    if shared is not None and shared.length:
        earlier, where, first, count = shared
        end = where + count
        if not where <= last < end and not any(first <= k < first + count for k in earlier.apart):
            block = (where, end, _content_slice(earlier, first, first + count), _shifted(earlier.summaries, first, count, where - first))
    if block is None:
        apart = [*itertools.compress(range(size), map(_SPECIAL, readings)), last]
    else:
        where, end = block[0], block[1]
        apart = [*itertools.compress(range(where), map(_SPECIAL, readings[:where])),
                 *itertools.compress(range(end, size), map(_SPECIAL, readings[end:])), last]
    instructions: list[str] = []
    content: list[_Part] = []
    summaries: list[int] = []
    counts: dict[int, int] = {}
    previous = ""

    def read_whole(a: int, b: int) -> None:
        """Add the content and summaries of readings[a:b], none read apart (the shared block's from `earlier`)."""
        if block is not None and a <= block[0] and block[1] <= b:
            read_whole(a, block[0])
            content.extend(block[2])
            summaries.extend(block[3])
            read_whole(block[1], b)
            return
        ordinary = readings[a:b]  # runs read as a whole, in C
        content.extend(itertools.chain.from_iterable(map(_PARTS, ordinary)))
        summaries.extend(itertools.compress(range(a, b), map(_SUMMARY, ordinary)))

    done = 0  # readings[:done] are read
    for k in sorted(set(apart) - {-1}):
        found = len(summaries)
        read_whole(done, k)
        if not previous and len(summaries) > found:
            previous = readings[summaries[found]].summary or ""
        reading = readings[k]
        before = len(content)
        last_user = reading.last_user if k == last else -1
        for n, (role, text) in enumerate(reading.entries):
            if role in ("system", "developer") or n == last_user:
                in_block, bodies, outside, layout = _tag_blocks(text)
                if in_block is not None:
                    previous = in_block
                for body in bodies:
                    shown = _OWN_SUMMARIES.preview(body)  # an event that is an earlier summary, cut short
                    if shown is not None:
                        previous = previous or shown
                    else:
                        content += _conversation_parts(body)
                outside, spoken = _spoken(outside)
                for speaker, said in spoken:
                    if speaker == CONVERSATION_ROLE:
                        content += _conversation_parts(said)
                    elif speaker == "user" and (summary := _earlier_summary(said)) is not None:
                        previous = previous or summary
                    else:
                        content.append(_part(said, speaker))
                # Content unless it is the request's first message (none before it in its run or in an earlier one).
                first_message = not n and not any(map(_SIZE, itertools.islice(readings, k)))
                if role in ("system", "developer") and n != last_user and not first_message and not _section_titles(outside):
                    content.append(_part(outside, role))
                else:
                    # the sections are those of the answer's example when it shows any (a prompt's own headings,
                    # such as Gemini CLI's "GOAL" before its <state_snapshot>, are not)
                    instructions.append(layout if _section_titles(layout) else outside)
            elif role == "user" and (summary := _earlier_summary(text)) is not None:
                previous = previous or summary
            else:
                content.append(_part(text, "tool" if role == "tool" else role))
        counts[k] = len(content) - before
        done = k + 1
    found = len(summaries)
    read_whole(done, size)
    if not previous and len(summaries) > found:
        previous = readings[summaries[found]].summary or ""
    return Split(_summary_titles(instructions), content, previous, readings, counts, summaries)


def _summary_titles(instructions: Sequence[str]) -> tuple[str, ...]:
    """The summary's sections: the titles of the last instruction text that has any (the summary
    prompt comes last; the headings of an agent's own system prompt before it, such as Codex's
    "Tools", are not the summary's layout), else none."""
    return next(filter(None, map(_section_titles, reversed(instructions))), ())


def _content_slice(earlier: Split, first: int, stop: int) -> Iterator[_Part]:
    """The content parts of the earlier request's runs [first:stop), all read whole: its content less
    the parts of its runs before `first` and from `stop` on (a run read apart added `apart`'s count)."""
    readings, apart = earlier.readings, earlier.apart

    def added(k: int) -> int:
        return apart[k] if k in apart else len(readings[k].parts)

    low = sum(map(added, range(first)))
    high = len(earlier.content) - sum(map(added, range(stop, len(readings))))
    return itertools.islice(earlier.content, low, high)


def _shifted(summaries: list[int], first: int, count: int, by: int) -> list[int]:
    """The indices among `summaries` from `first` to `first + count`, each moved by `by`."""
    return [k + by for k in summaries[bisect.bisect_left(summaries, first) : bisect.bisect_left(summaries, first + count)]]


_SPECIAL, _PARTS, _SUMMARY = operator.attrgetter("special"), operator.attrgetter("parts"), operator.attrgetter("summary")
_SIZE = operator.attrgetter("size")


def _speaker(line: str) -> str:
    """The role of a line of a serialized conversation ("[User]: ..."), from its prefix."""
    prefix = line.split(":", 1)[0].lower()
    return "user" if "user" in prefix else "tool" if ("tool" in prefix or "result" in prefix) else "assistant"


@functools.lru_cache(maxsize=1 << 14)
def _summary_line(line: str) -> tuple[str | None, str]:
    """A line of an earlier summary: (its heading title, "") or (None, its text without list markers).
    Memoized: a summary carries most of the previous one's lines."""
    title = _heading(line)
    return (title, "") if title is not None else (None, LIST_MARKERS.sub("", line.strip(), count=1))


def _previous_sections(previous: str, titles: Sequence[str]) -> dict[str, list[str]]:
    """Lines of an earlier summary under the headings it used."""
    sections: dict[str, list[str]] = {}
    current = titles[0] if titles else ""
    known = {t.lower(): t for t in titles}
    for line in previous.splitlines():
        title, stripped = _summary_line(line)
        if title is not None:
            current = known.get(title.lower(), title)
        elif stripped:
            sections.setdefault(current, []).append(stripped)
    return sections


class _EarlierLine(NamedTuple):
    """A line of an earlier summary as a candidate of the update: its text, its salience and
    categories, and the template title it goes under if chosen."""

    text: str
    salience: float
    categories: tuple[str, ...]
    title: str


@functools.lru_cache(maxsize=1 << 8)
def _earlier_lines(previous: str, titles: tuple[str, ...]) -> tuple[_EarlierLine, ...]:
    """The lines of an earlier summary, oldest first, each once, read as the conversation's lines are
    (at least 4 characters, cut at 400; an `EMPTY_SECTION` mark is no line), going under the
    template's title of their section (by heading, else by the heading's category, else the first).
    A summary does not say who spoke a line, so its categories are those of its words
    (`SUMMARY_ROLE`) and of its section's title when a rule reads one there (`_rule_category`), and a
    line with none of them is weighed as a goal: a summary keeps such a line for what it asks or
    states, as it keeps a user's request. They depend on the text alone, so an update reads the same
    earlier summary the same way in any process. Memoized: a strategy that compacts often sends the
    summary it got last, often the same text again."""
    lines: list[_EarlierLine] = []
    seen: set[str] = set()
    for title, texts in _previous_sections(previous, titles).items():
        target = title if title in titles else next((t for t in titles if _category(t) == _category(title)), titles[0])
        section = _rule_category(title)
        for text in texts:
            text = text[:400]
            if len(text) < 4 or text in seen or text == EMPTY_SECTION:
                continue
            seen.add(text)
            lines.append(_earlier_line(text, section, target))
    return tuple(lines)


@functools.lru_cache(maxsize=1 << 14)
def _earlier_line(text: str, section: str | None, title: str) -> _EarlierLine:
    """One line of `_earlier_lines` (memoized: an update carries most of the earlier summary's lines)."""
    categories = tuple(dict.fromkeys(((section,) if section is not None else ()) + _categories(text, SUMMARY_ROLE))) or ("goal",)
    return _EarlierLine(text, sum(SALIENCE[c] for c in categories), categories, title)


#: The shortest line that can be chosen costs this much budget (4 characters and a "- " bullet with its newline).
SHORTEST_LINE = 4 + 3


class _Bucket:
    """The candidate lines of one salience in a `_Chain`, oldest first: their chain positions, texts,
    categories and lengths, and for each line the index of the nearest earlier line that is shorter
    (`shorter`, -1 for none: `_fitting` jumps along them)."""

    __slots__ = ("categories", "lengths", "lines", "positions", "shorter")

    def __init__(self) -> None:
        self.positions: list[int] = []
        self.lines: list[str] = []
        self.categories: list[tuple[str, ...]] = []
        self.lengths: list[int] = []
        self.shorter: list[int] = []

    def add(self, position: int, text: str, categories: tuple[str, ...]) -> None:
        """Append a line at chain position `position`."""
        self.positions.append(position)
        self.lines.append(text)
        self.categories.append(categories)
        _add_length(self.lengths, self.shorter, len(text))

    def cut(self, position: int) -> None:
        """Drop the lines from chain position `position` on (the earlier lines' `shorter` stay as they are)."""
        k = bisect.bisect_left(self.positions, position)
        del self.positions[k:], self.lines[k:], self.categories[k:], self.lengths[k:], self.shorter[k:]

    def drop(self, position: int) -> None:
        """Drop the lines before chain position `position`."""
        k = bisect.bisect_left(self.positions, position)
        del self.positions[:k], self.lines[:k], self.categories[:k], self.lengths[:k]
        self.shorter = [n - k if n >= k else -1 for n in itertools.islice(self.shorter, k, None)]


def _add_length(lengths: list[int], shorter: list[int], length: int) -> None:
    """Append `length` to `lengths` and the index of the nearest earlier shorter one to `shorter`: found
    by jumping from the last along `shorter`, past lines at least as long (while lines are only
    appended, one jumped over is never visited by a later append: amortized O(1))."""
    n = len(lengths) - 1
    while n >= 0 and lengths[n] >= length:
        n = shorter[n]
    lengths.append(length)
    shorter.append(n)


class _Chain:
    """The content parts of the last summary request and their candidate lines by salience
    (`_Bucket`s), at chain positions that count lines from the chain's first part. The next request's
    parts are found in it (a remote Codex compaction sends the retained messages of the last one, less
    a few of the oldest, and a few new ones) by the identity of its first part, then compared in C by
    slices (the same objects pass without a look; an equal part has the same lines): its lines are the
    chain's from its first part's, the shared parts keep their lines and only its new parts are read,
    so a line's position in a request is its chain position less that of the request's first line."""

    def __init__(self) -> None:
        self.parts: list[_Part] = []
        self.ids: list[int] = []  # id() of each of `parts`
        self.starts: list[int] = []  # the chain position of each part's first line
        self.end = 0  # the chain position after the last part's lines
        self.first = 0  # parts[first:] are the last request's
        self.buckets: dict[float, _Bucket] = {}

    def take(self, parts: Sequence[_Part]) -> int:
        """Make `parts` the chain's parts from `first` on, keeping the lines of those it already holds;
        returns the chain position of the first line of `parts`."""
        start = len(self.parts)
        if parts and self.first < start:
            with contextlib.suppress(ValueError):
                start = self.ids.index(id(parts[0]), self.first)
        same = common_prefix_length(self.parts[start:], parts)
        if start + same < len(self.parts):
            self._cut(start + same)
        self._drop(start)
        for part in itertools.islice(parts, same, None):
            self._append(part)
        return self.starts[self.first] if self.first < len(self.parts) else self.end

    def _cut(self, k: int) -> None:
        """Forget parts[k:] and their lines."""
        self.end = self.starts[k]
        for bucket in self.buckets.values():
            bucket.cut(self.end)
        del self.parts[k:], self.ids[k:], self.starts[k:]

    def _drop(self, k: int) -> None:
        """Make parts[k:] the current ones; forget the others once they are most of the chain."""
        self.first = k
        if k > 64 and 2 * k > len(self.parts):
            position = self.starts[k] if k < len(self.parts) else self.end
            for bucket in self.buckets.values():
                bucket.drop(position)
            self.buckets = {salience: bucket for salience, bucket in self.buckets.items() if bucket.positions}
            del self.parts[:k], self.ids[:k], self.starts[:k]
            self.first = 0

    def _append(self, part: _Part) -> None:
        start = self.end
        self.parts.append(part)
        self.ids.append(id(part))
        self.starts.append(start)
        buckets = self.buckets
        for n, text, salience, categories in part.candidates:
            bucket = buckets.get(salience)
            if bucket is None:
                bucket = buckets[salience] = _Bucket()
            bucket.add(start + n, text, categories)
        self.end = start + part.size


_CHAIN = _Chain()
_CHAIN_LOCK = threading.Lock()


def _fitting(lengths: list[int], shorter: list[int], low: int, k: int, limit: int) -> int:
    """The largest index from `low` to `k` whose length is at most `limit`, else `low` - 1: from `k`, jumps
    to the nearest shorter line (`shorter`) while the line is too long, as every line jumped over is at
    least as long as one that does not fit."""
    while k >= low and lengths[k] > limit:
        k = shorter[k]
    return k if k >= low else low - 1


def _summary_buckets(earlier: Sequence[_EarlierLine]) -> dict[float, _Bucket]:
    """An earlier summary's lines by salience, at positions from -len(earlier) to -1."""
    grouped: dict[float, _Bucket] = {}
    for n, line in enumerate(earlier, -len(earlier)):
        bucket = grouped.get(line.salience)
        if bucket is None:
            bucket = grouped[line.salience] = _Bucket()
        bucket.add(n, line.text, line.categories)
    return grouped


#: A bucket as `_select` holds it, its columns read as locals in the loop: (salience, positions, lines, categories,
#: lengths, shorter, what a position is counted from).
_HeldBucket = tuple[float, list[int], list[str], list[tuple[str, ...]], list[int], list[int], int]


def _held(buckets: Mapping[float, _Bucket], offset: int) -> list[_HeldBucket]:
    """`buckets` by salience as `_select` holds them, their positions counted from `offset`."""
    return [(salience, b.positions, b.lines, b.categories, b.lengths, b.shorter, offset) for salience, b in buckets.items()]


def _select(parts: Sequence[_Part], budget: int, earlier: Sequence[_EarlierLine] = ()) -> list[tuple[int, str, tuple[str, ...]]]:
    """The most salient lines that fit `budget` characters, by score (newer first on ties), as
    (position, line, categories) in conversation order, each text once (a line said twice is chosen
    once). A line's score is the salience of its categories plus `RECENCY` times its position over
    the last position. The lines of an earlier
    summary (`earlier`) come before the conversation's, at positions -len(earlier) to -1, over the
    larger of the last position and len(earlier) (so the oldest loses at most `RECENCY`, however
    few lines are new): they compete by salience, and lose ties to the conversation's. Section titles play no part: they
    decide the layout, not what fits.

    Greedily, as if every line were scored and sorted: the lines of one salience come newest first
    (their scores only grow with their position), so the buckets of the request's lines by salience
    (`_Chain`, and the earlier summary's, `_summary_buckets`) are merged by score on a heap of their heads, and a
    bucket's head skips the lines too long to fit what is left of the budget (it only shrinks, so
    such a line is never chosen)."""
    with _CHAIN_LOCK:
        base = _CHAIN.take(parts)
        last = max(_CHAIN.end - base - 1, 0) or 1
        # the earlier summary's lines lose at most `RECENCY` however few new lines there are
        spans = (last, max(last, len(earlier)))
        buckets = _held(_CHAIN.buckets, base)  # the chain's first
        chained = len(buckets)
        if earlier:
            buckets += _held(_summary_buckets(earlier), 0)
        heap = []
        for key, (salience, positions, _, _, lengths, shorter, offset) in enumerate(buckets):
            low = bisect.bisect_left(positions, base) if key < chained else 0
            k = _fitting(lengths, shorter, low, len(positions) - 1, budget - 3)
            if k >= low:
                position = positions[k] - offset
                heap.append((-(salience + RECENCY * position / spans[position < 0]), -position, key, k, low))
        heapq.heapify(heap)
        chosen = []
        seen: set[str] = set()
        used = 0
        while heap and used + SHORTEST_LINE <= budget:
            _, position, key, k, low = heap[0]
            salience, positions, lines, categories, lengths, shorter, offset = buckets[key]
            text = lines[k]
            if used + lengths[k] + 3 <= budget and text not in seen:
                chosen.append((-position, text, categories[k]))
                seen.add(text)
                used += lengths[k] + 3
            k -= 1
            if k >= low and lengths[k] > budget - used - 3:  # the bucket's next line mostly fits: `_fitting` only when not
                k = _fitting(lengths, shorter, low, k, budget - used - 3)
            if k >= low:
                position = positions[k] - offset
                heapq.heapreplace(heap, (-(salience + RECENCY * position / spans[position < 0]), -position, key, k, low))
            else:
                heapq.heappop(heap)
    chosen.sort()
    return chosen


def extractive_summary(messages: Sequence[Mapping[str, Any]], max_tokens: int | None) -> str:
    """The offline summarizer (see module docstring) of a summary request's wire messages."""
    return summarize_readings([read_payload(messages)], max_tokens)


def summarize_readings(readings: Sequence[Reading], max_tokens: int | None) -> str:
    """`extractive_summary` of a request given as the `Reading`s of its runs of messages (each run
    read once per process, `compaction_bench.llm`)."""
    return summarize_split(split_readings(readings), max_tokens)


def summarize_split(split: Split, max_tokens: int | None) -> str:
    """`summarize_readings` of a request already split (`split_readings`)."""
    titles, parts, previous = split[:3]
    titles = titles or ("Summary",)
    budget_chars = max(200, min(max_tokens or SUMMARY_TARGET_TOKENS, SUMMARY_TARGET_TOKENS) * CHARS_PER_TOKEN)
    budget_chars -= sum(len(t) + 16 for t in titles)  # "## title", a possible "- (none)", blank lines
    earlier = _earlier_lines(previous, titles) if previous else ()
    sections: dict[str, list[str]] = {t: [] for t in titles}
    by_category: dict[str, str] = {}
    for title in titles:
        by_category.setdefault(_category(title), title)
    for position, text, categories in _select(parts, budget_chars, earlier):
        if position < 0:  # a line of the earlier summary: under its section's title
            target = earlier[position].title
        else:
            target = next((by_category[c] for c in categories if c in by_category), titles[0])
        sections[target].append(text)
    summary = "\n\n".join(f"## {t}\n- " + ("\n- ".join(sections[t]) if sections[t] else EMPTY_SECTION) for t in titles)
    _OWN_SUMMARIES.remember(summary)
    return summary


def remember_summary(summary: str) -> None:
    """Keep recognising `summary`, one of the summarizer's own given again, in later requests (`_OwnSummaries`)."""
    _OWN_SUMMARIES.remember(summary)


def _words(text: str) -> list[str]:
    return [w.strip("./-") for w in WORD.findall(text.lower()) if len(w) > 1 and w not in STOPWORDS]


@dataclass(frozen=True)
class _TextIndex:
    """One message text's non-empty lines and, per informative word, which of its lines hold it."""

    lines: tuple[str, ...]
    postings: dict[str, tuple[int, ...]]


#: Message texts whose line index is kept: a context is indexed once per distinct text, so the
#: uncompacted transcript at successive checkpoints and the cells' contexts share their messages' work.
TEXT_INDEX_CACHE = 65_536


class _Texts:
    """The process's line indexes by text, and for each word the indexed texts that hold it (so a
    rare word's lines are found without looking at every message of a context). Cleared whole when
    full; `generation` tells a context built before a clearing not to trust `holders`."""

    def __init__(self) -> None:
        self.indexes: dict[str, _TextIndex] = {}
        self.holders: dict[str, list[_TextIndex]] = {}
        self.generation = 0

    def index(self, text: str) -> _TextIndex:
        found = self.indexes.get(text)
        if found is None:
            if len(self.indexes) >= TEXT_INDEX_CACHE:
                self.indexes, self.holders, self.generation = {}, {}, self.generation + 1
            found = self.indexes[text] = _text_index(text)
            for word in found.postings:
                self.holders.setdefault(word, []).append(found)
        return found


def _text_index(text: str) -> _TextIndex:
    lines = tuple(line.strip() for line in text.splitlines() if line.strip())
    postings: dict[str, list[int]] = {}
    for n, line in enumerate(lines):
        for word in set(_words(line)):
            holders = postings.get(word)
            if holders is None:
                postings[word] = [n]
            else:
                holders.append(n)
    return _TextIndex(lines, {w: tuple(ns) for w, ns in postings.items()})


_TEXTS = _Texts()

#: A reader's word weight in these units: `ReaderContext` adds weights as integers (exact, in any order).
WEIGHT_UNITS = 2**40


class ReaderContext:
    """A context's lines, indexed per message text, for answering many questions about it.

    Its lines are the non-empty stripped lines of every message in order; a question scores each
    line by the sum of log(1 + lines / lines-with-word) over the question's words the line holds.
    Each weight is rounded to a multiple of 2**-40 (`WEIGHT_UNITS`) and the sums are taken in those
    units, as integers: exact, so a line's score does not depend on the order its words are added in.
    (In floating point it did, by a last bit, and the question's words are a set, whose order changes
    with each process's string hashes: lines whose sums were equal in exact arithmetic tied in one
    process and not in another, and a run's answers changed from one run to the next.)"""

    def __init__(self, messages: Sequence[Mapping[str, Any]]) -> None:
        self.generation = _TEXTS.generation
        self.parts = [part for part in (_TEXTS.index(_text_of(m)) for m in messages) if part.lines]
        self.offsets: list[int] = []
        self.where: dict[int, list[int]] = {}  # id of a part -> its offsets here (a text can occur twice)
        total = 0
        for part in self.parts:
            self.offsets.append(total)
            self.where.setdefault(id(part), []).append(total)
            total += len(part.lines)
        self.total = total
        self._weighted: dict[str, tuple[int, list[tuple[int, tuple[int, ...]]]]] = {}  # `_weighted_lines`, by word

    def line(self, n: int) -> str:
        k = bisect.bisect_right(self.offsets, n) - 1
        return self.parts[k].lines[n - self.offsets[k]]

    def _found(self, word: str) -> list[tuple[int, tuple[int, ...]]]:
        """(offset, line numbers) of each of this context's parts whose lines hold `word`, in any order."""
        known = _TEXTS.holders.get(word, ()) if self.generation == _TEXTS.generation else None
        if known is not None and len(known) < len(self.parts):
            return [(offset, part.postings[word]) for part in known for offset in self.where.get(id(part), ())]
        return [(offset, holders) for offset, part in zip(self.offsets, self.parts, strict=True) if (holders := part.postings.get(word))]

    def _weighted_lines(self, word: str) -> tuple[int, list[tuple[int, tuple[int, ...]]]]:
        """The weight of `word` here (in `WEIGHT_UNITS`) and where its lines are (`_found`), kept for the
        context's next questions (a probe set's questions share about half their words)."""
        known = self._weighted.get(word)
        if known is None:
            found = self._found(word)
            weight = round(math.log(1 + self.total / sum(len(holders) for _, holders in found)) * WEIGHT_UNITS) if found else 0
            known = self._weighted[word] = (weight, found)
        return known

    def answer(self, question: str) -> str:
        """The best-matching line (the last one on a tie), with the next line when it is short."""
        if not self.total:
            return "I don't know."
        query = set(_words(question))
        if not query:
            return self.line(self.total - 1)
        scores: dict[int, int] = {}
        for word in query:
            weight, found = self._weighted_lines(word)
            for offset, holders in found:
                for n in holders:
                    scores[offset + n] = scores.get(offset + n, 0) + weight
        if not scores:
            return "I don't know."
        best_score = max(scores.values())
        best = max(n for n, score in scores.items() if score == best_score)
        answer = self.line(best)
        if len(answer) < 60 and best + 1 < self.total:
            answer += "\n" + self.line(best + 1)
        return answer[:2000]


def reader_answer(messages: Sequence[Mapping[str, Any]], context: ReaderContext | None = None) -> str:
    """The offline answerer: the context line that best matches the last user message's question
    (`ReaderContext.answer`). `context`: the messages before the question, already indexed (a probe
    set asks many questions of one context); else they are `messages[:-1]`."""
    if not messages:
        return ""
    return (context or ReaderContext(messages[:-1])).answer(_text_of(messages[-1]))
