"""Probe questions: the data model, and loading/validating probe files (YAML or JSONL).

A probe asks for one recorded fact (DESIGN §6). `source` names the transcript item where the
fact first appears, or `source_text` a string whose first occurrence locates it. Probes are asked
at every compaction point after their source and at the end of the session (`metrics` grades them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from compaction_bench.errors import BenchError

KINDS = ("recall", "artifact", "continuation", "decision", "constraint", "error")
MATCHES = ("exact", "contains", "regex", "set", "number", "judge")


class ProbeError(BenchError, ValueError):
    """A probe file or probe that cannot be used; the message names file, entry and field."""


@dataclass(frozen=True)
class Probe:
    id: str
    kind: str
    question: str
    answer: str | list[str]
    match: str = "contains"
    accept: tuple[str, ...] = ()
    source: str | None = None
    source_text: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ProbeError(f"probe {self.id!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.match not in MATCHES:
            raise ProbeError(f"probe {self.id!r}: match {self.match!r} is not one of {', '.join(MATCHES)}")
        if self.match == "set" and not isinstance(self.answer, (list, tuple)):
            raise ProbeError(f"probe {self.id!r}: a 'set' probe needs a list answer")
        if self.match != "set" and not isinstance(self.answer, str):
            raise ProbeError(f"probe {self.id!r}: answer must be a string for match {self.match!r}")
        if not self.source and not self.source_text:
            raise ProbeError(f"probe {self.id!r}: needs 'source' (an item id) or 'source_text'")
        object.__setattr__(self, "accept", tuple(self.accept))
        if isinstance(self.answer, list):
            object.__setattr__(self, "answer", tuple(self.answer))

    @property
    def answers(self) -> tuple[str, ...]:
        """Every accepted answer string (a set probe's members for set matching)."""
        if isinstance(self.answer, tuple):
            return tuple(self.answer)
        return (self.answer, *self.accept)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["accept"] = list(self.accept)
        data["answer"] = list(self.answer) if isinstance(self.answer, tuple) else self.answer
        data["meta"] = dict(self.meta)
        return {k: v for k, v in data.items() if v not in (None, [], {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "") -> Probe:
        prefix = f"{where}: " if where else ""
        if not isinstance(data, Mapping):
            raise ProbeError(f"{prefix}a probe must be a mapping, got {type(data).__name__}")
        missing = [k for k in ("id", "kind", "question", "answer") if k not in data]
        if missing:
            raise ProbeError(f"{prefix}missing field(s) {', '.join(missing)}")
        allowed = {"id", "kind", "question", "answer", "match", "accept", "source", "source_text", "meta"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ProbeError(f"{prefix}unknown field(s) {', '.join(unknown)}")
        kw = dict(data)
        kw["id"] = str(kw["id"])
        kw["accept"] = tuple(str(a) for a in kw.get("accept") or ())
        if isinstance(kw["answer"], (int, float)):
            kw["answer"] = str(kw["answer"])
        try:
            return cls(**kw)
        except ProbeError as exc:
            raise ProbeError(f"{prefix}{exc}") from None


def load_probes(path: str | Path) -> list[Probe]:
    """Probes from a YAML list or a JSONL file (one probe per line)."""
    path = Path(path)
    if not path.is_file():
        raise ProbeError(f"{path}: no such probe file")
    text = path.read_text(encoding="utf-8")
    entries: list[tuple[str, Any]] = []
    if path.suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    entries.append((f"{path}:{number}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise ProbeError(f"{path}:{number}: malformed JSON ({exc.msg})") from None
    else:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 1}" if mark else ""
            raise ProbeError(f"{path}{line}: malformed YAML ({getattr(exc, 'problem', exc)})") from None
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


def write_probes(probes: Iterable[Probe], path: str | Path) -> Path:
    from compaction_bench.atomic import atomic_write_text

    path = Path(path)
    if path.suffix == ".jsonl":
        text = "".join(json.dumps(p.to_dict(), ensure_ascii=False) + "\n" for p in probes)
    else:
        import yaml

        text = yaml.safe_dump([p.to_dict() for p in probes], sort_keys=False, allow_unicode=True)
    return atomic_write_text(path, text)
