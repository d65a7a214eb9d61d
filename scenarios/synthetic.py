"""The deterministic synthetic session generator (DESIGN §6) and the embedded default suite.

`generate(shape, seed)` builds one long coding session as a canonical `Transcript` together with
the `Probe`s of the facts planted in it. A session is a recorded conversation with a coding agent
working on the fictional `ledgerline` repository (`compaction_bench.scenarios.synthetic_repo`):

- a system item first, then injected context as synthetic user items (AGENTS.md, environment);
- real user messages (one per turn) with requests, constraints and changes of mind;
- model responses (items sharing one `response` index: reasoning, assistant text, tool calls,
  several calls in one response for parallel calls) with recorded `Usage` on their last item
  (input = the running context size, output = the response's own tokens, cached input = the
  previous request's prefix in 128-token blocks), each followed by its tool results;
- tool loops with file reads, greps, test runs with tracebacks, patches, logs of any size, image
  attachments (on user messages and on `view_image` results), and aborted calls that never got a
  result (a `marker` item with event ``aborted`` records the interruption);
- ISO 8601 timestamps a few seconds apart.

Planted facts cover the six probe families: recall (ticket id, staging port, a stuck batch id in
a log), artifact (the set of files a turn modified), continuation (the task the user queued for
after the merge), decision (the option the user chose, or switched to), constraint (branch,
line-length limit, the vendored folder AGENTS.md protects) and error (the exact error of a failing
test); each probe's `source` is the item where its fact first appears in full, and its answer
occurs there verbatim (a `regex` probe's pattern matches there). The decision probe rejects the
other option's pattern (the one not chosen, or, after a reversal, the one first chosen) and the
line-limit probe after a change the old limit, so a reply naming both options or both limits is wrong.

Shapes (`SHAPES`) differ in how the work is laid out; every shape plants every family. Sizes are
in true tokens of the `gpt-5` profile's tokenizer; `default_suite()` holds one scenario per shape.

Balanced facts (`balanced_facts=True`; `default_suite()`, the run `bench run` makes without a
transcript, uses them; plain `generate` keeps the sessions recorded replays were made from). The
plain sessions favour strategies that keep user and assistant messages: every tool-output fact is
restated verbatim by the next assistant message, so no answer lives in tool outputs alone (on the
coding corpora 26% of mined probes do: errors 97%, recall facts 68%), 7 of 10 facts are in user
messages, the decision's options are named before the user picks one (its regex is present before
its source), 73% of the sources lie in the first quarter of the session's tokens (corpora: about a
third), and seven scenarios drawing from pools of four or five answers repeat them. Balanced facts
change that: the assistant points at the error and the stuck batch instead of quoting them, the
staging port comes from a `cat deploy/staging.env` output, a commit hash seen in passing in `git log`
(at 56% of the session) and a late failing export test (84%) are planted in outputs only, the
trade-offs describe the options in other words (the option's own words first appear in the user's
choice), and the pooled answers are the pools' entry `seed` in turn (a suite's consecutive seeds
never share one; line limits before and after a change never coincide). Then 5 of 12 facts are in
tool outputs only, every answer but one is first stated at its source by the grader's own presence
rule, and 3 or more sources lie in the second half of each session.

Balanced sessions are also laid out like recorded ones (plain sessions keep their layout). Work
comes in long tool loops: the kickoff's orientation, the decision's exploration, the implementation
and each user request run until the next planted turn is due, so a session has 14 to 23 real user
turns (`short-turns`: 69 to 80, its loops 5 to 12 steps). The calls mix as recorded sessions mix
them: edits whose `apply_patch` arguments carry whole rewritten functions, new modules and test
files written whole, many calls with tiny outputs (`git add`, `ruff check`, `ls`, `rg -l`, `wc -l`,
one test, `git diff --stat`), and reads of a function's neighbourhood rather than whole files. The
agent explains its next step in a few sentences. Measured with o200k tokens of every item on seeds
0, 7 and 14 (21 sessions) against the corpora's 18 coding sessions of 50k tokens or more
(tests/test_synthetic_shape.py keeps each figure within 30% of the corpora's): tool outputs are 53% of
a session's tokens (corpora: 49%), tool calls 31% (32%), an output's median 42 tokens (42),
assistant texts 121 tokens on average (124); user turns median 17 (corpora median 6.5, mean 20:
eight sessions have one or two, the other ten 6 to 88). Before, these sessions had the
plain layout: 92%, 4%, 195, 18 and about 60.

Defensible but not neutral (both modes):
- the files a turn modified are paths, which every listing, `rg` hit and `git status` holds: a
  context that kept such outputs holds the set without the assistant's statement of it (the one
  probe not first stated at its source);
- the protected folder is the same AGENTS.md rule in every scenario, and the modified-file sets are
  three of five files of the same repository, so those two answers recur across scenarios;
- AGENTS.md is injected context, which strategies that re-inject it after a compaction keep;
- plain sessions' shapes differ from the recorded sessions (o200k tokens of every item, seeds 0,
  7 and 14 against the corpora): tool outputs are 92% of a session's tokens (49%), tool calls 4%
  (32%), an output's median 198 tokens (42), assistant texts 18 tokens on average (124), and about
  58 real user turns per session (6.5), so masking old outputs frees more of a plain session than
  of a recorded one; balanced sessions match the corpora on the first four and have 14 to 23 turns
  (above the corpora's median: ten to thirteen of them carry planted facts);
- the generated code is a vocabulary's recombination: edits rewrite whole functions and new files
  are generated modules, so an edit's size matches recorded ones but its content is not a real fix.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from compaction_bench.probes import Probe
from compaction_bench.profiles import get_profile
from compaction_bench.provider import SimulatedProvider
from compaction_bench.request import message_from_item
from compaction_bench.scenarios.synthetic_repo import (
    NOUNS,
    ROOT,
    Failure,
    VirtualRepo,
    directory_listing,
    git_status,
    pytest_run,
    service_log,
    shell_output,
)
from compaction_bench.transcript import Attachment, Item, Transcript, Usage

GENERATOR = "compaction-bench/synthetic"
MODEL = "gpt-5"
#: Tokens above which a tool output counts as huge (a quarter of the 64k profile's window).
HUGE_OUTPUT_TOKENS = 16_000


@dataclass(frozen=True)
class Shape:
    """How one kind of session is laid out."""

    name: str
    description: str
    target_tokens: int
    steps: tuple[int, int]  # tool steps of an ordinary work turn (min, max)
    parallel: float = 0.1  # chance a step issues several calls at once
    abort: float = 0.0  # chance an ordinary work turn is interrupted mid-call
    images: float = 0.0  # chance an ordinary turn carries a screenshot
    chat: float = 0.1  # chance an ordinary turn is a short question (answered without tools; with balanced facts, by a loop a third as long as a work turn's)
    huge_outputs: int = 0  # tool outputs larger than HUGE_OUTPUT_TOKENS
    long_loop: bool = False  # the implementation turn is one huge tool loop
    constraint_change: bool = False  # the user changes a constraint and reverses a decision
    #: Tool steps of a work turn with balanced facts (min, max): recorded sessions work in long
    #: loops between few user messages; the loop also ends where the next planted turn is due.
    loop_steps: tuple[int, int] = (40, 120)


SHAPE_SPECS: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("short-turns", "many short turns: quick questions and short tool loops (1–2 steps; 5–12 with balanced facts)", 190_000, (1, 2), chat=0.45, loop_steps=(5, 12)),
        Shape("long-loop", "one huge tool loop in a single turn (most of the session)", 210_000, (2, 5), long_loop=True),
        Shape("parallel-calls", "most responses issue several tool calls at once", 200_000, (2, 5), parallel=0.75),
        Shape("aborted-calls", "the user interrupts running tool calls, which never get a result", 190_000, (2, 5), abort=0.35),
        Shape("images", "screenshots attached to user messages and returned by view_image", 190_000, (2, 5), images=0.45),
        Shape("huge-output", "tool outputs larger than a quarter of the 64k window", 220_000, (2, 5), huge_outputs=2),
        Shape("constraint-change", "the user changes a constraint and reverses a decision mid-session", 200_000, (2, 5), constraint_change=True),
    )
}
SHAPES: tuple[str, ...] = tuple(SHAPE_SPECS)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    transcript: Transcript
    probes: tuple[Probe, ...]


# --------------------------------------------------------------------------- planted facts
DECISIONS = (
    # topic, (label, regex) option A, option B
    ("the retry backoff of the bank client", ("exponential backoff with full jitter", r"full[ -]jitter"), ("a fixed two-second delay between attempts", r"fixed two-second delay")),
    ("locking settlement batches", ("a Postgres advisory lock per tenant", r"advisory lock"), ("a lease row in the settlement_leases table", r"settlement_leases")),
    ("paginating the export", ("keyset pagination on (created_at, id)", r"keyset pagination"), ("OFFSET/LIMIT pagination", r"OFFSET/LIMIT")),
    ("caching exchange rates", ("an LRU cache keyed by tenant", r"LRU cache"), ("a TTL cache with a 30-second expiry", r"TTL cache")),
)
CONTINUATIONS = (
    ("rename settle_batch to settle_batches in ledger/cli.py", "settle_batches"),
    ("add a --dry-run flag to the ledger export command", "--dry-run"),
    ("write migration 0042_backfill_fee_cents for the fee_cents column", "0042_backfill_fee_cents"),
    ("move compute_delay into ledger/retry_policy.py", "ledger/retry_policy.py"),
)
ERRORS = (
    "KeyError: 'tenant_slug'",
    "sqlite3.OperationalError: no such column: entries.settled_at",
    "decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]",
    "TypeError: apply_fees() missing 1 required keyword-only argument: 'rate_table'",
    "ValueError: settlement window P9D exceeds the 7-day maximum",
)
GENERIC_ERRORS = (
    "AssertionError: assert 0 == 1",
    "AttributeError: 'NoneType' object has no attribute 'entries'",
    "AssertionError: assert 'held' == 'posted'",
    "TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'",
)
LINE_LIMITS = ((88, 100), (100, 120), (79, 99), (120, 100))
TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")

# Balanced facts (`generate(..., balanced_facts=True)`, the default suite) draw from these longer
# pools, one entry per seed in turn, so the seven scenarios of a suite share no answer.
BALANCED_DECISIONS = DECISIONS + (
    ("storing webhook secrets", ("an envelope-encrypted column in the tenants table", r"envelope-encrypted column"), ("a per-tenant entry in HashiCorp Vault", r"HashiCorp Vault")),
    ("deduplicating bank callbacks", ("an idempotency key on (bank_ref, attempt)", r"idempotency key"), ("a unique index on bank_ref alone", r"unique index on bank_ref")),
    ("scheduling the nightly sync", ("a cron entry at 02:15 UTC", r"02:15 UTC"), ("a Celery beat schedule", r"Celery beat")),
    ("rounding fees", ("banker's rounding (ROUND_HALF_EVEN)", r"ROUND_HALF_EVEN"), ("rounding half up (ROUND_HALF_UP)", r"ROUND_HALF_UP")),
)
#: How the assistant describes each option before the user names one: the option's own words (its
#: regex) first appear in the user's choice, so a context that kept only the trade-offs does not
#: hold the answer.
OPTION_DESCRIPTIONS = {
    "exponential backoff with full jitter": "each wait doubles and is drawn at random below that bound",
    "a fixed two-second delay between attempts": "every attempt waits the same short time",
    "a Postgres advisory lock per tenant": "the database holds a per-tenant lock for the session",
    "a lease row in the settlement_leases table": "a row with an expiry marks who owns the batch",
    "keyset pagination on (created_at, id)": "each page starts after the last row of the previous one",
    "OFFSET/LIMIT pagination": "pages are counted from the start of the result each time",
    "an LRU cache keyed by tenant": "the least recently used tenants fall out when the cache is full",
    "a TTL cache with a 30-second expiry": "entries expire after half a minute whatever their use",
    "an envelope-encrypted column in the tenants table": "the secret stays in our database, encrypted with a data key",
    "a per-tenant entry in HashiCorp Vault": "the secret lives in an external secret store",
    "an idempotency key on (bank_ref, attempt)": "each callback carries a key we remember and refuse twice",
    "a unique index on bank_ref alone": "the database rejects a second row for the same bank reference",
    "a cron entry at 02:15 UTC": "the host's scheduler starts the sync at a fixed time each night",
    "a Celery beat schedule": "the task queue's own scheduler starts it",
    "banker's rounding (ROUND_HALF_EVEN)": "a half cent goes to the even neighbour",
    "rounding half up (ROUND_HALF_UP)": "a half cent always goes up",
}
BALANCED_CONTINUATIONS = CONTINUATIONS + (
    ("add a Prometheus counter settlement_retries_total to ledger/retry.py", "settlement_retries_total"),
    ("delete the unused preview_settlement endpoint from ledger/api.py", "preview_settlement endpoint"),
    ("bump httpx to 0.28 in pyproject.toml", "httpx to 0.28"),
    ("split ledger/sync/worker.py into a reader and a poster module", "reader and a poster module"),
)
BALANCED_ERRORS = ERRORS + (
    "ZeroDivisionError: division by zero in fee tier 'enterprise-eu'",
    "OverflowError: amount_cents 9223372036854775808 does not fit in int64",
)
#: Errors of the late failing test (`error-export-failure`), none shared with `BALANCED_ERRORS`.
EXPORT_ERRORS = (
    "UnicodeEncodeError: 'latin-1' codec can't encode character '\\u20ac' in position 14",
    "csv.Error: need to escape, but no escapechar set",
    "KeyError: 'posted_at'",
    "ValueError: time data '2026-02-30' does not match format '%Y-%m-%d'",
    "AttributeError: 'LedgerEntry' object has no attribute 'fee_cents'",
    "PermissionError: [Errno 13] Permission denied: '/var/exports/acme.csv'",
    "sqlite3.IntegrityError: UNIQUE constraint failed: exports.batch_id",
)
#: (limit at kickoff, limit after the change): no new limit is another pair's first one.
BALANCED_LINE_LIMITS = ((88, 104), (100, 115), (79, 92), (120, 108), (110, 84), (99, 127), (96, 132), (72, 98))
LINE_LIMIT_QUESTION = "What line-length limit (in characters) did the user set?"
PORT_QUESTION = "On which port does the staging settlement service listen?"


@dataclass
class _Facts:
    ticket: str
    port: int
    branch: str
    line_limit: tuple[int, int]
    decision: tuple[str, tuple[str, str], tuple[str, str]]
    continuation: tuple[str, str]
    error: str
    failing_test: str
    stuck_batch: str
    sync_since: str
    export_error: str = ""
    revert_commit: str = ""

    @classmethod
    def draw(cls, rng: random.Random) -> _Facts:
        ticket = f"LED-{rng.randint(1000, 9999)}"
        topic, a, b = rng.choice(DECISIONS)
        if rng.random() < 0.5:
            a, b = b, a
        return cls(
            ticket=ticket,
            port=rng.randint(20_000, 64_000),
            branch=f"fix/{ticket.lower()}-{rng.choice(('settlement-retries', 'double-posting', 'retry-storm'))}",
            line_limit=rng.choice(LINE_LIMITS),
            decision=(topic, a, b),
            continuation=rng.choice(CONTINUATIONS),
            error=rng.choice(ERRORS),
            failing_test=f"test_apply_fees_{rng.choice(('uses_tenant_rate', 'rounds_half_even', 'skips_held_entries'))}",
            stuck_batch=f"batch_{rng.randrange(16**8):08x}",
            sync_since=f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        )

    @classmethod
    def draw_balanced(cls, rng: random.Random, seed: int) -> _Facts:
        """`draw`, but the pooled facts (decision, continuation, errors, line limits) are the pools'
        entry `seed` in turn, so consecutive seeds (a suite's scenarios) never share one."""
        facts = cls.draw(rng)
        topic, a, b = BALANCED_DECISIONS[seed % len(BALANCED_DECISIONS)]
        if rng.random() < 0.5:
            a, b = b, a
        return replace(
            facts,
            decision=(topic, a, b),
            continuation=BALANCED_CONTINUATIONS[seed % len(BALANCED_CONTINUATIONS)],
            error=BALANCED_ERRORS[seed % len(BALANCED_ERRORS)],
            line_limit=BALANCED_LINE_LIMITS[seed % len(BALANCED_LINE_LIMITS)],
            export_error=EXPORT_ERRORS[seed % len(EXPORT_ERRORS)],
            revert_commit=f"{rng.randrange(16**7):07x}",
        )


SYSTEM_PROMPT = """You are a coding agent running in a terminal on the user's machine, working in the repository at {root}.

You can read files, search the code, run shell commands and apply patches. Keep going until the user's request is fully handled before ending your turn; only stop to ask when you truly need a decision.

# Tools
- read_file(path, offset, limit): numbered lines of a file.
- shell(command, workdir, timeout_ms): run a command; output is prefixed with its exit code and wall time.
- apply_patch(input): edit files with a patch in the *** Begin Patch / *** End Patch format.
- view_image(path): attach a local image to the conversation.

# Working style
- Prefer rg over grep; read before you edit; keep edits minimal and in the style of the code around them.
- Run the relevant tests after a change and report failures verbatim.
- Never revert changes you did not make. Do not commit unless asked.
- Final answers: short, plain text, list the files you changed.
"""

#: Where `constraint-vendor`'s answer counts (normalized text): in a sentence that forbids editing the folder, as
#: AGENTS.md states it or a summary rewords it ("never edit files under ledger/vendor/", "do not modify anything in
#: ledger/vendor/", "ledger/vendor/ is generated, read-only"), not in the file listings and grep hits that print the
#: folder's files (`ledger/vendor/iso4217.py`) without the rule.
VENDOR_RULE = (
    r"(?:never|not|n't|no|avoid)\W+(?:[\w-]+\W+){0,3}?(?:edit|modif|touch|chang|alter|writ)\w*\W+(?:[\w-]+\W+){0,4}?ledger/vendor/"
    r"|ledger/vendor/\W+(?:[\w-]+\W+){0,2}?(?:is|are|stays?)\W+(?:[\w-]+\W+){0,2}?(?:read-only|generated|off-limits|untouchable)"
)
AGENTS_MD = """# AGENTS.md instructions for {root}

<INSTRUCTIONS>
## Repository rules
- Never edit files under ledger/vendor/ — they are generated from the ISO 4217 tables by scripts/gen_vendor.py.
- Money is integer cents end to end; never use float for amounts.
- Every public function needs a docstring and type hints.
- Run `pytest -q` and `ruff check .` before saying a change is done.
## Layout
- ledger/: the service (api, settlement, retry, storage, sync, reports)
- tests/: pytest suite; fixtures in tests/conftest.py (make_batch, make_tenant)
</INSTRUCTIONS>"""

ENVIRONMENT = """<environment_context>
  <cwd>{root}</cwd>
  <approval_policy>on-request</approval_policy>
  <sandbox_mode>workspace-write</sandbox_mode>
  <network_access>restricted</network_access>
  <shell>bash</shell>
</environment_context>"""


# --------------------------------------------------------------------------- tools
@dataclass
class _Call:
    """One tool call of a step and what it returned (`output` None: aborted, no result)."""

    name: str
    arguments: dict[str, Any]
    output: str | None
    attachments: tuple[Attachment, ...] = ()
    is_error: bool = False


def _shell(command: str, output: str, exit_code: int = 0, seconds: float = 0.4) -> _Call:
    return _Call("shell", {"command": ["bash", "-lc", command], "workdir": ROOT, "timeout_ms": 120000}, shell_output(output, exit_code, seconds), is_error=exit_code != 0)


def _screenshot(rng: random.Random, clock: datetime) -> Attachment:
    return Attachment("image/png", f"Screenshot {clock:%Y-%m-%d at %H.%M.%S}.png", rng.randint(90_000, 900_000))


# --------------------------------------------------------------------------- the session
class _Session:
    """Builds one session item by item, keeping the running context size and the probes."""

    def __init__(self, shape: Shape, seed: int, target: int, balanced_facts: bool = False) -> None:
        self.shape = shape
        self.target = target
        self.balanced = balanced_facts
        self.rng = random.Random(f"{shape.name}:{seed}")
        self.facts = _Facts.draw_balanced(self.rng, seed) if balanced_facts else _Facts.draw(self.rng)
        self.repo = VirtualRepo.generate(self.rng, line_length=self.facts.line_limit[0])
        self.provider = SimulatedProvider(get_profile(MODEL))
        self.items: list[Item] = []
        self.probes: list[Probe] = []
        self.context = 0  # true tokens of everything the model has been sent so far
        self.previous_input = 0
        self.turn = -1
        self.response = -1
        self.clock = datetime(2026, 3, 2, 8, 30, tzinfo=UTC) + timedelta(seconds=self.rng.randrange(4 * 3600))
        self.huge_left = shape.huge_outputs
        self.interrupted: _Call | None = None
        self.aborted = 0  # calls interrupted so far
        self.due = 1.0  # share of the target size at which the next planted turn is due
        self.screenshots = 0  # user messages with a screenshot so far

    # ------------------------------------------------------------- items
    def _stamp(self, low: float, high: float) -> str:
        self.clock += timedelta(seconds=self.rng.uniform(low, high))
        return f"{self.clock:%Y-%m-%dT%H:%M:%S}.{self.clock.microsecond // 1000:03d}Z"

    def _add(self, kind: str, low: float = 1, high: float = 6, **fields: Any) -> Item:
        item = Item(id=f"{kind}-{len(self.items)}", kind=kind, turn=max(self.turn, 0), timestamp=self._stamp(low, high), **fields)
        self.items.append(item)
        if kind != "marker":
            self.context += self.provider.message_tokens(message_from_item(item))
        return item

    def user(self, text: str, attachments: tuple[Attachment, ...] = ()) -> Item:
        self.turn += 1
        if self.interrupted is not None:
            text = f"I interrupted that `{self.interrupted.arguments['command'][-1]}` run on purpose. {text}"
            self.interrupted = None
        return self._add("user", 15, 240, text=text, attachments=attachments)

    def step(self, calls: Sequence[_Call] = (), text: str = "", reasoning: str = "") -> list[Item]:
        """One model response (reasoning, text, calls; usage on its last item), then the results."""
        self.response += 1
        parts: list[dict[str, Any]] = []
        if reasoning:
            parts.append({"kind": "reasoning", "text": reasoning})
        if text:
            parts.append({"kind": "assistant", "text": text})
        call_ids = [f"call_{self.rng.randrange(16**24):024x}" for _ in calls]
        for call, call_id in zip(calls, call_ids, strict=True):
            parts.append({"kind": "tool_call", "call_id": call_id, "tool_name": call.name, "arguments": json.dumps(call.arguments)})
        if not parts:
            raise ValueError("a model response needs at least one item")
        request = self.context
        cached = (self.previous_input // 128) * 128 if self.previous_input >= 1024 else 0
        out: list[Item] = []
        for n, part in enumerate(parts):
            last = n == len(parts) - 1
            item = self._add(part.pop("kind"), 2, 14, response=self.response, **part)
            if last:
                output = self.context - request
                thinking = sum(self.provider.message_tokens(message_from_item(i)) for i in out + [item] if i.kind == "reasoning")
                usage = Usage(input=request, cached_input=min(cached, request), output=output, reasoning=thinking)
                item = self.items[-1] = replace(item, usage=usage)
            out.append(item)
        self.previous_input = request
        for call, call_id in zip(calls, call_ids, strict=True):
            if call.output is None:
                continue
            seconds = (0.2, 3) if len(call.output) < 4000 else (3, 40)
            out.append(self._add(
                "tool_result", *seconds, call_id=call_id, tool_name=call.name, text=call.output,
                attachments=call.attachments, is_error=call.is_error,
            ))
        return out

    def abort(self, calls: list[_Call], reasoning: str) -> Item:
        """A response whose last call the user interrupted: no result, an `aborted` marker."""
        calls[-1].output = None
        items = self.step(calls, reasoning=reasoning)
        self.aborted += 1
        self.interrupted = calls[-1]
        self._add("marker", 5, 40, meta={"event": "aborted", "reason": "interrupted by the user"})
        return [i for i in items if i.kind == "tool_call"][-1]

    def probe(
        self, id: str, kind: str, question: str, answer: str | list[str], match: str, source: Item, *,
        first: bool = False, reject: tuple[str, ...] = (), evidence: str | None = None,
    ) -> None:
        """Plant a probe; `first` claims the answer occurs nowhere before `source`; `reject` lists the
        wrong answers the session also states (a reply naming one is wrong); `evidence`, the passage the
        answer must lie in to count as present (`metrics.grading`)."""
        self.probes = [p for p in self.probes if p.id != id]
        self.probes.append(
            Probe(id=id, kind=kind, question=question, answer=answer, match=match, reject=reject, source=source.id,
                  meta={"first_occurrence": first}, evidence=evidence)
        )

    @property
    def progress(self) -> float:
        return self.context / self.target

    # ------------------------------------------------------------- tool calls
    def read(self, path: str) -> _Call:
        lines = len(self.repo.files[path])
        limit = lines if self.target >= 60_000 else min(lines, 60)
        return _Call("read_file", {"path": path, "offset": 1, "limit": limit}, self.repo.numbered(path, 1, limit))

    def grep(self, pattern: str) -> _Call:
        hits = self.repo.grep(pattern)
        return _shell(f"rg -n '{pattern}' ledger tests", hits, 0 if hits else 1, 0.1)

    def tests(self, test_path: str, failures: Sequence[Failure] = ()) -> _Call:
        output, code = pytest_run(self.rng, self.repo, [test_path], list(failures))
        return _shell(f"pytest -q {test_path}", output, code, self.rng.uniform(1, 9))

    def patch(self, path: str, note: str) -> _Call:
        text = self.repo.patch(self.rng, path, note)
        return _Call("apply_patch", {"input": text}, f"Success. Updated the following files:\nM {path}")

    def log(self, planted: str | None = None, huge: bool = False) -> _Call:
        lines = 120 if not huge else 700
        lines = lines if self.target >= 60_000 else 30
        text = service_log(self.rng, lines, planted)
        while huge and self.provider.counter.count(text) <= HUGE_OUTPUT_TOKENS + 1_000:
            lines += 150
            text = service_log(self.rng, lines, planted)
        return _shell(f"tail -n {lines} logs/worker.log", text, 0, 0.2)

    # ------------------------------------------------------------- pieces of work
    def _focus(self) -> tuple[str, str]:
        path = self.rng.choice([p for p in self.repo.paths(tests=False) if "/vendor/" not in p])
        return path, self.rng.choice(self.repo.functions(path))

    def _thought(self, path: str, fn: str) -> str:
        if self.rng.random() < 0.3:
            return ""
        attr = self.rng.choice(("amount_cents", "tenant_id", "status", "entries", "posted_at"))
        return self.rng.choice((
            f"**Checking {fn}**\n\nI should see how {fn} in {path} is called before changing anything.",
            f"**Tracing {attr}**\n\n{fn} reads {attr} without a default; find out who sets it.",
            f"**Planning the change**\n\nThe {fn} path looks like the culprit; read the tests next, then patch.",
            f"**Verifying**\n\nAfter the edit to {path}, run its tests to make sure nothing else broke.",
            f"**Looking for callers**\n\nSearch for {fn} across ledger/ and tests/ to see what depends on {attr}.",
        ))

    def _action(self, path: str, fn: str, allow_patch: bool) -> _Call:
        test_path = "tests/test_" + path.rsplit("/", 1)[-1]
        choice = self.rng.choices(("read", "grep", "test", "patch", "status", "log"), (30, 25, 15, 15 if allow_patch else 0, 5, 4))[0]
        if choice == "read":
            return self.read(self.rng.choice((path, path, test_path if test_path in self.repo.files else path)))
        if choice == "grep":
            return self.grep(rf"\b{fn}\b" if self.rng.random() < 0.7 else self.rng.choice(("TODO", "logger.debug", "amount_cents", "tenant_id")))
        if choice == "test" and test_path in self.repo.files:
            failing = [Failure(test_path, f"test_{fn}_regression", path, fn, self.rng.choice(GENERIC_ERRORS))] if self.rng.random() < 0.3 else []
            return self.tests(test_path, failing)
        if choice == "patch":
            return self.patch(path, f"tighten {fn} handling (double-posting)")
        if choice == "log":
            huge = self.huge_left > 0 and self.progress > 0.5
            self.huge_left -= huge
            return self.log(huge=huge)
        return _shell("git status --short && git diff --stat", git_status(self.repo), 0, 0.1)

    def _loop(self, path: str, fn: str, steps: int, allow_patch: bool = True) -> None:
        """`steps` tool steps on one area of the code (parallel calls by the shape's odds)."""
        for n in range(steps):
            width = self.rng.randint(2, 4) if self.rng.random() < self.shape.parallel else 1
            calls: dict[str, _Call] = {}
            for _ in range(width):
                call = self._action(path, fn, allow_patch and width == 1)
                calls.setdefault(json.dumps(call.arguments), call)
            preface = "" if n else self.rng.choice(("", f"Looking at {fn} in {path} first.", f"Let me check {path}."))
            self.step(list(calls.values()), text=preface, reasoning=self._thought(path, fn))

    def _quick_question(self, path: str, fn: str) -> str:
        """A short question a user asks between requests (the `chat` share of ordinary turns)."""
        return self.rng.choice((
            f"Quick question: what does {fn} return when the batch has no entries?",
            f"Is {fn} in {path} safe to call twice for the same batch?",
            f"ok. and who calls {fn}?",
            "thanks, that makes sense. keep going",
        ))

    def work_turn(self, until: float = 1.0) -> None:
        """An ordinary user request: a question, a tool loop, maybe interrupted or with a screenshot."""
        if self.balanced:
            self._recorded_work_turn(until)
            return
        path, fn = self._focus()
        rng = self.rng
        if rng.random() < self.shape.chat:
            self.user(self._quick_question(path, fn))
            self.step(text=rng.choice((
                f"{fn} returns its first argument unchanged in that case; the loop over entries simply never runs.",
                f"Yes — {fn} only reads the batch, so calling it twice is harmless.",
                f"Only {path} itself uses {fn} today; the API goes through create_settlement instead.",
                "Continuing with the next file.",
            )))
            return
        attachments = (_screenshot(rng, self.clock),) if rng.random() < self.shape.images else ()
        request = rng.choice((
            f"Can you look at how {fn} in {path} handles held entries? Something is off with the amounts.",
            f"Please add debug logging around {fn} in {path}.",
            f"Run the tests for {path} and fix whatever fails.",
            f"Why does {fn} take the tenant? Explain, and clean it up if it's unused.",
            f"Review {path} for places that could double-post a batch.",
        ))
        if attachments:
            request = f"This is what the settlement dashboard shows after the last deploy (screenshot attached). {request}"
        self.user(request, attachments)
        steps = rng.randint(*self.shape.steps)
        if attachments and rng.random() < 0.5:
            shot = _Call("view_image", {"path": "screenshots/settlement-dashboard.png"}, "Attached image: screenshots/settlement-dashboard.png (1440x900)", (_screenshot(rng, self.clock),))
            self.step([shot], reasoning="**Looking at the screenshot**\n\nCompare the dashboard totals with the stored screenshot from before the deploy.")
        self._loop(path, fn, steps)
        if rng.random() < self.shape.abort:
            command = "pytest -q" if rng.random() < 0.5 else f"ledger export --tenant {rng.choice(TENANTS)}"
            calls = [self.read(path), _shell(command, "")] if rng.random() < self.shape.parallel + 0.3 else [_shell(command, "")]
            self.abort(calls, f"**Reproducing**\n\nRun `{command}` to reproduce the issue end to end.")
            return
        self.step(text=rng.choice((
            f"Done. {fn} in {path} now checks held entries before summing; tests pass.",
            f"{fn} is only used in {path}. I left the behaviour as is and added a note; nothing else needed.",
            f"Reviewed {path}: the only risky spot is {fn}, which re-reads the batch without a lock. "
            + ("I patched it." if path in self.repo.edits else "No changes made yet."),
        )))

    # ------------------------------------------------------------- recorded-session layout (balanced facts)
    def _real_action(self, path: str, fn: str, edits: str) -> _Call:
        """One tool call as recorded coding sessions mix them: many tiny outputs (staging, lint,
        listings, one test), edits and new files whose arguments carry the code, and fewer reads,
        greps and test runs. `edits`: "any" (the focus file, or a new file), "focus" (only `path`)
        or "none"."""
        rng, repo = self.rng, self.repo
        if self.huge_left > 0 and self.progress > 0.5:
            self.huge_left -= 1
            return self.log(huge=True)
        test_path = "tests/test_" + path.rsplit("/", 1)[-1]
        tests = repo.functions(test_path) if test_path in repo.files else []
        kinds = ("edit", "write", "stage", "lint", "compile", "ls", "files", "count", "test-one", "slice", "read", "grep", "test", "diffstat", "status")
        weights = (22 if edits != "none" else 0, 5 if edits == "any" else 0, 3, 5, 1, 6, 8, 1, 5 if tests else 0, 10, 11, 9, 5 if tests else 0, 5, 2)
        choice = rng.choices(kinds, weights)[0]
        if choice == "edit":
            if rng.random() < 0.75:
                text = repo.rewrite(rng, path, rng.choice((fn, fn, *repo.functions(path))))
            else:
                text = repo.patch(rng, path, f"guard {fn} against a batch settled twice")
            return _Call("apply_patch", {"input": text}, shell_output(f"Success. Updated the following files:\nM {path}", 0, 0.0))
        if choice == "write":
            if rng.random() < 0.6:
                new, tested = f"tests/test_{fn}_{rng.choice(('regressions', 'edge_cases', 'held_entries', 'tenants'))}.py", path
            else:
                new, tested = f"ledger/{rng.choice(NOUNS)}_{rng.choice(('helpers', 'guards', 'checks', 'rules'))}.py", ""
            if new in repo.files:
                return _shell(f"git add {new}", "", 0, 0.1)
            return _Call("apply_patch", {"input": repo.add_file(rng, new, tested)}, shell_output(f"Success. Updated the following files:\nA {new}", 0, 0.0))
        if choice == "stage":
            return _shell(f"git add {path}", "", 0, 0.1)
        if choice == "lint":
            found = rng.random() < 0.25
            output = f"{path}:{rng.randint(3, 14)}:1: F401 [*] `typing.Any` imported but unused\nFound 1 error.\n[*] 1 fixable with the `--fix` option." if found else "All checks passed!"
            return _shell(f"ruff check {path}", output, int(found), 0.2)
        if choice == "compile":
            return _shell(f"python -m py_compile {path}", "", 0, 0.3)
        if choice == "ls":
            folder = path.rsplit("/", 1)[0]
            return _shell(f"ls {folder}", repo.listing(folder), 0, 0.1)
        if choice == "files":
            return _shell(f"rg -l '\\b{fn}\\b' ledger tests", repo.files_matching(rf"\b{fn}\b"), 0, 0.1)
        if choice == "count":
            return _shell(f"wc -l {path}", f"{len(repo.files[path]):>5} {path}", 0, 0.1)
        if choice == "test-one":
            return _shell(f"pytest -q {test_path}::{rng.choice(tests)}", f".{' ' * 71}[100%]\n1 passed in {rng.uniform(0.1, 0.9):.2f}s", 0, 1.2)
        if choice == "slice":
            start = max(1, repo.definition(path, fn) - rng.randint(0, 4))
            end = start + rng.randint(4, 20)
            return _shell(f"sed -n '{start},{end}p' {path}", "\n".join(repo.files[path][start - 1 : end]), 0, 0.1)
        if choice == "read":
            if rng.random() < 0.15:
                return self.read(path)
            start = max(1, repo.definition(path, fn) - rng.randint(0, 20))
            limit = rng.randint(20, 60)
            return _Call("read_file", {"path": path, "offset": start, "limit": limit}, repo.numbered(path, start, limit))
        if choice == "grep":
            pattern = rf"\b{fn}\b" if rng.random() < 0.7 else rng.choice(("TODO", "logger.debug", "amount_cents", "tenant_id"))
            hits = repo.grep(pattern, limit=25)
            return _shell(f"rg -n '{pattern}' ledger tests | head -n 25", hits, 0 if hits else 1, 0.1)
        if choice == "diffstat":
            changed = repo.edits.get(path, 0)
            stat = f" {path} | {2 * changed} {'+' * changed}{'-' * (changed // 2)}\n 1 file changed, {2 * changed} insertions(+), {changed} deletions(-)"
            return _shell(f"git diff --stat -- {path}", stat if changed else "", 0, 0.1)
        if choice == "test":
            failing = [Failure(test_path, f"test_{fn}_regression", path, fn, rng.choice(GENERIC_ERRORS))] if rng.random() < 0.3 else []
            return self.tests(test_path, failing)
        return _shell("git status --short && git diff --stat", git_status(repo), 0, 0.1)

    def _narration(self, path: str, fn: str) -> str:
        """What the agent says before its next calls: what it found and what it will do, in a few sentences."""
        rng = self.rng
        attr = rng.choice(("amount_cents", "tenant_id", "status", "entries", "posted_at"))
        test_path = "tests/test_" + path.rsplit("/", 1)[-1]
        findings = (
            f"{fn} in {path} reads {attr} straight off each entry and never checks whether the entry is held, so a held entry can still end up in the batch total.",
            f"The callers of {fn} all pass in the batch they loaded at the start of the request, which means a second call in the same request sees a stale {attr}.",
            f"Nothing in {path} stops a batch from being settled twice: the status check runs after the amounts are summed, not before.",
            f"The existing tests only cover the happy path of {fn}; none of them builds a batch with held or refunded entries, which is exactly the case that breaks.",
            f"{fn} does two jobs at once: it normalizes {attr} and it decides whether an entry is posted, which is why every earlier fix landed in the wrong place.",
            f"The diff so far is small and stays inside {path}; the public signature of {fn} has not changed, so the API layer needs nothing.",
            f"{attr} is set in two places, once when the entry is created and again in {fn}, and the second write wins even when it carries an older value.",
        )
        plans = (
            f"Next I'll read the rest of {path} around {fn} to see where {attr} gets its value before I change anything.",
            f"I'll rewrite {fn} so the check comes first and the sum only covers posted entries, then run {test_path} to confirm nothing else moved.",
            f"After that I'll search for the other callers of {fn} across ledger/ and tests/, since a change in what it returns would ripple into them.",
            "Then I'll add a regression test that builds a batch with one held entry and asserts the total, so this stays fixed.",
            "Once the tests pass I'll stage the file and run ruff on it, as AGENTS.md asks before a change counts as done.",
            "I'm keeping the change small: no new dependencies, no renames, and the behaviour for tenants without held entries stays the same.",
            f"If the tests for {path} are slow I'll run the single failing case first and the whole file once at the end.",
        )
        sentences = rng.sample(findings, rng.randint(1, 3)) + rng.sample(plans, rng.randint(2, 3))
        return " ".join(sentences)

    def _recorded_loop(self, path: str, fn: str, steps: int, edits: str, until: float | None = None) -> None:
        """`steps` tool steps (or fewer, once the session reaches `until` of its size) on one area of
        the code, the agent explaining its next move now and then."""
        for n in range(steps):
            if n and until is not None and self.progress >= until:
                return
            width = self.rng.randint(2, 4) if self.rng.random() < self.shape.parallel else 1
            calls: dict[str, _Call] = {}
            for _ in range(width):
                call = self._real_action(path, fn, edits)
                calls.setdefault(json.dumps(call.arguments), call)
            text = self._narration(path, fn) if n == 0 or self.rng.random() < 0.3 else ""
            self.step(list(calls.values()), text=text, reasoning=self._thought(path, fn))

    def _recorded_work_turn(self, until: float) -> None:
        """A user request answered by one long tool loop that runs until the next planted turn is due
        (short-turns: a question or a short loop); screenshots and interruptions by the shape's odds,
        and at least three of each in the shapes that have them."""
        path, fn = self._focus()
        rng = self.rng
        if rng.random() < self.shape.chat:
            self.user(self._quick_question(path, fn))
            self._recorded_loop(path, fn, max(1, rng.randint(*self.shape.loop_steps) // 3), "none", until)
            self.step(text=self._narration(path, fn))
            return
        screenshot = self.shape.images > 0 and (self.screenshots < 3 or rng.random() < self.shape.images)
        attachments = (_screenshot(rng, self.clock),) if screenshot else ()
        request = rng.choice((
            f"Can you look at how {fn} in {path} handles held entries? Something is off with the amounts.",
            f"Please add debug logging around {fn} in {path}, and tests for it.",
            f"Run the tests for {path} and fix whatever fails.",
            f"Why does {fn} take the tenant? Explain, and clean it up if it's unused.",
            f"Review {path} for places that could double-post a batch and fix what you find.",
        ))
        if attachments:
            self.screenshots += 1
            request = f"This is what the settlement dashboard shows after the last deploy (screenshot attached). {request}"
        self.user(request, attachments)
        if attachments and (self.screenshots == 1 or rng.random() < 0.5):
            shot = _Call("view_image", {"path": "screenshots/settlement-dashboard.png"}, "Attached image: screenshots/settlement-dashboard.png (1440x900)", (_screenshot(rng, self.clock),))
            self.step([shot], reasoning="**Looking at the screenshot**\n\nCompare the dashboard totals with the stored screenshot from before the deploy.")
        self._recorded_loop(path, fn, rng.randint(*self.shape.loop_steps), "any", until)
        if self.shape.abort and (self.aborted < 3 or rng.random() < self.shape.abort):
            command = "pytest -q" if rng.random() < 0.5 else f"ledger export --tenant {rng.choice(TENANTS)}"
            calls = [self.read(path), _shell(command, "")] if rng.random() < self.shape.parallel + 0.3 else [_shell(command, "")]
            self.abort(calls, f"**Reproducing**\n\nRun `{command}` to reproduce the issue end to end.")
            return
        self.step(text=(
            f"Done with {fn} in {path}: the check on held entries now runs before the amounts are summed, and the new "
            f"test covers a batch with one held entry. The tests for {path} pass and ruff is clean; I left everything "
            "outside it alone. Tell me if you want the same treatment for the other settlement paths."
        ))

    # ------------------------------------------------------------- planted turns
    def kickoff(self) -> None:
        f = self.facts
        old_limit = f.line_limit[0]
        staging = (
            "The staging settings are in deploy/staging.env" if self.balanced
            else f"The staging settlement service listens on port {f.port} (host stg-ledger-07.internal)"
        )
        item = self.user(
            f"We're picking up ticket {f.ticket}: settlement retries are hammering the bank API and some batches "
            f"end up double-posted. {staging} if you need to reproduce. Work on the branch `{f.branch}` and never push to main. "
            f"Keep the line-length limit at {old_limit} characters. First get oriented in the repo and tell me where the retry logic lives."
        )
        self.probe("recall-ticket", "recall", "Which ticket is this work tracked under?", f.ticket, "contains", item, first=True)
        if not self.balanced:
            self.probe("recall-port", "recall", PORT_QUESTION, str(f.port), "number", item)
        self.probe("constraint-branch", "constraint", "On which git branch must the work be done?", f.branch, "exact", item, first=True)
        self.probe("constraint-line-length", "constraint", LINE_LIMIT_QUESTION, str(old_limit), "number", item, first=self.balanced)
        self.step([_shell("rg --files", directory_listing(self.repo), 0, 0.1)], text="I'll start with the layout of the repo.")
        calls = [self.read("ledger/retry.py"), self.read("ledger/settlement.py")]
        if self.shape.parallel < 0.5:
            self.step(calls[:1], reasoning="**Finding the retry logic**\n\nretry.py is the obvious place; settlement.py calls it.")
            self.step(calls[1:])
        else:
            self.step(calls, reasoning="**Finding the retry logic**\n\nRead retry.py and settlement.py together.")
        if self.balanced:  # recorded sessions orient themselves at length before the first answer
            self._recorded_loop("ledger/retry.py", "compute_delay", self.rng.randint(*self.shape.loop_steps), "none", self.due)
        self.step(text="The retry logic lives in ledger/retry.py (compute_delay and call_with_retry); ledger/settlement.py calls it from settle_batch_entries.")

    def failing_tests(self) -> None:
        f = self.facts
        self.user("Run the settlement tests and tell me exactly what breaks.")
        failure = Failure("tests/test_settlement.py", f.failing_test, "ledger/settlement.py", "apply_fees", f.error)
        result = self.step([self.tests("tests/test_settlement.py", [failure])], text="Running the settlement tests.")[-1]
        self.probe("error-first-failure", "error", f"What exact error did {f.failing_test} fail with?", f.error, "contains", result, first=True)
        self.step([self.read("ledger/settlement.py")], reasoning="**Reading apply_fees**\n\nThe traceback points into apply_fees; read it.")
        if self.balanced:  # the error stays in the tool output only, as most real errors do
            self.step(text=f"One failure: {f.failing_test} fails inside apply_fees in ledger/settlement.py (traceback above). Everything else passes.")
        else:
            self.step(text=f"One failure: {f.failing_test} fails inside apply_fees in ledger/settlement.py with {f.error}. Everything else passes.")

    def stuck_batch(self) -> None:
        f = self.facts
        self.user("The sync worker on staging got stuck overnight. Check the worker log and tell me which batch is stuck.")
        if self.balanced:
            env = (
                f"SETTLEMENT_HOST=stg-ledger-07.internal\nSETTLEMENT_PORT={f.port}\nBANK_API_URL=https://bank-sandbox.example/v2\n"
                f"RETRY_MAX_ATTEMPTS=5\nSYNC_WORKERS=4\nLOG_LEVEL=debug"
            )
            result = self.step([_shell("cat deploy/staging.env", env, 0, 0.1)], reasoning="**Finding the worker**\n\nCheck the staging settings before reading its log.")[-1]
            self.probe("recall-port", "recall", PORT_QUESTION, str(f.port), "number", result, first=True)
        huge = self.huge_left > 0
        self.huge_left -= huge
        planted = f"ERROR   ledger.sync.worker {f.stuck_batch} stuck in state=settling for 41m; holding lock settlement:{self.rng.choice(TENANTS)}"
        result = self.step([self.log(planted, huge=huge)], reasoning="**Reading the log**\n\nLook for ERROR lines near the end.")[-1]
        self.probe("recall-stuck-batch", "recall", "Which batch id was stuck in state=settling according to the worker log?", f.stuck_batch, "contains", result, first=True)
        if self.balanced:
            self.step(text="One batch has been in state=settling for 41 minutes and still holds its tenant lock (the ERROR line above).")
        else:
            self.step(text=f"The stuck batch id is {f.stuck_batch}: it has been in state=settling for 41 minutes and still holds its tenant lock.")

    def decide(self) -> None:
        topic, (chosen, pattern), (other, other_pattern) = self.facts.decision
        if self.balanced:  # the options' own words first appear in the user's choice
            self.user(f"For {topic}: what are our options? Give me the trade-offs before changing anything.")
            self._recorded_loop("ledger/retry.py", "call_with_retry", self.rng.randint(*self.shape.loop_steps), "none", self.due)
            self.step(text=f"Option 1: {OPTION_DESCRIPTIONS[chosen]}. Option 2: {OPTION_DESCRIPTIONS[other]}. Either works; tell me which.")
        else:
            self.user(f"For {topic}: should we go with {chosen} or {other}? Give me the trade-offs before changing anything.")
            self._loop("ledger/retry.py", "call_with_retry", 1, allow_patch=False)
            self.step(text=f"Option 1, {chosen}: simple to reason about, fits the current code. Option 2, {other}: more moving parts. Either works; tell me which.")
        pick = self.user(f"For {topic}, let's go with {chosen}. It matches what the payments team runs elsewhere.")
        self.probe(
            "decision-approach", "decision", f"Which approach did the user choose for {topic}?", pattern, "regex", pick,
            first=self.balanced, reject=(other_pattern,),
        )
        self.step(text=f"Understood: {chosen}. I'll implement it next.")

    def implement(self) -> None:
        topic, (chosen, _), _ = self.facts.decision
        self.user(f"Implement that for {topic} now. Touch only what you need.")
        files = self.rng.sample(["ledger/retry.py", "ledger/api.py", "ledger/sync/worker.py", "ledger/settlement.py", "tests/test_retry.py"], 3)
        touched: list[str] = []
        start = self.progress
        for n, path in enumerate(files):
            fn = self.rng.choice(self.repo.functions(path))
            self.step([self.read(path)], reasoning=self._thought(path, fn))
            self.step([self.patch(path, chosen)], text="" if n else "Patching now.")
            touched.append(path)
            if self.balanced and not self.shape.long_loop:  # a long loop up to the next planted turn
                steps = self.rng.randint(*self.shape.loop_steps) // len(files)
                self._recorded_loop(path, fn, steps, "focus", start + (self.due - start) * (n + 1) / len(files))
            if self.shape.long_loop:
                while self.progress < 0.2 + 0.65 * (n + 1) / len(files):
                    if self.balanced:  # edits of this file only: the set of files modified stays `files`
                        self._recorded_loop(path, fn, 1, "focus")
                    else:
                        self._loop(path, fn, 1, allow_patch=False)
        self.step([self.tests("tests/test_retry.py")])
        done = self.step(text=f"Implemented {chosen} for {topic}. Files modified: {', '.join(touched)}. All retry tests pass.")[-1]
        self.probe("artifact-files-modified", "artifact", f"Which files were modified to implement {topic}?", touched, "set", done)

    def change_constraint(self) -> None:
        old, new = self.facts.line_limit
        item = self.user(f"Change of plan on formatting: the team agreed on a line-length limit of {new} characters instead of {old}. Update pyproject.toml and reflow what you touched.")
        self.probe("constraint-line-length", "constraint", LINE_LIMIT_QUESTION, str(new), "number", item, first=self.balanced, reject=(str(old),))
        self.step([_shell(f"sed -i 's/line-length = {old}/line-length = {new}/' pyproject.toml && ruff format ledger", "4 files reformatted, 27 files left unchanged", 0, 0.8)])
        self.step(text=f"The line-length limit is now {new} characters; pyproject.toml updated and the touched files reformatted.")

    def reverse_decision(self) -> None:
        topic, (_, first_pattern), (other, other_pattern) = self.facts.decision
        item = self.user(f"I changed my mind on {topic}: switch to {other} instead. The bank asked us to keep it predictable.")
        self.probe(
            "decision-approach", "decision", f"Which approach did the user choose for {topic}?", other_pattern, "regex", item,
            first=self.balanced, reject=(first_pattern,),
        )
        self.step([self.patch("ledger/retry.py", f"switch to {other}")], reasoning="**Switching approach**\n\nReplace the earlier choice in retry.py.")
        self.step(text=f"Switched to {other} in ledger/retry.py.")

    def queue_next(self) -> None:
        task, key = self.facts.continuation
        item = self.user(f"Once this is merged, the next task is to {task}. Don't start it now, just keep it in mind.")
        self.probe("continuation-next-task", "continuation", "What did the user say is the next task once the current work is merged?", key, "contains", item, first=True)
        self.step(text=f"Noted: after the merge, the next task is to {task}.")

    def interrupted_sync(self) -> None:
        command = f"ledger sync --all-tenants --since {self.facts.sync_since}"
        self.user("Reproduce the double-posting against staging with a full sync.")
        call = self.abort([_shell(command, "")], "**Reproducing**\n\nA run over every tenant should show the double-posting.")
        self.probe("recall-interrupted-command", "recall", "Which sync command did the user say they interrupted?", command, "contains", call, first=True)

    def lock_history(self) -> None:
        """Balanced facts: a commit hash seen in passing in `git log` (a fact only the output holds)."""
        self.user("Did anyone touch the settlement locking recently? Check the history before we go further.")
        subjects = (
            "settlement: log batch ids at debug", "retry: cap attempts at five", "api: validate tenant slugs",
            "storage: close the store on shutdown", "sync: drain the queue before exit", "export: quote every csv field",
            "tests: make_batch takes a tenant", "cli: add --tenant to export",
        )
        lines = [f"{self.rng.randrange(16**7):07x} {subject}" for subject in self.rng.sample(subjects, 7)]
        lines.insert(self.rng.randrange(2, 6), f'{self.facts.revert_commit} Revert "settlement: take the tenant lock before posting"')
        result = self.step([_shell("git log --oneline -8 -- ledger/settlement.py", "\n".join(lines), 0, 0.1)])[-1]
        self.probe(
            "recall-revert-commit", "recall", "What is the short hash of the commit that reverted taking the tenant lock before posting?",
            self.facts.revert_commit, "contains", result, first=True,
        )
        self.step(text="Yes: the tenant lock before posting was added and then reverted a few commits back; nothing else touched locking since.")

    def export_tests(self) -> None:
        """Balanced facts: a late failing test whose error only its output states."""
        name = f"test_export_csv_{self.rng.choice(('quotes_fields', 'writes_header', 'skips_held'))}"
        self.user("Before we wrap up, run the export tests too.")
        failure = Failure("tests/test_export.py", name, "ledger/reports/export.py", "export_csv", self.facts.export_error)
        result = self.step([self.tests("tests/test_export.py", [failure])], text="Running the export tests.")[-1]
        self.probe("error-export-failure", "error", f"What exact error did {name} fail with?", self.facts.export_error, "contains", result, first=True)
        self.step(text=f"One failure, {name}, inside export_csv (traceback above); it is unrelated to the retry work, so I left it.")

    def closing(self) -> None:
        self.user("Let's stop here for today. Where are we?")
        self.step([_shell("git status --short && git diff --stat", git_status(self.repo), 0, 0.1)])
        self.step(text=f"Changes are uncommitted in {len(self.repo.edits)} files. Tests pass locally.")

    # ------------------------------------------------------------- the whole session
    def build(self) -> None:
        self._add("system", 0, 0, text=SYSTEM_PROMPT.format(root=ROOT))
        agents = self._add("user", 0, 1, text=AGENTS_MD.format(root=ROOT), synthetic=True)
        self.probe("constraint-vendor", "constraint", "Under which folder must files never be edited?", "ledger/vendor/", "contains", agents, first=True,
                   evidence=VENDOR_RULE)
        self._add("user", 0, 1, text=ENVIRONMENT.format(root=ROOT), synthetic=True)
        schedule: list[tuple[float, Any]] = [(0.06, self.failing_tests), (0.14, self.stuck_batch), (0.22, self.decide), (0.3, self.implement)]
        if self.shape.abort:
            schedule.append((0.45, self.interrupted_sync))
        if self.shape.constraint_change:
            schedule += [(0.5, self.change_constraint), (0.62, self.reverse_decision)]
        schedule.append((0.9 if self.shape.long_loop else 0.72, self.queue_next))
        if self.balanced:
            schedule += [(0.56, self.lock_history), (0.84, self.export_tests)]
            schedule.sort(key=lambda entry: entry[0])
        self.due = schedule[0][0]
        self.kickoff()
        while schedule or self.progress < 1:
            if schedule and (self.progress >= schedule[0][0] or self.progress >= 1):
                planted = schedule.pop(0)[1]
                self.due = schedule[0][0] if schedule else 1.0
                planted()
            else:
                self.work_turn(until=schedule[0][0] if schedule else 1.0)
        self.closing()


def _check_shape(shape: str) -> Shape:
    try:
        return SHAPE_SPECS[shape]
    except KeyError:
        raise ValueError(f"unknown synthetic shape {shape!r}; known: {', '.join(SHAPES)}") from None


def generate(shape: str, seed: int = 0, *, target_tokens: int | None = None, balanced_facts: bool = False) -> Scenario:
    """One synthetic session of `shape` (see `SHAPES`); the same arguments give the same session.

    `target_tokens` (true tokens of the whole session; default: the shape's size) is reached or
    slightly exceeded: every planted fact is placed even in a small session.
    """
    spec = _check_shape(shape)
    target = spec.target_tokens if target_tokens is None else target_tokens
    if target <= 0:
        raise ValueError(f"target_tokens must be positive, got {target}")
    session = _Session(spec, seed, target, balanced_facts)
    session.build()
    name = f"synthetic-{shape}-s{seed}"
    probes = tuple(session.probes)
    transcript = Transcript(
        id=name,
        items=tuple(session.items),
        source={"format": "synthetic", "generator": GENERATOR, "shape": shape, "seed": seed, **({"facts": "balanced"} if balanced_facts else {})},
        model=MODEL,
        meta={
            "description": spec.description,
            "target_tokens": target,
            "true_tokens": session.context,
            "probes": [p.to_dict() for p in probes],
        },
    )
    return Scenario(name=name, description=spec.description, transcript=transcript, probes=probes)


def default_suite(seed: int = 0) -> list[Scenario]:
    """The embedded default corpus: one scenario of every shape, at each shape's default size, with
    balanced facts (consecutive seeds: no two scenarios share a pooled answer)."""
    return [generate(shape, seed + n, balanced_facts=True) for n, shape in enumerate(SHAPES)]
