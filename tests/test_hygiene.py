"""House rules checked on every run of the suite: ruff, mypy, and the import-layering contracts.

mypy and import-linter find modules by walking package folders, and the `compaction_bench`
package is assembled from several top-level folders by setuptools' `package-dir` mapping, which
neither tool follows. So both run over a tree of links laid out as the installed package is
(`compaction_bench/strategies/pi.py` -> `strategies/pi.py`, and so on), built from the same
mapping that `pyproject.toml` declares.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def package_tree(tmp_path_factory) -> Path:
    """The installed layout of `compaction_bench`, as links to the checkout's files."""
    root = tmp_path_factory.mktemp("package-tree")
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in mapping.items():
        target = root.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for source in (REPO / folder).glob("*.py"):
            os.symlink(source, target / source.name)
    return root


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env={**os.environ, **env}, timeout=900)


def test_ruff_is_clean():
    result = _run([str(BIN / "ruff"), "check", "--no-cache", "."], REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean(package_tree):
    result = _run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(package_tree / ".mypy"),
         "-p", "compaction_bench"],
        package_tree,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr


def test_import_layering_contracts_hold(package_tree):
    result = _run([str(BIN / "lint-imports"), str(REPO / "pyproject.toml"), "--no-cache"], package_tree, PYTHONPATH=str(package_tree))
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr
    assert "0 broken" in result.stdout


def test_the_layering_contract_catches_a_violation(package_tree, tmp_path):
    """The contract is not vacuous: a kernel module that imports a plug-in package breaks it."""
    tree = tmp_path / "tree"
    shutil.copytree(package_tree / "compaction_bench", tree / "compaction_bench", ignore=shutil.ignore_patterns(".mypy"))
    provider = tree / "compaction_bench" / "provider.py"
    provider.write_text(provider.read_text() + "\nimport compaction_bench.metrics.cost  # noqa\n")
    result = _run([str(BIN / "lint-imports"), str(REPO / "pyproject.toml"), "--no-cache"], tree, PYTHONPATH=str(tree))
    assert result.returncode != 0
    assert "compaction_bench.provider -> compaction_bench.metrics.cost" in result.stdout
