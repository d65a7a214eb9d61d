"""Every option of every registered strategy says what it does: a `#:` comment above its field, which
`bench list strategies ID` shows in its "what it does" column (`compaction_bench.strategy.option_comments`)."""

from __future__ import annotations

import dataclasses

from compaction_bench.registry import strategies
from compaction_bench.strategy import option_comments


def test_every_strategy_option_has_a_comment():
    missing = [
        f"{name}.{option.name}"
        for name, cls in sorted(strategies().items())
        for comments in [option_comments(cls.Options)]
        for option in dataclasses.fields(cls.Options)
        if not comments.get(option.name, "").strip()
    ]
    assert not missing, "options without a `#:` comment: " + ", ".join(missing)
