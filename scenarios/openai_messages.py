"""Importer for plain OpenAI-style message lists: a JSON list or JSONL of `{role, content, tool_calls,
tool_call_id}`, an object holding `messages`, and tau-bench's container (a JSON list of runs
`{task_id, trial, reward, info, traj}`: one transcript per run). The message conversion is
`compaction_bench.scenarios.openai_style`. A file with an entry that looks like a run (`task_id` and `traj`, no
`role`: `looks_like_tau_run`) is a tau-bench container: an entry of it that is no readable run is a problem naming
run N, and the other runs are kept (read as chat messages, each run would be a message without a role, all lost).

A JSONL (or JSON list) of session records, `{"id": …, "messages": [...]}` one per line (OpenAI's
chat fine-tuning files, Hugging Face chat datasets), holds one session per record, read as `hf-dataset`
reads its rows: transcript `<file stem>:<id>` (`line<N>` / `entry<N>` without an id). The first record or
message decides what the file holds; a message among records, or a record among messages, is an error
naming its line: read as a message, a record is no message (no role), and its whole session was lost.

Session records' ids are unique within the file, made so as `hf-dataset` makes its rows' (`builder.unique_ids`,
its module docstring): records that would share one each get `#row<N>` appended, N their index among the
file's records (so a file both importers read gives the same ids), and each of those sessions carries a
problem naming the records and their lines. Two sessions of one id would each be asked the other's probes
(`bench.probes.assign_probes` matches a probe's `session` by id), and `bench probes mine` would write probe
ids twice, which `bench probes check` refuses. tau-bench runs of one task and trial (two results files put
together) are made unique the same way, N their index among the runs.

A message's content is text or a list of content parts (openai/openai-python:src/openai/types/chat/
chat_completion_user_message_param.py@4677fff: `content: Required[Union[str, Iterable[ChatCompletionContentPartParam]]]`).
Content of another type (a number, an object not in the parts form, a part that is no text or image
part) is a problem naming the message and its line, its text kept as `content_parts` makes it
(`openai_style.content_problem`), in every layout the importer reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure
from compaction_bench.scenarios.builder import TranscriptBuilder, mapping_of, unique_ids
from compaction_bench.scenarios.openai_style import add_messages, content_problem, fields_of, sniff_messages
from compaction_bench.scenarios.readers import SURROGATE_PROBLEM, parse_json, read_json_reported, read_jsonl, read_text, scrubbed
from compaction_bench.transcript import Transcript, json_type

FORMAT = "openai-messages"
#: How a problem names one session record and several (`distinct_ids`): in JSONL, in a JSON list.
RECORDS, ENTRIES, RUNS = ("record", "records"), ("entry", "entries"), ("run", "runs")


def is_tau_run(entry: Any) -> bool:
    return isinstance(entry, Mapping) and isinstance(entry.get("traj"), list) and "task_id" in entry


def looks_like_tau_run(entry: Any) -> bool:
    """A tau-bench run whole or damaged: an object with `task_id` and `traj` (of any type) and no chat `role`."""
    return isinstance(entry, Mapping) and "task_id" in entry and "traj" in entry and "role" not in entry


def is_session_record(entry: Any) -> bool:
    """A `{"messages": [...]}` object without a role: one whole session, not a chat message."""
    return isinstance(entry, Mapping) and isinstance(entry.get("messages"), list) and "role" not in entry


def record_name(entry: Mapping[str, Any], origin: Mapping[str, int]) -> str:
    """A session record's `id` (a string or number), else where it is (`line3`, `entry0`)."""
    name = entry.get("id")
    if isinstance(name, (str, int)) and not isinstance(name, bool) and str(name).strip():
        return str(name)
    return "".join(f"{key}{value}" for key, value in origin.items())


def place(path: Path, n: int, lines: list[int] | None) -> str:
    """Entry `n` of the file as an error names it: `file:line` in JSONL, `file: entry n` in a JSON list."""
    return f"{path}:{lines[n]}" if lines else f"{path}: entry {n}"


def origin_of(n: int, lines: list[int] | None) -> dict[str, int]:
    """Where entry `n` is, as a transcript's `source` keeps it: its line in JSONL, its index in a JSON list."""
    return {"line": lines[n]} if lines else {"entry": n}


def describe(entry: Any) -> str:
    if isinstance(entry, Mapping):
        return f"a message with role {entry['role']!r}" if "role" in entry else "an object without 'messages'"
    return f"a JSON {type(entry).__name__}"


def read_chat(path: Path) -> tuple[list[Any], list[int] | None, list[str]]:
    """The file's entries (messages, records or runs), their line numbers (JSONL only) and the problems met."""
    text, utf8_problems = read_text(path)
    lines: list[int] | None = None
    if text.lstrip().startswith("["):
        data, problems = read_json_reported(path)
    else:
        try:
            data, fixed = scrubbed(text, parse_json(text))
        except ValueError:
            data, fixed = None, False
        problems = [*utf8_problems, *([f"{path}: {SURROGATE_PROBLEM}"] if fixed else [])]
        if not (isinstance(data, Mapping) and isinstance(data.get("messages"), list)):
            jsonl = read_jsonl(path)
            data, problems = [value for _, value in jsonl.lines], jsonl.problems
            lines = [number for number, _ in jsonl.lines]
    if isinstance(data, Mapping):
        data = data["messages"]
    if not isinstance(data, list):
        raise ImportFailure(f"{path}:1: expected a list of chat messages, got a JSON {type(data).__name__}")
    return data, lines, problems


def new_builder(path: Path, problems: Sequence[str]) -> TranscriptBuilder:
    """A builder for one session of the file, holding the problems met reading the whole file."""
    builder = TranscriptBuilder(path, FORMAT)
    builder.problems.extend(problems)
    return builder


def add_chat(
    builder: TranscriptBuilder,
    messages: Sequence[Any],
    where: Callable[[int], str] = lambda m: f"message {m}",
    line_of: Callable[[int], int | None] = lambda m: None,
    failed: Callable[[str], bool] = lambda text: False,
) -> None:
    """`add_messages`, each message whose content it does not read as text or parts reported first
    (`openai_style.content_problem`, module docstring); `where`/`line_of` name a message and `failed` tells a
    failed call's result as `add_messages` does."""
    for m, message in enumerate(messages):
        problem = content_problem(message.get("content")) if isinstance(message, Mapping) else None
        if problem is not None:
            builder.problem(f"{where(m)}: {problem}", line_of(m))
    add_messages(builder, messages, where=where, line_of=line_of, failed=failed)


def tau_failed(text: str) -> bool:
    """Whether a tau-bench tool message reports a failed call. Its environment words every failure one way:
    a tool's exception becomes `f"Error: {e}"` and an action it does not know `f"Unknown action {name}"`
    (sierra-research/tau-bench tau_bench/envs/base.py@59a200c6 L101-113), and the tools return their own
    refusals as `"Error: …"` strings (e.g. tau_bench/envs/airline/tools/book_reservation.py@59a200c6)."""
    return text.startswith(("Error: ", "Unknown action "))


def distinct_ids(
    wanted: Sequence[str], builders: Sequence[TranscriptBuilder], lines: list[int] | None, nouns: tuple[str, str] | None = None
) -> list[str]:
    """The records' ids made unique within the file (`builder.unique_ids`: `#row<N>`, module docstring);
    each renamed record's builder names the records (`nouns`: what a record is called, one and several) that
    shared its id and, in JSONL, their lines."""
    ids, renamed = unique_ids(wanted)
    one, several = nouns or (RECORDS if lines else ENTRIES)
    for n, (shared_id, shared) in renamed.items():
        at = f" (lines {', '.join(str(lines[k]) for k in shared)})" if lines else ""
        same = f"{several} {', '.join(map(str, shared))}{at} have the same session id {shared_id!r}"
        builders[n].problem(f"{same}; this one, {one} {n}, is named {ids[n]!r}", lines[n] if lines else None)
    return ids


def check_no_record(path: Path, data: Sequence[Any], lines: list[int] | None) -> None:
    """Refuse a session record among chat messages (module docstring): read as a message, its session is lost."""
    for n, entry in enumerate(data):
        if is_session_record(entry):
            raise ImportFailure(
                f"{place(path, n, lines)}: a session record {{\"messages\": [...]}} among chat messages; a file holds "
                "either chat messages or session records, one per line"
            )


def session_builder(path: Path, n: int, entry: Any, lines: list[int] | None, problems: Sequence[str]) -> TranscriptBuilder:
    """One `{"id": …, "messages": [...]}` record's messages in a builder of their own."""
    if not is_session_record(entry):
        raise ImportFailure(
            f"{place(path, n, lines)}: expected a session record {{\"messages\": [...]}} as on the file's first "
            f"{'line' if lines else 'entry'}, got {describe(entry)}; a file holds either chat messages or session records"
        )
    builder = new_builder(path, problems)
    if lines is None:
        add_chat(builder, entry["messages"], where=lambda m: f"entry {n} message {m}")
    else:
        line = lines[n]
        add_chat(builder, entry["messages"], line_of=lambda m: line)
    return builder


def tau_builder(path: Path, n: int, entry: Mapping[str, Any], problems: Sequence[str]) -> TranscriptBuilder:
    """One tau-bench run's `traj` in a builder of its own."""
    builder = new_builder(path, problems)
    add_chat(builder, entry["traj"], where=lambda m: f"run {n} message {m}", failed=tau_failed)
    return builder


def tau_damage(entry: Any) -> str:
    """What keeps an entry of a tau-bench file from being read as a run (`is_tau_run`)."""
    if not isinstance(entry, Mapping):
        return f"expected a tau-bench run {{task_id, traj: [...]}}, got a JSON {json_type(entry)}"
    if "task_id" not in entry or "traj" not in entry:
        return f"expected a tau-bench run {{task_id, traj: [...]}}, got an object with fields {fields_of(entry)}"
    return f"traj is a JSON {json_type(entry['traj'])}, not a list of messages"


def tau_meta(entry: Mapping[str, Any]) -> dict[str, Any]:
    """What a tau-bench run records about itself: its task, trial, reward and the simulated user's cost."""
    info = mapping_of(entry.get("info"))
    meta = {"container": "tau-bench", "task_id": entry.get("task_id"), "trial": entry.get("trial"), "reward": entry.get("reward")}
    if "user_cost" in info:
        meta["user_cost"] = info["user_cost"]
    return meta


class OpenAIMessagesImporter(Importer):
    format = FORMAT
    description = (
        "OpenAI-style chat messages (JSON list, JSONL, {messages: [...]}), one session per {messages: [...]} line "
        "(fine-tuning / Hugging Face layout), and tau-bench trajectories"
    )
    suffixes = (".json", ".jsonl")
    priority = 10

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        stripped = head.lstrip()
        if stripped.startswith("[") and '"traj"' in head and '"task_id"' in head:
            return True
        return sniff_messages(head)

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        data, lines, problems = read_chat(path)
        if any(looks_like_tau_run(entry) for entry in data):
            return self._tau_runs(path, data, problems)
        if data and is_session_record(data[0]):
            return self._session_records(path, data, lines, problems)
        check_no_record(path, data, lines)
        builder = new_builder(path, problems)
        if lines is None:
            add_chat(builder, data)
        else:
            numbers = lines
            add_chat(builder, data, where=lambda n: f"line {numbers[n]}", line_of=lambda n: numbers[n])
        return [builder.finish(path.stem)]

    @staticmethod
    def _session_records(path: Path, data: Sequence[Any], lines: list[int] | None, problems: Sequence[str]) -> list[Transcript]:
        """Each `{"id": …, "messages": [...]}` record as its own transcript, of an id unique within the file."""
        builders = [session_builder(path, n, entry, lines, problems) for n, entry in enumerate(data)]
        origins = [origin_of(n, lines) for n in range(len(data))]
        wanted = [f"{path.stem}:{record_name(entry, origin)}" for entry, origin in zip(data, origins, strict=True)]
        ids = distinct_ids(wanted, builders, lines)
        return [builder.finish(ids[n], source=origins[n]) for n, builder in enumerate(builders)]

    @staticmethod
    def _tau_runs(path: Path, data: Sequence[Any], problems: Sequence[str]) -> list[Transcript]:
        """Each tau-bench run as its own transcript, `<stem>:task<task_id>:trial<trial>`, unique within the file as
        records' ids are (`distinct_ids`: two results files put together repeat a task's trials). An entry that is
        no run, or a run whose `traj` is no list of messages, is a problem naming run N that every transcript of
        the file carries (`tau_damage`), and the file keeps its other runs; a file with none left is an error.
        A damaged run keeps its place under a name no run has (`run<N>`), so N is the index in the file in
        every problem."""
        damage = [f"{path}: run {n}: {tau_damage(entry)}; run left out" for n, entry in enumerate(data) if not is_tau_run(entry)]
        if len(damage) == len(data):
            raise ImportFailure(f"{damage[0]}; the tau-bench file has no readable run ({len(damage)} damaged)")
        builders = [tau_builder(path, n, entry, [*problems, *damage]) if is_tau_run(entry) else new_builder(path, ())
                    for n, entry in enumerate(data)]
        wanted = [f"{path.stem}:task{entry.get('task_id')}:trial{entry.get('trial')}" if is_tau_run(entry) else f"{path.stem}:run{n}"
                  for n, entry in enumerate(data)]
        ids = distinct_ids(wanted, builders, None, RUNS)
        return [builder.finish(ids[n], source={"entry": n}, meta=tau_meta(data[n]))
                for n, builder in enumerate(builders) if is_tau_run(data[n])]
