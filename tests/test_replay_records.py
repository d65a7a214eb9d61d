"""A cell's replay records store each request's context by its difference from the request before it, and each
compaction's id lists by theirs from the compaction before it (`records.to_rows`): as long as what the requests
and compactions add, not quadratic in the session's length where contexts only grow or each summary covers the
one before, and `from_rows` gives every request's messages and every compaction's ids back, from rows written
either way. The archive of them keeps parquet statistics of the cells' keys alone."""

from __future__ import annotations

import json

import pytest

from compaction_bench.importing import load_transcript
from compaction_bench.records import from_rows, to_rows
from compaction_bench.replay import replay
from compaction_bench.request import message_item_ids
from compaction_bench.store import CellKey, RunStore
from compaction_bench.transcript import Transcript

TURNS = 300


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> Transcript:
    """Many short turns as OpenAI chat messages, each a question, a tool call, its output and an answer (about
    45 tokens a turn): at `32k@1000` a context never compacted outgrows the window within the first 30 turns."""
    messages: list[dict] = []
    for n in range(TURNS):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "read", "arguments": json.dumps({"path": f"file_{n}.py"})}}
        messages += [
            {"role": "user", "content": f"question {n}: what does file_{n}.py do?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"def parse_{n}(row):\n    return row[{n}]"},
            {"role": "assistant", "content": f"file_{n}.py parses column {n}"},
        ]
    path = tmp_path_factory.mktemp("chat") / "chat.json"
    path.write_text(json.dumps(messages))
    return load_transcript(path)


def as_earlier_versions_stored(rows: dict) -> list[dict]:
    """The requests' rows as versions before `shared` wrote them: each request's references whole, and its item ids."""
    built = [row["item_ids"] for row in rows["messages"]]
    whole: list[int] = []
    out = []
    for row in rows["requests"]:
        whole = whole[: row["shared"]] + row["messages"]
        legacy = {k: v for k, v in row.items() if k != "shared"}
        out.append({**legacy, "messages": list(whole), "item_ids": [i for n in whole for i in built[n]]})
    return out


def test_a_context_that_only_grows_stores_each_message_once(chat: Transcript) -> None:
    result = replay(chat, "none", profile="32k@1000")
    assert len(result.requests) > TURNS and sum(r.overflow for r in result.requests) > TURNS
    rows = to_rows(result)
    # Every request is the one before it and its new messages: the shared part is the whole of the one before.
    lengths = [len(r.messages) for r in result.requests]
    assert [row["shared"] for row in rows["requests"]] == [0, *(min(a, b) for a, b in zip(lengths, lengths[1:], strict=False))]
    # So each of the session's 1,200 messages is referenced once, where whole contexts held about 600 each.
    assert sum(len(row["messages"]) for row in rows["requests"]) == len(rows["messages"]) == 4 * TURNS
    whole = sum(lengths)
    assert whole > 100 * len(rows["messages"])


def test_every_request_reads_back_from_rows_written_now_and_by_earlier_versions(chat: Transcript) -> None:
    for strategy in ("none", "truncate", "observation-masking", "codex-local"):  # grows; cuts the front; edits; summarizes
        result = replay(chat, strategy, profile="32k@1000")
        assert result.compactions or strategy == "none"
        rows = to_rows(result)
        for requests in (rows["requests"], as_earlier_versions_stored(rows)):
            back = from_rows(result.transcript, result.profile, rows["messages"], requests, rows["replay"])
            assert [tuple(r.messages) for r in back.requests] == [tuple(r.messages) for r in result.requests], strategy
            assert [list(message_item_ids(r.messages)) for r in back.requests] == [r.item_ids() for r in result.requests]


def test_an_archive_of_cells_written_either_way_rebuilds_every_request(chat: Transcript, tmp_path) -> None:
    """A run resumed over cells an earlier version wrote (contexts whole, with item ids) archives them beside
    this version's (contexts by difference): the two schemas made one, each cell's requests read back whole."""
    results = {strategy: replay(chat, strategy, profile="32k@1000") for strategy in ("none", "codex-local")}
    store = RunStore(tmp_path)
    for n, (strategy, result) in enumerate(results.items()):
        rows = to_rows(result)
        if n == 0:
            rows = {**rows, "requests": as_earlier_versions_stored(rows)}
        store.write_cell(CellKey("chat", strategy, "32k@1000", 0), {"replay": rows})
    assert store.compact()
    read = {record["replay"]["key"]["strategy"]: record for record in RunStore(tmp_path).replays()}
    for strategy, result in results.items():
        record = read[strategy]
        back = from_rows(chat, result.profile, record["messages"], record["requests"], record["replay"])
        assert [tuple(r.messages) for r in back.requests] == [tuple(r.messages) for r in result.requests], strategy


def test_a_summary_profile_no_name_finds_reads_back_as_the_session_s(chat: Transcript) -> None:
    """A summarizer model litellm's map lacks sends its requests to a stand-in for it, the session's profile
    (`replay.summary_profile`); a session profile built in Python has a name `get_profile` does not know, and the
    stored rows read back with it, not with an error."""
    from dataclasses import replace as replaced

    from compaction_bench.profiles import get_profile

    custom = replaced(get_profile("64k"), name="built-in-python")
    result = replay(chat, "none", profile=custom)
    result.summary_profile = custom
    rows = to_rows(result)
    again = from_rows(result.transcript, custom, rows["messages"], rows["requests"], rows["replay"])
    assert again.summary_profile is custom


def test_a_compaction_s_ids_are_stored_by_difference_with_the_compaction_before(chat: Transcript) -> None:
    """Each compaction's id lists are stored as the leading ids shared with the compaction before it and the rest,
    so a strategy whose summaries each cover the one before stores each id once, not once per compaction."""
    from dataclasses import replace as replaced

    result = replay(chat, "codex-local", profile="32k@1000")
    first, second, third = result.compactions[:3]
    result.compactions[:3] = [
        replaced(first, summarized_ids=("a", "b", "c"), kept_ids=("k",), dropped_ids=()),
        replaced(second, summarized_ids=("a", "b", "c", "d"), kept_ids=("k", "m"), dropped_ids=("x",)),
        replaced(third, summarized_ids=("b", "c"), kept_ids=("k", "m"), dropped_ids=("x", "y")),
    ]
    stored = to_rows(result)["replay"]["compactions"]
    assert [c["summarized_ids"] for c in stored[:3]] == [
        {"shared": 0, "ids": ["a", "b", "c"]}, {"shared": 3, "ids": ["d"]}, {"shared": 0, "ids": ["b", "c"]},
    ]
    assert [c["kept_ids"] for c in stored[:3]] == [{"shared": 0, "ids": ["k"]}, {"shared": 1, "ids": ["m"]}, {"shared": 2, "ids": []}]
    assert [c["dropped_ids"] for c in stored[:3]] == [{"shared": 0, "ids": []}, {"shared": 0, "ids": ["x"]}, {"shared": 1, "ids": ["y"]}]


def test_every_compaction_s_ids_read_back_from_rows_written_now_and_by_earlier_versions(chat: Transcript) -> None:
    """`from_rows` gives each compaction's summarized, kept and dropped ids back, from this version's rows and from
    rows whose lists are whole (as versions before the fifty-third pass wrote them)."""
    names = ("summarized_ids", "kept_ids", "dropped_ids")
    for strategy in ("codex-local", "codex-remote-v2", "truncate"):  # keeps users' messages; retains a run; drops
        result = replay(chat, strategy, profile="32k@1000")
        assert len(result.compactions) > 3, strategy
        expected = [tuple(tuple(getattr(c, name)) for name in names) for c in result.compactions]
        rows = to_rows(result)
        stored = sum(len(c[name]["ids"]) for c in rows["replay"]["compactions"] for name in names)
        assert stored < sum(len(ids) for lists in expected for ids in lists) or strategy == "truncate", strategy
        whole = {**rows["replay"], "compactions": [
            {**c, **{name: list(ids) for name, ids in zip(names, lists, strict=True)}}
            for c, lists in zip(rows["replay"]["compactions"], expected, strict=True)
        ]}
        for replay_row in (rows["replay"], whole):
            back = from_rows(result.transcript, result.profile, rows["messages"], rows["requests"], replay_row)
            assert [tuple(tuple(getattr(c, name)) for name in names) for c in back.compactions] == expected, strategy
    # a record that says it shares more ids than the compaction before it had is damaged, not read as fewer ids
    first, second, *rest = rows["replay"]["compactions"]
    damaged = {**second, "kept_ids": {"shared": len(first["kept_ids"]["ids"]) + 1, "ids": []}}
    with pytest.raises(ValueError, match="share"):
        from_rows(result.transcript, result.profile, rows["messages"], rows["requests"],
                  {**rows["replay"], "compactions": [first, damaged, *rest]})


def test_the_archive_keeps_statistics_and_dictionaries_of_the_cell_keys_only(chat: Transcript, tmp_path) -> None:
    """Parquet's writer copies a value it keeps min/max statistics of or tries to dictionary-encode, and a cell's
    replay text may be many MB: `cells.parquet` keeps them for the key's columns alone (`store.CELLS_INDEXED`)."""
    import pyarrow.parquet as pq

    from compaction_bench.store import CELLS_INDEXED

    store = RunStore(tmp_path)
    store.write_cell(CellKey("chat", "codex-local", "32k@1000", 0), {"replay": to_rows(replay(chat, "codex-local", profile="32k@1000"))})
    assert store.compact()
    metadata = pq.ParquetFile(store.archive_dir / "cells.parquet").metadata
    columns = {metadata.schema.column(n).path: metadata.row_group(0).column(n) for n in range(metadata.num_columns)}
    assert {path for path, column in columns.items() if column.is_stats_set} == set(CELLS_INDEXED)
    assert {path for path, column in columns.items() if column.has_dictionary_page} == set(CELLS_INDEXED)
