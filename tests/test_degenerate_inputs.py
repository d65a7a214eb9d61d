"""Degenerate and hostile input from the user's side: sessions with nothing to replay, file names
that are not text, an indented JSON document whose first event is long, `--out` or a run folder
that is the user's file, and hostile text in names and content reaching the HTML report.

Each expected answer comes from the input built here by hand: how many messages a cell replayed,
which file a warning must name, which bytes a user's file held before the command.
"""

from __future__ import annotations

import json
import os
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pytest

import compaction_bench as bench
from compaction_bench.importing import SNIFF_BYTES, detect
from compaction_bench.records import to_rows
from compaction_bench.runner import Case, RunError
from compaction_bench.store import CellKey, RunStore, StoreError
from compaction_bench.transcript import Item, Transcript
from tests.conftest import bench_cli, write_tiny_session

PI_HEADER = '{"type":"session","version":3,"id":"x","timestamp":"2025-01-01T00:00:00Z","cwd":"/"}'


def answered_session(name: str = "answered") -> Transcript:
    """One question, one tool call and its result, one answer: two model responses to replay."""
    return Transcript(name, (
        Item("u0", "user", "Remember: the deploy key is ZEBRA-42. Now list the files.", turn=0),
        Item("c0", "tool_call", call_id="c0", tool_name="bash", arguments='{"command": "ls"}', response=0, turn=0),
        Item("r0", "tool_result", "setup.py", call_id="c0", turn=0),
        Item("a0", "assistant", "One file: setup.py.", response=1, turn=0),
    ))


def stderr_lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


# --------------------------------------------------------------------------- sessions with nothing to replay
@pytest.mark.parametrize("with_messages", [False, True])
def test_the_archive_keeps_cells_that_stored_no_message(tmp_path, with_messages):
    """Regression: when every cell of a run stored no message (nothing was sent), the merged messages
    table had no column at all and archiving failed with a pyarrow KeyError after every cell had
    finished. Beside a cell that did send messages, the empty one must still read back empty."""
    store = RunStore(tmp_path / "run")
    rows = to_rows(bench.replay(answered_session(), "none"))
    empty = {"messages": [], "requests": [], "replay": {}}
    cells = {"blank": empty, "blank too": empty, **({"answered": rows} if with_messages else {})}
    for name, records in cells.items():
        key = CellKey(name, "none", "64k", 0)
        store.write_cell(key, {"replay": records})
    assert pa.Table.from_pylist([]).num_columns == 0  # what an empty cell stores: a table without schema
    store.write_archive(list(store.cell_records()))
    by_cell = {r["replay"]["key"]["scenario"]: r["messages"] for r in store.replays()}
    assert sorted(by_cell) == sorted(cells)
    assert by_cell["blank"] == by_cell["blank too"] == []
    if with_messages:
        assert [m["content"] for m in by_cell["answered"]] == [m["content"] for m in rows["messages"]]
        assert len(rows["messages"]) > 0


def test_a_pi_header_without_a_message_is_named_and_refused_with_no_run_left(tmp_path):
    """The reported case: a valid Pi header, then a malformed line. The run used to replay 21 empty
    cells and crash while archiving; now the file is named as having nothing to replay, and with no
    other scenario the run stops at once (exit 2, no traceback, no run folder)."""
    session = tmp_path / "pi header only.jsonl"
    session.write_text(PI_HEADER + "\n{not json\n")
    out = tmp_path / "runs"
    proc = bench_cli("run", str(session), "-s", "none", "-o", str(out), "-j", "1")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = stderr_lines(proc)
    assert f"warning: {session}: 1 import problem(s), e.g. {session}:2: malformed JSON" in lines[0]
    assert lines[1] == f"warning: {session}: nothing to replay (it holds no message); left out of the run"
    assert lines[-1].startswith("error: no scenario to run: no session given has a model response to replay")
    assert str(session) in lines[-1]
    assert not out.exists()


@pytest.mark.parametrize(("lines", "why"), [
    ([{"role": "system", "content": "You are terse."}], "it holds no model response, only 1 system item(s)"),
    ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}],
     "it holds no model response, only 1 system, 1 user item(s)"),
    ([{"role": "user", "content": "   \n\t"}], "it holds no model response, only 1 user item(s)"),
])
def test_a_session_never_answered_is_left_out_named_and_listed_in_the_manifest(tmp_path, lines, why):
    """Beside a session with answers, the unanswered one is left out (a warning naming it, the
    manifest's `nothing_to_replay`), not run as a scenario of empty cells."""
    folder = tmp_path / "in"
    folder.mkdir()
    good = write_tiny_session(folder)
    unanswered = folder / "only asked.jsonl"
    unanswered.write_text("".join(json.dumps(line) + "\n" for line in lines))
    proc = bench_cli("run", str(good), str(unanswered), "-s", "none", "-o", str(tmp_path / "runs"), "--run-id", "r",
                     "--no-report", "-j", "1")
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {unanswered}: nothing to replay ({why}); left out of the run" in stderr_lines(proc)
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    assert [s["name"] for s in manifest["scenarios"]] == ["tiny.jsonl"]
    assert manifest["nothing_to_replay"] == [{"file": str(unanswered.resolve()), "session_index": 0, "reason": why}]
    assert set(bench.load_run(tmp_path / "runs" / "r")["summary"]["scenario"]) == {"tiny.jsonl"}


#: An Aider chat history of eight sessions: one answered, the others ended before the model answered (a launch
#: line alone, a question never answered) or empty (a header alone).
AIDER_HISTORY = """
# aider chat started at 2024-06-01 10:00:00

> /usr/bin/aider

# aider chat started at 2024-06-01 10:05:00

#### Add a docstring to main.py.

Here is the change:

main.py
```python
\"\"\"Entry point.\"\"\"
```

# aider chat started at 2024-06-01 11:00:00

# aider chat started at 2024-06-01 12:00:00

> /usr/bin/aider

# aider chat started at 2024-06-01 13:00:00

#### only a question nobody answered

# aider chat started at 2024-06-01 14:00:00

# aider chat started at 2024-06-01 15:00:00

# aider chat started at 2024-06-01 16:00:00
"""


def test_the_sessions_of_one_file_with_nothing_to_replay_are_counted_in_one_warning_line_and_each_listed(tmp_path):
    """An Aider history holds hundreds of sessions that end before the model answers (660 of the corpus file's
    1,392): past three, the file gets one warning line that counts them by reason and names the first five, not a
    line each; the manifest still lists every one."""
    history = tmp_path / "chat history.md"
    history.write_text(AIDER_HISTORY)
    proc = bench_cli("run", str(history), "-s", "none", "-o", str(tmp_path / "runs"), "--run-id", "r", "--no-report", "-j", "1")
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in stderr_lines(proc) if "nothing to replay" in line]
    assert warned == [f"warning: {history}: 7 of its 8 sessions have nothing to replay (4 hold no message, 3 no model response; "
                      "sessions 1, 3, 4, 5, 6, …, each listed in the run's manifest under nothing_to_replay); left out of the run"]
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    listed = [(entry["session_index"], entry["reason"]) for entry in manifest["nothing_to_replay"]]
    assert [index for index, _ in listed] == [0, 2, 3, 4, 5, 6, 7]
    assert [why for _, why in listed].count("it holds no message") == 4
    assert len(manifest["scenarios"]) == 1
    # up to three get a line each, naming the session
    short = tmp_path / "short history.md"
    short.write_text(AIDER_HISTORY.split("# aider chat started at 2024-06-01 12:00:00")[0])
    proc = bench_cli("run", str(short), "-s", "none", "-o", str(tmp_path / "runs"), "--run-id", "s", "--no-report", "-j", "1")
    assert proc.returncode == 0, proc.stderr
    assert [line for line in stderr_lines(proc) if "nothing to replay" in line] == [
        f"warning: {short} session 1: nothing to replay (it holds no model response, only 1 marker item(s)); left out of the run",
        f"warning: {short} session 3: nothing to replay (it holds no message); left out of the run",
    ]


def test_the_python_api_leaves_out_an_empty_case_and_refuses_a_run_of_only_empty_ones(tmp_path, caplog):
    empty = Case("blank", Transcript("blank", ()), ())
    with pytest.raises(RunError, match=r"no scenario to run: .*blank: it holds no message"):
        bench.run(cases=[empty], strategies=["none"], out=tmp_path / "runs", jobs=1, progress=False, report=False)
    assert not (tmp_path / "runs").exists()
    root = bench.run(cases=[empty, Case("answered", answered_session(), ())], strategies=["none"], out=tmp_path / "runs",
                     run_id="r", jobs=1, progress=False, report=False)
    assert "warning: scenario blank: nothing to replay (it holds no message); left out of the run" in caplog.text
    manifest = json.loads((root / "manifest.json").read_text())
    assert [s["name"] for s in manifest["scenarios"]] == ["answered"]
    assert manifest["nothing_to_replay"] == [{"file": None, "session_index": 0, "given_as": "blank", "reason": "it holds no message"}]


# --------------------------------------------------------------------------- file names and detection
def test_a_file_name_that_is_not_utf8_runs_under_a_readable_name(tmp_path):
    """Bytes of a file name that are not UTF-8 reach Python as lone surrogates, which no parquet
    column can hold: the run used to fail with a UnicodeEncodeError traceback after claiming its folder."""
    source = write_tiny_session(tmp_path)
    odd = os.fsdecode(bytes(tmp_path) + b"/bad\xff\xfename.jsonl")
    Path(odd).write_bytes(source.read_bytes())
    proc = bench_cli("run", odd, "-s", "none", "-o", str(tmp_path / "runs"), "--run-id", "r", "--no-report", "-j", "1")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    (scenario,) = manifest["scenarios"]
    assert scenario["name"] == "bad\ufffd\ufffdname.jsonl"
    assert scenario["file"] == str(Path(odd).resolve())  # the path itself, to read the file again
    assert list(bench.load_run(tmp_path / "runs" / "r")["summary"]["scenario"]) == ["bad\ufffd\ufffdname.jsonl"]


@pytest.mark.parametrize("name", ["-dash.jsonl", "with space.jsonl", "ünï cødé ✓.jsonl", "<img src=x onerror=alert(1)>.jsonl"])
def test_file_names_with_dashes_spaces_unicode_and_markup_are_scenarios_named_as_given(tmp_path, name):
    (tmp_path / "in").mkdir()
    source = write_tiny_session(tmp_path / "in")
    target = source.parent / name
    target.write_bytes(source.read_bytes())
    proc = bench_cli("run", "-s", "none", "-o", str(tmp_path / "runs"), "--run-id", "r", "--no-report", "-j", "1", "--", name,
                     cwd=source.parent)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    assert [s["name"] for s in manifest["scenarios"]] == [name]


def test_an_indented_json_document_whose_first_event_is_long_is_detected(tmp_path):
    """An OpenHands event list whose first message is longer than the sniffed head: the key that
    tells the format (`"action": "message"`) comes after the message, beyond the first 256 KiB."""
    long_text = "log line\n" * (SNIFF_BYTES // 9 + 10)
    events = [{"id": 0, "source": "user", "message": long_text, "action": "message", "args": {"content": long_text}},
              {"id": 1, "source": "agent", "message": "done", "action": "message", "args": {"content": "done"}}]
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events, indent=2))
    assert path.read_text().find('"action"') > SNIFF_BYTES
    assert detect(path).format == "openhands"
    (transcript,) = bench.load_transcripts(path)
    assert [i.text for i in transcript.items if i.kind == "user"] == [long_text]


# --------------------------------------------------------------------------- the user's files are never a run's
def test_an_out_that_is_a_file_is_refused_before_the_import_and_left_as_it_was(tmp_path):
    session = write_tiny_session(tmp_path)
    mine = tmp_path / "results.txt"
    mine.write_text("precious\n")
    proc = bench_cli("run", str(session), "-s", "none", "-o", str(mine))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert stderr_lines(proc) == [f"error: --out {mine}: is a file, not a folder (runs are written inside --out); choose a folder"]
    assert mine.read_text() == "precious\n"


def test_report_and_compare_of_a_folder_that_holds_no_run_say_so(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("mine\n")
    proc = bench_cli("report", str(notes))
    assert proc.returncode == 2 and stderr_lines(proc) == [f"error: {notes}: not a run folder (no manifest.json)"]
    assert sorted(p.name for p in notes.iterdir()) == ["todo.md"]
    with pytest.raises(StoreError, match="is a file, not a run folder"):
        bench.load_run(notes / "todo.md")


# --------------------------------------------------------------------------- hostile text in the report
class _Elements(HTMLParser):
    """Every script element's type and every element that could run code (an `on…` attribute, an img)."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.active: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.scripts.append(dict(attrs).get("type") or "text/javascript")
        if tag == "img" or any(name.startswith("on") for name, _ in attrs):
            self.active.append(tag)


def test_markup_in_names_tool_names_and_content_never_becomes_an_element_of_the_report(tmp_path):
    evil = "</script><script>alert(1)</script><img src=x onerror=alert(2)>\"'&\u2028"
    transcript = Transcript(f"id{evil}", (
        Item("u0", "user", f"Remember ZEBRA-42. {evil}", turn=0),
        Item("c0", "tool_call", call_id="c0", tool_name=f"bash{evil}", arguments=json.dumps({"command": evil}), response=0, turn=0),
        Item("r0", "tool_result", f"out {evil}", call_id="c0", turn=0),
        Item("a0", "assistant", f"Done {evil}", response=1, turn=0),
    ), meta={"title": evil})
    root = bench.run(cases=[Case(f"scenario{evil}", transcript, ())], strategies=["none", "truncate"], out=tmp_path, run_id="r",
                     jobs=1, progress=False)
    pages = sorted(root.rglob("*.html"))
    clean = bench.run(cases=[Case("scenario", answered_session(), ())], strategies=["none", "truncate"], out=tmp_path, run_id="c",
                      jobs=1, progress=False)
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert "alert(" in html  # the hostile text is shown, as text
        found = _Elements()
        found.feed(html)
        assert found.active == []
        reference = _Elements()
        reference.feed((clean / page.relative_to(root)).read_text(encoding="utf-8"))
        assert found.scripts == reference.scripts  # the same script elements as a clean run's page, no more
