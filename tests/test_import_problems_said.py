"""Every command that imports a transcript says once how many problems its import met, as `bench run` does:
`bench import`, `probes mine` and `probes check` read a file with a malformed line and went on without a word (the
line's facts missing from the probes mined, the canonical file written without it). A reproduced defect (session 42)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import bench_cli


@pytest.fixture
def damaged(tmp_path):
    """An OpenAI-messages session whose second line was cut in half: its import keeps the other two lines and records
    the cut one as a problem."""
    source = tmp_path / "chat.jsonl"
    lines = [json.dumps({"role": "user", "content": "Remember: the deploy key is ZEBRA-42."}), '{"role": "assistant", "cont',
             json.dumps({"role": "assistant", "content": "Noted: the deploy key is ZEBRA-42."})]
    source.write_text("\n".join(lines) + "\n")
    return source


@pytest.mark.parametrize("command", ["import", "probes mine", "probes check"])
def test_a_command_that_imports_a_transcript_warns_of_its_import_problems(damaged, tmp_path, command):
    args = {"import": ["import", str(damaged), "-o", str(tmp_path / "out.jsonl")],
            "probes mine": ["probes", "mine", str(damaged), "-o", str(tmp_path / "probes.yaml")],
            "probes check": ["probes", "check", str(damaged), "--probes", str(tmp_path / "probes.yaml")]}[command]
    if command == "probes check":
        (tmp_path / "probes.yaml").write_text("- id: key\n  kind: recall\n  question: What is the deploy key?\n  answer: ZEBRA-42\n  source_text: deploy key is ZEBRA-42\n")
    proc = bench_cli(*args)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: {damaged}: 1 import problem(s), e.g. {damaged}:2: malformed JSON "
                        f"(Unterminated string starting at column 23); line kept out (`bench inspect {damaged}` lists them all)"], proc.stderr
