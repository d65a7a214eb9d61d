"""The files of a run folder that are its report, and removing them.

A report is `report.html` and, for a large run, one page per scenario in `report/`
(`report/0007-<scenario>.html`, `PAGE_NAME`). A report describes the tables beside it, so a finalize
removes the old one before it writes new tables, with or without a new report, and `bench report`
removes the pages the new report no longer has. Only what a report writes is removed: a file of the
user's in `report/` stays (and so does the folder that holds it), and a `report` that is a symbolic
link or a file is refused rather than followed (what it points to is not the run's).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

from compaction_bench.errors import BenchError

#: The report's main page, in the run folder.
REPORT = "report.html"
#: The folder of a large report's scenario pages, in the run folder.
PAGES = "report"
#: A scenario page's file name in `PAGES`: its scenario's index, then its name made safe.
PAGE_NAME = re.compile(r"\d{4}-[A-Za-z0-9._-]*\.html")


class ReportFilesError(BenchError, RuntimeError):
    """A run folder whose `report` is not a folder of report pages (a symbolic link or a file)."""


def page_name(index: int, scenario: str) -> str:
    """The file name of scenario `index`'s page (`PAGE_NAME`)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", scenario)[:60].strip("_") or "scenario"
    return f"{index:04d}-{safe}.html"


def pages_folder(root: Path) -> Path:
    """`root/report`, checked to be a folder of the run's own (or absent)."""
    folder = root / PAGES
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        kind = "a symbolic link" if folder.is_symlink() else "a file"
        raise ReportFilesError(f"{folder}: is {kind}, not the report's folder of pages; move it away to write or remove the run's report")
    return folder


def remove_pages(root: Path, keep: Collection[str] = ()) -> None:
    """Remove the scenario pages in `root/report` whose names are not in `keep`, and the folder once empty."""
    folder = pages_folder(root)
    if not folder.is_dir():
        return
    for page in folder.iterdir():
        if PAGE_NAME.fullmatch(page.name) and page.name not in keep and page.is_file():
            page.unlink()
    if not any(folder.iterdir()):
        folder.rmdir()


def remove_report(root: Path) -> None:
    """Remove the run's report: `report.html` and its scenario pages."""
    pages_folder(root)  # refused before anything is removed
    (root / REPORT).unlink(missing_ok=True)
    remove_pages(root)
