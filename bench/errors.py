"""The base class of every error a user can cause (bad input, unknown names, unusable runs).

The command line turns a `BenchError` into one `error: …` line and exit status 2; anything else
is a bug and keeps its traceback. `json_problem` says what is wrong with a line of JSON in words
that read whole in such a line.
"""

from __future__ import annotations

import json


class BenchError(Exception):
    """A mistake in what the user gave: the message says what and where, in one line."""


def json_problem(exc: json.JSONDecodeError) -> str:
    """`exc` as "Expecting value at column 3" or "Unterminated string starting at column 5": the
    decoder's messages that end in "at" already name the place (never "starting at at column")."""
    joint = " " if exc.msg.endswith(" at") else " at "
    return f"{exc.msg}{joint}column {exc.colno}"
