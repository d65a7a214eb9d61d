"""The base class of every error a user can cause (bad input, unknown names, unusable runs).

The command line turns a `BenchError` into one `error: …` line and exit status 2; anything else
is a bug and keeps its traceback. `json_problem` says what is wrong with a line of JSON in words
that read whole in such a line. `did_you_mean` and `with_guesses` add the known name a misspelled
one most likely meant to the message that refuses it; `shown` quotes a refused value, cut short when
it is long (`json_shown` as its JSON text); `one_line` makes another program's message (a provider's error, with its traceback) one line.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Iterable
from difflib import get_close_matches


class BenchError(Exception):
    """A mistake in what the user gave: the message says what and where, in one line."""


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxlong = 60


def shown(value: object) -> str:
    """`repr(value)` for an error message, a string or integer longer than 60 characters cut in its
    middle (`'999...999'`), so a refused value of any size keeps its message one readable line."""
    return _SHOWN.repr(value)


#: The most of another program's message `one_line` keeps.
ONE_LINE_CHARACTERS = 500


def one_line(text: str) -> str:
    """`text` (a provider's error, which may hold a traceback and the raw response) as one line: its lines joined by
    " | ", blank ones left out, cut at `ONE_LINE_CHARACTERS` with an ellipsis."""
    joined = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return joined if len(joined) <= ONE_LINE_CHARACTERS else joined[: ONE_LINE_CHARACTERS - 1] + "…"


def json_shown(value: object, limit: int = 40) -> str:
    """A value read from JSON as a message quotes it: its JSON text (`"10"`, `Infinity`), cut at `limit` characters."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_problem(exc: json.JSONDecodeError) -> str:
    """`exc` as "Expecting value at column 3" or "Unterminated string starting at column 5": the
    decoder's messages that end in "at" already name the place (never "starting at at column")."""
    joint = " " if exc.msg.endswith(" at") else " at "
    return f"{exc.msg}{joint}column {exc.colno}"


def no_file(path: object) -> str:
    """Why a path given for a file to read is none: "no such file", or what it is instead (a folder, a pipe, a
    device, a link that leads nowhere), which "no such file" would deny."""
    from pathlib import Path

    given = Path(str(path))
    if given.is_dir():
        return "is a folder, not a file"
    if given.exists():
        return "is not a regular file (a pipe, a socket or a device)"
    return "is a link that leads to no file" if given.is_symlink() else "no such file"


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` most likely misspells (case aside), if one is close enough and is not `name` itself."""
    by_folded = {k.casefold(): k for k in known}
    found = get_close_matches(name.casefold(), list(by_folded), n=1, cutoff=0.6)
    return by_folded[found[0]] if found and by_folded[found[0]] != name else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """" (did you mean 'X'?)" after a refused name close to a known one (`closest`), else ""."""
    guess = closest(name, known)
    return "" if guess is None else f" (did you mean {guess!r}?)"


def with_guesses(names: Iterable[str], known: Iterable[str]) -> str:
    """Refused names joined by ", ", each close to a known one followed by "(did you mean X?)"."""
    known = list(known)
    return ", ".join(f"{n} (did you mean {guess}?)" if (guess := closest(n, known)) else n for n in names)
