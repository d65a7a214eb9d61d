"""Atomic file writes: write to a temporary file beside the target, fsync, then rename.

`exclusive=True` never replaces an existing file: the finished file is hard-linked into place,
which fails with `FileExistsError` when the name is taken (also by a concurrent writer).
`write_output` writes a file the user named on the command line: one already there is replaced
only when they said so (`--force`), never inside a run folder the command reads (`check_output`), a
stream such as `/dev/stdout` is written into, and a link keeps pointing at the file it names. A write that fails (a read-only folder, a full disk) is a
`WriteFailed` naming the file, whatever raised it (Python's own messages and Arrow's often name no
path, or only the temporary one).
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from compaction_bench.errors import BenchError


class OutputExists(BenchError, FileExistsError):
    """The output file a command was asked to write exists, and replacing it was not asked for."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path}: already exists; not overwritten (pass --force to replace it, or choose another path)")


class OutputInsideRun(BenchError, ValueError):
    """An output file named inside a run folder the same command reads."""


class WriteFailed(BenchError, OSError):
    """A file could not be written (a read-only or full file system, a missing permission)."""

    def __init__(self, path: Path, exc: OSError) -> None:
        reason = exc.strerror or str(exc) or type(exc).__name__
        super().__init__(f"{path}: cannot write ({reason})")
        self.errno, self.strerror, self.filename = exc.errno, exc.strerror, str(path)

    def __str__(self) -> str:
        return str(self.args[0])


def atomic_write(path: Path, write: Callable[[Path], object], *, exclusive: bool = False) -> Path:
    """Call `write(tmp_path)` and move the result onto `path` only when it succeeded (and, with
    `exclusive`, only when `path` does not exist yet: then `FileExistsError`). Any other failure to
    write is a `WriteFailed` naming `path`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise WriteFailed(path, exc) from exc
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    except OSError as exc:
        if isinstance(exc, BenchError) or (exclusive and isinstance(exc, FileExistsError)):
            raise
        raise WriteFailed(path, exc) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str, *, exclusive: bool = False) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), exclusive=exclusive)


def is_stream(path: Path) -> bool:
    """Whether `path` names an existing file that is neither a regular file nor a folder once its links are followed
    (a terminal, a pipe, a device), or an open file descriptor (`/dev/stdout` while the shell sends it to a file): an
    output written into as a stream, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return (not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)) or _names_a_descriptor(path)


#: A process's open file descriptor, as `/dev/stdout` and `/dev/fd/N` reach it (`/proc/self/fd/1`, its folder resolved).
_DESCRIPTOR = re.compile(r"/proc/[^/]+/fd/\d+")


def _names_a_descriptor(path: Path) -> bool:
    """Whether following `path`'s links, one at a time, reaches a `/proc/<pid>/fd/<n>` entry."""
    current = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
    for _ in range(40):  # the kernel's own limit on links followed
        if _DESCRIPTOR.fullmatch(current):
            return True
        if not os.path.islink(current):
            return False
        target = os.path.join(os.path.dirname(current), os.readlink(current))
        current = os.path.join(os.path.realpath(os.path.dirname(target)), os.path.basename(target))
    return False


def check_output(path: Path | None, *, replace: bool = False, reads: Sequence[Path] = ()) -> None:
    """Refuse an output file that exists unless `replace`, and one inside a folder in `reads` (the run folders the
    command reads: `--force` is no licence to replace a run's own files): called before a command's work, so the
    refusal comes first (`write_output` checks again as it writes). A stream (`is_stream`) is not refused."""
    if path is None or is_stream(Path(path)):
        return
    target = Path(path).resolve()
    for folder in reads:
        if target.is_relative_to(Path(folder).resolve()):
            raise OutputInsideRun(f"{path}: is inside the run folder {folder}, which this command reads; write it elsewhere "
                                  "(a run's own files are never replaced, --force or not)")
    if not replace and Path(path).exists():
        raise OutputExists(Path(path))


def write_output(path: Path, text: str, *, replace: bool = False) -> Path:
    """Write `text` to the output file the user named; an existing file is replaced only with `replace`. A stream
    (`-o /dev/stdout`) is written into, as a shell's redirection would; a link to a file replaces the file it names, and
    the link stays (an atomic replace of the name itself would put a file where the device or the link was)."""
    path = Path(path)
    if is_stream(path):
        try:
            with open(path, "a", encoding="utf-8") as stream:  # appended: a shell's `>>` to a file keeps what it holds
                stream.write(text)
        except OSError as exc:
            raise WriteFailed(path, exc) from exc
        return path
    target = path.resolve() if path.is_symlink() else path
    try:
        return atomic_write_text(target, text, exclusive=not replace)
    except FileExistsError:
        if replace or not target.exists():
            raise
        raise OutputExists(path) from None
