"""Mining quality against hand-labelled probes (`bench probes eval --labelled FILE TRANSCRIPT`).

Two numbers per transcript, and their sums over a development set:
- **recall** by kind: the share of labelled facts whose answer a mined probe asks for. A mined probe
  asks for a labelled answer when, after normalization (`metrics/grading.normalize`), the labelled
  answer occurs in one of the mined answer terms (the mined probe needs the fact to pass), or a
  mined term occurs in the labelled answer and covers at least half of it. A labelled set (`match:
  set`, a list of members) is asked for by one mined probe whose terms ask for at least half of its
  members (and at least one), each member matched as a single answer is: the set counterpart of a
  term covering half a string, so a mined set with every member, or a mined file among the two
  files of a labelled pair, counts, and one file of three does not. (Before, the members were
  joined into one string, which no single member could cover half of once there were three.) The
  kind of the mined probe does not have to agree (a fact is recalled whatever family found it);
- **located**: the share of mined probes whose every answer term occurs verbatim in the transcript
  at or after the item they name as their source (`compaction_bench.probes.answer_after_source`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from compaction_bench.metrics.grading import normalize
from compaction_bench.probes import KINDS, Probe, answer_after_source
from compaction_bench.transcript import Transcript

COVER = 0.5  # a mined term inside the labelled answer must cover this share of it (of a set: of its members)


@dataclass
class MiningEval:
    """Counts behind the recall and located shares (add them up over several transcripts)."""

    labelled: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    recalled: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    mined: int = 0
    located: int = 0
    missed: list[str] = field(default_factory=list)  # ids of labelled probes no mined probe asks for

    def add(self, other: MiningEval) -> MiningEval:
        for kind in KINDS:
            self.labelled[kind] += other.labelled[kind]
            self.recalled[kind] += other.recalled[kind]
        self.mined += other.mined
        self.located += other.located
        self.missed += other.missed
        return self

    def recall(self, kind: str | None = None) -> float | None:
        kinds = [kind] if kind else list(KINDS)
        total = sum(self.labelled[k] for k in kinds)
        return sum(self.recalled[k] for k in kinds) / total if total else None

    def located_share(self) -> float | None:
        return self.located / self.mined if self.mined else None

    def to_dict(self) -> dict[str, object]:
        return {
            "recall": self.recall(),
            "recall_by_kind": {k: self.recall(k) for k in KINDS},
            "labelled_by_kind": dict(self.labelled),
            "recalled_by_kind": dict(self.recalled),
            "mined": self.mined,
            "located": self.located,
            "located_share": self.located_share(),
            "missed": list(self.missed),
        }


def _terms(probe: Probe) -> list[str]:
    return [normalize(a) for a in (probe.answers if probe.match == "set" else (probe.answer,)) if isinstance(a, str)]


def _asks_for_answer(terms: Sequence[str], wanted: str) -> bool:
    """A mined term needs the labelled answer, or is a part of it covering at least `COVER` of it."""
    return any(wanted in term or (term in wanted and len(term) >= COVER * len(wanted)) for term in terms)


def _wanted(labelled: Probe) -> list[str]:
    """The normalized answers a labelled probe wants: its answer, or a set's members."""
    return [normalize(labelled.answer)] if isinstance(labelled.answer, str) else [normalize(m) for m in labelled.answer]


def asks_for(mined: Iterable[Probe], labelled: Probe) -> bool:
    """Whether some mined probe asks for the labelled probe's answer: its one answer, or at least `COVER` of a
    labelled set's members and at least one, each as a single answer is asked for (module docstring)."""
    members = _wanted(labelled)
    for probe in mined:
        terms = _terms(probe)
        asked = sum(_asks_for_answer(terms, member) for member in members)
        if asked and asked >= COVER * len(members):
            return True
    return False


def evaluate(transcript: Transcript, labelled: Sequence[Probe], mined: Sequence[Probe]) -> MiningEval:
    """Recall of `mined` against `labelled` and the share of `mined` located in `transcript`."""
    result = MiningEval()
    for probe in labelled:
        result.labelled[probe.kind] += 1
        if asks_for(mined, probe):
            result.recalled[probe.kind] += 1
        else:
            result.missed.append(probe.id)
    result.mined = len(mined)
    result.located = sum(1 for p in mined if answer_after_source(transcript, p) is None)
    return result


def markdown_table(result: MiningEval) -> str:
    """Recall by kind as a markdown table (the README's), then the located share."""
    rows = ["| kind | labelled | recalled | recall |", "|---|---:|---:|---:|"]
    for kind in (*KINDS, None):
        labelled = sum(result.labelled.values()) if kind is None else result.labelled[kind]
        recalled = sum(result.recalled.values()) if kind is None else result.recalled[kind]
        share = result.recall(kind)
        rows.append(f"| {kind or '**all**'} | {labelled} | {recalled} | {'–' if share is None else f'{share:.0%}'} |")
    share = result.located_share()
    rows.append("")
    rows.append(f"mined probes located at or after their source: {result.located} of {result.mined}"
                + ("" if share is None else f" ({share:.0%})"))
    return "\n".join(rows)
