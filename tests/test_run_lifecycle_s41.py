"""Run lifecycle, from the forty-first audit: what identifies the code a resume must match (the package's own source
files, not the git commit of whatever repository it sits in), a resumed run's record of the templates its cells
rendered, and a run stopped before its manifest (no folder left that nothing would take). Each case was a reproduced
defect (/tmp/audit_s41_runs)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

import compaction_bench as bench
from compaction_bench import code_identity, runner
from compaction_bench.runner import Case, RunError
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.store import CellKey, RunStore, load_run
from compaction_bench.transcript import Item, Transcript
from tests.conftest import BENCH, write_tiny_session

REPO = Path(__file__).resolve().parents[1]


def stop_after_first_cell(key, status):
    raise KeyboardInterrupt


def run_tiny(tmp_path: Path, run_id: str | None, **kwargs):
    session = tmp_path / "tiny.jsonl" if (tmp_path / "tiny.jsonl").exists() else write_tiny_session(tmp_path)
    return bench.run([session], strategies=kwargs.pop("strategies", ["none", "truncate"]), profiles=["32k"], out=tmp_path / "runs",
                     run_id=run_id, jobs=1, report=False, progress=False, probes=str(tmp_path / "probes.yaml"), **kwargs)


# --------------------------------------------------------------------------- the code a resume must match
def shipped_packages() -> dict[str, Path]:
    """What pyproject.toml ships ([tool.setuptools.package-dir]): each package's name as a path inside the wheel
    (`compaction_bench/strategies`) → its folder in this repository."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return {package.replace(".", "/"): REPO / folder for package, folder in setuptools["package-dir"].items()}


def test_the_code_hash_covers_every_file_the_package_ships_and_no_cache():
    """The package's modules and the data pyproject.toml ships with them (prompts, report templates), as a wheel holds
    them; Python's caches are no code."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    files = code_identity.code_files()
    expected = set()
    for name, folder in shipped_packages().items():
        expected |= {f"{name}/{p.name}" for p in folder.glob("*.py")}
        for pattern in setuptools["package-data"].get(name.replace("/", "."), ()):
            expected |= {f"{name}/{p.relative_to(folder).as_posix()}" for p in folder.glob(pattern)}
    assert {n for n in expected if n.endswith(".j2")} and expected <= set(files)
    assert not [n for n in files if "__pycache__" in n or n.endswith(".pyc")]
    assert files == code_identity.code_files()  # the same files, the same order, the same digest
    assert list(files) == sorted(files)


def copy_package(site: Path) -> Path:
    """The package under test as a wheel installs it (`site/compaction_bench`, its subpackages inside), without Python's
    caches: copied from this repository by pyproject.toml's package-dir (an editable install), or from the one folder
    of an install like a wheel's."""
    installed = Path(bench.__file__).resolve().parent
    sources = shipped_packages() if installed == REPO / "bench" else {"compaction_bench": installed}
    for name, folder in sorted(sources.items()):
        shutil.copytree(folder, site / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
    return site / "compaction_bench"


#: One attempt of a tiny run with the package at `SITE` (the copy, not this repository's editable install):
#: `python driver.py SITE SESSION OUT first|resume`; "first" stops after the first cell (Ctrl-C).
DRIVER = """
import sys
from pathlib import Path

site, session, out, mode = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
import compaction_bench as bench
from compaction_bench.errors import BenchError

assert Path(bench.__file__).resolve().is_relative_to(site.resolve()), bench.__file__


def stop(key, status):
    raise KeyboardInterrupt


try:
    bench.run([session], strategies=["none", "truncate"], profiles=["32k"], out=out, run_id="r", jobs=1, report=False,
              progress=False, probes=str(session.with_name("probes.yaml")), resume=mode == "resume",
              on_cell=stop if mode == "first" else None)
except KeyboardInterrupt:
    sys.exit(130)
except BenchError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
"""


def attempt(tmp_path: Path, site: Path, mode: str) -> subprocess.CompletedProcess[str]:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    session = tmp_path / "tiny.jsonl" if (tmp_path / "tiny.jsonl").exists() else write_tiny_session(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, str(driver), str(site), str(session), str(tmp_path / "runs"), mode],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(command, cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def test_installed_in_the_users_own_repository_a_commit_of_theirs_does_not_block_resume(tmp_path):
    """Audit (a): installed in `myproject/.venv` (ignored by the project's git), the manifest recorded the project's
    commit as the bench's revision, and the user's next commit refused `--resume` ("code: git revision … then, … now")."""
    project = tmp_path / "myproject"
    site = project / ".venv" / "site"
    copy_package(site)
    git(project, "init", "-q")
    (project / ".gitignore").write_text(".venv/\n")
    (project / "notes.md").write_text("one\n")
    git(project, "add", ".gitignore", "notes.md")
    git(project, "commit", "-qm", "one")
    first = attempt(tmp_path, site, "first")
    assert first.returncode == 130, first.stderr
    (project / "notes.md").write_text("two\n")
    git(project, "commit", "-qam", "two")
    resumed = attempt(tmp_path, site, "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert set(load_run(tmp_path / "runs" / "r")["summary"]["strategy"]) == {"none", "truncate"}
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    assert manifest["git_revision"] is None and manifest["git_dirty"] is None  # not the project's commit


def test_an_edit_not_committed_to_the_benchs_code_refuses_resume_naming_the_file(tmp_path):
    """Audit (b): in a checkout of the bench, an edit not committed left the revision as it was, and a resume mixed
    cells of two code versions under one revision. Undone, the resume proceeds."""
    checkout = tmp_path / "checkout"
    package = copy_package(checkout)
    git(checkout, "init", "-q")
    git(checkout, "add", ".")
    git(checkout, "commit", "-qm", "snapshot")
    first = attempt(tmp_path, checkout, "first")
    assert first.returncode == 130, first.stderr
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    edited = package / "strategies" / "baselines.py"
    original = edited.read_text(encoding="utf-8")
    edited.write_text(original + "\n# an edit not committed\n", encoding="utf-8")
    refused = attempt(tmp_path, checkout, "resume")
    assert refused.returncode == 2, refused.stderr
    assert "code: compaction_bench's source files are not the ones that made the run's cells" in refused.stderr
    assert "compaction_bench/strategies/baselines.py changed" in refused.stderr
    assert json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text()) == manifest  # the record stays as it was
    assert manifest["git_revision"] == git(checkout, "rev-parse", "HEAD") and manifest["git_dirty"] is False
    assert set(manifest["code_files"]) == set(code_identity.code_files({"compaction_bench": package}))  # the copy's files
    edited.write_text(original, encoding="utf-8")
    resumed = attempt(tmp_path, checkout, "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert set(load_run(tmp_path / "runs" / "r")["summary"]["strategy"]) == {"none", "truncate"}


def interrupted_manifest(tmp_path: Path) -> tuple[Path, dict]:
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path, "r", on_cell=stop_after_first_cell)
    path = tmp_path / "runs" / "r" / "manifest.json"
    return path, json.loads(path.read_text())


def test_a_resume_with_other_source_files_names_them(tmp_path):
    path, manifest = interrupted_manifest(tmp_path)
    assert manifest["code_sha256"] == code_identity.code_sha256(code_identity.code_files())
    manifest["code_files"]["compaction_bench/runner.py"] = "0" * 64
    manifest["code_files"]["compaction_bench/strategies/gone.py"] = "0" * 64
    del manifest["code_files"]["compaction_bench/metrics/measure.py"]
    manifest["code_sha256"] = code_identity.code_sha256(manifest["code_files"])
    path.write_text(json.dumps(manifest))
    with pytest.raises(RunError, match=r"another configuration \(code: compaction_bench's source files are not the ones that made the "
                                       r"run's cells \(compaction_bench/metrics/measure\.py added, compaction_bench/runner\.py changed, "
                                       r"compaction_bench/strategies/gone\.py removed\)\)"):
        run_tiny(tmp_path, "r", resume=True)
    assert json.loads(path.read_text()) == manifest


def test_a_run_recorded_before_code_hashes_resumes_under_the_old_rule(tmp_path):
    """A manifest without `code_sha256` is compared as before: by git revision where both recorded one."""
    path, manifest = interrupted_manifest(tmp_path)
    for name in ("code_sha256", "code_files", "git_dirty"):
        del manifest[name]
    if manifest["git_revision"]:  # a checkout: an older revision is other code
        path.write_text(json.dumps({**manifest, "git_revision": "0123456789abcdef"}))
        with pytest.raises(RunError, match=r"code: git revision 0123456789ab then, .* now \(the run recorded no code_sha256"):
            run_tiny(tmp_path, "r", resume=True)
    path.write_text(json.dumps({**manifest, "git_revision": None}))
    root = run_tiny(tmp_path, "r", resume=True)
    assert "code_sha256" in json.loads((root / "manifest.json").read_text())


# --------------------------------------------------------------------------- the templates of a resumed run
def summarizing_case() -> Case:
    small = generate("parallel-calls", seed=3, target_tokens=45_000)  # codex-local compacts it at 32k
    return Case("memory", small.transcript, tuple(small.probes))


def run_summarizing(tmp_path: Path, run_id: str, **kwargs) -> Path:
    return bench.run(strategies=["codex-local", "truncate"], profiles=["32k"], cases=[summarizing_case()], out=tmp_path / "runs",
                     run_id=run_id, jobs=1, report=False, progress=False, **kwargs)


def stop_after_codex(key, status):
    if key.strategy == "codex-local":
        raise KeyboardInterrupt


def test_a_resumed_run_records_the_templates_the_earlier_attempts_cells_rendered(tmp_path):
    """Audit: interrupted after codex-local's cell, then resumed, the manifest's template_hashes and templates were
    empty (the earlier attempt's manifest, written before any cell finished, named none); an uninterrupted run names
    codex_summary.j2 and codex_summary_prefix.j2."""
    whole = json.loads((run_summarizing(tmp_path, "whole") / "manifest.json").read_text())
    assert {"codex_summary.j2", "codex_summary_prefix.j2"} <= set(whole["template_hashes"])
    with pytest.raises(KeyboardInterrupt):
        run_summarizing(tmp_path, "r", on_cell=stop_after_codex)
    resumed = json.loads((run_summarizing(tmp_path, "r", resume=True) / "manifest.json").read_text())
    assert resumed["template_hashes"] == whole["template_hashes"]
    assert resumed["templates"] == whole["templates"]


def test_the_templates_of_archived_cells_are_read_from_the_archive(tmp_path):
    root = run_summarizing(tmp_path, "whole")
    store = RunStore(root)
    assert store.archived() and not store.stored_cells()
    keys = [CellKey("memory", strategy, "32k", 0) for strategy in ("codex-local", "truncate")]
    assert runner.stored_template_hashes(store, keys) == json.loads((root / "manifest.json").read_text())["template_hashes"]
    assert runner.stored_template_hashes(store, keys[1:]) == {}


# --------------------------------------------------------------------------- stopped before the manifest
def stop_at_claim(path):
    raise KeyboardInterrupt


@pytest.mark.parametrize("run_id", ["r", None])
def test_a_run_stopped_before_its_manifest_leaves_no_folder(tmp_path, run_id):
    """Audit: stopped between claiming its folder and writing its manifest, a run left a folder that `--resume` refused
    ("nothing to resume (no run manifest there)") and a new run refused ("is not empty and holds no run"): the user had
    to delete it by hand."""
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path, run_id, on_claim=stop_at_claim)
    assert list((tmp_path / "runs").iterdir()) == []
    root = run_tiny(tmp_path, "r")  # the same id again starts
    assert set(load_run(root)["summary"]["strategy"]) == {"none", "truncate"}


def test_a_folder_the_user_made_stays_as_it_was(tmp_path):
    """The empty folder the user made for the run is theirs: only the lock file the run made is removed."""
    (tmp_path / "runs" / "r").mkdir(parents=True)
    with pytest.raises(KeyboardInterrupt):
        run_tiny(tmp_path, "r", on_claim=stop_at_claim)
    assert list((tmp_path / "runs" / "r").iterdir()) == []


def distinct_cases(count: int) -> list[Case]:
    """`count` small sessions, each its own (a run keeps each one's transcript and probes in its folder)."""
    cases = []
    for n in range(count):
        items = (
            Item("u0", "user", f"Remember: the deploy key is ZEBRA-{n}. Now list the files.", turn=0),
            Item("a0", "assistant", f"Noted: ZEBRA-{n}.", response=0, turn=0),
        )
        cases.append(Case(f"s{n}", Transcript(f"t{n}", items)))
    return cases


@pytest.fixture
def ctrl_c_raises():
    """Python's own SIGINT handler (KeyboardInterrupt) for the test: a process started in the background by a
    non-interactive shell, as CI starts the suite, inherits SIGINT ignored, and Python then leaves it ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _sigint_as_python_starts() -> None:
    """For a child process: SIGINT at its default, so the Python it runs installs its own handler (see `ctrl_c_raises`)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("appears", ["r", "r/probes"])
def test_ctrl_c_as_the_run_folder_fills_leaves_a_run_to_resume_or_no_folder(tmp_path, appears, ctrl_c_raises):
    """A real SIGINT, sent as soon as the run folder (or its probes/) appears, while a run of 100 scenarios writes its
    files. Before: probes/ and transcripts/ came before the manifest, and the folder was left holding neither."""
    cases = distinct_cases(100)
    watched, out = tmp_path / "runs" / appears, tmp_path / "runs"

    def interrupt_when_it_appears() -> None:
        deadline = time.monotonic() + 60
        while not watched.exists() and time.monotonic() < deadline:
            time.sleep(0.0002)
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt_when_it_appears)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            bench.run(strategies=["none"], cases=cases, out=out, run_id="r", jobs=1, report=False, progress=False)
            time.sleep(5)  # a run that finished before the signal: it arrives here
    finally:
        sender.join()
    folder = out / "r"
    if folder.exists():
        assert (folder / "manifest.json").is_file(), sorted(p.name for p in folder.iterdir())
        root = bench.run(strategies=["none"], cases=cases, out=out, run_id="r", jobs=1, report=False, progress=False, resume=True)
        assert len(load_run(root)["summary"]) > 0


def test_the_cli_says_what_a_ctrl_c_as_the_folder_appears_left(tmp_path):
    """Before: the folder was left holding only its lock, and the CLI said "interrupted" and nothing of it. Now either
    nothing is left and "interrupted" is all there is to say (README: as for other commands), or the run has its
    manifest and the message says how to finish it."""
    session = write_tiny_session(tmp_path)
    folder = tmp_path / "runs" / "r"
    command = [*BENCH, "run", str(session), "-s", "none", "-p", "32k", "-j", "1", "--no-report", "-o", str(folder.parent),
               "--run-id", "r", "--probes", str(tmp_path / "probes.yaml")]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_python_starts)
    try:
        while not folder.exists() and proc.poll() is None:
            time.sleep(0.0002)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    if folder.exists():
        assert (folder / "manifest.json").is_file(), sorted(p.name for p in folder.iterdir())
        assert "finish the run with `bench run --resume`" in stderr
    else:
        assert stderr.splitlines()[-1] == "interrupted"


def test_the_report_names_the_code_that_made_the_run(tmp_path):
    """The report's header showed `git <HEAD of any repository around the package>`, or "unknown"; it shows the git
    revision only where the manifest records one (a checkout of the bench), "(modified)" when its files differ from
    HEAD, else the first 12 digits of `code_sha256`."""
    session = write_tiny_session(tmp_path)
    root = bench.run([session], strategies=["none"], profiles=["32k"], out=tmp_path / "runs", run_id="r", jobs=1,
                     progress=False, probes=str(tmp_path / "probes.yaml"))
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    header = next(line for line in (root / "report.html").read_text(encoding="utf-8").splitlines() if " cells" in line and "scenarios" in line)
    if manifest["git_revision"]:
        shown = f"git {manifest['git_revision'][:12]}" + (" (modified)" if manifest["git_dirty"] else "")
    else:
        shown = f"code {manifest['code_sha256'][:12]}"
    assert header.endswith(f"· {shown}</p>"), header
