"""Atomic file writes: write to a temporary file beside the target, fsync, then rename.

`exclusive=True` never replaces an existing file: the finished file is hard-linked into place,
which fails with `FileExistsError` when the name is taken (also by a concurrent writer).
`write_output` writes a file the user named on the command line: one already there is replaced
only when they said so (`--force`), never inside a run folder the command reads (`check_output`), a
stream such as `/dev/stdout` is written into, and a link keeps pointing at the file it names. A write that fails (a read-only folder, a full disk) is a
`WriteFailed` naming the file, whatever raised it (Python's own messages and Arrow's often name no
path, or only the temporary one); when a folder stands where the file goes, or a file where one of its folders
does, it says which (`_in_the_way`: Python's "File exists", "Not a directory" and "Is a directory" do not).
A writer of a folder no other process writes in (`sweep`: a run folder, which its run holds) removes, once its
file is in place, the temporary files a write of the same file left when it was killed (`stale_temps`).
"""

from __future__ import annotations

import errno
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

    def __init__(self, path: Path, exc: OSError, reason: str | None = None) -> None:
        reason = reason or exc.strerror or str(exc) or type(exc).__name__
        super().__init__(f"{path}: cannot write ({reason})")
        self.errno, self.strerror, self.filename = exc.errno, exc.strerror, str(path)

    def __str__(self) -> str:
        return str(self.args[0])


#: `atomic_write`'s temporary file beside `path` is `.<path's name>.<random>.tmp`, where `<random>` is what
#: `tempfile.mkstemp` puts between its prefix and suffix: 8 characters of a-z, 0-9 and _ (CPython
#: Lib/tempfile.py, `_RandomNameSequence`: its `characters` and `k=8`, the same in 3.11.7, 3.12.1 and 3.13.0). A name of another form is
#: never taken for one (`stale_temps`).
TEMP_SUFFIX = ".tmp"
MKSTEMP_RANDOM = "[a-z0-9_]{8}"


def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def stale_temps(path: Path) -> list[Path]:
    """The regular files beside `path` named as `atomic_write` names its temporary file of `path` (`TEMP_SUFFIX`): what
    a write of `path` that was killed before its rename (SIGKILL, a power cut) left. Nothing else matches: not another
    file's, not a name a user chose unless it has exactly that form."""
    pattern = re.compile(re.escape(_temp_prefix(path)) + MKSTEMP_RANDOM + re.escape(TEMP_SUFFIX))
    try:
        with os.scandir(path.parent) as entries:
            return [Path(e.path) for e in entries if pattern.fullmatch(e.name) and e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def remove_stale_temps(path: Path) -> None:
    """Remove `stale_temps(path)`. Only where no other process writes `path` at the same time (its temporary file
    would look the same): a run folder, which one run holds. One that cannot be removed stays (the write it follows
    succeeded; the file is a leftover, not a result)."""
    for tmp in stale_temps(path):
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def _in_the_way(path: Path, exc: OSError) -> str | None:
    """Why `path` cannot be written when something of the wrong kind stands in the way (`exc` is "File exists", "Not
    a directory" or "Is a directory", which name neither): `path` a folder, or the nearest of its folders that exists
    a file (or a link to nothing). None for any other failure, or when neither is found."""
    if exc.errno not in (errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
        return None
    try:
        if os.path.isdir(path) and not os.path.islink(path):  # a link to a folder is replaced, as any link is
            return f"{path} is a folder, not a file"
        for folder in path.parents:  # the nearest first
            if folder.is_dir():
                return None
            if folder.exists():
                return f"{folder} is a file, not a folder"
            if folder.is_symlink():
                return f"{folder} is a link to nothing, not a folder"
    except OSError:  # a folder that cannot be looked into: the error as the system gave it
        pass
    return None


def atomic_write(path: Path, write: Callable[[Path], object], *, exclusive: bool = False, sweep: bool = False) -> Path:
    """Call `write(tmp_path)` and move the result onto `path` only when it succeeded (and, with
    `exclusive`, only when `path` does not exist yet: then `FileExistsError`). Any other failure to
    write is a `WriteFailed` naming `path`. With `sweep`, once `path` is in place the temporary files that
    earlier writes of it left are removed (`remove_stale_temps`: only for a folder no other process writes in)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise WriteFailed(path, exc, _in_the_way(path, exc)) from exc
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
        raise WriteFailed(path, exc, _in_the_way(path, exc)) from exc
    finally:
        tmp.unlink(missing_ok=True)
    if sweep:
        remove_stale_temps(path)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str, *, exclusive: bool = False, sweep: bool = False) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), exclusive=exclusive, sweep=sweep)


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
