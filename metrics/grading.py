"""Probe graders: presence (no model) and answered (the answerer's reply, graded by `match`).

Presence: every answer term of the probe (for a set probe, every member; for a regex probe, the
pattern) occurs in the rendered context after normalization (Unicode NFKC, case folding,
whitespace collapsed, typographic quotes made plain), by the whole-token rule below. Terms listed
in `meta["evidence"]` must occur too; a miner uses them to tie a short answer (an exit code) to its fact (the command).

Whole tokens: an answer that is one token (no whitespace once normalized: `view`, `8080`,
`config.py`), whatever its length, or a short one (below), matches only as a whole token, never
inside a longer word, number or dotted version (`view` is not in `review`, `344` not in `13445`,
`3440` or `1.344.2`); token boundaries are judged on the whole text, never on a cut-out passage.
A phrase of several words that is not short matches as a substring. The same rule grades replies
(`contains`, and the members of a `set`), so presence and answered agree on what a match is.

Evidence anchoring: a short answer (fewer than `SHORT_ANSWER_CHARS` letters and digits) or a
numeric one (no letter: `100`, `3.12`, `-1`) counts as present only where one of its whole-token
occurrences in the context lies in (overlaps) a passage of its evidence: the probe's `evidence`
regex, else the sentence of its source that states the answer (`anchor`), else its
`source_text`. `344` in `line 344` next to the evidence `344` does not count, nor does `1` of
`exit code: 12` for the evidence `exit code: 1`. A short answer with no evidence at all is never
present. A longer answer counts wherever it occurs, unless its probe gives an `evidence` regex: then
only in a passage of it (a folder a rule forbids, which every file listing of the repository prints
too, counts only where a sentence says so).

Answered, by the probe's `match`:
- ``exact``: the normalized reply, stripped of surrounding punctuation, equals an answer;
- ``contains``: a normalized answer occurs in the normalized reply (a one-token or short answer as
  a whole token: the reply `rows: 13445` does not contain `344`; a phrase without its closing
  punctuation, ending where a word ends: "Do NOT commit your changes." is in "- Do NOT commit your changes");
- ``regex``: an answer pattern matches the reply (case-insensitive);
- ``set``: F1 between the answer members and the items of the reply (split at commas,
  semicolons, newlines and a free-standing "and", not the `and` of `src/and/x.py`; an item matches a member it contains; a member is recalled
  when it occurs anywhere in the reply; "contains" and "occurs" by the whole-token rule); correct when F1 ≥ `meta["min_f1"]` (default 0.5);
- ``number``: a number the reply states equals the answer's first number (within
  `meta["tolerance"]`); both read as whole tokens (`compaction_bench.probes.numbers_in`), so the
  `001` of `L001`, the `5` of `-B5`, the `1` of `1st` or of a version `1.2.3` is no number;
- ``judge``: an LLM judge with a strict and a lenient rubric (metrics/prompts); without a judge
  the probe is unscored (None), never passed. A verdict is the `VERDICT: CORRECT|INCORRECT` the
  judge wrote; none, or both (a judge quoting the two options of the rubric, or changing its
  mind), leaves that rubric unscored.

Rejected answers (the probe's `reject`): a reply that states one is wrong whatever else it says, so
a reply that hedges ("5432 or 5433", "we could use A or B") scores as a wrong one. A reject is
stated by the rule the probe's match uses for its answers: whole-token `occurs` (``contains``),
a number of the reply within the tolerance (``number``), an RE2 pattern search (``regex``), the
whole reply (``exact``: a reply equals one text, so there a reject changes a verdict only when it
normalizes to an answer, which the probe schema refuses up to case and spacing). In a ``set`` reply an item that states a rejected member is a wrong item even when it
names a right one too ("a.py or d.py"), which lowers precision rather than failing the reply.
The rule is strict by design: it reads no negation, so "not 5433 but 5432" is wrong too (naming
the wrong option at all is what a hedge does, and telling a correction from a hedge would need a
judge). Only replies are judged: a context may hold a rejected answer (the discussion before a
choice), so presence ignores `reject`. Judge probes take no `reject` (the rubrics have no place for
it; the probe schema refuses it).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from compaction_bench.llm import LLMClient, LLMResult, PreparedContext
from compaction_bench.probes import Probe, numbers_in, regex_search, regex_spans
from compaction_bench.request import Message
from compaction_bench.templates import PromptSet
from compaction_bench.wire import chat_messages, readable_output

SET_PASS_F1 = 0.5
PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " "})
SPACE = re.compile(r"\s+")
EDGE_PUNCTUATION = " \t\n.,;:!?\"'`*()[]{}<>-"
SET_SPLIT = re.compile(r"[,;\n]|(?<!\S)and(?!\S)")
VERDICT = re.compile(r"verdict\s*:\s*\**\s*(correct|incorrect)", re.I)
#: Answers with fewer letters and digits than this (or none of them letters) need their evidence.
SHORT_ANSWER_CHARS = 4
SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
MAX_SENTENCE = 400


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(QUOTES).casefold()
    return SPACE.sub(" ", text).strip()


#: Distinct texts whose normalization is kept (contexts share most of their messages).
NORMALIZED_CACHE = 65_536


@lru_cache(maxsize=NORMALIZED_CACHE)
def _normalized_part(text: str) -> str:
    return normalize(text)


def normalize_joined(parts: Sequence[str]) -> str:
    """`normalize("\\n".join(parts))`, from each part's normalization (memoized per text).

    NFKC, case folding and the quote table act per character and a newline composes with nothing,
    so only the joins differ: the whitespace there collapses to one space, and a part that
    normalizes to nothing leaves no trace."""
    return " ".join(n for n in map(_normalized_part, parts) if n)


def readable(message: Message) -> str:
    """A message's content as text, a tool output in a Codex JSON envelope read as a model reads it
    (`wire.readable_output`)."""
    return readable_output(message.content) if message.role == "tool" else message.content


def context_parts(messages: Sequence[Message]) -> list[str]:
    """Everything a model reads in a request, in order: contents (`readable`), then each call's name and arguments."""
    parts: list[str] = []
    for m in messages:
        if m.content:
            parts.append(readable(m))
        parts.extend(f"{c.name} {c.arguments}" for c in m.tool_calls)
    return parts


def context_text(messages: Sequence[Message]) -> str:
    """`context_parts` as one text, one part per line."""
    return "\n".join(context_parts(messages))


def evidence_terms(probe: Probe) -> list[str]:
    """The terms of a probe's `meta["evidence"]` that must occur beside its answer (module docstring)."""
    evidence = probe.meta.get("evidence") or ()
    return [evidence] if isinstance(evidence, str) else [str(e) for e in evidence]


def is_short(answer: str) -> bool:
    """An answer too short or too numeric to count as present by a bare substring match."""
    text = normalize(answer)
    return sum(c.isalnum() for c in text) < SHORT_ANSWER_CHARS or not any(c.isalpha() for c in text)


@lru_cache(maxsize=NORMALIZED_CACHE)
def _token_pattern(normalized: str) -> re.Pattern[str]:
    """Boundaries only at an edge that is a word character (or a sign or point before a digit): the
    folder `ledger/vendor/` is whole in `ledger/vendor/x.py`, `-1` is not inside `2-1`."""
    lead = normalized[:1].isalnum() or normalized[:1] == "_" or (normalized[:1] in "-." and normalized[1:2].isdigit())
    trail = normalized[-1:].isalnum() or normalized[-1:] == "_"
    before = r"(?<![\w.])" if lead else ""
    after = r"(?![\w]|\.\w)" if trail else ""
    return re.compile(f"{before}{re.escape(normalized)}{after}")


def _token(answer: str) -> re.Pattern[str]:
    """The normalized answer as a whole token: not inside a longer number, word or dotted version."""
    return _token_pattern(normalize(answer))


#: What ends a sentence an answer was mined from, and need not follow it where it is found.
SENTENCE_END = ".!?;:,"


@lru_cache(maxsize=NORMALIZED_CACHE)
def _matcher(answer: str) -> tuple[str, re.Pattern[str] | None]:
    """The normalized answer, and its whole-token pattern when it must match as a whole token (one token
    or short); None: a phrase, matched as a substring. A phrase's closing punctuation is not part of it: a
    constraint mined as "Do NOT commit your changes." is stated by "- Do NOT commit your changes" too; such a
    phrase, its full stop gone, must end where a word ends ("port is 5432." is not in "port is 54321")."""
    text = normalize(answer)
    if " " in text and not is_short(answer):
        bare = text.rstrip(SENTENCE_END)
        return (bare, _token_pattern(bare)) if bare and bare != text else (text, None)
    return text, _token_pattern(text)


def find_token(text: str, token: re.Pattern[str], normalized: str, pos: int = 0, endpos: int | None = None) -> re.Match[str] | None:
    """`token.search(normalized, pos, endpos)` for a `_token_pattern(text)`: the occurrences of `text` are
    found with `str.find` and each is tried with `token.match` (its look-behind still reads the text
    before it). The same first match, found faster: a pattern that opens with a look-behind has no
    literal prefix for `re` to scan for, so `search` tries the pattern at every position of a long
    context (about 30 times as slow as `find` on 250,000 characters)."""
    end = len(normalized) if endpos is None else min(endpos, len(normalized))
    at = normalized.find(text, pos, end)
    while at >= 0:
        found = token.match(normalized, at, end)
        if found is not None:
            return found
        at = normalized.find(text, at + 1, end)
    return None


def occurs(answer: str, normalized: str) -> bool:
    """Whether `answer` occurs in a normalized text: as a whole token if it is one token or short, else
    as a substring (module docstring)."""
    text, token = _matcher(answer)
    if token is None:
        return text in normalized
    return find_token(text, token, normalized) is not None


def source_sentence(text: str, answer: str) -> str | None:
    """The sentence (or line) of a source item's text that states `answer` as a whole token."""
    token = _token(answer)
    for sentence in SENTENCE_SPLIT.split(text):
        normalized = normalize(sentence)
        found = token.search(normalized)
        if found:
            if len(normalized) <= MAX_SENTENCE:
                return normalized
            # A long line (minified code, a log line): the words around the answer.
            start = max(0, found.start() - MAX_SENTENCE // 3)
            return normalized[start : found.end() + MAX_SENTENCE // 3].strip()
    return None


@dataclass(frozen=True)
class Anchor:
    """Where a short answer may count: a probe's `evidence` regex and/or a normalized sentence."""

    pattern: str | None = None
    sentence: str | None = None

    def spans(self, normalized: str) -> list[tuple[int, int]]:
        """Where this evidence is in a normalized context: (start, end) of each passage."""
        if self.pattern is not None:
            return regex_spans(self.pattern, normalized)
        out: list[tuple[int, int]] = []
        if self.sentence:
            start = normalized.find(self.sentence)
            while start >= 0:
                out.append((start, start + len(self.sentence)))
                start = normalized.find(self.sentence, start + 1)
        return out


def anchor(probe: Probe, source_text: str | None = None) -> Anchor:
    """The evidence of a probe: its `evidence` regex, else the sentence of `source_text` (the text of its
    source item) stating the first answer that occurs there, else its own `source_text` field."""
    if probe.evidence is not None:
        return Anchor(pattern=probe.evidence)
    for text in (source_text, probe.source_text):
        if text:
            for answer in probe.answers:
                sentence = source_sentence(text, answer)
                if sentence:
                    return Anchor(sentence=sentence)
    return Anchor(sentence=normalize(probe.source_text) if probe.source_text else None)


@dataclass(frozen=True)
class Presence:
    present: bool
    share: float  # share of the probe's terms that are present


def _term_present(term: str, normalized: str, evidence: Anchor) -> bool:
    if not is_short(term):
        # a long answer counts anywhere, unless its probe names the passage it must lie in (an `evidence` regex: a
        # path that file listings also print counts only in the rule that states it)
        return occurs(term, normalized) if evidence.pattern is None else _within(normalize(term), normalized, evidence)
    text, token = _matcher(term)
    assert token is not None
    if text not in normalized:
        return False
    for start, end in evidence.spans(normalized):
        # The first whole-token occurrence that ends after the passage starts; its boundaries are judged
        # on the whole text (the pattern looks behind `pos`; `endpos` leaves room for its look-ahead).
        found = find_token(text, token, normalized, max(0, start - len(text) + 1), end + len(text) + 2)
        if found is not None and found.start() < end:
            return True
    return False


def _within(text: str, normalized: str, evidence: Anchor) -> bool:
    """Whether an occurrence of `text` (normalized) overlaps a passage of `evidence`."""
    for start, end in evidence.spans(normalized):
        at = normalized.find(text, max(0, start - len(text) + 1))
        if 0 <= at < end:
            return True
    return False


def presence(probe: Probe, context: str, normalized_context: str | None = None, evidence: Anchor | None = None) -> Presence:
    """Whether the probe's answer survives verbatim (normalized) in a context's text; short answers
    only inside `evidence` (default: `anchor(probe)`, from the probe's own fields)."""
    normalized = normalized_context if normalized_context is not None else normalize(context)
    evidence = evidence if evidence is not None else anchor(probe)
    if probe.match == "regex":
        hits = [any(regex_search(p, context) for p in probe.answers)]
    elif probe.match == "set":
        hits = [_term_present(member, normalized, evidence) for member in probe.answers]
    else:
        hits = [any(_term_present(a, normalized, evidence) for a in probe.answers)]
    hits += [occurs(e, normalized) for e in evidence_terms(probe)]
    share = sum(hits) / len(hits)
    return Presence(all(hits), share)


def set_f1(members: Sequence[str], reply: str, rejected: Sequence[str] = ()) -> float:
    """F1 of a reply's items against the members; an item stating a `rejected` member is a wrong item."""
    gold = [normalize(m) for m in members]
    text = normalize(reply)
    items = [normalize(i).strip(EDGE_PUNCTUATION) for i in SET_SPLIT.split(reply)]
    items = [i for i in items if i]
    if not gold or not items:
        return 0.0
    recalled = sum(1 for m in members if occurs(m, text))
    precise = sum(1 for i in items if any(occurs(m, i) for m in members) and not any(occurs(r, i) for r in rejected))
    precision, recall = precise / len(items), recalled / len(gold)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class Grade:
    correct: bool | None  # None: unscored
    score: float | None = None  # F1 for set probes; 1/0 otherwise
    judge_strict: bool | None = None
    judge_lenient: bool | None = None


def _states_any(probe: Probe, candidates: Sequence[str], reply: str) -> bool:
    """Whether a reply states one of `candidates` by the probe's match rule (not `set`, not `judge`)."""
    if probe.match == "exact":
        return normalize(reply).strip(EDGE_PUNCTUATION) in {normalize(c).strip(EDGE_PUNCTUATION) for c in candidates}
    if probe.match in ("contains", "set"):
        text = normalize(reply)
        return any(occurs(c, text) for c in candidates)
    if probe.match == "regex":
        return any(regex_search(pattern, reply) for pattern in candidates)
    if probe.match == "number":
        tolerance = float(probe.meta.get("tolerance", 0.0))
        wanted = [n for c in candidates for n in numbers_in(c)[:1]]
        return any(abs(got - want) <= tolerance for got in numbers_in(reply) for want in wanted)
    raise ValueError(f"probe {probe.id!r}: match {probe.match!r} needs a judge")


def states_rejected(probe: Probe, reply: str) -> bool:
    """Whether a reply states one of the probe's rejected answers (a set probe: one of its rejected
    members anywhere), by the rule the probe's match uses for its answers (module docstring)."""
    return bool(probe.reject) and _states_any(probe, probe.reject, reply)


def grade_reply(probe: Probe, reply: str) -> Grade:
    """Grade a reply by the probe's deterministic rule (judge probes: `judge_reply`); a reply stating a
    rejected answer is wrong (a set reply: each item stating a rejected member is a wrong item)."""
    if probe.match == "set":
        f1 = set_f1(probe.answers, reply, probe.reject)
        return Grade(f1 >= float(probe.meta.get("min_f1", SET_PASS_F1)), f1)
    ok = _states_any(probe, probe.answers, reply) and not states_rejected(probe, reply)
    return Grade(ok, 1.0 if ok else 0.0)


def _verdict(text: str) -> bool | None:
    """The judge's verdict; None when it wrote none or both."""
    verdicts = {found.lower() == "correct" for found in VERDICT.findall(text)}
    return verdicts.pop() if len(verdicts) == 1 else None


@lru_cache(maxsize=1)
def judge_prompts() -> PromptSet:
    """The strict and lenient judge rubrics (metrics/prompts), loaded once."""
    return PromptSet(directory=PROMPT_DIR)


def judge_reply(probe: Probe, reply: str, judge: LLMClient | None, *, sample: int = 0) -> Grade:
    """Strict and lenient verdicts of an LLM judge; the strict one decides `correct`."""
    if judge is None:
        return Grade(None)
    verdicts = []
    for rubric in ("judge_strict.j2", "judge_lenient.j2"):
        prompt = judge_prompts().render(rubric, question=probe.question, references=list(probe.answers), reply=reply)
        result = judge.complete([{"role": "user", "content": prompt}], purpose="judge", sample=sample, max_tokens=200)
        verdicts.append(_verdict(result.text))
    strict, lenient = verdicts
    return Grade(strict, None if strict is None else float(strict), strict, lenient)


def context_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A request's messages as valid Chat Completions dicts for the answerer (`compaction_bench.wire`)."""
    return chat_messages(messages)


@dataclass(frozen=True)
class Answer:
    reply: str
    cache_hit: bool
    grade: Grade


def ask(
    probe: Probe,
    context: PreparedContext,
    answerer: LLMClient,
    judge: LLMClient | None = None,
    *,
    sample: int = 0,
) -> Answer:
    """Ask one probe against a context (converted once, without the question) and grade the reply."""
    question = {"role": "user", "content": probe.question}
    result: LLMResult = answerer.complete([question], purpose="answer", sample=sample, context=context)
    grade = judge_reply(probe, result.text, judge, sample=sample) if probe.match == "judge" else grade_reply(probe, result.text)
    return Answer(result.text, result.cache_hit, grade)
