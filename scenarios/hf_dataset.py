"""Importer for Hugging Face datasets of chat transcripts: local JSON / JSONL / Parquet files loaded
with `datasets`, or a Hub id (`org/name`) where a network exists.

One row is one transcript. Options map the dataset's columns: `messages` (the column holding the
message list; by default the first of messages / conversations / traj / history that exists),
`role_key` / `content_key` (per-message field names, e.g. ShareGPT's `from` / `value`), `id_column`,
`model_column`, `split` (default "train"). Messages are converted by `compaction_bench.scenarios.openai_style`.
Sniffing is by content elsewhere, so this importer is chosen explicitly (`format="hf-dataset"`)
or for Parquet files.

Local files never reach the network: they are loaded with the `datasets` and `huggingface_hub`
offline switches on (without them `datasets` makes a telemetry request even for a local file). An
argument is a Hub id only when it is clearly not a path (`is_name`): nothing exists at it locally
and it has the Hub's `owner/name` form (one `/`, no leading `.`, `/` or `~`, not ending in a data-file
suffix such as `.jsonl`); anything else is a local path, and a missing one is "no such file".
Offline (`HF_DATASETS_OFFLINE=1` / `HF_HUB_OFFLINE=1`) a Hub id fails at once with one clear message.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure, check_input
from compaction_bench.scenarios.builder import TranscriptBuilder
from compaction_bench.scenarios.openai_style import add_messages
from compaction_bench.scenarios.readers import read_text
from compaction_bench.transcript import Transcript

FORMAT = "hf-dataset"
MESSAGE_COLUMNS = ("messages", "conversations", "traj", "history")
LOADERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
#: ShareGPT-style role names mapped to chat roles.
ROLE_ALIASES = {"human": "user", "gpt": "assistant", "model": "assistant", "observation": "tool"}


def _where(row: int, message: int) -> str:
    return f"row {row} message {message}"


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
        if not rows.column_names:
            raise ImportFailure(f"{path}: the dataset has no columns")
        column = messages or next((c for c in MESSAGE_COLUMNS if c in rows.column_names), None)
        if column not in rows.column_names:
            raise ImportFailure(
                f"{path}: no message column {column or '(messages/conversations/traj/history)'}; "
                f"columns: {', '.join(rows.column_names)} (pass messages=COLUMN)"
            )
        out = []
        for n, row in enumerate(rows):
            builder = TranscriptBuilder(path, FORMAT)
            value = row[column]
            if not isinstance(value, list):
                raise ImportFailure(f"{path}: row {n}: column {column!r} is a {type(value).__name__}, expected a list of messages")
            chat = [self._message(m, role_key, content_key) for m in value]
            add_messages(builder, chat, where=partial(_where, n))
            if model_column and isinstance(row.get(model_column), str):
                builder.model = row[model_column]
            name = row.get(id_column) if id_column else None
            out.append(builder.finish(f"{path.stem}:{name if name is not None else n}", source={"row": n, "split": split}))
        return out

    @staticmethod
    def _message(message: Any, role_key: str, content_key: str) -> Any:
        if not isinstance(message, Mapping):
            return message
        out = {k: v for k, v in message.items() if v is not None}
        role = message.get(role_key)
        out["role"] = ROLE_ALIASES.get(role, role) if isinstance(role, str) else role
        out["content"] = message.get(content_key)
        return out

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
