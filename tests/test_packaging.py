"""One namespace, a registry that works from any install state, and command-line mistakes.

- Every module is imported as `compaction_bench.…`: no file of the project imports the folders
  by their bare names, and outside the checkout the bare names do not exist.
- Built-in strategies and importers are registered in code: with no entry-point metadata at all,
  every one of them is still there.
- A third-party package adds a strategy through its entry point (the example plug-in under
  `tests/plugins/` is pip-installed into a scratch folder and run); a clash with a built-in is
  served under the plug-in's distribution name, two plug-ins with one id are an error naming
  both, and a registered class that is not a Strategy is refused by name.
- Command-line mistakes end in one `error:` line and exit status 2, never a traceback.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from compaction_bench import registry
from compaction_bench.strategies.baselines import NoCompaction
from compaction_bench.strategy import Strategy
from tests.conftest import corpus_files

REPO = Path(__file__).resolve().parents[1]
PROJECT_FOLDERS = ("bench", "strategies", "scenarios", "metrics", "reports", "tests")
BARE = {"bench", "strategies", "scenarios", "metrics", "reports"}
BENCH = [str(Path(sys.executable).with_name("bench"))]


def _python_files() -> list[Path]:
    return [p for folder in PROJECT_FOLDERS for p in (REPO / folder).rglob("*.py") if "plugins" not in p.parts]


def _notebook_sources() -> list[tuple[str, str]]:
    out = []
    for nb in (REPO / "notebooks").glob("*.ipynb"):
        for index, cell in enumerate(json.loads(nb.read_text())["cells"]):
            if cell["cell_type"] == "code":
                source = "".join(cell["source"])
                out.append((f"{nb.name} cell {index}", "\n".join(line for line in source.splitlines() if not line.startswith(("%", "!")))))
    return out


def _bare_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in BARE]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] in BARE:
            found.append(node.module)
    return found


def test_no_file_imports_a_bare_top_level_folder():
    offenders = [f"{p.relative_to(REPO)}: {m}" for p in _python_files() for m in _bare_imports(p.read_text())]
    offenders += [f"{where}: {m}" for where, src in _notebook_sources() for m in _bare_imports(src)]
    assert offenders == []


def test_bare_import_check_catches_each_form():
    assert _bare_imports("import bench\nimport metrics.cost\nfrom reports import html\nfrom strategies.pi import Pi\n") == [
        "bench", "metrics.cost", "reports", "strategies.pi",
    ]
    assert _bare_imports("import compaction_bench.strategies.pi\nfrom . import x\n") == []


def test_installed_namespace_outside_the_checkout(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ok = subprocess.run([sys.executable, "-c", "import compaction_bench.strategies.pi, compaction_bench.cli"], cwd=tmp_path, env=env)
    assert ok.returncode == 0
    for bare in sorted(BARE):
        result = subprocess.run([sys.executable, "-c", f"import {bare}"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr, bare


@pytest.fixture
def fresh_registry():
    registry.reset()
    yield registry
    registry.reset()


def test_builtins_are_registered_without_any_entry_point_metadata(monkeypatch, fresh_registry):
    from compaction_bench.importing import Importer
    from compaction_bench.scenarios import BUILTIN as BUILTIN_IMPORTERS
    from compaction_bench.strategies import BUILTIN as BUILTIN_STRATEGIES

    monkeypatch.setattr(registry, "entry_points", lambda **_: [])
    strategies = registry.strategies()
    assert set(strategies) == set(BUILTIN_STRATEGIES)
    assert all(issubclass(cls, Strategy) and cls.name == name for name, cls in strategies.items())
    importers = registry.importers()
    assert set(importers) == set(BUILTIN_IMPORTERS)
    assert all(issubclass(cls, Importer) and cls.format == name for name, cls in importers.items())
    from compaction_bench.runner import default_strategies

    assert default_strategies() == tuple(BUILTIN_STRATEGIES)


def _entry_point(name: str, value: str, dist: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, value=value, dist=SimpleNamespace(name=dist))


class AlphaLossy(NoCompaction):
    name = "lossy"


class BetaLossy(NoCompaction):
    name = "lossy"


def test_two_plugins_with_one_id_are_an_error_naming_both(monkeypatch, fresh_registry):
    points = [
        _entry_point("lossy", f"{__name__}:AlphaLossy", "alpha-strategies"),
        _entry_point("lossy", f"{__name__}:BetaLossy", "beta-strategies"),
    ]
    monkeypatch.setattr(registry, "entry_points", lambda **kw: points if kw.get("group") == registry.STRATEGY_GROUP else [])
    with pytest.raises(registry.RegistryError, match="alpha-strategies .*and beta-strategies"):
        registry.strategy_class("lossy")
    assert registry.strategy_class("alpha-strategies/lossy") is AlphaLossy
    assert registry.strategy_class("beta-strategies/lossy") is BetaLossy


def test_a_registered_class_must_be_a_strategy(monkeypatch, fresh_registry):
    points = [_entry_point("odd", "pathlib:Path", "odd-dist")]
    monkeypatch.setattr(registry, "entry_points", lambda **kw: points if kw.get("group") == registry.STRATEGY_GROUP else [])
    with pytest.raises(registry.RegistryError, match="'odd' .*odd-dist.*not a subclass of Strategy"):
        registry.strategy_class("odd")
    assert "odd" not in registry.strategies()


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("plugin-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target", str(site),
         str(REPO / "tests" / "plugins" / "example_plugin")],
        check=True,
    )
    return site


def _with_plugin(site: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([*BENCH, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_an_installed_plugin_strategy_is_listed_and_runs(plugin_site, tmp_path):
    listing = _with_plugin(plugin_site, tmp_path, "list", "strategies")
    assert listing.returncode == 0, listing.stderr
    assert "keep-everything" in listing.stdout and "cb-example-plugin/truncate" in listing.stdout
    assert "not-a-strategy" in listing.stderr and "not a subclass of Strategy" in listing.stderr
    session = corpus_files("swe-agent-traj")[0].parent / "function_calling_simple.traj"
    done = _with_plugin(
        plugin_site, tmp_path, "run", str(session), "-s", "keep-everything", "-s", "cb-example-plugin/truncate", "-s", "truncate",
        "-p", "32k", "-o", "runs", "--run-id", "plug", "-j", "1",
    )
    assert done.returncode == 0, done.stderr
    import pandas as pd

    requests = pd.read_parquet(tmp_path / "runs" / "plug" / "requests.parquet")
    assert set(requests["strategy"]) == {"keep-everything", "cb-example-plugin/truncate", "truncate"}


@pytest.mark.parametrize(
    "args",
    [
        ["list", "strategy"],  # unknown sub-command
        ["frobnicate"],  # unknown command
        ["run", "--strategies", "pi"],  # unknown option
        ["run", "-j", "abc"],  # not an integer
        ["gate", "--baseline", "runs/a"],  # missing required option
        ["inspect"],  # missing argument
    ],
)
def test_command_line_mistakes_are_one_line_and_exit_2(args, tmp_path):
    result = subprocess.run([*BENCH, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
