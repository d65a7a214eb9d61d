"""Importer protocol, format auto-detection and the `load_transcripts` entry point.

An importer turns one file in a recorded-agent format into canonical `Transcript`s (a file may
hold several sessions). Importers are registered under the `compaction_bench.importers` entry
point; detection asks each one to `sniff` the file's content (not only its name) and picks the
most specific match.

Every transcript file is opened here, by `open_input` (through `read_head`, `read_bytes` and
`read_input`), and nowhere else: only a regular file is read (symlinks followed). A folder, a named
pipe, a device or a socket is refused before anything is read (a FIFO would block, `/dev/zero` never
ends), as are a missing path, a broken symlink and a symlink loop, each with one line naming it. The
one folder taken is one an importer reads from a file inside it (`Importer.folder_entry`: an
OpenHands conversation saved as `base_state.json` beside `events/`): that file is the input.
"""

from __future__ import annotations

import abc
import errno
import hashlib
import logging
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path, PosixPath
from typing import Any, BinaryIO, ClassVar

from compaction_bench import registry
from compaction_bench.transcript import Transcript, TranscriptError

LOG = logging.getLogger(__name__)

SNIFF_BYTES = 256 * 1024
#: Detection reads a first line longer than `SNIFF_BYTES` (a JSONL whose first record holds a large
#: system prompt) whole, up to this many bytes, when the shorter head matched no format; a file of
#: shorter lines (an indented JSON document) is read this far.
FIRST_LINE_BYTES = 8 * 1024 * 1024
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
UTF8_BOM = b"\xef\xbb\xbf"
#: Default bound on the decompressed size of a `.zst` transcript (a zstd bomb stops here, not in memory).
DEFAULT_MAX_DECOMPRESSED_BYTES = 1024**3
MAX_DECOMPRESSED_ENV = "COMPACTION_BENCH_MAX_DECOMPRESSED_BYTES"
#: Exceptions that malformed content raises inside parsers and sniffers (too deep, too large a number,
#: an infinite count); they become an `ImportFailure` naming the file, never a traceback.
CONTENT_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError, OverflowError)


class TypedPath(PosixPath):
    """A transcript's path that prints as the user typed it. pathlib normalizes `./x` to `x` and `a//b` to
    `a/b`, so every message about the file (an error, a problem line of `bench inspect`, the transcript's
    `source["path"]`) would name it otherwise than the user did. It is the same path for every other purpose
    (opening, comparing, hashing); paths derived from it (`.parent`, `/ name`) print as pathlib's do."""

    typed = ""

    @classmethod
    def of(cls, text: str) -> TypedPath:
        path = cls(text)
        path.typed = text
        return path

    def __str__(self) -> str:
        return self.typed or super().__str__()


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
    #: True for importers that also take names that are not local files (a Hub dataset id); which
    #: names they take is `is_name`.
    accepts_names: ClassVar[bool] = False

    @classmethod
    def is_name(cls, text: str) -> bool:
        """True when `text` (as the user gave it) names something that is not a local file, which
        `load` fetches (a Hub dataset id). Asked only of importers with `accepts_names`; by default
        anything that does not exist locally (an importer can be stricter: `hf-dataset` is)."""
        return not os.path.lexists(text)

    @classmethod
    @abc.abstractmethod
    def sniff(cls, path: Path, head: str) -> bool:
        """True when `head` (the first bytes of the file, decoded leniently) looks like this format."""
        raise NotImplementedError

    @classmethod
    def folder_entry(cls, folder: Path) -> str | None:
        """The name of the file inside `folder` that is the folder's transcript in this format (a session saved as a
        folder of files, read from one of them), or None when the folder is no session of this format. A folder of
        this format it cannot read raises an `ImportFailure` saying what to pass instead. By default None."""
        return None

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


_FILE_KINDS = (
    (stat.S_ISDIR, "is a directory; pass the files inside it"),
    (stat.S_ISFIFO, "is a named pipe (FIFO), not a regular file; save what it carries to a file and pass that"),
    (stat.S_ISCHR, "is a character device, not a regular file; pass a transcript file"),
    (stat.S_ISBLK, "is a block device, not a regular file; pass a transcript file"),
    (stat.S_ISSOCK, "is a socket, not a regular file; pass a transcript file"),
)


def _os_failure(path: Path, exc: OSError) -> ImportFailure:
    """One line for a path that cannot be opened, saying why in words."""
    if exc.errno == errno.ELOOP:
        return ImportFailure(f"{path}: symlink loop (the link leads back to itself); pass the file it should point to")
    if exc.errno == errno.ENOENT:
        if os.path.islink(path):
            return ImportFailure(f"{path}: broken symlink (it points to {os.readlink(path)}, which does not exist)")
        return ImportFailure(f"{path}: no such file")
    if exc.errno == errno.ENOTDIR:
        return ImportFailure(f"{path}: no such file (a part of the path is a file, not a folder)")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ImportFailure(f"{path}: permission denied")
    if exc.errno == errno.ENAMETOOLONG:
        return ImportFailure(f"{path}: file name too long")
    return ImportFailure(f"{path}: cannot open ({exc.strerror or exc})")


def _refuse_special(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        reason = next((why for test, why in _FILE_KINDS if test(mode)), "is not a regular file")
        raise ImportFailure(f"{path}: {reason}")


def folder_input(path: TypedPath, importer: type[Importer] | None) -> TypedPath:
    """The file to read for `path`: `path` itself, unless it is a folder that an importer reads from a file inside it
    (`Importer.folder_entry`; the forced `importer`'s, else that of the most specific importer that claims it). Then
    that file, named as the folder was typed. A folder no importer claims stays: `check_input` refuses it."""
    if not os.path.isdir(path):
        return path
    claims = [(cls, name) for cls in ([importer] if importer else formats().values()) if (name := cls.folder_entry(path))]
    if not claims:
        return path
    _, name = max(claims, key=lambda claim: claim[0].priority)
    return TypedPath.of(os.path.join(str(path), name))


def check_input(path: str | Path) -> os.stat_result:
    """The status of a transcript file that may be read: a regular file (symlinks followed), else one
    `ImportFailure` naming the path and what it is (missing, a symlink loop, a folder, a FIFO, a device)."""
    path = path if isinstance(path, Path) else Path(path)  # a `TypedPath` keeps its spelling
    try:
        status = os.stat(path)
    except OSError as exc:
        raise _os_failure(path, exc) from None
    except ValueError:  # an embedded NUL byte
        raise ImportFailure(f"{path!r}: not a usable file name") from None
    _refuse_special(path, status.st_mode)
    return status


_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_OPEN_FLAGS = os.O_RDONLY | _NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def open_input(path: str | Path) -> BinaryIO:
    """Open a transcript file for reading (binary): the one way every importer opens its input.

    Checked twice: by `check_input` before opening (so a FIFO or a device is never opened), and on
    the open descriptor (opened non-blocking, so a path swapped for a FIFO in between cannot hang).
    """
    path = path if isinstance(path, Path) else Path(path)  # a `TypedPath` keeps its spelling
    check_input(path)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise _os_failure(path, exc) from None
    try:
        _refuse_special(path, os.fstat(fd).st_mode)
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _is_zstd(path: Path, start: bytes) -> bool:
    return path.suffix == ".zst" or start[:4] == ZSTD_MAGIC


_ZSTD_FRAME = 0xFD2FB528
_SKIPPABLE_FIRST, _SKIPPABLE_LAST = 0x184D2A50, 0x184D2A5F


def zstd_truncation(fh: BinaryIO, size: int) -> str | None:
    """Where a zstd file ends inside a frame, in words, or None when every frame is whole.

    Walks the frame and block headers only (RFC 8878 §3.1), a few bytes per block. Bytes that do not
    start a frame stop the walk with None: the decompressor says what is wrong with them.
    """
    pos, frame = 0, 0
    while pos < size:
        frame += 1
        start = pos
        fh.seek(pos)
        magic = fh.read(4)
        cut = f"frame {frame} (from byte {start:,}) is cut off where the file ends (byte {size:,})"
        if len(magic) < 4:
            return cut
        number = int.from_bytes(magic, "little")
        if _SKIPPABLE_FIRST <= number <= _SKIPPABLE_LAST:
            length = fh.read(4)
            if len(length) < 4:
                return cut
            pos += 8 + int.from_bytes(length, "little")
            if pos > size:
                return cut
            continue
        if number != _ZSTD_FRAME:
            return None
        descriptor = fh.read(1)
        if not descriptor:
            return cut
        flags = descriptor[0]
        single_segment = (flags >> 5) & 1
        header = 1 + (0 if single_segment else 1) + (0, 1, 2, 4)[flags & 3] + (single_segment, 2, 4, 8)[flags >> 6]
        pos += 4 + header
        while pos <= size:
            fh.seek(pos)
            block = fh.read(3)
            if len(block) < 3:
                return cut
            value = int.from_bytes(block, "little")
            kind = (value >> 1) & 3
            if kind == 3:  # reserved block type: corrupt, not cut
                return None
            pos += 3 + (1 if kind == 1 else value >> 3)
            if value & 1:
                break
        if (flags >> 2) & 1:
            pos += 4  # content checksum
        if pos > size:
            return cut
    return None


def _decompress(path: Path, fh: BinaryIO, limit: int, *, stop_at_limit: bool = False) -> tuple[bytes, str | None]:
    """Stream-decompress every frame of a zstd file, at most `limit` bytes, and say where the file is
    cut off (`zstd_truncation`) when it ends inside a frame (what the whole blocks before the cut
    hold is returned).

    Beyond `limit` the file is refused (`stop_at_limit=False`) or cut there (for sniffing).
    """
    import zstandard

    out = bytearray()
    failure: zstandard.ZstdError | None = None
    fh.seek(0)
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True, closefd=False)
        while True:
            chunk = reader.read(min(1 << 20, limit + 1 - len(out)))
            if not chunk:
                break
            out += chunk
            if len(out) > limit:
                if stop_at_limit:
                    del out[limit:]
                    return bytes(out), None
                raise ImportFailure(
                    f"{path}: decompresses to more than {limit:,} bytes; refused (raise the bound with "
                    f"{MAX_DECOMPRESSED_ENV}=BYTES if the file is genuine)"
                )
    except zstandard.ZstdError as exc:
        failure = exc
    truncated = zstd_truncation(fh, os.fstat(fh.fileno()).st_size)
    if failure is not None and truncated is None:
        raise ImportFailure(f"{path}: not a readable zstd file ({failure})")
    return bytes(out), truncated


def _truncated_failure(path: Path, where: str) -> ImportFailure:
    return ImportFailure(f"{path}: truncated zstd file: {where}; nothing before the cut decompresses")


def _read_head_bytes(path: Path, size: int, *, first_line: bool = False) -> bytes:
    """The first `size` bytes (decompressed); with `first_line`, the first line whole (up to
    `FIRST_LINE_BYTES`) and `size` bytes after it."""
    with open_input(path) as fh:
        raw = fh.read(size)
        if _is_zstd(path, raw):
            bound = FIRST_LINE_BYTES + size if first_line else size
            raw, truncated = _decompress(path, fh, bound, stop_at_limit=True)
            if truncated is not None and not raw:
                raise _truncated_failure(path, truncated)
        elif first_line:
            chunks = [raw]
            total = len(raw)
            while b"\n" not in chunks[-1] and total < FIRST_LINE_BYTES:
                chunk = fh.read(1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            chunks.append(fh.read(size))
            raw = b"".join(chunks)
    if first_line:
        newline = raw.find(b"\n", 0, FIRST_LINE_BYTES)
        raw = raw[:FIRST_LINE_BYTES] if newline < 0 else raw[: newline + 1 + size]
    return raw.removeprefix(UTF8_BOM)


def read_head(path: Path, size: int = SNIFF_BYTES) -> str:
    """The first bytes of a file as text (zstd-compressed files decompressed, a UTF-8 BOM removed), for sniffing."""
    return _read_head_bytes(path, size).decode("utf-8", errors="replace")


def read_input(path: Path) -> tuple[bytes, list[str]]:
    """The whole file, zstd-compressed files decompressed (every frame, within `max_decompressed_bytes`),
    and the problems met: a `.zst` whose last frame is cut off keeps what decompresses before the cut,
    with a problem naming the file; one cut before anything decompresses is an `ImportFailure`."""
    with open_input(path) as fh:
        if not _is_zstd(path, fh.read(4)):
            fh.seek(0)
            return fh.read(), []
        data, truncated = _decompress(path, fh, max_decompressed_bytes())
    if truncated is None:
        return data, []
    if not data:
        raise _truncated_failure(path, truncated)
    return data, [f"{path}: truncated zstd file: {truncated}; the {len(data):,} bytes before the cut are kept, the rest is lost"]


def read_bytes(path: Path) -> bytes:
    """`read_input` for readers that accept no damage: a truncated `.zst` is an `ImportFailure`."""
    data, problems = read_input(path)
    if problems:
        raise ImportFailure(problems[0])
    return data


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
    """The importer class for a file, from its content.

    Sniffers see the first `SNIFF_BYTES`; when nothing matches and the file is longer, they see more:
    the first line whole (up to `FIRST_LINE_BYTES`) when that head ends inside it, else the first
    `FIRST_LINE_BYTES`. So a JSONL whose first record is a long system prompt, or an indented JSON
    document whose first event holds a long message, is still recognised without slowing down the
    files that match at once.
    """
    table = formats()
    if check_input(path).st_size == 0:
        raise ImportFailure(f"{path}: empty file")
    raw = _read_head_bytes(path, SNIFF_BYTES)
    head = raw.decode("utf-8", errors="replace")
    matches = [cls for cls in table.values() if _sniffs(cls, path, head)]
    long_line = ""
    if not matches and len(raw) >= SNIFF_BYTES - len(UTF8_BOM):
        if b"\n" not in raw:
            raw = _read_head_bytes(path, SNIFF_BYTES, first_line=True)
        else:  # a JSON document whose first record holds a long text: the keys that tell its format come after it
            raw = _read_head_bytes(path, FIRST_LINE_BYTES)
        matches = [cls for cls in table.values() if _sniffs(cls, path, raw.decode("utf-8", errors="replace"))]
        if b"\n" not in raw and len(raw) >= FIRST_LINE_BYTES:  # detection stopped inside the line (a shorter file has no newline at all)
            long_line = f"; its first line is longer than {FIRST_LINE_BYTES:,} bytes, beyond what detection reads"
    if not matches:
        raise ImportFailure(
            f"{path}: unrecognised transcript format{long_line}; known formats: {', '.join(sorted(table))} "
            "(pass --format NAME to force one)"
        )
    return max(matches, key=lambda cls: cls.priority)


def warn_import_problems(path: str | Path, transcripts: Sequence[Transcript]) -> None:
    """Say once per file how many problems its import met (lines kept out, repaired or kept as
    markers; the importers record each in `meta["problems"]`), so none passes a run, a mining or a
    conversion unnoticed."""
    from compaction_bench.progress import shown

    problems = list(dict.fromkeys(p for t in transcripts for p in t.meta.get("problems", ())))
    if problems:
        name = shown(str(path))
        LOG.warning("warning: %s: %d import problem(s), e.g. %s (`bench inspect %s` lists them all)", name, len(problems), shown(problems[0]), name)


def load_transcripts(path: str | Path, format: str = "auto", **options: Any) -> list[Transcript]:
    """Import every session in a file.

    Damaged content never escapes as a traceback: an error a parser raises on it (nesting too deep,
    a number too large, an infinite count, undecodable text) becomes an `ImportFailure` naming the
    file. A forced `format` that finds nothing of its kind in the file is an error too.
    """
    given = str(path)
    path = TypedPath.of(given)  # messages name the file as the user typed it
    if format == "auto":
        cls = None
    else:
        try:
            cls = registry.importer_class(format)
        except registry.RegistryError as exc:
            raise ImportFailure(str(exc)) from None
    if not (cls is not None and cls.accepts_names and cls.is_name(given)):
        path = folder_input(path, cls)  # a conversation saved as a folder: the file it is read from
        check_input(path)  # before anything reads it: missing, a loop, a folder, a FIFO, a device
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
    if format != "auto" and not any(item.kind != "marker" for t in transcripts for item in t.items):  # markers only: lines it did not read
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
    `output/<stem>.jsonl` when it is a folder, or typed as one with a trailing `/`), else
    `output/<stem>.jsonl` per session, the stem from `safe_file_stem` and a `-2`, `-3`… suffix for
    sessions whose ids give the same stem."""
    if len(transcripts) == 1 and not output.is_dir() and not str(output).endswith("/"):
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
    paths = output_paths(transcripts, output if isinstance(output, Path) else Path(output))  # a `TypedPath` keeps its spelling
    existing = [str(p) for p in paths if p.exists() or p.is_symlink()]
    if existing:
        raise ImportFailure(f"{existing[0]}: already exists; not overwritten (remove it or choose another -o)")
    if paths[0] != output:  # a folder: made when it is not there yet
        try:
            Path(output).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ImportFailure(f"{output}: cannot create the folder ({exc.strerror or exc})") from None
    written = []
    for transcript, path in zip(transcripts, paths, strict=True):
        try:
            written.append(transcript.write(path, exclusive=True))
        except FileExistsError:
            raise ImportFailure(f"{path}: already exists; not overwritten (remove it or choose another -o)") from None
    return written
