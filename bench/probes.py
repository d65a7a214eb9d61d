"""Probe questions: the data model, and loading/validating probe files (YAML or JSONL).

A probe asks for one recorded fact (DESIGN §6). `source` names the transcript item where the
fact first appears, or `source_text` a string whose first occurrence locates it; `evidence` (a
regex) is the passage a short answer must sit in; `session` (optional) the id of the session it was
written for. Probes are asked at the paired checkpoints after their source
(`compaction_bench.metrics.retention`, which `metrics` grades).

Which session asks a probe (`assign_probes`): the one its `session` names, else each session of the
run that holds its source. The sessions of one file (a tau-bench or Aider history) number their items
alike (`user-5` in each), so a probe without a `session` whose `source` id is in several sessions is
asked in none: its fact is in one of them, and elsewhere the id names another item, whose later
context may not hold the answer for any strategy. `probes mine` names the session of every probe it
mines from a file of several. A probe is asked only where its answer is where its source says
(`answer_after_source`). Each probe left out is named once, with why.

Probe files are checked against a schema before any replay (errors name file, probe and field):
`answer` is a string (a list of strings for `match: set`; an integer is read as its digits),
`accept` a list of strings, `reject` a list of strings, `meta` a mapping; a free `note` field and any
`x-…` field are kept in `meta`. YAML is read with YAML 1.2 booleans: `answer: yes` stays the string "yes", while
`answer: true` and `answer: 3.10` (which YAML reads as a boolean and the number 3.1) are errors
asking for quotes. Aliases may add at most `MAX_ALIAS_EXPANSION` nodes plus as many as the file writes once
expanded (no alias bombs, while PyYAML's dump of probes that share a `meta` object reads), and a file nested
deeper than the YAML reader recurses is an error too.
Regex probes are compiled and matched with RE2 (linear time: `(a+)+$` cannot hang grading); a
pattern RE2 cannot compile is an error naming the probe. A `number` probe's answer must state a
number as `numbers_in` reads one (a whole token: `42`, `1,024`, `-1`, `3.12`, `42 ms`; not the `001`
of `L001`, a version `1.2.3` or an ordinal `1st`), else no reply could ever match it.

`reject` lists wrong answers a hedging reply might name beside the right one (the option the user did
not choose, a limit the user later changed): a reply that states one is wrong whatever else it says
(`compaction_bench.metrics.grading.grade_reply`; a context may hold them, presence ignores them). Each
is read as the probe's answers are: a pattern for `regex` (compiled by RE2), a number for `number`
(it must state one), a term otherwise. A reject that is an answer (the same text up to case and
spacing; for `number`, a number within the tolerance of an answer's) is an error, as no reply could
be right; a reject only inside an answer (answer `port 5432`, reject `5432`) is not caught here (the
whole-token rule belongs to the graders, which this module may not import) and fails every reply
that states that answer. `reject` on a `judge` probe is an error (the judge rubrics have no place
for rejected answers, so the field would be ignored).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import re2
import yaml

from compaction_bench.errors import BenchError, no_file

if TYPE_CHECKING:
    from compaction_bench.transcript import Transcript

KINDS = ("recall", "artifact", "continuation", "decision", "constraint", "error")
MATCHES = ("exact", "contains", "regex", "set", "number", "judge")
FIELDS = ("id", "kind", "question", "answer", "match", "accept", "reject", "source", "source_text", "session", "meta", "evidence")
LOG = logging.getLogger(__name__)
#: A number as a whole token: not preceded by a word character or a point (`L001`, `-B5`, `v2`, the `3` of
#: `1.2.3`), thousands only in groups of three (`1,024`; `1,2,3` is three numbers), and not followed by a
#: digit, an underscore, a point and a digit (a version) or an ordinal suffix (`1st`); a unit may follow (`42ms`).
NUMBER = re.compile(r"(?<![\w.])-?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?![\d_]|\.\d|(?:st|nd|rd|th)\b)")
MAX_ALIAS_EXPANSION = 10_000  # YAML nodes that aliases may add to a probe file once expanded, besides as many as it writes


class ProbeError(BenchError, ValueError):
    """A probe file or probe that cannot be used; the message names file, entry and field."""


@lru_cache(maxsize=512)
def compiled_regex(pattern: str) -> Any:
    """A probe pattern compiled by RE2 (case-insensitive, multi-line; memoized); `ProbeError` if RE2 cannot."""
    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False
    try:
        return re2.compile(f"(?m){pattern}", options)
    except re2.error as exc:
        raise ProbeError(f"regex {pattern!r} is not supported by RE2 ({exc})") from None


def numbers_in(text: str) -> list[float]:
    """The numbers a text states, in order, each a whole token (`NUMBER`)."""
    return [float(raw.replace(",", "")) for raw in NUMBER.findall(text)]


def regex_spans(pattern: str, text: str) -> list[tuple[int, int]]:
    """(start, end) of each match of a probe pattern in `text`, in characters (`compiled_regex`'s search). RE2 matches
    UTF-8 and converts each match's byte offsets to characters over the text before it; in an ASCII text they are the
    same, so it is searched as bytes and the conversion skipped (a context of many matches: two fifths of the time)."""
    regex = compiled_regex(pattern)
    subject: str | bytes = text.encode() if text.isascii() else text
    return [match.span() for match in regex.finditer(subject)]


def regex_search(pattern: str, text: str) -> bool:
    """Case-insensitive, multi-line search in linear time (RE2: no backtracking, no hang)."""
    return compiled_regex(pattern).search(text) is not None


@dataclass(frozen=True)
class Probe:
    id: str
    kind: str
    question: str
    answer: str | list[str]
    match: str = "contains"
    accept: tuple[str, ...] = ()
    #: Wrong answers: a reply stating one is wrong even if it states an answer too (module docstring).
    reject: tuple[str, ...] = ()
    source: str | None = None
    source_text: str | None = None
    #: The id of the session (`Transcript.id`) the probe was written for: asked there only (module docstring).
    session: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    #: A regex (RE2, case-insensitive) of the passage that states the fact; a short or numeric answer
    #: counts as present only inside a match of it (`metrics/grading.py`). None: the source sentence.
    evidence: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ProbeError(f"probe {self.id!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.match not in MATCHES:
            raise ProbeError(f"probe {self.id!r}: match {self.match!r} is not one of {', '.join(MATCHES)}")
        if self.match == "set" and not isinstance(self.answer, (list, tuple)):
            raise ProbeError(f"probe {self.id!r}: a 'set' probe needs a list answer")
        if self.match != "set" and not isinstance(self.answer, str):
            raise ProbeError(f"probe {self.id!r}: answer must be a string for match {self.match!r}")
        if self.match == "number" and isinstance(self.answer, str) and not numbers_in(self.answer):
            raise ProbeError(f"probe {self.id!r}: a 'number' probe's answer {self.answer!r} states no number (a whole token such as 42 or 1,024)")
        if not self.source and not self.source_text:
            raise ProbeError(f"probe {self.id!r}: needs 'source' (an item id) or 'source_text'")
        object.__setattr__(self, "accept", tuple(self.accept))
        object.__setattr__(self, "reject", tuple(self.reject))
        if isinstance(self.answer, list):
            object.__setattr__(self, "answer", tuple(self.answer))
        if self.evidence is not None:
            try:
                compiled_regex(self.evidence)
            except ProbeError as exc:
                raise ProbeError(f"probe {self.id!r}: field 'evidence': {exc}") from None
        if self.match == "regex":
            for name, patterns in (("answer", self.answers), ("reject", self.reject)):
                for pattern in patterns:
                    try:
                        compiled_regex(pattern)
                    except ProbeError as exc:
                        raise ProbeError(f"probe {self.id!r}: field {name!r}: {exc}") from None
        if self.reject:
            self._check_reject()

    def _check_reject(self) -> None:
        """Refuse rejects no reply could be graded by: any on a judge probe, a number probe's reject that
        states no number or that its answer's number matches, and a reject equal to an answer."""
        if self.match == "judge":
            raise ProbeError(f"probe {self.id!r}: field 'reject' has no effect on a 'judge' probe (the judge rubrics take no rejected answers)")
        for wrong in self.reject:
            if not wrong.strip():
                raise ProbeError(f"probe {self.id!r}: field 'reject' holds an empty string")
            if self.match == "number" and not numbers_in(wrong):
                raise ProbeError(f"probe {self.id!r}: field 'reject': {wrong!r} states no number (a whole token such as 42 or 1,024)")
        if self.match == "number":
            try:
                tolerance = float(self.meta.get("tolerance", 0.0))
            except (TypeError, ValueError):
                raise ProbeError(f"probe {self.id!r}: meta 'tolerance' must be a number, got {self.meta.get('tolerance')!r}") from None
            wanted = {answer: numbers_in(answer)[0] for answer in self.answers if numbers_in(answer)}
            for wrong in self.reject:
                for answer, number in wanted.items():
                    if abs(numbers_in(wrong)[0] - number) <= tolerance:
                        raise ProbeError(f"probe {self.id!r}: field 'reject': {wrong!r} rejects the answer {answer!r} itself, so no reply could be right")
        elif self.match != "regex":
            answers = {_folded(answer): answer for answer in self.answers}
            for wrong in self.reject:
                if _folded(wrong) in answers:
                    raise ProbeError(f"probe {self.id!r}: field 'reject': {wrong!r} is the answer {answers[_folded(wrong)]!r} itself, so no reply could be right")

    @property
    def answers(self) -> tuple[str, ...]:
        """Every accepted answer string (a set probe's members for set matching)."""
        if not isinstance(self.answer, str):
            return tuple(self.answer)
        return (self.answer, *self.accept)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["accept"] = list(self.accept)
        data["reject"] = list(self.reject)
        data["answer"] = list(self.answer) if isinstance(self.answer, tuple) else self.answer
        data["meta"] = dict(self.meta)
        return {k: v for k, v in data.items() if v not in (None, [], {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "") -> Probe:
        """A probe from one file entry, checked field by field (see the module docstring)."""
        prefix = f"{where}: " if where else ""
        if not isinstance(data, Mapping):
            raise ProbeError(f"{prefix}a probe must be a mapping, got {type(data).__name__}")
        if isinstance(data.get("id"), (str, int)) and not isinstance(data.get("id"), bool):
            prefix = f"{where}: probe {str(data['id'])!r}: " if where else f"probe {str(data['id'])!r}: "
        missing = [k for k in ("id", "kind", "question", "answer") if k not in data]
        if missing:
            raise ProbeError(f"{prefix}missing field(s) {', '.join(missing)}")
        extra = {str(k): v for k, v in data.items() if k == "note" or (isinstance(k, str) and k.startswith("x-"))}
        unknown = sorted(str(k) for k in data if k not in FIELDS and str(k) not in extra)
        if unknown:
            raise ProbeError(f"{prefix}unknown field(s) {', '.join(unknown)} (free fields: 'note' and 'x-…')")
        try:
            kw = _checked_fields(data)
        except ProbeError as exc:
            raise ProbeError(f"{prefix}{exc}") from None
        kw["meta"] = {**kw.get("meta", {}), **extra}
        try:
            return cls(**kw)
        except ProbeError as exc:
            own = f"probe {kw['id']!r}: "
            raise ProbeError(prefix + str(exc).removeprefix(own)) from None


def _folded(text: str) -> str:
    """A text up to case and spacing (how a reject is compared with the answers it must differ from)."""
    return " ".join(text.casefold().split())


def _field_type_error(name: str, value: Any, wanted: str) -> ProbeError:
    hint = ""
    if isinstance(value, (bool, float)):
        hint = " (quote it: YAML reads unquoted true/false and decimals as non-strings)"
    return ProbeError(f"field {name!r} must be {wanted}, got {type(value).__name__} {value!r}{hint}")


def _text(name: str, value: Any, *, integer_ok: bool = False) -> str:
    if isinstance(value, str):
        return value
    if integer_ok and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise _field_type_error(name, value, "a string")


def _checked_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    kw: dict[str, Any] = {"id": _text("id", data["id"], integer_ok=True)}
    for name in ("kind", "question", "match", "source", "source_text", "session", "evidence"):
        if name in data and not (data[name] is None and name in ("source", "source_text", "session", "evidence")):
            kw[name] = _text(name, data[name])
    if not kw["question"].strip():
        raise ProbeError("field 'question' is empty")
    answer = data["answer"]
    if isinstance(answer, list):
        kw["answer"] = [_text(f"answer[{n}]", a, integer_ok=True) for n, a in enumerate(answer)]
        if not kw["answer"]:
            raise ProbeError("field 'answer' is an empty list")
    else:
        kw["answer"] = _text("answer", answer, integer_ok=True)
        if not kw["answer"].strip():
            raise ProbeError("field 'answer' is empty")
    for name in ("accept", "reject"):
        listed = data.get(name)
        if listed is not None:
            if not isinstance(listed, list):
                raise _field_type_error(name, listed, "a list of strings")
            kw[name] = tuple(_text(f"{name}[{n}]", a, integer_ok=True) for n, a in enumerate(listed))
    meta = data.get("meta")
    if meta is not None:
        if not isinstance(meta, Mapping):
            raise _field_type_error("meta", meta, "a mapping")
        kw["meta"] = dict(meta)
    return kw


class _ProbeLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans (only true/false: `yes`, `no`, `on`, `off` stay strings) and only plain
    decimal integers: YAML 1.1's other integer forms would change an answer as written (`007` read 7, `017` 15,
    `12:30` 750, `0x1F` 31, `1_000` 1000, `+12` 12), so they stay the strings they are."""


    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping, refusing a key written twice in it (PyYAML keeps the last silently: a second `answer:` replaced
        the first); keys a merge (`<<`) brings in may be overridden, as YAML intends."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                continue  # a probe's keys are strings; the schema names any other
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is given twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


_ProbeLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ProbeLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_ProbeLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^-?(?:0|[1-9][0-9]*)$"), list("-0123456789"))


def _expanded_size(root: yaml.Node, origin: str) -> int:
    """Nodes of the document with every alias expanded (computed on the shared graph, not by expanding)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ProbeError(f"{origin}: a YAML alias refers to itself (line {node.start_mark.line + 1})")
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        active.discard(key)
        sizes[key] = total
        return total

    expanded, written = size(root), len(sizes)
    if expanded - written > MAX_ALIAS_EXPANSION + written:
        raise ProbeError(
            f"{origin}: YAML aliases expand to {expanded:,} nodes ({written:,} written); aliases may add at most "
            f"{MAX_ALIAS_EXPANSION:,} nodes plus as many as the file writes (write the shared parts out instead of anchors)"
        )
    return expanded


def _load_yaml(text: str, origin: str) -> Any:
    loader = _ProbeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, origin)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ProbeError(f"{origin}{line}: malformed YAML ({getattr(exc, 'problem', exc)})") from None
    except RecursionError:  # the composer and the alias count recurse once per level of nesting
        raise ProbeError(f"{origin}: YAML nested too deeply to read (a probe file is a list of flat mappings)") from None
    finally:
        loader.dispose()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key written twice in it (`json` keeps the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice in one object")
        out[key] = value
    return out


def load_probes(path: str | Path) -> list[Probe]:
    """Probes from a YAML list or a JSONL file (one probe per line), validated (module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise ProbeError(f"{path}: {no_file(path)}; a probe file is a YAML or JSONL file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProbeError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    entries: list[tuple[str, Any]] = []
    if path.suffix.lower() == ".jsonl":
        for number, line in enumerate(text.split("\n"), start=1):  # not `splitlines`: a JSON string may hold U+2028 or NEL as they are
            if line.strip():
                try:
                    entries.append((f"{path}:{number}", json.loads(line, object_pairs_hook=_unique_keys)))
                except (json.JSONDecodeError, RecursionError, ValueError) as exc:
                    raise ProbeError(f"{path}:{number}: malformed JSON ({getattr(exc, 'msg', exc)})") from None
    else:
        data = _load_yaml(text, str(path))
        if data is None:
            return []
        if not isinstance(data, list):
            raise ProbeError(f"{path}: expected a list of probes")
        entries = [(f"{path}: probe #{n + 1}", d) for n, d in enumerate(data)]
    probes = [Probe.from_dict(d, where=w) for w, d in entries]
    check_unique(probes, origin=str(path))
    return probes


def check_unique(probes: Sequence[Probe], origin: str = "") -> None:
    seen: set[str] = set()
    for probe in probes:
        if probe.id in seen:
            raise ProbeError(f"{origin}: duplicate probe id {probe.id!r}")
        seen.add(probe.id)


def source_index(transcript: Transcript, probe: Probe) -> int | None:
    """Position of the item where the probe's fact first appears, or None when the view lacks it."""
    if probe.source:
        return transcript.position(probe.source) if probe.source in transcript.by_id else None
    for position, item in enumerate(transcript.items):
        if probe.source_text and (probe.source_text in item.text or probe.source_text in (item.arguments or "")):
            return position
    return None


def unlocatable(transcript: Transcript, probe: Probe) -> str | None:
    """Why the probe's source is not in this transcript view (None: it is)."""
    if source_index(transcript, probe) is not None:
        return None
    if probe.source:
        return f"source item {probe.source!r} is not in the imported view"
    return f"source_text {_clip(probe.source_text or '')!r} occurs nowhere in the imported view"


@dataclass(frozen=True)
class LeftOut:
    """A probe left out of a session (`session`: that session's id) or of every session (`session` None), and why."""

    probe: Probe
    session: str | None
    why: str


def assign_probes(transcripts: Sequence[Transcript], probes: Sequence[Probe]) -> tuple[list[tuple[Probe, ...]], list[LeftOut]]:
    """Which probes each of a run's sessions asks (in order, one tuple per transcript), and the probes left out
    (module docstring): a probe goes to the session its `session` names, else to each session holding its source,
    but a `source` id held by several sessions goes to none; in a session it goes to, it is asked only when its
    answer is where its source says."""
    assigned: list[list[Probe]] = [[] for _ in transcripts]
    left_out: list[LeftOut] = []
    for probe in probes:
        if probe.session is not None:
            starts = {n: source_index(t, probe) for n, t in enumerate(transcripts) if t.id == probe.session}
            if not starts:
                left_out.append(LeftOut(probe, None, f"its session {probe.session!r} is not among the {_sessions(transcripts)}"))
        else:
            starts = {n: start for n, t in enumerate(transcripts) if (start := source_index(t, probe)) is not None}
            if not starts and len(transcripts) > 1:
                left_out.append(LeftOut(probe, None, f"its source is in none of the {_sessions(transcripts)}"))
            elif not starts:
                starts = {0: None}  # named below, as unlocatable
            elif probe.source and len(starts) > 1:
                named = ", ".join(repr(transcripts[n].id) for n in list(starts)[:3]) + (", …" if len(starts) > 3 else "")
                left_out.append(LeftOut(probe, None, f"its source item {probe.source!r} is in {len(starts)} sessions ({named}), "
                                                     "each numbering its items alike; give the probe a 'session' naming its own"))
                starts = {}
        for n, start in starts.items():
            if start is None:
                why = unlocatable(transcripts[n], probe)
            else:
                misplaced = _answer_at(transcripts[n], probe, start)
                why = f"not where its source says: {misplaced}" if misplaced is not None else None
            if why is None:
                assigned[n].append(probe)
            else:
                left_out.append(LeftOut(probe, transcripts[n].id, why))
    return [tuple(found) for found in assigned], left_out


def _sessions(transcripts: Sequence[Transcript]) -> str:
    return f"{len(transcripts)} sessions" if len(transcripts) != 1 else f"1 session ({transcripts[0].id!r})"


def usable_probes(transcripts: Sequence[Transcript], probes: Sequence[Probe], *, origin: str = "") -> list[tuple[Probe, ...]]:
    """`assign_probes`, each probe left out reported once (a warning naming probe, session and why), so that none can
    fail a cell after its replay; `origin` (the probe file) leads the warnings."""
    assigned, left_out = assign_probes(transcripts, probes)
    for gone in left_out:
        where = f"{origin}: " if origin else ""
        session = f" for session {gone.session!r}" if gone.session is not None else ""
        LOG.warning("warning: %sprobe %r skipped%s: %s", where, gone.probe.id, session, gone.why)
    return assigned


def answer_after_source(transcript: Transcript, probe: Probe) -> str | None:
    """Why the probe's answer is not where its source says (None: it is). An answer is verbatim at or after its
    source. A set is stated once its last member has been: every member occurs at or before its source (which
    states one of them), so that a checkpoint after the source never asks for a member not yet stated."""
    start = source_index(transcript, probe)
    return unlocatable(transcript, probe) if start is None else _answer_at(transcript, probe, start)


def _answer_at(transcript: Transcript, probe: Probe, start: int) -> str | None:
    """`answer_after_source` of a probe whose source is the item at `start`."""
    if probe.match in ("regex", "judge"):
        return None
    if probe.match == "set":
        upto = "\n".join(f"{i.text}\n{i.arguments or ''}" for i in transcript.items[: start + 1])
        missing = [t for t in probe.answers if t not in upto]
        if missing:
            return f"set member {_clip(missing[0])!r} is not stated by the end of the source"
        source = transcript.items[start]
        if not any(t in source.text or t in (source.arguments or "") for t in probe.answers):
            return "the source states no member of the set"
        return None
    text = "\n".join(f"{i.text}\n{i.arguments or ''}" for i in transcript.items[start:])
    if isinstance(probe.answer, str) and probe.answer not in text:
        return f"answer {_clip(probe.answer)!r} does not occur at or after the source"
    return None


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _ProbeDumper(yaml.SafeDumper):
    """SafeDumper that writes a text holding NEL (U+0085) double-quoted, the one style whose writer escapes it (`\\N`):
    PyYAML writes it as it is in the other styles, and a reader takes it for a line break (a space or a newline)."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"' if "\x85" in text else None)


_ProbeDumper.add_representer(str, _represent_text)


def probes_text(probes: Iterable[Probe], suffix: str = ".yaml") -> str:
    """What `write_probes` writes to a file with this suffix (JSONL for `.jsonl` in any case, else YAML); `load_probes` reads back
    every text as it was."""
    if suffix.lower() == ".jsonl":
        return "".join(json.dumps(p.to_dict(), ensure_ascii=False) + "\n" for p in probes)
    return yaml.dump([p.to_dict() for p in probes], Dumper=_ProbeDumper, sort_keys=False, allow_unicode=True)


def write_probes(probes: Iterable[Probe], path: str | Path, *, sweep: bool = False) -> Path:
    """`probes` as the file `path` (`probes_text`), written whole or not at all; `sweep` for a file of a run folder,
    whose only writer is its run: the temporary files an earlier write of it left when killed are removed."""
    from compaction_bench.atomic import atomic_write_text

    path = Path(path)
    return atomic_write_text(path, probes_text(probes, path.suffix), sweep=sweep)
