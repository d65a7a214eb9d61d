"""The files of a run folder that are its report, and removing them.

A report is `report.html` and, for a large run, one page per scenario in `report/`
(`report/0007-<scenario>.html`, `page_name`). A report describes the tables beside it, so a finalize
removes the old one before it writes new tables, with or without a new report, and `bench report`
removes the pages the new report no longer has. Only what a report wrote is removed: the pages its
`report.html` lists (`listed_pages`), never a file because of its name alone (`2024-q3-notes.html`
has the shape of a page name, and is the user's), so a file of the user's in `report/` stays (and
so does the folder that holds it), and a `report` that is a symbolic link or a file is refused
rather than followed (what it points to is not the run's).

Why a listing in `report.html` rather than a pattern or a file of its own: the index is the one file
that is the report's whatever the folder holds, written whole (`atomic_write_text`) with the pages it
names; no pattern of names can tell a page from a user's file of the same shape. A report written
before the listing names its pages in its links (`href="report/<page>"`), which are read instead.
Pages are removed before the index that lists them, so a removal stopped part-way leaves a listing
that still names what is left.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from pathlib import Path

from compaction_bench.errors import BenchError

#: The report's main page, in the run folder.
REPORT = "report.html"
#: The folder of a large report's scenario pages, in the run folder.
PAGES = "report"
#: A scenario page's file name in `PAGES`: its scenario's index, then its name made safe. Only a name the
#: index lists (`listed_pages`) is a page of the report: a user's file can have this shape too.
PAGE_NAME = re.compile(r"\d{4}-[A-Za-z0-9._-]*\.html")
#: The element of `report.html` that lists its pages in `PAGES`: a JSON array of their names (`listed_pages` reads it).
LISTING_ID = "report-pages"
_LISTING = re.compile(rf'<script type="application/json" id="{LISTING_ID}">(.*?)</script>', re.S)
#: A link of a report written before the listing to one of its pages.
_LINK = re.compile(rf'href="{PAGES}/({PAGE_NAME.pattern})[#"]')


class ReportFilesError(BenchError, RuntimeError):
    """A run folder whose `report` is not a folder of report pages (a symbolic link or a file)."""


def page_name(index: int, scenario: str) -> str:
    """The file name of scenario `index`'s page (`PAGE_NAME`)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", scenario)[:60].strip("_") or "scenario"
    return f"{index:04d}-{safe}.html"


def listed_pages(root: Path) -> set[str]:
    """The names of the pages in `root/report` that the run's `report.html` wrote: those it lists, or, for a report
    written before the listing, those it links to; none without a `report.html` (or with one that names none, such as
    a single-page report). Only names of `PAGE_NAME`'s shape, which hold no `/`, so nothing outside `report/` is named."""
    index = root / REPORT
    if not index.is_file():
        return set()
    text = index.read_bytes().decode("utf-8", errors="replace")
    found = _LISTING.search(text)
    if found is None:
        return set(_LINK.findall(text))
    try:
        names = json.loads(found.group(1))
    except ValueError:
        names = []
    return {n for n in names if isinstance(n, str) and PAGE_NAME.fullmatch(n)} if isinstance(names, list) else set()


def pages_folder(root: Path) -> Path:
    """`root/report`, checked to be a folder of the run's own (or absent)."""
    folder = root / PAGES
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        kind = "a symbolic link" if folder.is_symlink() else "a file"
        raise ReportFilesError(f"{folder}: is {kind}, not the report's folder of pages; move it away to write or remove the run's report")
    return folder


def remove_pages(root: Path, keep: Collection[str] = ()) -> None:
    """Remove the pages in `root/report` that the run's report wrote (`listed_pages`) and whose names are not in
    `keep`, and the folder once empty."""
    folder = pages_folder(root)
    if not folder.is_dir():
        return
    for name in listed_pages(root) - set(keep):
        page = folder / name
        if page.is_file() and not page.is_symlink():
            page.unlink()
    if not any(folder.iterdir()):
        folder.rmdir()


def remove_report(root: Path) -> None:
    """Remove the run's report: its scenario pages, then `report.html`, which lists them."""
    pages_folder(root)  # refused before anything is removed
    remove_pages(root)
    (root / REPORT).unlink(missing_ok=True)
