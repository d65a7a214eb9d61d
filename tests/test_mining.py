"""Probe mining: each rule on a small hand-built session whose probes are worked out by hand; on every
real corpus transcript every mined answer is verbatim at or after its source; subagent work is mined."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compaction_bench.importing import load_transcripts
from compaction_bench.metrics.grading import context_text, is_short, normalize, presence
from compaction_bench.probes import answer_after_source, regex_search
from compaction_bench.request import message_from_item
from compaction_bench.scenarios.mining import MINERS, PER_BUCKET, mine_probes, mine_transcripts
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA, corpus_files


class Session:
    """A hand-built transcript: items get ids in order, tool results pair with the previous call."""

    def __init__(self) -> None:
        self.items: list[Item] = [Item("sys", "system", "You are a coding agent.")]
        self.turn = -1
        self.response = 0

    def user(self, text: str, synthetic: bool = False) -> Session:
        self.turn += not synthetic
        self.items.append(Item(f"u{len(self.items)}", "user", text, turn=max(self.turn, 0), synthetic=synthetic))
        return self

    def say(self, text: str, kind: str = "assistant") -> Session:
        self.items.append(Item(f"a{len(self.items)}", kind, text, response=self.response, turn=self.turn))
        return self

    def call(self, name: str, args: dict, output: str, error: bool = False) -> Session:
        n = len(self.items)
        self.items.append(Item(f"c{n}", "tool_call", call_id=f"k{n}", tool_name=name, arguments=json.dumps(args), response=self.response, turn=self.turn))
        self.items.append(Item(f"r{n}", "tool_result", output, call_id=f"k{n}", turn=self.turn, is_error=error))
        self.response += 1
        return self

    def bash(self, command: str, output: str, error: bool = False, **extra: str) -> Session:
        return self.call("Bash", {"command": command, **extra}, output, error)

    def transcript(self) -> Transcript:
        return Transcript("hand", tuple(self.items))


def answers(transcript: Transcript, kind: str) -> dict[str, str]:
    """answer → rule of every candidate one family's rules find (before deduplication and caps)."""
    out: dict[str, str] = {}
    for c in MINERS[kind](transcript):
        out.setdefault(" | ".join(c.answer) if isinstance(c.answer, tuple) else c.answer, c.rule)
    return out


def test_error_rules():
    s = Session().user("The export crashes with `ValueError: bad header` when I run it.")
    s.bash("grep -rn TODO srcs", "grep: srcs: No such file or directory", error=True)
    s.bash("pytest -x", "/usr/bin/python: No module named pytest\nExit code: 1")
    s.bash("make build", "building...\nerror: linker `cc` not found\nmake: *** [build] Error 1")
    s.call("apply_patch", {"input": "*** Begin Patch\n*** Update File: a.py\n*** End Patch"}, "apply_patch verification failed: context not found")
    s.bash("sleep 900", "command timed out after 120 seconds")
    s.call("Read", {"file_path": "src/export.py"}, "    raise ValueError(f'bad header {h}')\n")  # a file's code, not a failure
    s.bash("pytest -x", "/usr/bin/python: No module named pytest\nExit code: 1")  # the same error again
    assert answers(s.transcript(), "error") == {
        "The export crashes with `ValueError: bad header` when I run it.": "error.user-quoted",
        "grep: srcs: No such file or directory": "error.flagged-result",
        "/usr/bin/python: No module named pytest": "error.last-line",
        # every error line, not only the last: the last (the failure) and the first (the cause)
        "make: *** [build] Error 1": "error.last-line",
        "error: linker `cc` not found": "error.first-line",
        "apply_patch verification failed: context not found": "error.last-line",
        "command timed out after 120 seconds": "error.last-line",
    }
    probes = mine_probes(s.transcript())
    first = next(p for p in probes if p.answer == "error: linker `cc` not found")
    assert first.source == "r6" and "`make build`" in first.question


def test_artifact_rules():
    s = Session().user("Add an export schema and clean up the old exporter.")
    s.bash("cat > schema/export.json <<'EOF'\n{\"type\": \"object\"}\nEOF", "")
    s.bash("rm legacy/exporter.py && mv tmp/out.csv data/out.csv", "")
    s.bash("touch notes.txt; sed -i 's/old/new/' config.toml", "")
    s.call("apply_patch", {"path": "src/app.py", "patch": "@@\n-old\n+new"}, "Done")
    s.call("apply_patch", {"input": "*** Begin Patch\n*** Add File: src/new_mod.py\n+x = 1\n*** Delete File: src/dead.py\n*** End Patch"}, "")
    s.call("Write", {"file_path": "docs/export.md", "content": "# Export format\n"}, "File created successfully at: docs/export.md")
    s.call("create", {"command": "create reproduce.py\n"}, "[File: /repo/reproduce.py (1 lines total)]")
    s.bash("mkdir -p out/reports", "")
    assert answers(s.transcript(), "artifact") == {
        "schema/export.json": "artifact.shell-wrote",
        "legacy/exporter.py": "artifact.shell-deleted",
        "data/out.csv": "artifact.shell-moved",
        "notes.txt": "artifact.shell-created",
        "config.toml": "artifact.shell-edited",
        "src/app.py": "artifact.call-edited",
        "src/new_mod.py": "artifact.call-created",
        "src/dead.py": "artifact.call-deleted",
        "docs/export.md": "artifact.call-wrote",
        "reproduce.py": "artifact.shell-created",
        "out/reports": "artifact.shell-created",
    }
    probes = mine_probes(s.transcript())
    written = next(p for p in probes if p.answer == "docs/export.md")
    assert written.question == "Which file did the assistant write with content beginning '# Export format'?"
    assert all(p.answer not in p.question for p in probes if p.kind == "artifact")
    # a read-only session gets the set of files read per request
    r = Session().user("Explain the app.")
    r.call("Read", {"file_path": "src/app.py"}, "x = 1").call("Read", {"file_path": "src/util.py"}, "y = 2")
    (read,) = [p for p in mine_probes(r.transcript()) if p.kind == "artifact"]
    assert (read.answer, read.match, read.meta["rule"], read.source) == (("src/app.py", "src/util.py"), "set", "artifact.read-set", "c2")


def test_constraint_rules():
    s = Session().user("# AGENTS.md\n- NEVER commit generated files.\n- Run `make lint` before pushing.", synthetic=True)
    s.user("Fix the parser. Keep the public API unchanged. Use pnpm, not npm. Pin requests==2.31.0 in the lock file. Thanks for the help!")
    assert answers(s.transcript(), "constraint") == {
        "NEVER commit generated files.": "constraint.modal",
        "Run `make lint` before pushing.": "constraint.imperative",
        "Fix the parser.": "constraint.imperative",
        "Keep the public API unchanged.": "constraint.imperative",
        "Use pnpm, not npm.": "constraint.imperative",
        "Pin requests==2.31.0 in the lock file.": "constraint.pin",
    }
    questions = {p.answer: p.question for p in mine_probes(s.transcript())}
    assert questions["NEVER commit generated files."].startswith("What did the injected instructions say about")
    assert questions["Keep the public API unchanged."] == "What did the user say about Keep, public, unchanged?"


def test_recall_rules():
    s = Session().user("Ship the release.")
    s.bash("git log -1 --oneline", "a1b2c3d Fix fee rounding", description="Show the last commit")
    s.bash("npm run dev", "\n".join(["> app@0.1.0 dev", "starting...", "compiling", "compiled", "ready", "watching", "Listening on http://localhost:8080"]))
    s.bash("pytest -q", "\n".join(["." * 40, "tests/test_fees.py ....", "", "12 passed, 1 skipped in 0.31s"] + ["log"] * 5))
    s.bash("./deploy.sh", "deploying\nExit code: 3")
    assert answers(s.transcript(), "recall") == {
        "a1b2c3d Fix fee rounding": "recall.short-output",
        "git log -1 --oneline": "recall.command",
        "app@0.1.0 dev": "recall.version",
        "tests/test_fees.py ....": "recall.filename",
        "Listening on http://localhost:8080": "recall.url",
        "12 passed, 1 skipped in 0.31s": "recall.count",
        "3": "recall.exit-code",
        "deploying": "recall.short-output",  # the output without its exit-code line
    }
    probes = mine_probes(s.transcript())
    command = next(p for p in probes if p.meta["rule"] == "recall.command")
    assert command.question == "What exact command did the assistant run for 'Show the last commit'?"
    exit_code = next(p for p in probes if p.meta["rule"] == "recall.exit-code")
    # a bare number counts only inside its evidence, the line that states it
    assert exit_code.match == "number" and regex_search(exit_code.evidence, normalize("deploying\nExit code: 3"))
    assert presence(exit_code, "deploying\nExit code: 3").present
    assert not presence(exit_code, "we waited 3 minutes").present


def test_decision_and_continuation_rules():
    s = Session().user("Fix the fee calculation.")
    s.say("**Handling the rate table**\n\nI plan to pass the rate table explicitly so that callers stay unchanged.", kind="reasoning")
    s.bash("pytest -x", "1 failed")
    s.say("We keep the keyword argument because callers rely on it. I'll pass the rate table explicitly next.")
    s.bash("pytest -x", "all green")
    s.say("Done.\n\n**Next Steps**\n- Run the full suite in CI\n- Tag the release once it is green")
    assert answers(s.transcript(), "decision") == {
        "I plan to pass the rate table explicitly so that callers stay unchanged.": "decision.reason",
        "We keep the keyword argument because callers rely on it.": "decision.reason",
        "**Handling the rate table**": "decision.reasoning-heading",
        # the items of the closing message of a request
        "Run the full suite in CI": "decision.summary-item",
        "Tag the release once it is green": "decision.summary-item",
    }
    assert answers(s.transcript(), "continuation") == {
        "I'll pass the rate table explicitly next.": "continuation.stated",
        "Run the full suite in CI": "continuation.plan-item",
        "Tag the release once it is green": "continuation.plan-item",
    }
    assert all(c.match == "judge" for kind in ("decision", "continuation") for c in MINERS[kind](s.transcript()))


def test_probes_are_deduplicated_capped_per_position_and_deterministic():
    s = Session().user("Keep going until the build passes.")
    for n in range(60):
        s.bash(f"make step{n}", f"compiling step {n}\nerror: undefined symbol sym_{n}\nmake: *** [step{n}] Error 2" if n % 2 else "ok")
        s.bash(f"make step{n}", f"compiling step {n}\nerror: undefined symbol sym_{n}\nmake: *** [step{n}] Error 2" if n % 2 else "ok")
    transcript = s.transcript()
    probes = mine_probes(transcript)
    errors = [p for p in probes if p.kind == "error"]
    by_position = {b: sum(p.meta["position"] == b for p in errors) for b in ("early", "middle", "late")}
    assert by_position == dict.fromkeys(("early", "middle", "late"), PER_BUCKET)  # 60 distinct failures: 5 per third
    assert len({p.answer for p in probes}) == len(probes)  # the repeated failures are asked once
    assert [p.to_dict() for p in probes] == [p.to_dict() for p in mine_probes(transcript)]
    assert len({p.id for p in probes}) == len(probes)
    assert all(p.meta["rule"] and p.meta["mined"] for p in probes)
    judged = sum(p.match == "judge" for p in probes)
    assert judged <= 0.3 * len(probes)


@pytest.mark.corpora
def test_every_mined_answer_is_verbatim_at_or_after_its_source_on_every_corpus_file():
    files = corpus_files()
    assert len(files) == 57
    total = judged = 0
    for path in files:
        for transcript in load_transcripts(path):
            probes = mine_probes(transcript)
            context = None
            for p in probes:
                assert answer_after_source(transcript, p) is None, (path.name, transcript.id, p.id, p.meta["rule"])
                if isinstance(p.answer, str) and is_short(p.answer):
                    # a short answer carries evidence: a passage of its source item that holds it ...
                    source = transcript.by_id[p.source]
                    assert p.evidence and regex_search(p.evidence, normalize(f"{source.text}\n{source.arguments or ''}")), (path.name, p.id)
                    # ... so that it is graded present in the whole, uncompacted session
                    context = context or context_text([message_from_item(i) for i in transcript.items if i.kind != "marker"])
                    assert presence(p, context).present, (path.name, p.id)
            total += len(probes)
            judged += sum(p.match == "judge" for p in probes)
    assert total > 3000 and judged <= 0.3 * total


SUBAGENT_FILE = "claude-code-jsonl/d-kimuson__claude-code-viewer/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"


@pytest.mark.corpora
def test_subagent_work_is_mined_with_chain_sidechains(tmp_path):
    path = CORPORA / SUBAGENT_FILE
    main_ids = {i.id for t in load_transcripts(path) for i in t.items}
    out = tmp_path / "side.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "compaction_bench.cli", "probes", "mine", str(path), "--import-option", "chain=sidechains", "-o", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    mined = yaml.safe_load(out.read_text())
    sidechains = load_transcripts(path, chain="sidechains")
    side_ids = {i.id for t in sidechains for i in t.items}
    assert len(sidechains) >= 2 and len(mined) >= 10
    # every probe comes from a subagent's own work, none from the main chain
    assert all(p["source"] in side_ids and p["source"] not in main_ids for p in mined)
    # e.g. the package.json the "Check package configuration" subagent found
    assert any(p["answer"] == "/path/to/Demo/todo-app/package.json" for p in mined)
    assert mine_transcripts(sidechains) == [p for p in mine_transcripts(sidechains)]


def test_mine_cli_passes_import_options(tmp_path):
    s = Session().user("Run it.")
    s.bash("make", "error: missing target")
    transcript = s.transcript()
    path = transcript.write(tmp_path / "t.jsonl")
    proc = subprocess.run(
        [sys.executable, "-m", "compaction_bench.cli", "probes", "mine", str(path), "--format", "canonical", "--import-option", "x=1"],
        capture_output=True, text=True, timeout=300,
    )
    # the canonical importer takes no options: the option reaches it and is refused with one line
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    ok = subprocess.run([sys.executable, "-m", "compaction_bench.cli", "probes", "mine", str(path), "--format", "canonical"],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "error: missing target" in ok.stdout


def test_answers_never_leak_into_artifact_questions_on_a_real_file():
    path = Path(CORPORA / SUBAGENT_FILE)
    if not path.exists():
        pytest.skip("corpora not present")
    for p in mine_probes(load_transcripts(path)[0]):
        if p.kind == "artifact" and isinstance(p.answer, str):
            assert p.answer not in p.question
