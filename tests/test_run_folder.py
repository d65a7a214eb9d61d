"""The run folder: safe run ids, one run at a time, resume of the newest run with the same configuration,
injective cell folders, and no stale error log (issue 17 items 2, 4, 5, 6, 19)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import compaction_bench as bench
from compaction_bench import run_folder
from compaction_bench import store as store_module
from compaction_bench.runner import Case, RunError
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.store import CELL_MEMBERS, CellKey, CellRecords, RunStore, StoreError, load_run
from compaction_bench.transcript import Item, Transcript
from tests.earlier_cells import as_earlier_folder


@pytest.fixture(scope="module")
def case() -> Case:
    small = generate("parallel-calls", seed=3, target_tokens=20_000)
    return Case(small.name, small.transcript, tuple(small.probes))


def run_cases(out: Path, cases: list[Case], **kwargs):
    return bench.run(
        strategies=kwargs.pop("strategies", ["none"]), profiles=["32k"], cases=cases, out=out, jobs=1,
        report=False, progress=False, **kwargs,
    )


# --------------------------------------------------------------------------- 6: run ids
@pytest.mark.parametrize("bad", ["../../escape", "/tmp/absolute-run", "a/b/c", ".", "..", "a\\b", "x..y", "", "tab\there"])
def test_a_run_id_that_is_not_a_plain_folder_name_is_refused(tmp_path, case, bad):
    out = tmp_path / "deep" / "runs"
    with pytest.raises(RunError, match="--run-id"):
        run_cases(out, [case], run_id=bad)
    # Nothing was written anywhere: not outside --out, not nested inside it, not in its root.
    assert list(tmp_path.iterdir()) == []


def test_plain_run_ids_are_accepted():
    for good in ("2026-01-01-baseline", "candidate", "r.1_x-y", "a" * 128):
        assert run_folder.validate_run_id(good) == good
    with pytest.raises(run_folder.RunFolderError, match="longer than 128"):
        run_folder.validate_run_id("a" * 129)


# --------------------------------------------------------------------------- 4: resume
def test_resume_without_run_id_takes_the_newest_run_not_the_last_name(tmp_path, case):
    two = ["none", "truncate"]
    # "zzz" is created first and "aaa" later: the alphabetically last folder is the older run.
    run_cases(tmp_path, [case], run_id="zzz", strategies=two)

    def interrupt(key, status):  # "aaa" is stopped right after its first cell
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_cases(tmp_path, [case], run_id="aaa", strategies=two, on_cell=interrupt)
    newest = tmp_path / "aaa"
    created = json.loads((newest / "manifest.json").read_text())["created"]
    first = next((newest / "cells").iterdir()).name
    finished = []
    root = run_cases(tmp_path, [case], resume=True, strategies=two, on_cell=lambda key, status: finished.append((key.slug, status)))
    assert root == newest and len(finished) == 1 and finished[0][0] != first and finished[0][1] == "done"
    assert run_folder.newest_run(tmp_path) == "aaa"
    # The resumed run keeps its creation time (a resume does not make it newer than a later run).
    assert json.loads((newest / "manifest.json").read_text())["created"] == created


def stopped_at_truncate(out: Path, case: Case) -> RunStore:
    """The store of run "r" of `none`, `truncate` and `codex-local` on `case`, stopped before its `truncate` cell."""
    def interrupt(key, status):
        if key.strategy == "truncate":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_cases(out, [case], run_id="r", strategies=["none", "truncate", "codex-local"], on_cell=interrupt)
    return RunStore(out / "r")


def stopped_after_one(out: Path, case: Case, strategies: list[str]) -> RunStore:
    """The store of run "r" of `strategies` on `case`, stopped right after its first cell."""
    def interrupt(key, status):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_cases(out, [case], run_id="r", strategies=strategies, on_cell=interrupt)
    return RunStore(out / "r")


def test_compacting_keeps_every_cells_replay_records_exactly(tmp_path, case):
    store = stopped_at_truncate(tmp_path, case)
    cells = store.stored_cells()
    assert len(cells) >= 1
    before = {json.dumps(r["replay"]["key"]): r for r in store.replays()}
    assert len(before) == len(cells)
    store.compact()
    assert not (tmp_path / "r" / "cells").exists()
    after = {json.dumps(r["replay"]["key"]): r for r in RunStore(tmp_path / "r").replays()}
    assert after == before
    assert all(RunStore(tmp_path / "r").is_done(CellKey(**r["replay"]["key"])) for r in before.values())


def test_a_finished_cell_is_one_file_of_its_tables_and_replay_records(tmp_path, case):
    """A cell is stored as one zip file named by its slug: its three tables and its replay records, nothing
    else in `cells/` (no temporary file left), and two runs of the same cell store the same bytes."""
    store = stopped_after_one(tmp_path, case, ["none"])
    (cell,) = store.stored_cells()
    assert [p.name for p in (tmp_path / "r" / "cells").iterdir()] == [cell.path.name] == [f"{cell.slug}.zip"]
    with zipfile.ZipFile(cell.path) as archive:
        assert archive.namelist() == list(CELL_MEMBERS)
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())
    key = CellKey(case.name, "none", "32k", 0)
    assert cell.slug == key.slug and store.is_done(key) and not store.is_done(CellKey(case.name, "none", "32k", 1))
    again = stopped_after_one(tmp_path / "again", case, ["none"])
    assert again.stored_cells()[0].path.read_bytes() == cell.path.read_bytes()


def test_a_cells_key_is_read_from_its_replay_text_alone():
    """The key of a replay.json as the store writes it (`json_text`: indented, keys sorted, so the cell's compactions
    come before it) is its top-level "key" member, never a nested member of that name, and is read without the rest
    of the text: cut after the key, the text still gives it. A text written otherwise (compact) is parsed whole."""
    key = CellKey("scenario \"x\"\n", "pi", "64k", 2)
    record = {"compactions": [{"details": {"key": {"scenario": "other", "strategy": "none", "profile": "1m", "repeat": 9}}}],
              "key": key.columns(), "points": [{"key": 1}]}
    text = store_module.json_text(record)
    assert store_module.replay_key(text) == key == CellKey(**json.loads(text)["key"])
    cut = text[: text.index('"points"')]  # not JSON any more
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut)
    assert store_module.replay_key(cut) == key
    assert store_module.replay_key(json.dumps(record)) == key


@pytest.mark.parametrize("records", ["arrow", "parquet"])
def test_cells_an_earlier_version_wrote_as_folders_are_read_and_archived_alike(tmp_path, case, records):
    """A cell folder from a version before cell files (records as Arrow IPC or, earlier, parquet files; an
    interrupted run resumed by this one) reads the same tables and records as the cell's file, and the archive
    holds them."""
    store = stopped_after_one(tmp_path, case, ["none", "truncate"])
    (cell,) = store.stored_cells()
    written = {json.dumps(r["replay"]["key"]): r for r in store.replays()}
    tables = cell.tables()
    folder = as_earlier_folder(cell.path, records=records)
    (earlier,) = RunStore(tmp_path / "r").stored_cells()
    assert earlier.path == folder and earlier.slug == cell.slug and earlier.is_folder
    for name in tables:  # the folder's parquet reads back as the file's table, as pandas read it before
        expected = pd.read_parquet(folder / f"{name}.parquet")
        pd.testing.assert_frame_equal(earlier.tables()[name].to_pandas(), expected, check_exact=True)
        pd.testing.assert_frame_equal(tables[name].to_pandas(), expected, check_exact=True)
    assert {json.dumps(r["replay"]["key"]): r for r in RunStore(tmp_path / "r").replays()} == written
    assert RunStore(tmp_path / "r").compact()
    assert not (tmp_path / "r" / "cells").exists()
    assert {json.dumps(r["replay"]["key"]): r for r in RunStore(tmp_path / "r").replays()} == written


def test_a_run_resumed_over_an_earlier_versions_cell_folder_has_the_tables_of_a_run_without_a_break(tmp_path, case):
    three = ["none", "truncate", "codex-local"]
    whole = load_run(run_cases(tmp_path, [case], run_id="whole", strategies=three))
    store = stopped_after_one(tmp_path, case, three)
    (cell,) = store.stored_cells()
    first = cell.slug
    as_earlier_folder(cell.path)
    done = []
    root = run_cases(tmp_path, [case], run_id="r", strategies=three, resume=True, on_cell=lambda key, status: done.append(key.slug))
    assert len(done) == 2 and first not in done  # the folder's cell was not done again
    resumed = load_run(root)
    for name in ("requests", "compactions", "probes", "summary"):
        pd.testing.assert_frame_equal(resumed[name], whole[name], check_exact=True, obj=name)
    assert not (root / "cells").exists()


def test_a_cell_file_that_is_not_whole_is_named_with_what_to_do(tmp_path, case):
    store = stopped_after_one(tmp_path, case, ["none", "truncate"])
    (cell,) = store.stored_cells()
    cell.path.write_bytes(cell.path.read_bytes()[: cell.path.stat().st_size // 2])
    with pytest.raises(StoreError, match=rf"{re.escape(str(cell.path))}: not a readable cell file \(.*\); delete it, and `bench run --resume` does the cell again"):
        run_cases(tmp_path, [case], run_id="r", strategies=["none", "truncate"], resume=True)
    cell.path.unlink()
    root = run_cases(tmp_path, [case], run_id="r", strategies=["none", "truncate"], resume=True)
    assert set(load_run(root)["summary"]["strategy"]) == {"none", "truncate"}


#: A member as a hostile or damaged writer could leave it in a zip that is itself whole (its CRCs right).
DAMAGED = {"requests.arrow": b"ARROW1 but not", "compactions.arrow": b"\xff\xfe", "probes.arrow": b"", "contexts.arrow": b"\x00" * 64,
           "messages.arrow": b"PAR1", "replay.json": b'{"key": {"scenario": "x"}}'}


@pytest.mark.parametrize("member", CELL_MEMBERS)
def test_a_whole_cell_file_with_a_damaged_member_is_named_with_the_member_and_what_to_do(tmp_path, case, member):
    """Each member of a cell file that is not what it should be (not Arrow IPC, a replay without its key) is one
    `StoreError` naming the file and the member, whether the resumed run reads it for its tables or for the archive;
    once the file is deleted the run does the cell again."""
    store = stopped_after_one(tmp_path, case, ["none", "truncate"])
    (cell,) = store.stored_cells()
    with zipfile.ZipFile(cell.path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    assert list(members) == list(CELL_MEMBERS)
    members[member] = DAMAGED[member]
    with zipfile.ZipFile(cell.path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    message = rf"{re.escape(str(cell.path))}: not a readable cell file \({re.escape(member)}: .*\); delete it, and `bench run --resume` does the cell again"
    with pytest.raises(StoreError, match=message):
        run_cases(tmp_path, [case], run_id="r", strategies=["none", "truncate"], resume=True)
    cell.path.unlink()
    root = run_cases(tmp_path, [case], run_id="r", strategies=["none", "truncate"], resume=True)
    assert set(load_run(root)["summary"]["strategy"]) == {"none", "truncate"}


def test_a_resumed_run_whose_early_cells_kept_no_replay_records_finishes_uncompacted(tmp_path, case):
    """Cells written by a version that kept no replay records (then resumed by this one): the run
    finishes with every table and its report, and the cell folders stay (nothing to archive them from)."""
    (early,) = stopped_after_one(tmp_path, case, ["none", "truncate"]).stored_cells()
    as_earlier_folder(early.path, records=None)
    root = run_cases(tmp_path, [case], run_id="r", strategies=["none", "truncate"], resume=True)
    assert set(load_run(root)["summary"]["strategy"]) == {"none", "truncate"}
    assert (root / "cells").is_dir() and not (root / "replays").exists()


def test_runs_started_in_the_same_second_get_a_folder_each(tmp_path):
    first = run_folder.claim(tmp_path, None, resume=False, new_id="20261203-101500")
    second = run_folder.claim(tmp_path, None, resume=False, new_id="20261203-101500")  # while the first holds its folder
    first.release()
    second.release()
    third = run_folder.claim(tmp_path, None, resume=False, new_id="20261203-101500")  # the folders stay taken after their runs
    assert [first.run_id, second.run_id, third.run_id] == ["20261203-101500", "20261203-101500-2", "20261203-101500-3"]
    # An id the user chose is theirs: a second claim of it waits for the first instead of moving.
    with pytest.raises(run_folder.RunFolderError, match="in use by another run"):
        run_folder.claim(tmp_path, "20261203-101500-3", resume=False, new_id="x")
    third.release()


def test_newest_run_is_by_manifest_created_time(tmp_path):
    for name, created in (("b", "2026-01-02T00:00:00+00:00"), ("c", "2026-01-01T00:00:00+00:00"), ("a", "2026-01-03T00:00:00+00:00")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({"created": created}))
    (tmp_path / "zz-broken").mkdir()
    (tmp_path / "zz-broken" / "manifest.json").write_text("{not json")
    assert run_folder.newest_run(tmp_path) == "a"
    with pytest.raises(run_folder.RunFolderError, match="no earlier run"):
        run_folder.newest_run(tmp_path / "empty")


def test_resume_with_another_configuration_is_refused_naming_the_difference(tmp_path, case):
    root = run_cases(tmp_path, [case], run_id="r", strategies=["none"])
    before = (root / "manifest.json").read_text()
    with pytest.raises(RunError, match=r"another configuration \(strategies: \[\"none\"\] then, \[\"truncate\"\] now\)"):
        run_cases(tmp_path, [case], run_id="r", strategies=["truncate"], resume=True)
    with pytest.raises(RunError, match="seed: 0 then, 7 now"):
        run_cases(tmp_path, [case], run_id="r", strategies=["none"], resume=True, seed=7)
    # The manifest still describes the tables that are there.
    assert (root / "manifest.json").read_text() == before
    assert set(load_run(root)["requests"]["strategy"]) == {"none"}
    # The same configuration resumes (nothing left to do), and the lock was released by the refusals.
    assert run_cases(tmp_path, [case], run_id="r", strategies=["none"], resume=True) == root


def test_resume_over_another_transcript_or_other_probes_of_the_same_name_is_refused_and_writes_nothing(tmp_path, case):
    root = run_cases(tmp_path, [case], run_id="r")
    kept = {path: path.read_bytes() for path in root.rglob("*") if path.is_file() and path.name != run_folder.LOCK_NAME}
    longer = Case(case.name, Transcript(case.transcript.id, (*case.transcript.items, Item("extra", "user", "one more turn"))), case.probes)
    with pytest.raises(RunError, match=rf"scenario '{case.name}': sha256 changed"):
        run_cases(tmp_path, [longer], run_id="r", resume=True)
    fewer = Case(case.name, case.transcript, case.probes[:1])
    with pytest.raises(RunError, match=rf"scenario '{case.name}': probes_sha256 changed"):
        run_cases(tmp_path, [fewer], run_id="r", resume=True)
    # The refusals left every file as the run wrote it: manifest, probes and the transcript's canonical copy.
    assert {path: path.read_bytes() for path in root.rglob("*") if path.is_file() and path.name != run_folder.LOCK_NAME} == kept
    assert run_cases(tmp_path, [case], run_id="r", resume=True) == root


def test_the_archive_keeps_messages_apart_that_differ_only_in_where_a_field_ends(tmp_path):
    base = {"role": "user", "content": "ab", "tool_calls": None, "tool_call_id": None, "item_ids": ["a", "b"], "attachments": None,
            "name": None, "is_error": False}
    variants = [
        base, dict(base), {**base, "content": "a", "tool_calls": "b"}, {**base, "content": ""}, {**base, "content": None},
        {**base, "item_ids": ["ab"]}, {**base, "item_ids": []}, {**base, "item_ids": ["a", "b", ""]}, {**base, "is_error": True},
        {**base, "content": "ab;N"}, {**base, "name": "N"},
    ]
    key = CellKey("s", "none", "32k", 0)
    records = CellRecords(
        key, pa.Table.from_pylist([{"index": 0, "messages": list(range(len(variants)))}]), pa.Table.from_pylist(variants),
        json.dumps({"key": key.columns()}),
    )
    store = RunStore(tmp_path)
    store.write_archive([records, records])
    # The two equal messages are stored once, every other message apart; each cell reads back its own list.
    assert len(pd.read_parquet(tmp_path / "replays" / "messages.parquet")) == len(variants) - 1
    for replayed in store.replays():
        assert replayed["messages"] == variants and replayed["requests"] == [{"index": 0, "messages": list(range(len(variants)))}]


def hand_built_records(scenario: str, requests: int) -> CellRecords:
    """A cell's records with `requests` requests, each naming its cell and place, over two messages of the cell's own."""
    key = CellKey(scenario, "none", "32k", 0)
    messages = [{"role": "user", "content": f"{scenario} question", "is_error": False}, {"role": "assistant", "content": f"{scenario} answer", "is_error": False}]
    contexts = [{"index": n, "label": f"{scenario}/{n}", "messages": [0, 1][: n % 2 + 1]} for n in range(requests)]
    return CellRecords(key, pa.Table.from_pylist(contexts), pa.Table.from_pylist(messages), json.dumps({"key": key.columns()}))


def test_each_archived_cell_reads_back_its_own_requests_in_order_however_the_archive_orders_them(tmp_path):
    """The archive's requests name their cell by its row; a run writes each cell's together, but a cell is read by that
    row, not by where its requests sit: interleaved, every cell still reads back exactly its own, in their order."""
    cells = [hand_built_records(name, n) for name, n in (("a", 3), ("b", 0), ("c", 5), ("d", 1))]
    store = RunStore(tmp_path)
    store.write_archive(cells)
    contexts = tmp_path / "replays" / "contexts.parquet"
    table = pq.read_table(contexts)
    shuffled = table.take(pa.array([3, 0, 4, 8, 1, 5, 6, 2, 7]))  # c0 a0 c1 d0 a1 c2 c3 a2 c4: "a" and "c" interleaved, "d" among them
    assert shuffled.column("cell").to_pylist() != sorted(shuffled.column("cell").to_pylist())
    pq.write_table(shuffled, contexts)
    for read, written in zip(RunStore(tmp_path).cell_records(), cells, strict=True):
        assert read.key == written.key
        assert read.contexts.to_pylist() == written.contexts.to_pylist()
        assert read.messages.to_pylist() == written.messages.to_pylist()
    assert [r["requests"] for r in RunStore(tmp_path).replays()] == [c.contexts.to_pylist() for c in cells]


def varied_records(scenario: str, own: int, shared: int, calls: bool) -> CellRecords:
    """A cell's records: `shared` messages every such cell sends, then `own` of its own; with `calls`, a column of
    tool calls (text), else none at all; its requests refer to every message."""
    key = CellKey(scenario, "none", "32k", 0)
    messages = [{"role": "user", "content": f"shared {n}", "is_error": False} for n in range(shared)]
    messages += [{"role": "assistant", "content": f"{scenario} {n}", "is_error": n % 2 == 0} for n in range(own)]
    if calls:
        messages = [{**m, "tool_calls": f'[{{"name": "{m["content"]}"}}]'} for m in messages]
    contexts = [{"index": n, "messages": list(range(n + 1))} for n in range(len(messages))]
    return CellRecords(key, pa.Table.from_pylist(contexts), pa.Table.from_pylist(messages), json.dumps({"key": key.columns()}))


def test_the_archive_is_written_a_batch_of_cells_at_a_time_with_the_same_contents(tmp_path, monkeypatch):
    """Written a cell per batch, the archive holds what it holds written in one batch: a message sent by cells
    of different batches once, the messages in order of first appearance, each cell's own rows; the cells'
    schemas made one (a cell without a tool calls column reads back with none)."""
    cells = [varied_records(f"s{n}", own=n, shared=3 if n % 2 else 1, calls=n % 3 == 0) for n in range(6)]
    RunStore(tmp_path / "whole").write_archive(cells)
    monkeypatch.setattr(store_module, "ARCHIVE_BATCH_BYTES", 1)
    RunStore(tmp_path / "batched").write_archive(cells)
    for name in ("messages", "contexts", "cells"):
        whole, batched = (pq.read_table(tmp_path / run / "replays" / f"{name}.parquet") for run in ("whole", "batched"))
        assert batched.equals(whole)
    assert len(pq.ParquetFile(tmp_path / "batched" / "replays" / "cells.parquet").metadata.to_dict()["row_groups"]) == len(cells)
    stored = pq.read_table(tmp_path / "batched" / "replays" / "messages.parquet")
    # in order of first appearance: cell 0's "shared 0" with a call, then cell 1's shared messages without one and its own
    contents, calls = stored.column("content").to_pylist(), stored.column("tool_calls").to_pylist()
    assert contents[:5] == ["shared 0", "shared 0", "shared 1", "shared 2", "s1 0"] and calls[1:5] == [None] * 4 and calls[0]
    # each distinct message once: "shared 0" and "shared 1" and "shared 2" with and without a call (cells 0 and 3 have
    # calls), and each cell's own 0 + 1 + ... + 5
    assert len(contents) == len(set(zip(contents, calls, strict=True))) == 2 + 4 + sum(range(6))
    for read, written in zip(RunStore(tmp_path / "batched").replays(), cells, strict=True):
        rows = written.messages.to_pylist()
        assert read["messages"] == [{**dict.fromkeys(stored.column_names), **row} for row in rows]
        assert read["requests"] == written.contexts.to_pylist()


def test_cells_whose_records_cannot_share_a_schema_stay_where_they_are(tmp_path):
    """A column of integers in one cell and of floats in another cannot be one archive column: `compact` leaves
    the cells in `cells/` (the run complete, only not compacted), their records as they were."""
    store = RunStore(tmp_path / "r")
    for scenario, estimate in (("a", 12), ("b", 12.5)):
        rows = {"requests": [{"index": 0, "estimate_tokens": estimate, "messages": [0]}], "messages": [{"role": "user", "content": scenario}],
                "replay": {}}
        store.write_cell(CellKey(scenario, "none", "32k", 0), {"replay": rows})
    assert store.compact() is False
    assert sorted(p.name for p in (tmp_path / "r" / "cells").iterdir()) == sorted(f"{CellKey(s, 'none', '32k', 0).slug}.zip" for s in "ab")
    assert not (tmp_path / "r" / "replays").exists()
    assert [r["requests"][0]["estimate_tokens"] for r in store.replays()] == [12, 12.5]


def test_an_archive_that_cannot_be_written_is_one_error_naming_its_folder_and_the_cells_stay(tmp_path, monkeypatch):
    """The disk fills while the archive is written: one `WriteFailed` naming `replays/`, no file of it left behind
    (not even a temporary one), and every cell still in `cells/` for the next attempt."""
    import errno

    from compaction_bench.atomic import WriteFailed

    store = RunStore(tmp_path / "r")
    for scenario in "ab":
        rows = {"requests": [{"index": 0, "messages": [0]}], "messages": [{"role": "user", "content": scenario}], "replay": {}}
        store.write_cell(CellKey(scenario, "none", "32k", 0), {"replay": rows})

    def full(self, table, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    with pytest.raises(WriteFailed) as failed:
        store.compact()
    assert str(failed.value) == f"{tmp_path / 'r' / 'replays'}: cannot write (No space left on device)"
    assert list((tmp_path / "r" / "replays").iterdir()) == []
    assert len(list((tmp_path / "r" / "cells").iterdir())) == 2
    monkeypatch.undo()
    assert RunStore(tmp_path / "r").compact() and [r["messages"][0]["content"] for r in RunStore(tmp_path / "r").replays()] == ["a", "b"]


def test_a_scored_copy_of_a_run_gets_its_archive_as_it_is_or_written_from_its_cells(tmp_path):
    """`archive_from`: the files of an archive that holds every cell are copied byte for byte; a run with cells
    outside its archive (or none in it) gets an archive written from all of them, which reads back the same."""
    whole = RunStore(tmp_path / "whole")
    whole.write_archive([hand_built_records("a", 3), hand_built_records("c", 2)])
    copy = RunStore(tmp_path / "copy")
    copy.archive_from(whole)
    for name in ("messages.parquet", "contexts.parquet", "cells.parquet"):
        assert (copy.archive_dir / name).read_bytes() == (whole.archive_dir / name).read_bytes()
    assert list(copy.archived()) == [CellKey(s, "none", "32k", 0).slug for s in "ac"]
    # a cell outside the archive too: the new archive holds all three
    whole.write_cell(CellKey("e", "none", "32k", 0), {"replay": {"requests": hand_built_records("e", 1).contexts.to_pylist(),
                                                                "messages": hand_built_records("e", 1).messages.to_pylist(), "replay": {}}})
    mixed = RunStore(tmp_path / "mixed")
    mixed.archive_from(whole)
    assert [(r["replay"]["key"]["scenario"], r["requests"]) for r in mixed.replays()] == [
        (r["replay"]["key"]["scenario"], r["requests"]) for r in whole.replays()] == [
        (s, hand_built_records(s, n).contexts.to_pylist()) for s, n in (("a", 3), ("c", 2), ("e", 1))]


# --------------------------------------------------------------------------- 5: lock
def test_a_second_run_with_the_same_id_fails_while_the_first_holds_the_folder(tmp_path, case):
    folder = run_folder.claim(tmp_path, "busy", resume=False, new_id="unused")
    try:
        with pytest.raises(RunError, match="is in use by another run"):
            run_cases(tmp_path, [case], run_id="busy")
        # Another process is refused the same way, in one line, with exit status 2.
        transcript = tmp_path / "t.jsonl"
        case.transcript.write(transcript)
        proc = subprocess.run(
            [sys.executable, "-m", "compaction_bench.cli", "run", str(transcript), "-s", "none", "-p", "32k", "-o", str(tmp_path),
             "--run-id", "busy", "--probes", "auto"],
            capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error: ") and "is in use by another run" in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "busy" / "manifest.json").exists()
    finally:
        folder.release()
    # Once released, the folder can be used.
    assert run_cases(tmp_path, [case], run_id="busy").name == "busy"


# --------------------------------------------------------------------------- 2: cell folders
def test_scenarios_differing_only_in_punctuation_keep_separate_cells(tmp_path, case):
    keys = [CellKey(name, "none", "32k", 0) for name in ("x y.json", "x_y.json", "x?y.json", "x/y.json")]
    assert len({k.slug for k in keys}) == 4
    assert all("/" not in k.slug and len(k.slug) < 200 for k in keys)
    assert len(CellKey("n" * 5000, "none", "32k", 0).slug) < 200
    other = Transcript("other", (Item("u", "user", "hello", turn=0), Item("a", "assistant", "hi", response=0, turn=0)))
    root = run_cases(tmp_path, [Case("x y.json", case.transcript, case.probes), Case("x_y.json", other)], run_id="p")
    requests = load_run(root)["requests"]
    assert set(requests["scenario"]) == {"x y.json", "x_y.json"}
    # Each scenario's rows are its own replay's requests, not the other one's written over them.
    for name, transcript in (("x y.json", case.transcript), ("x_y.json", other)):
        assert (requests["scenario"] == name).sum() == len(bench.replay(transcript, "none", profile="32k").requests)


# --------------------------------------------------------------------------- 19: stale errors.log
def test_a_successful_resume_removes_the_error_log_of_the_failed_attempt(tmp_path, case):
    from compaction_bench import registry
    from compaction_bench.strategies.baselines import NoCompaction

    switch = tmp_path / "fail-now"
    switch.write_text("")

    class Flaky(NoCompaction):
        name = "flaky"

        def request(self):
            if switch.exists():
                raise ZeroDivisionError("flaky failure")
            return super().request()

    registry.register_strategy(Flaky)
    try:
        with pytest.raises(RunError, match="1 of 2 cells failed"):
            run_cases(tmp_path, [case], run_id="f", strategies=["none", "flaky"])
        assert "flaky failure" in (tmp_path / "f" / "errors.log").read_text()
        switch.unlink()
        run_cases(tmp_path, [case], run_id="f", strategies=["none", "flaky"], resume=True)
    finally:
        registry.reset()
    assert not (tmp_path / "f" / "errors.log").exists()
    assert set(load_run(tmp_path / "f")["requests"]["strategy"]) == {"none", "flaky"}


def test_where_and_how_patiently_a_run_works_may_change_on_resume():
    old = {"config": {"strategies": ["none"], "run_dir": "runs/r", "max_retries": 3, "offline": False, "seed": 0},
           "scenarios": [{"name": "a.jsonl"}]}
    new = {"config": {"strategies": ["none"], "run_dir": "/abs/runs/r", "max_retries": 0, "offline": True, "seed": 0},
           "scenarios": [{"name": "a.jsonl"}]}
    assert run_folder.config_difference(old, new) == []
    changed = {**new, "config": {**new["config"], "seed": 1}, "scenarios": [{"name": "b.jsonl"}]}
    assert run_folder.config_difference(old, changed) == ["seed: 0 then, 1 now", 'scenarios: ["a.jsonl"] then, ["b.jsonl"] now']


# --------------------------------------------------------------------------- a folder that is not a run's
def test_a_run_never_writes_into_a_folder_of_the_users_own_files(tmp_path, case):
    mine = tmp_path / "userdir"
    mine.mkdir()
    (mine / "report.html").write_text("my own report\n")
    (mine / "summary.parquet").write_bytes(b"my own table")
    before = sorted(p.name for p in mine.iterdir())
    with pytest.raises(RunError, match=rf"{mine} is not empty and holds no run \(report.html, summary.parquet\)"):
        run_cases(tmp_path, [case], run_id="userdir")
    # Nothing was added, replaced or locked.
    assert sorted(p.name for p in mine.iterdir()) == before
    assert (mine / "report.html").read_text() == "my own report\n" and (mine / "summary.parquet").read_bytes() == b"my own table"
    # The command line: one line naming the folder, exit 2, the files as they were.
    transcript = tmp_path / "t.jsonl"
    case.transcript.write(transcript)
    proc = subprocess.run(
        [sys.executable, "-m", "compaction_bench.cli", "run", str(transcript), "-s", "none", "-p", "32k", "-j", "1", "-o", str(tmp_path),
         "--run-id", "userdir", "--probes", "auto", "--no-report"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"error: {mine} is not empty and holds no run"), proc.stderr
    assert sorted(p.name for p in mine.iterdir()) == before and (mine / "report.html").read_text() == "my own report\n"
    # A file where the folder would go is refused too; an empty folder, or one a run left only its lock in, is used.
    (tmp_path / "afile").write_text("x")
    with pytest.raises(RunError, match="exists and is not a folder"):
        run_cases(tmp_path, [case], run_id="afile")
    (tmp_path / "empty").mkdir()
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / run_folder.LOCK_NAME).write_bytes(b"")
    for name in ("empty", "locked"):
        assert (run_cases(tmp_path, [case], run_id=name) / "manifest.json").is_file()


def test_resume_of_a_folder_without_a_run_is_refused_and_creates_nothing(tmp_path, case):
    with pytest.raises(RunError, match=rf"--resume {tmp_path / 'nosuch'}: nothing to resume"):
        run_cases(tmp_path, [case], run_id="nosuch", resume=True)
    assert not (tmp_path / "nosuch").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(RunError, match="nothing to resume"):
        run_cases(tmp_path, [case], run_id="mine", resume=True)
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    # A real run still resumes (nothing left to do: the same folder back).
    root = run_cases(tmp_path, [case], run_id="real")
    assert run_cases(tmp_path, [case], run_id="real", resume=True) == root


def test_a_run_folder_that_cannot_be_written_in_asks_for_its_permissions_not_another_out(tmp_path, monkeypatch):
    """`score --in-place` (or `--resume`) of a read-only run said "cannot create the run folder; choose another --out",
    an option that cannot go with --in-place and would not finish the run."""
    import errno

    from compaction_bench import run_folder

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "manifest.json").write_text("{}")  # a run to resume or score in place

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "r" / run_folder.LOCK_NAME))

    monkeypatch.setattr(run_folder, "open", read_only, raising=False)  # the lock file is the first thing written
    with pytest.raises(run_folder.RunFolderError, match=r"cannot write in the run folder \(Read-only file system\); make it writable"):
        run_folder.claim(tmp_path, "r", resume=True, new_id="unused")
    with pytest.raises(run_folder.RunFolderError, match=r"cannot create the run folder \(Read-only file system\); choose another --out"):
        run_folder.claim(tmp_path, "new", resume=False, new_id="unused")
