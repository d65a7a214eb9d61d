"""The run folder `runs/<run-id>/` as a resource: a safe name, one run at a time, resume rules.

Owns what must hold before a run writes anything into its folder:

- `validate_run_id`: a run id is one plain folder name (no path separator, no `..`, not `.`, not
  absolute, no control character, at most 128 characters), so a run never writes outside `--out`
  or nested inside it;
- `newest_run`: `--resume` without `--run-id` finishes the newest run under `--out`, by the
  `created` time in its manifest (not the alphabetically last folder, nor a copy `bench score` wrote);
- `claim`: an exclusive `flock` on `<run folder>/.lock`, held for the whole run, so two processes
  given the same `--run-id` cannot both proceed (the second fails at once with one line), and the
  check "this folder already holds a run" is made under the lock. A new run goes only into a folder
  that does not exist, is empty, or holds nothing but a lock file; a folder with anything else in it
  and no run manifest (the user's own files) is refused before anything is written into it, and
  `--resume` of a folder without a manifest is refused (nothing to resume); a run stopped before it
  wrote its manifest removes what its claim made (`RunFolder.remove_unstarted`);
- `config_difference`: `--resume` with a configuration other than the one the folder's tables were
  made with is refused, naming the first settings that differ: the settings, the scenarios' content,
  the content of the files the settings name (`--prompt` templates, strategies loaded from a file) and
  what made the cells (the profiles' definitions, the measuring packages' versions, the sha256 of the
  package's source files, `code_sha256`);
- `precheck`: the same refusals, made before a run spends minutes importing its transcripts;
- `held_here`: whether this process holds a folder's lock (a run reading its own tables), as opposed
  to `in_use` by any process.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from compaction_bench.errors import BenchError
from compaction_bench.llm import redact_url

MAX_RUN_ID = 128
LOCK_NAME = ".lock"
#: Settings of `manifest["config"]` that say where or how patiently a run works, not what it measures:
#: a resume may change them.
OPERATIONAL_SETTINGS = frozenset({"run_dir", "max_retries", "max_concurrency", "model_timeout", "offline", "responses"})
#: The manifest's entry with the sha256 of each file a setting names and the cells read (flag → sha256).
INPUT_FILES = "input_sha256"

#: Run folders whose lock this process holds (resolved paths).
_held: set[Path] = set()


def strategy_file_key(name: str) -> str:
    """The key of `INPUT_FILES` under which a strategy loaded from a file (`path/file.py:Class`, no variant suffix)
    has its file's sha256: `--strategy path/file.py:Class`, the flag that named it."""
    return f"--strategy {name}"


class RunFolderError(BenchError, RuntimeError):
    """A run id that is not a plain folder name, a busy run folder, or a resume that does not match."""


def validate_run_id(run_id: str) -> str:
    """`run_id` itself when it is one plain folder name; else a `RunFolderError` saying why."""
    why = None
    if not run_id or not run_id.strip():
        why = "is empty"
    elif run_id in (".", ".."):
        why = "names the runs folder itself or its parent"
    elif "/" in run_id or "\\" in run_id or os.sep in run_id or (os.altsep and os.altsep in run_id):
        why = "contains a path separator"
    elif ".." in run_id:
        why = "contains '..'"
    elif any(ord(c) < 32 or ord(c) == 127 for c in run_id):
        why = "contains a control character"
    elif len(run_id) > MAX_RUN_ID:
        why = f"is longer than {MAX_RUN_ID} characters"
    elif Path(run_id).is_absolute():
        why = "is an absolute path"
    if why:
        raise RunFolderError(f"--run-id {run_id!r} {why}; expected a plain folder name such as 2026-01-01-baseline")
    return run_id


def _created(manifest_path: Path) -> datetime | None:
    """When the run of this manifest was created; None for no readable time, and for a folder `bench score`
    wrote (its manifest is a copy of its run's, `created` included, and it is no run to finish)."""
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if "scored" in manifest:
            return None
        stamp = datetime.fromisoformat(str(manifest.get("created")))
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
        return None
    return stamp if stamp.tzinfo is not None else None


def newest_run(root: Path) -> str:
    """The id of the run under `root` whose manifest was created last (not a folder `bench score` wrote)."""
    dated = []
    for folder in root.glob("*") if root.is_dir() else ():
        created = _created(folder / "manifest.json")
        if created is not None:
            dated.append((created, folder.name))
    if not dated:
        raise RunFolderError(f"--resume: no earlier run with a readable manifest in {root}")
    return max(dated)[1]


def _normal(value: Any) -> Any:
    """`value` as it reads back from the manifest's JSON (tuples become lists, keys strings)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


#: What a scenario's manifest entry says about its content: a resume over another transcript or
#: other probes under the same name would mix their cells with the run's.
SCENARIO_IDENTITY = ("sha256", "session_id", "session_index", "format", "import_options", "probes_sha256")


def config_difference(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Settings of two manifests that differ: the `config` entries both have (but `OPERATIONAL_SETTINGS`),
    the scenario list, and each scenario's content (`SCENARIO_IDENTITY`)."""
    differences = []
    old_config, new_config = _normal(old.get("config") or {}), _normal(new.get("config") or {})
    for config in (old_config, new_config):  # a run made before URLs were recorded without credentials is the same endpoint
        if isinstance(config.get("api_base"), str):
            config["api_base"] = redact_url(config["api_base"])
    for key in sorted((set(old_config) & set(new_config)) - OPERATIONAL_SETTINGS):
        if old_config[key] != new_config[key]:
            differences.append(f"{key}: {_short(old_config[key])} then, {_short(new_config[key])} now")
    old_scenarios = [s for s in old.get("scenarios") or () if isinstance(s, dict)]
    new_scenarios = [s for s in new.get("scenarios") or () if isinstance(s, dict)]
    old_names, new_names = [s.get("name") for s in old_scenarios], [s.get("name") for s in new_scenarios]
    if old_names != new_names:
        differences.append(f"scenarios: {_short(old_names)} then, {_short(new_names)} now")
        return differences
    for before, now in zip(old_scenarios, new_scenarios, strict=True):
        changed = [key for key in SCENARIO_IDENTITY if key in before and key in now and before[key] != now[key]]
        if changed:
            differences.append(f"scenario {now.get('name')!r}: {', '.join(changed)} changed (its transcript or probes are not the run's)")
    differences += code_difference(old, new)
    old_files, new_files = old.get(INPUT_FILES), new.get(INPUT_FILES)
    if isinstance(old_files, dict) and isinstance(new_files, dict):  # runs before this record: nothing to compare
        for flag in sorted(set(old_files) & set(new_files)):
            if old_files[flag] != new_files[flag]:
                differences.append(f"{flag}: the file changed since the run's cells read it (sha256 differs)")
    return differences


#: Packages whose version changes what a cell computes: this one, and those that supply its profiles and counts.
MEASURING_PACKAGES = ("compaction-bench", "litellm", "tiktoken")


def code_difference(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What made the cells, where it differs between two manifests: the profiles' definitions (limits, prices,
    cache rules: litellm's map supplies them), the measuring packages' versions, and the git revision of the
    code where both recorded one. A resume after an upgrade merged cells of two versions without a word."""
    differences = []
    old_profiles, new_profiles = old.get("profiles"), new.get("profiles")
    if isinstance(old_profiles, dict) and isinstance(new_profiles, dict):
        for name in sorted(set(old_profiles) & set(new_profiles)):
            before, now = old_profiles[name], new_profiles[name]
            if _normal(before) == _normal(now):
                continue
            both = isinstance(before, dict) and isinstance(now, dict)
            changed = sorted(k for k in set(before) | set(now) if _normal(before.get(k)) != _normal(now.get(k))) if both else []
            differences.append(f"profile {name}: its definition changed ({', '.join(changed) or 'its form'})")
    old_versions, new_versions = old.get("versions"), new.get("versions")
    if isinstance(old_versions, dict) and isinstance(new_versions, dict):
        for package in MEASURING_PACKAGES:
            if package in old_versions and package in new_versions and old_versions[package] != new_versions[package]:
                differences.append(f"{package}: {old_versions[package]} then, {new_versions[package]} now")
    return differences + _source_difference(old, new)


#: The manifest's entries that identify the code that made the cells (`code_identity.code_identity`): a digest of the package's
#: source files and each file's sha256, by its name inside the package.
CODE_SHA256, CODE_FILES = "code_sha256", "code_files"


def _source_difference(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The code that made the cells, where it differs: the sha256 of the package's source files (`code_sha256`), naming
    the files that changed. The git revision is not compared: it named the commit of whatever repository the package sat
    in (a user's project around its `.venv`), and no edit not yet committed. A run recorded before `code_sha256` existed
    is compared as it was then, by the git revision both recorded (this version records one only for a checkout of
    compaction-bench itself), which cannot see an edit not committed."""
    old_code, new_code = old.get(CODE_SHA256), new.get(CODE_SHA256)
    if old_code is None:
        old_revision, new_revision = old.get("git_revision"), new.get("git_revision")
        if old_revision and new_revision and old_revision != new_revision:
            return [f"code: git revision {str(old_revision)[:12]} then, {str(new_revision)[:12]} now (the run recorded no {CODE_SHA256}: "
                    "a run made before it is compared by git revision)"]
        return []
    if new_code is None or old_code == new_code:
        return []
    changed = _changed_files(old.get(CODE_FILES), new.get(CODE_FILES)) or f"{CODE_SHA256} {str(old_code)[:12]} then, {str(new_code)[:12]} now"
    return [f"code: compaction_bench's source files are not the ones that made the run's cells ({changed})"]


def _changed_files(old: Any, new: Any, shown: int = 5) -> str:
    """`a.py changed, b.py added, c.py removed`: the files of two `code_files` records that differ (the first `shown`,
    then how many more); empty when either record is missing."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return ""
    names = sorted(set(old) | set(new))
    said = [f"{name} {'added' if name not in old else 'removed' if name not in new else 'changed'}"
            for name in names if old.get(name) != new.get(name)]
    more = f" and {len(said) - shown} more" if len(said) > shown else ""
    return ", ".join(said[:shown]) + more


@dataclass
class RunFolder:
    """A claimed run folder: its id and path, and the open lock file that holds the claim."""

    run_id: str
    path: Path
    _lock: IO[bytes] | None = field(default=None, repr=False)
    made_folder: bool = False  # `claim` created the folder
    made_lock: bool = False  # `claim` created its lock file

    def release(self) -> None:
        """Give up the claim (also done when the process ends, however it ends)."""
        if self._lock is not None:
            _held.discard(self.path.resolve())
            self._lock.close()
            self._lock = None

    def remove_unstarted(self) -> None:
        """Release the claim of a run stopped (Ctrl-C, SIGTERM, an error) before it wrote its manifest, removing what the
        claim made: its lock file, then the folder if the claim created it and nothing else is in it. Left, the folder
        held a run neither `--resume` (no manifest) nor a new run (not empty) would take, and the user had to delete it;
        a folder that was there before (empty, the user's) stays. A run with a manifest is only released."""
        unstarted = not (self.path / "manifest.json").exists()
        if unstarted and self.made_lock:
            self._remove_lock_file()
        self.release()
        if unstarted and self.made_folder:
            _remove_empty(self.path)

    def _remove_lock_file(self) -> None:
        """Remove the folder's lock file while holding its lock (taken now if the claim was stopped before it took it):
        a lock another run took meanwhile stays with it."""
        lock_path = self.path / LOCK_NAME
        try:
            lock = self._lock or open(lock_path, "rb")
        except OSError:  # not made yet, or gone
            return
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock_path.unlink(missing_ok=True)
        except OSError:  # held by another run
            pass
        finally:
            if lock is not self._lock:
                lock.close()

    def take(self, *, resume: bool) -> None:
        """Create the folder and its lock file (`made_lock` says whether this made it) and take the lock, for the whole
        run; refused when another run holds it, or when a new run (not `resume`) lands on a folder holding a run."""
        lock_path = self.path / LOCK_NAME
        self.made_lock = not lock_path.exists()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock = open(lock_path, "ab+")  # held open for the whole run, closed by release()
        except OSError as exc:
            raise _cannot_create(self.path, exc, existing=resume) from None
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock.close()
            self._lock = None
            if isinstance(exc, BlockingIOError):
                raise RunFolderError(f"{self.path} is in use by another run (its lock {lock_path} is held); wait for it or choose "
                                     "another --run-id") from None
            raise RunFolderError(f"{self.path}: cannot lock the run folder ({exc.strerror or exc})") from None
        _held.add(self.path.resolve())
        if (self.path / "manifest.json").exists() and not resume:
            raise RunFolderError(f"{self.path} already holds a run; pass --resume to finish it or choose another --run-id")

    def fail(self, message: str) -> RunFolderError:
        """Release the claim and return the error to raise."""
        self.release()
        return RunFolderError(message)

    def resume_manifest(self, new: dict[str, Any]) -> dict[str, Any]:
        """The manifest of the run being resumed, after checking that `new` has the same configuration
        (else the claim is released and the resume refused, naming the differences)."""
        manifest_path = self.path / "manifest.json"
        try:
            old = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            raise self.fail(f"--resume: {manifest_path} is not readable ({type(exc).__name__}: {exc})") from None
        if not isinstance(old, dict):
            raise self.fail(f"--resume: {manifest_path} is not a run manifest (not a JSON object)")
        differences = config_difference(old, new)
        if differences:
            raise self.fail(
                f"--resume {self.path}: the run was made with another configuration ({'; '.join(differences)}); "
                "resume with the same settings, or start a new run with another --run-id"
            )
        return old


def held_here(path: Path) -> bool:
    """Whether this process holds the folder's lock (a run in this process, e.g. reading its own tables for its report)."""
    return Path(path).resolve() in _held


def in_use(path: Path) -> bool:
    """Whether a run is working in the folder now (it holds the folder's lock; see `claim`)."""
    lock_path = Path(path) / LOCK_NAME
    if not lock_path.is_file():
        return False
    try:
        with open(lock_path, "rb") as lock:  # closing it gives back only this shared lock, never a run's
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # an unreadable lock file: reading the run will say what is wrong
        return False
    return False


def _new_folder(root: Path, base: str) -> str:
    """Create the first of `base`, `base-2`, `base-3`, … that does not exist yet and return its name:
    two runs started in the same second get a folder each (creating a folder is atomic)."""
    name, n = base, 1
    while True:
        candidate = root / name
        try:
            os.mkdir(candidate)
        except FileExistsError:
            n += 1
            name = f"{base}-{n}"
            continue
        except BaseException:  # Ctrl-C as it was made: not left behind empty
            _remove_empty(candidate)
            raise
        return name


def _check_usable(path: Path, *, resume: bool) -> None:
    """Refuse a folder that is not a run's (a file, or a folder of the user's own files) and, for a
    resume, one that holds no run to finish; nothing is created or written here."""
    if path.exists() and not path.is_dir():
        raise RunFolderError(f"{path} exists and is not a folder; choose another --run-id or --out")
    has_manifest = (path / "manifest.json").is_file()
    if resume and not has_manifest:
        raise RunFolderError(f"--resume {path}: nothing to resume (no run manifest there); drop --resume to start a new run")
    if has_manifest or not path.is_dir() or in_use(path):  # a run starting in it: the lock says so
        return
    try:
        others = sorted(entry.name for entry in path.iterdir() if entry.name != LOCK_NAME)
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot read the folder ({exc.strerror or exc})") from None
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise RunFolderError(
            f"{path} is not empty and holds no run ({shown}); not writing into it: choose another --run-id or --out"
        )


def _check_runs_root(root: Path, *, resume: bool) -> None:
    """Refuse an `--out` that exists but is not a folder (a file of the user's), or that is a run folder itself
    (`-o runs/first`): runs go inside it, so a new run would be made inside that run and `--resume` would look
    for runs inside it. The refusal says how to name the run instead."""
    if root.exists() and not root.is_dir():
        raise RunFolderError(f"--out {root}: is a file, not a folder (runs are written inside --out); choose a folder")
    if (root / "manifest.json").is_file():
        fix = (f"to finish it, pass --resume --run-id {root.name} -o {root.parent}" if resume
               else f"for a new run, pass -o {root.parent} (or another folder); to finish this one, --resume --run-id {root.name} -o {root.parent}")
        raise RunFolderError(f"--out {root}: is itself a run folder (it holds manifest.json), and runs are written inside --out; {fix}")


def precheck(root: Path, run_id: str | None, *, resume: bool) -> None:
    """The refusals `claim` would make of this run id, made now without creating or locking anything:
    a run checks them before importing its transcripts, which can take minutes (`claim` checks again)."""
    _check_runs_root(root, resume=resume)
    if run_id is None and resume:
        run_id = newest_run(root)
    if run_id is None:
        return
    path = root / validate_run_id(run_id)
    _check_usable(path, resume=resume)
    if in_use(path):
        raise RunFolderError(f"{path} is in use by another run (its lock {path / LOCK_NAME} is held); wait for it or choose another --run-id")
    if (path / "manifest.json").exists() and not resume:
        raise RunFolderError(f"{path} already holds a run; pass --resume to finish it or choose another --run-id")


def _cannot_create(path: Path, exc: OSError, *, existing: bool = False) -> RunFolderError:
    """A run folder that cannot be created, or (`existing`: a resume, a score in place) not written in: the fix
    for the one is another --out, for the other the folder's permissions (its run's files are there)."""
    if existing and path.is_dir():
        return RunFolderError(f"{exc.filename or path}: cannot write in the run folder ({exc.strerror or exc}); make it writable")
    return RunFolderError(f"{exc.filename or path}: cannot create the run folder ({exc.strerror or exc}); choose another --out")


def claim(root: Path, run_id: str | None, *, resume: bool, new_id: str) -> RunFolder:
    """Validate the run id (`new_id` when none is given; the newest run for a bare `--resume`),
    check the folder is free for a run (`_check_usable`), create it, take its exclusive lock, and
    check that a new run does not land on an old one. A folder that cannot be created (a read-only
    or full file system) is one `RunFolderError` naming it. A claim refused or stopped part-way (Ctrl-C,
    SIGTERM) removes what it made (`RunFolder.remove_unstarted`)."""
    _check_runs_root(root, resume=resume)
    if run_id is None and resume:
        run_id = newest_run(root)
    made_folder, folder = run_id is None, None
    try:
        if run_id is None:  # a run id of our choosing never lands on another run's folder
            try:
                root.mkdir(parents=True, exist_ok=True)
                run_id = _new_folder(root, validate_run_id(new_id))
            except OSError as exc:
                raise _cannot_create(root, exc) from None
        path = root / validate_run_id(run_id)
        if not made_folder:
            _check_usable(path, resume=resume)
            made_folder = not path.exists()
        folder = RunFolder(run_id, path, made_folder=made_folder)
        folder.take(resume=resume)
        return folder
    except BaseException:
        if folder is not None:
            folder.remove_unstarted()
        elif made_folder and run_id is not None:  # stopped between `_new_folder` and the RunFolder
            _remove_empty(root / run_id)
        raise


def _remove_empty(path: Path) -> None:
    """Remove the folder `path` if it is empty (a run's folder that nothing was written in); else leave it."""
    try:
        path.rmdir()
    except OSError:  # not empty (a file the run did not make), or gone
        pass
