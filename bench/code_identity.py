"""What identifies the code that makes a run's cells: the sha256 of every source file of the installed package
(`code_files`, `code_sha256`, compared when a run resumes: `run_folder.config_difference`) and, for a checkout of
compaction-bench itself, its git revision and whether its files differ from it (`git_state`, information only), for
the run's manifest (`code_identity`); and `sha256_file`, the digest of one file's bytes, which the manifest's inputs
use too."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from compaction_bench.errors import BenchError


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


#: The subpackages pyproject.toml maps from folders of their own ([tool.setuptools] packages and package-dir): an
#: editable install finds each in its own folder (strategies/, not bench/strategies/), a wheel inside the package's.
SUBPACKAGES = ("strategies", "scenarios", "metrics", "reports")


def package_folders() -> dict[str, Path]:
    """The folder of compaction_bench and of each of its `SUBPACKAGES`, by the name their files have inside the
    package (`compaction_bench`, `compaction_bench/strategies`, …), wherever the install put them (found as Python
    finds them: an editable install's finder maps each to its own folder)."""
    folders = {"compaction_bench": Path(__file__).resolve().parent}
    for name in SUBPACKAGES:
        spec = importlib.util.find_spec(f"compaction_bench.{name}")
        if spec is None or not spec.submodule_search_locations:
            raise BenchError(f"compaction_bench.{name}: not found where compaction_bench is installed ({folders['compaction_bench']}); reinstall it")
        folders[f"compaction_bench/{name}"] = Path(list(spec.submodule_search_locations)[0]).resolve()
    return folders


def _source_files(folder: Path) -> Iterator[Path]:
    """Every file under `folder` but Python's caches (__pycache__, .pyc, .pyo) and hidden names (an editor's swap file,
    .DS_Store), which no import or template lookup reads; folders and files in name order."""
    for directory, subfolders, names in os.walk(folder):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__" and not d.startswith("."))
        for name in sorted(names):
            if not name.startswith(".") and not name.endswith((".pyc", ".pyo")):
                yield Path(directory, name)


def code_files(folders: Mapping[str, Path] | None = None) -> dict[str, str]:
    """The sha256 of each file of the package as it runs (`package_folders`: its modules, its strategies' and metrics'
    prompts, its report templates), by its name inside the package (`compaction_bench/strategies/codex.py`), in name
    order. A wheel's subpackage folders lie inside the package's and give the same names twice; an edit not committed
    to git changes it, and a git repository the package happens to sit in does not. About 120 files, 2.5 MB: 15 ms."""
    out: dict[str, str] = {}
    for prefix, folder in (folders if folders is not None else package_folders()).items():
        for path in _source_files(folder):
            out[f"{prefix}/{path.relative_to(folder).as_posix()}"] = sha256_file(path)
    return dict(sorted(out.items()))


def code_sha256(files: Mapping[str, str]) -> str:
    """One digest of the package's source (`code_files`): the sha256 of each file's name and sha256, in name order."""
    digest = hashlib.sha256()
    for name, sha in sorted(files.items()):
        digest.update(f"{name}\0{sha}\n".encode())
    return digest.hexdigest()


def _git(folder: Path, *args: str) -> str | None:
    """`git ARGS` run in `folder` (never taking the index's optional lock: a run writes nothing into a repository): its
    output, or None when it fails or there is no git."""
    try:
        out = subprocess.run(["git", "--no-optional-locks", *args], capture_output=True, text=True, timeout=5, cwd=folder)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state(folders: Mapping[str, Path]) -> dict[str, Any]:
    """The manifest's `git_revision` (HEAD) and `git_dirty` (whether the package's files differ from HEAD, untracked ones
    included) when the package's files are tracked by the git repository they sit in (a checkout of compaction-bench);
    both None otherwise: a copy installed in a virtual environment inside the user's own repository (`.venv`, ignored)
    would record the user's commit. Information only: a resume compares `code_sha256` (`run_folder.config_difference`)."""
    here = Path(__file__).resolve()
    unknown = {"git_revision": None, "git_dirty": None}
    top = _git(here.parent, "rev-parse", "--show-toplevel")
    if top is None or _git(here.parent, "ls-files", "--error-unmatch", "--", here.name) is None:
        return unknown
    root = Path(top).resolve()
    inside = [str(folder.relative_to(root)) for folder in folders.values() if folder.is_relative_to(root)]
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", *inside)
    return {"git_revision": _git(root, "rev-parse", "HEAD"), "git_dirty": None if status is None else bool(status)}


def code_identity() -> dict[str, Any]:
    """What identifies the code that makes a run's cells, for its manifest: `code_sha256` and `code_files` (compared on
    resume, naming the files that changed), `git_revision` and `git_dirty` (information, `git_state`)."""
    folders = package_folders()
    files = code_files(folders)
    return {"code_sha256": code_sha256(files), "code_files": files, **git_state(folders)}
