"""`claude-code`'s memory-file check compiles its per-session pattern only for a path that could match it
(issue 18: compiling it in every session cost 0.16 s over the Aider file's 1,134 sessions). The answer must
be the pattern's own: for sessions of every kind (config folder absolute or under "~", a plan slug or none, a
sub-agent, 2.0.57 or 2.1, the working directory known or not) and paths built from the names the pattern
holds, `MemoryFiles.holds` equals `exact` membership or a full match of the pattern, compiled eagerly."""

from __future__ import annotations

import posixpath
import re
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction_bench.profiles import get_profile
from compaction_bench.strategies.claude_code import ClaudeCode, ClaudeCode21, MemoryFiles

PIECES = ["/", "//", ".", "..", "\n", "home", "u", ".claude", "claude", "CLAUDE.md", "CLAUDE.local.md", "plans", "todos",
          "projects", "-repo", "memory", "MEMORY.md", "brave-plan", ".md", "s1", "-agent-", "a1", ".json", "repo", "etc",
          "claude-code", "x"]


def _session(kind: type[ClaudeCode], config: str, slug: str | None, agent: str | None, cwd: str | None) -> MemoryFiles:
    session = {"session_id": "s1", **({"slug": slug} if slug else {}), **({"agent_id": agent} if agent else {}), **({"cwd": cwd} if cwd else {})}
    strategy = kind(SimpleNamespace(profile=get_profile("claude-opus"), session=session), kind.Options(config_dir=config))
    return strategy._memory


def _reference(files: MemoryFiles, path: str) -> bool:
    normal = posixpath.normpath(path) if path else path
    return normal in files.exact or path in files.exact or re.fullmatch(files.source, normal) is not None


@settings(max_examples=3000, deadline=None)
@given(
    kind=st.sampled_from([ClaudeCode, ClaudeCode21]),
    config=st.sampled_from(["~/.claude", "~", "/home/u/.claude", "/home/u/.claude/"]),
    slug=st.sampled_from([None, "brave-plan"]),
    agent=st.sampled_from([None, "a1"]),
    cwd=st.sampled_from([None, "/repo"]),
    pieces=st.lists(st.sampled_from(PIECES), max_size=9),
)
def test_holds_is_the_patterns_answer(kind, config, slug, agent, cwd, pieces):
    files = _session(kind, config, slug, agent, cwd)
    path = "".join(pieces)
    assert files.holds(path) == _reference(files, path)


def test_the_files_of_the_hand_built_sessions():
    """Paths whose answer the spec gives (claude-code.md §4.2), each matched or not by the pattern itself."""
    main = _session(ClaudeCode, "~/.claude", "brave-plan", None, None)
    later = _session(ClaudeCode21, "~/.claude", "brave-plan", "a1", "/repo")
    held = ["/home/u/.claude/plans/brave-plan.md", "/home/u/.claude/todos/s1-agent-s1.json", "/repo/docs/CLAUDE.md", "CLAUDE.local.md"]
    assert [main.holds(p) for p in held] == [True, True, True, True]
    assert [main.holds(p) for p in ["/home/u/.claude/plans/other.md", "/home/u/.claude/todos/s0-agent-s0.json", "/repo/a.py"]] == [False] * 3
    assert [later.holds(p) for p in ["/home/u/.claude/plans/brave-plan-agent-a1.md", "/x/.claude/projects/-repo/memory/MEMORY.md",
                                     "/repo/CLAUDE.md", "/repo/docs/CLAUDE.md", "/home/u/.claude/todos/s1-agent-a1.json"]] == [True, True, True, False, False]


def test_a_session_that_reads_no_such_file_compiles_nothing():
    files = _session(ClaudeCode, "~/.claude", "brave-plan", None, None)
    assert not any(files.holds(p) for p in ["/repo/a.py", "/repo/README.md", "/home/u/.claude/settings.json"])
    assert files._pattern is None
    assert files.holds("/home/u/.claude/CLAUDE.md") and files._pattern is not None
