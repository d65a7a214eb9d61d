"""compaction-bench test suite (a package, so tests import shared helpers as `tests.conftest`)."""
