"""Atomic file writes: write to a temporary file beside the target, fsync, then rename.

`exclusive=True` never replaces an existing file: the finished file is hard-linked into place,
which fails with `FileExistsError` when the name is taken (also by a concurrent writer).
`write_output` writes a file the user named on the command line: one already there is replaced
only when they said so (`--force`). A write that fails (a read-only folder, a full disk) is a
`WriteFailed` naming the file, whatever raised it (Python's own messages and Arrow's often name no
path, or only the temporary one).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from compaction_bench.errors import BenchError


class OutputExists(BenchError, FileExistsError):
    """The output file a command was asked to write exists, and replacing it was not asked for."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path}: already exists; not overwritten (pass --force to replace it, or choose another path)")


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


def check_output(path: Path | None, *, replace: bool = False) -> None:
    """Refuse an output file that exists unless `replace`: called before a command's work, so the
    refusal comes first (`write_output` checks again as it writes)."""
    if path is not None and not replace and Path(path).exists():
        raise OutputExists(Path(path))


def write_output(path: Path, text: str, *, replace: bool = False) -> Path:
    """Write `text` to the output file the user named; an existing file is replaced only with `replace`."""
    path = Path(path)
    try:
        return atomic_write_text(path, text, exclusive=not replace)
    except FileExistsError:
        if replace or not path.exists():
            raise
        raise OutputExists(path) from None
