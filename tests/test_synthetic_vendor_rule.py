"""The default suite's AGENTS.md rule ("Never edit files under ledger/vendor/") is asked as "Under which folder must
files never be edited?", answer `ledger/vendor/`. The synthetic repository holds `ledger/vendor/iso4217.py`, so every
file listing and grep hit prints the folder without the rule: those are no retention of the rule. Right answers by
reading: the rule's own line and rewordings of it keep the fact; a listing, a grep hit and an unrelated "never"
near the path do not. (Before the fortieth pass the listings counted: 92 present rows of the default run.)"""

from __future__ import annotations

import pytest

from compaction_bench.metrics.grading import presence
from compaction_bench.scenarios.synthetic import default_suite


@pytest.fixture(scope="module")
def vendor():
    (probe,) = [p for p in default_suite()[0].probes if p.id == "constraint-vendor"]
    return probe


@pytest.mark.parametrize("text", [
    "- Never edit files under ledger/vendor/ — they are generated from the ISO 4217 tables by scripts/gen_vendor.py.",
    "## Constraints\n- Do not modify anything in ledger/vendor/ (generated).",
    "ledger/vendor/ is generated and read-only.",
    "Rules kept: don't touch the files in ledger/vendor/; money in integer cents.",
])
def test_the_rule_and_its_rewordings_keep_the_fact(vendor, text):
    assert presence(vendor, text).present


@pytest.mark.parametrize("text", [
    "Exit code: 0\nOutput:\nledger/api.py\nledger/settlement.py\nledger/vendor/iso4217.py\ntests/test_api.py",
    "ledger/vendor/iso4217.py:12:    \"USD\": 2,",
    "ledger/vendor/iso4217.py was not changed; never use float for amounts.",
])
def test_a_listing_or_grep_hit_of_the_folder_does_not(vendor, text):
    assert not presence(vendor, text).present


def test_every_scenario_states_the_rule_at_its_source(vendor):
    for case in default_suite():
        (probe,) = [p for p in case.probes if p.id == "constraint-vendor"]
        assert presence(probe, case.transcript.by_id[probe.source].text).present
