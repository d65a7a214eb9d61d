"""Importer protocol, format auto-detection and the `load_transcripts` entry point.

An importer turns one file in a recorded-agent format into canonical `Transcript`s (a file may
hold several sessions). Importers are registered under the `compaction_bench.importers` entry
point; detection asks each one to `sniff` the file's content (not only its name) and picks the
most specific match.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from compaction_bench import registry
from compaction_bench.transcript import Transcript, TranscriptError

SNIFF_BYTES = 256 * 1024


class ImportFailure(TranscriptError):
    """A file that cannot be imported; the message names the file (and line where there is one)."""


class Importer(abc.ABC):
    """Base class of importers. Subclasses set the class attributes and implement `load`."""

    format: ClassVar[str] = ""
    description: ClassVar[str] = ""
    suffixes: ClassVar[tuple[str, ...]] = ()
    #: Higher wins when several importers recognise the same file.
    priority: ClassVar[int] = 0
    #: Options `load` accepts (name -> what it does); anything else is refused before loading.
    options: ClassVar[dict[str, str]] = {}
    #: True for importers that also take names that are not local files (a Hub dataset id).
    accepts_names: ClassVar[bool] = False

    @classmethod
    @abc.abstractmethod
    def sniff(cls, path: Path, head: str) -> bool:
        """True when `head` (the first bytes of the file, decoded leniently) looks like this format."""
        raise NotImplementedError

    @abc.abstractmethod
    def load(self, path: Path, **options: Any) -> list[Transcript]:
        raise NotImplementedError


def read_head(path: Path, size: int = SNIFF_BYTES) -> str:
    """The first bytes of a file as text (zstd-compressed files decompressed), for sniffing."""
    with open(path, "rb") as fh:
        raw = fh.read(size)
    if path.suffix == ".zst" or raw[:4] == b"\x28\xb5\x2f\xfd":
        import zstandard

        try:
            with open(path, "rb") as fh:
                raw = zstandard.ZstdDecompressor().stream_reader(fh).read(size)
        except zstandard.ZstdError as exc:
            raise ImportFailure(f"{path}: not a readable zstd file ({exc})") from None
    return raw.decode("utf-8", errors="replace")


def read_bytes(path: Path) -> bytes:
    """The whole file, zstd-compressed files decompressed."""
    raw = path.read_bytes()
    if path.suffix == ".zst" or raw[:4] == b"\x28\xb5\x2f\xfd":
        import zstandard

        try:
            return zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        except zstandard.ZstdError as exc:
            raise ImportFailure(f"{path}: not a readable zstd file ({exc})") from None
    return raw


def decode_utf8(path: Path, raw: bytes) -> tuple[str, list[str]]:
    """Decode as UTF-8; invalid bytes become U+FFFD and each bad line is reported, none dropped."""
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError:
        pass
    problems = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(f"{path}:{number}: invalid UTF-8 at byte {exc.start} of the line (replaced with U+FFFD)")
    return raw.decode("utf-8", errors="replace"), problems


def formats() -> Mapping[str, type[Importer]]:
    return registry.importers()


def detect(path: Path) -> type[Importer]:
    """The importer class for a file, from its content."""
    table = formats()
    if path.stat().st_size == 0:
        raise ImportFailure(f"{path}: empty file")
    head = read_head(path)
    matches = [cls for cls in table.values() if cls.sniff(path, head)]
    if not matches:
        raise ImportFailure(
            f"{path}: unrecognised transcript format; known formats: {', '.join(sorted(table))} "
            "(pass --format NAME to force one)"
        )
    return max(matches, key=lambda cls: cls.priority)


def load_transcripts(path: str | Path, format: str = "auto", **options: Any) -> list[Transcript]:
    """Import every session in a file."""
    path = Path(path)
    if format == "auto":
        cls = None
    else:
        try:
            cls = registry.importer_class(format)
        except registry.RegistryError as exc:
            raise ImportFailure(str(exc)) from None
    if not path.exists() and not (cls is not None and cls.accepts_names):
        raise ImportFailure(f"{path}: no such file")
    if path.is_dir():
        raise ImportFailure(f"{path}: is a directory; pass the files inside it")
    if cls is None:
        cls = detect(path)
    unknown = sorted(set(options) - set(cls.options))
    if unknown:
        valid = ", ".join(f"{k} ({v})" for k, v in cls.options.items()) or "none"
        raise ImportFailure(f"{path}: unknown import option(s) for format {cls.format}: {', '.join(unknown)}; valid: {valid}")
    try:
        transcripts = cls().load(path, **options)
    except TranscriptError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ImportFailure(f"{path}: cannot import as {cls.format}: {type(exc).__name__}: {exc}") from exc
    if not transcripts:
        raise ImportFailure(f"{path}: no session found in the file")
    return transcripts


def load_transcript(path: str | Path, format: str = "auto", **options: Any) -> Transcript:
    """Import a file that holds one session (the first of several, with a note in its `meta`)."""
    transcripts = load_transcripts(path, format=format, **options)
    return transcripts[0]
