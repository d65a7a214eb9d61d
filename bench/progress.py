"""Progress of a run: events, and the displays that show them (terminal bar, notebook bar, plain lines).

`compaction_bench.runner.run` emits a `ProgressEvent` for every transcript file read and every
scenario's probes mined (once that has taken a while), when the cells start, after every cell and at
each step of the finalize phase (merging the tables, the summary, the report's pages). A caller
passes its own callback to receive them; `progress=True` also shows them with `display_for()`:
a rich bar on a terminal, an HTML `<progress>` element updated in place in a Jupyter notebook
(no widget library needed), and otherwise (a pipe, a log file, CI) one plain line per event on
stderr, never truncated. Labels hold file names, which may hold anything: control characters
(ESC, CR, …) are shown as escapes (`\x1b`), never sent to the terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import Any, Protocol, TextIO


@dataclass(frozen=True)
class ProgressEvent:
    """`phase` is `scenarios`, `probes`, `cells` or `finalize`; `done` of `total` steps of that phase; `label` says what just happened."""

    phase: str
    done: int
    total: int
    label: str = ""
    failed: bool = False


ProgressHook = Callable[[ProgressEvent], None]


def shown(text: str) -> str:
    """`text` with every non-printable character (ESC, CR, BEL, …) written as its escape, so a file
    name cannot move the cursor, recolour or rewrite the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class Display(Protocol):
    def __call__(self, event: ProgressEvent) -> None: ...

    def close(self) -> None: ...


class PlainLines:
    """One line per event (`cells 3/77 scenario · strategy · profile`), for output that is not a terminal."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr

    def __call__(self, event: ProgressEvent) -> None:
        status = " FAILED" if event.failed else ""
        print(f"{event.phase} {event.done}/{event.total}{status} {shown(event.label)}".rstrip(), file=self.stream, flush=True)

    def close(self) -> None:
        pass


class TerminalBar:
    """A rich progress bar per phase on stderr; failed cells are printed above it in full."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("[bold]{task.fields[phase]}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}", markup=False), console=Console(stderr=True), transient=False,
        )
        self.tasks: dict[str, Any] = {}
        self.progress.start()

    def __call__(self, event: ProgressEvent) -> None:
        if event.failed:
            self.progress.console.print(f"{event.phase} {shown(event.label)} failed", markup=False, style="red")
        if event.phase not in self.tasks:
            self.tasks[event.phase] = self.progress.add_task("", total=event.total, phase=event.phase)
        self.progress.update(self.tasks[event.phase], completed=event.done, total=event.total, description=shown(event.label))

    def close(self) -> None:
        self.progress.stop()


class NotebookBar:
    """An HTML `<progress>` element per phase, updated in place through IPython's display handles."""

    def __init__(self) -> None:
        from IPython.display import HTML, display

        self._html = HTML
        self._display = display
        self.handles: dict[str, Any] = {}

    def __call__(self, event: ProgressEvent) -> None:
        state = " <b style='color:#b00'>failed</b>" if event.failed else ""
        html = self._html(
            f"<div style='font:12px monospace'>{escape(event.phase)} <progress value='{event.done}' max='{max(event.total, 1)}'></progress> "
            f"{event.done}/{event.total}{state} {escape(shown(event.label))}</div>"
        )
        if event.phase in self.handles:
            self.handles[event.phase].update(html)
        else:
            self.handles[event.phase] = self._display(html, display_id=True)

    def close(self) -> None:
        pass


def in_notebook() -> bool:
    """True inside a Jupyter kernel (not a plain IPython terminal)."""
    module = sys.modules.get("IPython")
    shell = module.get_ipython() if module is not None and hasattr(module, "get_ipython") else None
    return shell is not None and hasattr(shell, "kernel")


def display_for(stream: TextIO | None = None) -> Display:
    """The display that fits where the output goes: notebook, terminal, or plain lines."""
    if in_notebook():
        return NotebookBar()
    target = stream or sys.stderr
    if target.isatty():
        return TerminalBar()
    return PlainLines(target)
