"""Importer protocol, format auto-detection and the `load_transcripts` entry point.

An importer turns one file in a recorded-agent format into canonical `Transcript`s (a file may
hold several sessions). Importers are registered under the `compaction_bench.importers` entry
point; detection asks each one to `sniff` the file's content (not only its name) and picks the
most specific match.
"""

from __future__ import annotations

import abc
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from compaction_bench import registry
from compaction_bench.transcript import Transcript, TranscriptError

SNIFF_BYTES = 256 * 1024
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
UTF8_BOM = b"\xef\xbb\xbf"
#: Default bound on the decompressed size of a `.zst` transcript (a zstd bomb stops here, not in memory).
DEFAULT_MAX_DECOMPRESSED_BYTES = 1024**3
MAX_DECOMPRESSED_ENV = "COMPACTION_BENCH_MAX_DECOMPRESSED_BYTES"
#: Exceptions that malformed content raises inside parsers and sniffers (too deep, too large a number,
#: an infinite count); they become an `ImportFailure` naming the file, never a traceback.
CONTENT_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError, OverflowError)


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


def max_decompressed_bytes() -> int:
    """The decompression bound: `COMPACTION_BENCH_MAX_DECOMPRESSED_BYTES` (bytes), else 1 GiB."""
    raw = os.environ.get(MAX_DECOMPRESSED_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_DECOMPRESSED_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise ImportFailure(f"{MAX_DECOMPRESSED_ENV}={raw!r}: expected a number of bytes") from None
    if value <= 0:
        raise ImportFailure(f"{MAX_DECOMPRESSED_ENV}={raw!r}: expected a positive number of bytes")
    return value


def _is_zstd(path: Path, start: bytes) -> bool:
    return path.suffix == ".zst" or start[:4] == ZSTD_MAGIC


def _decompress(path: Path, limit: int, *, stop_at_limit: bool = False) -> bytes:
    """Stream-decompress every frame of a zstd file, at most `limit` bytes.

    Beyond `limit` the file is refused (`stop_at_limit=False`) or cut there (for sniffing).
    """
    import zstandard

    out = bytearray()
    try:
        with open(path, "rb") as fh:
            reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)
            while True:
                chunk = reader.read(min(1 << 20, limit + 1 - len(out)))
                if not chunk:
                    break
                out += chunk
                if len(out) > limit:
                    if stop_at_limit:
                        break
                    raise ImportFailure(
                        f"{path}: decompresses to more than {limit:,} bytes; refused (raise the bound with "
                        f"{MAX_DECOMPRESSED_ENV}=BYTES if the file is genuine)"
                    )
    except zstandard.ZstdError as exc:
        raise ImportFailure(f"{path}: not a readable zstd file ({exc})") from None
    del out[limit:]
    return bytes(out)


def read_head(path: Path, size: int = SNIFF_BYTES) -> str:
    """The first bytes of a file as text (zstd-compressed files decompressed, a UTF-8 BOM removed), for sniffing."""
    with open(path, "rb") as fh:
        raw = fh.read(size)
    if _is_zstd(path, raw):
        raw = _decompress(path, size, stop_at_limit=True)
    return raw.removeprefix(UTF8_BOM).decode("utf-8", errors="replace")


def read_bytes(path: Path) -> bytes:
    """The whole file, zstd-compressed files decompressed (every frame, within `max_decompressed_bytes`)."""
    with open(path, "rb") as fh:
        start = fh.read(4)
    if _is_zstd(path, start):
        return _decompress(path, max_decompressed_bytes())
    return path.read_bytes()


def decode_utf8(path: Path, raw: bytes) -> tuple[str, list[str]]:
    """Decode as UTF-8 (a leading BOM removed); invalid bytes become U+FFFD and each bad line is reported, none dropped."""
    raw = raw.removeprefix(UTF8_BOM)
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


def _sniffs(cls: type[Importer], path: Path, head: str) -> bool:
    """`cls.sniff`, with content a sniffer chokes on (too deep, a huge number) counted as no match."""
    try:
        return bool(cls.sniff(path, head))
    except CONTENT_ERRORS:
        return False


def detect(path: Path) -> type[Importer]:
    """The importer class for a file, from its content."""
    table = formats()
    if path.stat().st_size == 0:
        raise ImportFailure(f"{path}: empty file")
    head = read_head(path)
    matches = [cls for cls in table.values() if _sniffs(cls, path, head)]
    if not matches:
        raise ImportFailure(
            f"{path}: unrecognised transcript format; known formats: {', '.join(sorted(table))} "
            "(pass --format NAME to force one)"
        )
    return max(matches, key=lambda cls: cls.priority)


def load_transcripts(path: str | Path, format: str = "auto", **options: Any) -> list[Transcript]:
    """Import every session in a file.

    Damaged content never escapes as a traceback: an error a parser raises on it (nesting too deep,
    a number too large, an infinite count, undecodable text) becomes an `ImportFailure` naming the
    file. A forced `format` that finds nothing of its kind in the file is an error too.
    """
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
    except RecursionError:
        raise ImportFailure(f"{path}: cannot import as {cls.format}: data nested too deeply") from None
    except CONTENT_ERRORS as exc:
        raise ImportFailure(f"{path}: cannot import as {cls.format}: {type(exc).__name__}: {exc}") from None
    if not transcripts:
        raise ImportFailure(f"{path}: no session found in the file")
    if format != "auto" and not any(t.items for t in transcripts):
        raise ImportFailure(f"{path}: nothing in the file is {cls.format} content (forced with --format {format})")
    return transcripts


def load_transcript(path: str | Path, format: str = "auto", **options: Any) -> Transcript:
    """Import a file that holds one session (the first of several, with a note in its `meta`)."""
    transcripts = load_transcripts(path, format=format, **options)
    return transcripts[0]


MAX_FILE_STEM = 80


def safe_file_stem(session_id: str) -> str:
    """A file name stem from a session id found in a file (which may be hostile: `../../x`, `/etc/y`).

    Only letters, digits, `.`, `_` and `-` remain, never a leading dot, at most 80 characters; a stem
    that had to change ends in 8 hex digits of the id's sha256, so different ids get different stems.
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", session_id).strip("._-")[:MAX_FILE_STEM]
    if cleaned == session_id and cleaned:
        return cleaned
    digest = hashlib.sha256(session_id.encode("utf-8", errors="surrogatepass")).hexdigest()[:8]
    return f"{cleaned or 'session'}-{digest}"


def output_paths(transcripts: Sequence[Transcript], output: Path) -> list[Path]:
    """Where `bench import` writes each transcript: `output` itself for one session (or
    `output/<stem>.jsonl` when it is a folder), else `output/<stem>.jsonl` per session, the stem from
    `safe_file_stem` and a `-2`, `-3`… suffix for sessions whose ids give the same stem."""
    if len(transcripts) == 1 and not output.is_dir():
        return [output]
    if output.exists() and not output.is_dir():
        raise ImportFailure(f"{output}: is a file, but the input holds {len(transcripts)} sessions; pass a folder with -o")
    paths: list[Path] = []
    taken: set[str] = set()
    for transcript in transcripts:
        stem = safe_file_stem(transcript.id)
        candidate, n = stem, 1
        while candidate.lower() in taken:
            n += 1
            candidate = f"{stem}-{n}"
        taken.add(candidate.lower())
        paths.append(output / f"{candidate}.jsonl")
    return paths


def write_transcripts(transcripts: Sequence[Transcript], output: Path) -> list[Path]:
    """Write canonical files (`output_paths`) without ever replacing an existing file: any name
    already taken is an error before anything is written, and each write is exclusive."""
    paths = output_paths(transcripts, Path(output))
    existing = [str(p) for p in paths if p.exists() or p.is_symlink()]
    if existing:
        raise ImportFailure(f"{existing[0]}: already exists; not overwritten (remove it or choose another -o)")
    written = []
    for transcript, path in zip(transcripts, paths, strict=True):
        try:
            written.append(transcript.write(path, exclusive=True))
        except FileExistsError:
            raise ImportFailure(f"{path}: already exists; not overwritten (remove it or choose another -o)") from None
    return written
