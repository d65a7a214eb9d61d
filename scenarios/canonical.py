"""Importer for the canonical compaction-bench transcript JSONL (what `bench import` writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, decode_utf8, read_bytes
from compaction_bench.transcript import Transcript, TranscriptError, is_canonical


class CanonicalImporter(Importer):
    format = "canonical"
    description = "compaction-bench canonical transcript JSONL (header line + one item per line)"
    suffixes = (".jsonl",)
    priority = 100

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        return is_canonical(head)

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        text, problems = decode_utf8(path, read_bytes(path))
        if problems:
            raise TranscriptError(problems[0])
        return [Transcript.loads(text, origin=str(path))]
