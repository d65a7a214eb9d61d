"""Importer for Hugging Face datasets of chat transcripts: local JSON / JSONL / Parquet files loaded
with `datasets`, or a Hub id (`org/name`) where a network exists.

One row is one transcript. Options map the dataset's columns: `messages` (the column holding the
message list; by default the first of messages / conversations / traj / history that exists),
`role_key` / `content_key` (per-message field names, e.g. ShareGPT's `from` / `value`), `id_column`,
`model_column`, `split` (default "train"). Messages are converted by `compaction_bench.scenarios.openai_style`.
Sniffing is by content elsewhere, so this importer is chosen explicitly (`format="hf-dataset"`)
or for Parquet files.

What the mapping does not fit is an error or a problem, never an empty message (`check_fields`):

- a named column (`messages`, `id_column`, `model_column`) that is not among the dataset's columns
  is an error naming it and the columns there are;
- a dataset in which no message is an object, no message has the `role_key` field, no message has
  the `content_key` field, or no message has a chat role, does not fit the mapping at all: one error
  naming the first message (row and index), the fields it does have and the option to pass (ShareGPT's
  `from`/`value`: `role_key=from content_key=value`). `datasets` gives every message of a column the
  same fields (null where a line had none) where it can, so "has a field" means "has a non-null value there";
- where the mapping fits but one message lacks its content field (while holding others), or its
  content is of a type `content_parts` does not read (a number, an object not in the parts form, a
  part that is no text or image part), that message is a problem naming row and message, its text
  kept as before (`content_problem`); a message without a role is a problem and a marker, as
  `add_messages` keeps it. An assistant message with `tool_calls` or `function_call`
  needs no content (OpenAI: "Required unless `tool_calls` or `function_call` is specified",
  openai/openai-python:src/openai/types/chat/chat_completion_assistant_message_param.py@2dc3976).

Transcript ids are `<file stem>:<id>` (`id_column`'s value, a string or number) or `<file stem>:<row>`
(no `id_column`, or a null id; an id of another type is a problem). Ids are unique within the file:
rows that would share one (the same value in `id_column`, or an id that equals another row's index)
each get `#row<N>` appended, and each of those sessions carries a problem naming the rows. Two
sessions of one id would each be asked the other's probes (`bench.probes.assign_probes` matches a
probe's `session` by id), and `bench probes mine` would write probe ids twice, which `bench probes
check` refuses; as the builder keeps a repeated item id with a `#n` suffix (`scenarios/builder.py`),
nothing is dropped or refused. A model column's value that is no string is a problem (model unknown).

Local files never reach the network: they are loaded with the `datasets` and `huggingface_hub`
offline switches on (without them `datasets` makes a telemetry request even for a local file). An
argument is a Hub id only when it is clearly not a path (`is_name`): nothing exists at it locally
and it has the Hub's `owner/name` form (one `/`, no leading `.`, `/` or `~`, not ending in a data-file
suffix such as `.jsonl`); anything else is a local path, and a missing one is "no such file".
Offline (`HF_DATASETS_OFFLINE=1` / `HF_HUB_OFFLINE=1`) a Hub id fails at once with one clear message.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure, check_input
from compaction_bench.scenarios.builder import TranscriptBuilder, unique_ids
from compaction_bench.scenarios.openai_style import ROLES, add_messages, content_problem, describe_value, fields_of
from compaction_bench.scenarios.readers import read_text
from compaction_bench.transcript import Transcript

FORMAT = "hf-dataset"
MESSAGE_COLUMNS = ("messages", "conversations", "traj", "history")
LOADERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
#: ShareGPT-style role names mapped to chat roles (LLaMA-Factory's sharegpt tags: `from`/`value`, `human`,
#: `gpt`, `observation`; hiyouga/LLaMA-Factory:data/README.md@2ad9871).
ROLE_ALIASES = {"human": "user", "gpt": "assistant", "model": "assistant", "observation": "tool"}
#: Fields that let an assistant message go without content (openai/openai-python:src/openai/types/chat/
#: chat_completion_assistant_message_param.py@2dc3976: content "Required unless `tool_calls` or `function_call`").
CONTENT_OPTIONAL_WITH = ("tool_calls", "function_call")


def _where(row: int, message: int) -> str:
    return f"row {row} message {message}"


def chat_role(message: Mapping[str, Any], role_key: str) -> Any:
    """The message's role as a chat role (a ShareGPT name mapped by `ROLE_ALIASES`)."""
    role = message.get(role_key)
    return ROLE_ALIASES.get(role, role) if isinstance(role, str) else role


def needs_content(message: Mapping[str, Any]) -> bool:
    return not any(message.get(k) for k in CONTENT_OPTIONAL_WITH)


def check_fields(path: Path, chats: Sequence[list[Any]], role_key: str, content_key: str) -> None:
    """Refuse a dataset the message mapping does not fit at all (module docstring): no message object, no
    message with the role field or the content field, or no message with a chat role."""
    messages = [(n, m, message) for n, chat in enumerate(chats) for m, message in enumerate(chat)]
    if not messages:
        return
    objects = [(n, m, message) for n, m, message in messages if isinstance(message, Mapping)]
    if not objects:
        n, m, first = messages[0]
        raise ImportFailure(
            f"{path}: {_where(n, m)}: the messages are values like {describe_value(first)}, not objects with "
            f"{role_key!r} and {content_key!r} fields; no row holds a message object"
        )
    n, m, first = objects[0]
    missing = [key for key in (role_key, content_key) if not has_field(objects, key, content_key)]
    if missing:
        options = " and ".join(f"--import-option {option_of(key, role_key)}=FIELD" for key in missing)
        hint = " (ShareGPT: role_key=from content_key=value)" if "from" in first and "value" in first else ""
        raise ImportFailure(
            f"{path}: {_where(n, m)}: no message of the dataset has a {' or a '.join(map(repr, missing))} field "
            f"(this one has: {fields_of(first)}); pass {options}{hint}"
        )
    roles = [chat_role(message, role_key) for _, _, message in objects]
    if not any(role in ROLES for role in roles):
        found = ", ".join(dict.fromkeys(repr(role) for role in roles))[:200]
        raise ImportFailure(
            f"{path}: {_where(n, m)}: no message of the dataset has a chat role in its {role_key!r} field (found {found}; "
            f"expected one of {', '.join(ROLES)}, or ShareGPT's {', '.join(ROLE_ALIASES)})"
        )


def has_field(objects: Sequence[tuple[int, int, Mapping[str, Any]]], key: str, content_key: str) -> bool:
    """Some message holds a value in `key`; for the content field, some message that needs one
    (messages with tool calls need none), or none needs one."""
    if key == content_key:
        needing = [message for _, _, message in objects if needs_content(message)]
        return not needing or any(message.get(key) is not None for message in needing)
    return any(message.get(key) is not None for _, _, message in objects)


def option_of(key: str, role_key: str) -> str:
    return "role_key" if key == role_key else "content_key"


def adapted(message: Any, role_key: str, content_key: str, report: Callable[[str], None]) -> Any:
    """A dataset message as `add_messages` reads it: `role` (ShareGPT names mapped) and `content` from the
    mapped fields, null fields dropped; a missing or unreadable content reported (module docstring)."""
    if not isinstance(message, Mapping):
        return message  # `add_messages` keeps it as a marker and reports it
    out = {k: v for k, v in message.items() if v is not None}
    out["role"] = chat_role(message, role_key)
    out["content"] = content = message.get(content_key)
    if content is None and needs_content(message):
        report(f"no {content_key!r} field (fields: {fields_of(message)}); its text is empty")
    elif (problem := content_problem(content)) is not None:
        report(problem)
    return out


def is_missing(value: Any) -> bool:
    """Null, or the NaN a float column holds for a missing value."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def session_name(value: Any) -> str | None:
    """An id column's value as a session name: a non-empty string or a number (not a bool or NaN), else None."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool) and not is_missing(value) and str(value).strip():
        return str(value)
    return None


OFFLINE_VARIABLES = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
#: The Hub's `owner/name` repository id (letters, digits, `-`, `_`, `.`; no leading or trailing punctuation).
HUB_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?/[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
#: A name ending like a data file is a mistyped path, never a Hub id.
FILE_SUFFIXES = (".json", ".jsonl", ".parquet", ".csv", ".tsv", ".txt", ".arrow", ".zst", ".gz", ".md", ".db", ".traj")


def offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in OFFLINE_VARIABLES)


def is_hub_id(text: str) -> bool:
    """True when `text` is clearly a Hub dataset id, not a path: nothing exists at it (not even a
    broken symlink), it is `owner/name`, and it does not end like a data file."""
    return (
        HUB_ID.fullmatch(text) is not None
        and ".." not in text
        and not text.lower().endswith(FILE_SUFFIXES)
        and not os.path.lexists(text)
    )


@contextmanager
def local_only() -> Iterator[None]:
    """`datasets` and `huggingface_hub` in offline mode for a local load, then as they were.

    Both read their switches once, at import, so the module constants are set as well as the
    environment (for anything that reads it later).
    """
    import datasets.config
    import huggingface_hub.constants

    saved_env = {name: os.environ.get(name) for name in OFFLINE_VARIABLES}
    saved = (datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    os.environ.update(dict.fromkeys(OFFLINE_VARIABLES, "1"))
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class HFDatasetImporter(Importer):
    format = FORMAT
    description = (
        "Hugging Face dataset, one transcript per row: a local JSON/JSONL/Parquet file (never the network), or a Hub id "
        "owner/name when no such local path exists"
    )
    suffixes = (".parquet",)
    priority = 5
    accepts_names = True
    options = {
        "messages": "column holding the message list",
        "role_key": "role field of a message (default role)",
        "content_key": "content field of a message (default content)",
        "id_column": "column with the session id",
        "model_column": "column with the model id",
        "split": "dataset split (default train)",
    }

    @classmethod
    def is_name(cls, text: str) -> bool:
        return is_hub_id(text)

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        return path.suffix == ".parquet" or head.startswith("PAR1")

    def load(
        self,
        path: Path,
        *,
        messages: str | None = None,
        role_key: str = "role",
        content_key: str = "content",
        id_column: str | None = None,
        model_column: str | None = None,
        split: str = "train",
        **options: Any,
    ) -> list[Transcript]:
        rows = self._rows(path, split)
        column = self._message_column(path, rows.column_names, messages)
        for option, name in (("id_column", id_column), ("model_column", model_column)):
            if name is not None and name not in rows.column_names:
                columns = ", ".join(rows.column_names)
                raise ImportFailure(f"{path}: {option} {name!r} is not a column of the dataset; columns: {columns}")
        records = list(rows)
        chats = [self._chat(path, n, record[column], column) for n, record in enumerate(records)]
        check_fields(path, chats, role_key, content_key)
        builders = [TranscriptBuilder(path, FORMAT) for _ in records]
        ids = self._session_ids(path.stem, builders, records, id_column)
        for n, (record, chat, builder) in enumerate(zip(records, chats, builders, strict=True)):
            report = partial(self._report, builder, n)
            chat = [adapted(message, role_key, content_key, partial(report, m)) for m, message in enumerate(chat)]
            add_messages(builder, chat, where=partial(_where, n))
            if model_column:
                builder.model = self._model(builder, n, record.get(model_column), model_column)
        return [builder.finish(ids[n], source={"row": n, "split": split}) for n, builder in enumerate(builders)]

    def _session_ids(self, stem: str, builders: Sequence[TranscriptBuilder], records: Sequence[Any], id_column: str | None) -> list[str]:
        """Each row's transcript id (module docstring), unique within the file; a renamed row's builder says why."""
        names = [self._name(builders[n], n, record, id_column) for n, record in enumerate(records)]
        ids, renamed = unique_ids([f"{stem}:{name}" for name in names])
        column = f" (id column {id_column!r})" if id_column else ""
        for n, (wanted, shared) in renamed.items():
            rows = ", ".join(map(str, shared))
            builders[n].problem(f"row {n}: rows {rows} have the same session id {wanted!r}{column}; this one is named {ids[n]!r}")
        return ids

    @staticmethod
    def _report(builder: TranscriptBuilder, row: int, message: int, text: str) -> None:
        builder.problem(f"{_where(row, message)}: {text}")

    @staticmethod
    def _message_column(path: Path, columns: Sequence[str], messages: str | None) -> str:
        if not columns:
            raise ImportFailure(f"{path}: the dataset has no columns")
        column = messages or next((c for c in MESSAGE_COLUMNS if c in columns), None)
        if column is None or column not in columns:
            raise ImportFailure(
                f"{path}: no message column {column or '(messages/conversations/traj/history)'}; "
                f"columns: {', '.join(columns)} (pass messages=COLUMN)"
            )
        return column

    @staticmethod
    def _chat(path: Path, row: int, value: Any, column: str) -> list[Any]:
        if not isinstance(value, list):
            raise ImportFailure(f"{path}: row {row}: column {column!r} is a {type(value).__name__}, expected a list of messages")
        return value

    @staticmethod
    def _name(builder: TranscriptBuilder, row: int, record: Mapping[str, Any], id_column: str | None) -> str:
        """The row's session name: its `id_column` value, else its row index (a value of another type is a problem)."""
        value = record.get(id_column) if id_column else None
        name = session_name(value)
        if name is None and not is_missing(value):
            builder.problem(f"row {row}: id column {id_column!r} holds {describe_value(value)}, not a string or number; named by its row")
        return name if name is not None else str(row)

    @staticmethod
    def _model(builder: TranscriptBuilder, row: int, value: Any, model_column: str) -> str | None:
        if isinstance(value, str):
            return value
        if is_missing(value):
            return None
        builder.problem(f"row {row}: model column {model_column!r} holds {describe_value(value)}, not a model id; the model is unknown")
        return None

    @staticmethod
    def _rows(path: Path, split: str) -> Any:
        import datasets

        datasets.disable_progress_bars()
        with tempfile.TemporaryDirectory(prefix="bench-hf-") as cache:
            if not is_hub_id(str(path)):
                check_input(path)  # a missing path is "no such file", never a Hub lookup
                loader = LOADERS.get(path.suffix)
                if loader is None:
                    raise ImportFailure(f"{path}: a Hugging Face dataset file must be .json, .jsonl or .parquet")
                if loader == "json":
                    problems = read_text(path)[1]
                    if problems:  # the Arrow JSON reader would stop on them with no line number
                        raise ImportFailure(problems[0])
                try:
                    with local_only():
                        return datasets.load_dataset(loader, data_files=str(path), split=split, cache_dir=cache, keep_in_memory=True)
                except Exception as exc:  # datasets wraps parser errors in many types
                    raise ImportFailure(f"{path}: cannot load as a {loader} dataset: {type(exc).__name__}: {exc}") from None
            if offline():
                raise ImportFailure(
                    f"{path}: no such file, and Hugging Face Hub ids cannot be loaded offline (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set)"
                )
            try:
                return datasets.load_dataset(str(path), split=split, cache_dir=cache, keep_in_memory=True)
            except Exception as exc:  # network, auth and missing-dataset errors all end here
                raise ImportFailure(f"{path}: cannot load the Hugging Face dataset: {type(exc).__name__}: {exc}") from None
