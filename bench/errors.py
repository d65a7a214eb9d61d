"""The base class of every error a user can cause (bad input, unknown names, unusable runs).

The command line turns a `BenchError` into one `error: …` line and exit status 2; anything else
is a bug and keeps its traceback.
"""


class BenchError(Exception):
    """A mistake in what the user gave: the message says what and where, in one line."""
