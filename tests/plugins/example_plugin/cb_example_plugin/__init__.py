"""A plug-in strategy: the `none` baseline under its own id (it never compacts)."""

from compaction_bench.strategies.baselines import NoCompaction


class KeepEverything(NoCompaction):
    name = "keep-everything"
    description = "example plug-in: never compacts"


class NotAStrategy:
    """Registered by mistake: not a subclass of Strategy."""
