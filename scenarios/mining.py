"""Probe mining: deterministic probes from any transcript (`bench probes mine FILE`).

Each probe names the item where its fact first appears (`source`), an answer that occurs verbatim
in that item, the rule that produced it (`meta.rule`) and, for a short or numeric answer, the
passage that states it (`evidence`, a regex of the normalized line; `metrics/grading.py`). Rules
by family (DESIGN §6; `docs/specs/evaluation.md` §1 and §4 for the four Factory kinds):

- error: the error lines of a tool result (exceptions, `error:`/`fatal:`/`ERROR:` lines, shell
  failures such as `No such file or directory`, `command not found`, `No module named`, `timed
  out`, `verification failed`; the last that names an error and the first; none of a file read, also
  after `cd DIR &&`), the whole text of a short result flagged as an error, and error
  lines a user quotes in a message;
- artifact: files created, edited, moved or deleted: file-tool arguments, `apply_patch` headers,
  shell commands (`cat > f`, `> f`, `tee`, `touch`, `rm`, `mv`, `cp`, `mkdir`, `sed -i`, SWE-agent
  `create`), tool results that name the file (`File created successfully at:`, `Success. Updated
  the following files:`, `[File: … (N lines total)]`); plus the set of files read per user request,
  sourced at the read that completes it (the first read, within that request's turn, of its last
  member to be read), never where a member is merely named earlier (a `write` of it, a user message),
  so no checkpoint before that read asks it;
- constraint: instruction sentences of user and injected messages (of a demonstration of another
  task, only those the session's own messages say too: `_demonstration`): modal (must, never, only,
  always, do not, cannot, should, …), imperative (a sentence that starts with a verb, also after a
  `**Label**:` or an `If …,` clause) and version pins, not of a message the agent program composed
  itself (`meta["from_agent"]`); a lead-in to a one-line code block (`You MUST use
  this EXACT command to submit:`) asks for that line, and a title in capitals with no verb is none;
- recall: facts of tool outputs: a short output whole, lines with versions, hashes, ids, ports,
  URLs, counts, test summaries, grep hits and traceback frames, non-zero exit codes, and the exact
  command behind a described shell call. An exit code's evidence is its command followed either by the
  tool's own line (`Exit code: 1`, `<returncode>1</returncode>`) or, as a summary words it, by the code
  in words close after it in the same sentence (`exited with 1`, `exit code 1`, `returned 1`,
  `status 1`; `_stated_code_evidence`). A tool's receipt is none of these: its fixed words and what the
  call's own arguments state (Pi's `Successfully replaced text in f. Changed 12 characters to 18
  characters.`, Claude Code's `File created successfully at: f`, Codex's `Success. Updated the following
  files:` and `M f`, and of tools that edit nothing tau-bench's `Transfer successful`, OpenHands' `Your
  thought has been logged.`, Pi's `(no output)`, the ElevenLabs MCP's `Successfully played audio file: f`;
  `RECEIPTS`) are left out, and the family takes the next outputs in their place, as for any other output
  it leaves out; a receipt that says more (a snippet of the file, a warning, an id the tool made) stays;
- decision: assistant and reasoning sentences that give a reason or choose (because, instead of,
  for consistency, we need to, I plan to, …), and the items of an assistant's closing summary;
- continuation: stated next steps (I'll, let me, now I, next step, …) and the items of a plan or
  next-steps list; the last one the assistant stated is always kept.

Mined probes are deduplicated by answer (a file by its path), then capped per kind and position
(the early, middle and late third of the session, `per_bucket` each; constraints
`CONSTRAINT_FACTOR` times as many, since instructions come in a few long messages, mostly early),
taken evenly within each third, strongest rule first. The two judged families are capped at 30% of
the probes (at least 70% need no model).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from compaction_bench.metrics.grading import anchor, context_parts, is_short, normalize, normalize_joined, presence
from compaction_bench.probes import Probe
from compaction_bench.request import message_from_item
from compaction_bench.transcript import Item, Transcript, answered_call

PER_BUCKET = 5
# Instructions come in a few long messages (AGENTS.md, a command's template), nearly all in the first third.
CONSTRAINT_FACTOR = 3
BUCKETS = ("early", "middle", "late")
JUDGED_SHARE = 0.3
MAX_ANSWER = 300
MAX_LINE = 200
MIN_SENTENCE = 12
KIND_ORDER = ("error", "artifact", "constraint", "recall", "decision", "continuation")

PATH_KEYS = ("file_path", "path", "filePath", "filename", "notebook_path", "file", "input_file_path")
READ_TOOLS = frozenset({"read", "read_file", "readfile", "view", "view_file", "open", "open_file", "cat", "notebookread"})
WRITE_TOOLS = frozenset({"write", "create", "write_file", "create_file"})
EDIT_TOOLS = frozenset({"edit", "multiedit", "edit_file", "str_replace", "notebookedit", "replace", "patch", "apply_patch"})
EDITOR_TOOLS = frozenset({"str_replace_based_edit_tool", "str_replace_editor", "text_editor"})
COMMAND_KEYS = ("command", "cmd", "script")
GENERIC_LINE = re.compile(r"^\s*(?:from \S+ import |import |#!|\"\"\"$|---|@@|\*\*\* (?:Begin|End) Patch|<<)")
PATH_LIKE = re.compile(r"^[\w.~/][\w.~/@+,-]*$")  # a file name as written, not `$tmp`, `=1.11` or a stray token
SHELL_VERBS = frozenset({"touch", "create", "rm", "mv", "cp", "mkdir", "sed", "tee", "git"})
READ_COMMANDS = frozenset({"cat", "sed", "nl", "head", "tail", "grep", "rg", "less", "awk", "find", "ls", "git", "wc", "open", "goto", "search_file", "search_dir"})

PATCH_HEADER = re.compile(r"\*\*\* (Add|Update|Delete) File: ([^\n\\\"]+)|\*\*\* Move to: ([^\n\\\"]+)")
RESULT_PATH = re.compile(
    r"File created successfully at: (?P<created>\S+)|The file (?P<updated>\S+) has been updated"
    r"|Applied \d+ edits? to (?P<applied>\S+?):|^(?P<flag>[AMD]) (?P<listed>\S+)$|^\[File: (?P<opened>\S+) \(\d+ lines total\)\]",
    re.M,
)
VERB = {"A": "created", "M": "edited", "D": "deleted"}

ERROR_LINE = re.compile(
    r"\b[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b:|^\s*(?:error|fatal|ERROR|FATAL|FAILED|FAIL|panic)\b[:\[ ]"
    r"|\berror(?:\[\w+\])?: |\berror TS\d+:|No such file or directory|command not found|No module named|cannot access"
    r"|can't read|[Pp]ermission denied|\bnot found\b|does not exist|timed out|verification failed|Could not resolve"
    r"|syntax error|invalid option|Segmentation fault|cannot open|[Uu]nable to|\bfailed\b|\*\*\* \[\S+\] Error \d+"
)
ERROR_HINT = re.compile(
    r"error|exception|exit|interrupt|fatal|fail|panic|no such|not found|no module|cannot|can't|denied|does not exist|timed out"
    r"|resolve|invalid|segmentation|unable",
    re.I,
)  # a cheap filter before ERROR_LINE
STRONG_ERROR = re.compile(r"\b[\w.]*(?:Error|Exception)\b:|\berror(?:\[\w+\])?:|fatal:|FAILED|\bfailed\b", re.I)
#: An error that names itself: an exception (`ValueError:`) or a compiler's or linter's `error:`.
NAMED_ERROR = re.compile(r"\b[\w.]*(?:Error|Exception)\b:|\berror(?:\[\w+\])?:|fatal:", re.I)
CODE_LINE = re.compile(r"^\s*(?:\d+\s*(?:[→:|\t-]|\s{2})|[+-]\s|>>>|#|//|\w+\s*=|(?:raise|except|def|class|import|from|return|if|assert)\b)")
RETURNCODE = re.compile(r"<returncode>-?\d+</returncode>")
TAGS = re.compile(r"</?tool_use_error>|</?(?:output|returncode|stdout|stderr)>")
NOISE_LINE = re.compile(
    r"^(?:<returncode>-?\d+</returncode>|</?output>|\(Open file: .*\)|\(Current directory: .*\)|bash-\$|Total output lines: \d+"
    r"|Output:|Exit code: \d+|Wall time: .*|Process exited with code \d+|Shell cwd was reset to .*)$"
)
BOILERPLATE = re.compile(
    r"^(?:Plan updated|Todos have been modified successfully|Success\. Updated the following files:|ok|OK|Done!?|None|null|true|false"
    r"|Your command ran successfully and did not produce any output\.|Launching skill: .*|No files found|No matches found)(?:\W|$)"
)
EXIT_CODE = re.compile(
    r"(?:exit code|exited with code|exit status|returned non-zero exit status|Process exited with code)[:\s]+(-?\d+)|<returncode>(-?\d+)</returncode>",
    re.I,
)
TRACE_FRAME = re.compile(r'^\s*File "[^"]+", line \d+, in \S+\s*$', re.M)
FACT_TOKENS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("version", re.compile(r"(?<![\w.])[v^~]?\d+\.\d+\.\d+(?:[-.+]\w+)*")),
    ("hash", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")),
    ("url", re.compile(r"https?://[^\s\"'<>)\]]+")),
    ("port", re.compile(r"(?:localhost|127\.0\.0\.1|0\.0\.0\.0):\d{2,5}|\bport\b\D{0,12}\d{2,5}", re.I)),
    ("id", re.compile(r"\b(?=\w*\d)(?=\w*[a-z])(?=\w*[A-Z])[A-Za-z0-9]{16,}\b")),
    ("package", re.compile(r"@[a-z0-9-]+/[a-z0-9.-]+")),
    ("count", re.compile(r"\b\d+ (?:passed|failed|deselected|skipped|errors?|warnings?|tests?|files?|lines?|items?|matches|selected)\b")),
    ("grep-hit", re.compile(r"^\s*\d+:\S")),
    ("lines-total", re.compile(r"\(\d+ lines total\)")),
    ("json", re.compile(r"^\{.*\}$")),
)
FILENAME = re.compile(r"(?<![\w/.-])[\w./-]+\.(?:py|ts|tsx|js|jsx|json|md|yml|yaml|toml|sql|sh|txt|html|css|go|rs|java|c|h|cpp|plist|cfg|ini)\b")

SENTENCE_SPLIT = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)(?<=[.!?])\s+(?=[A-Z*`\"'(\[])|\n+")
LIST_MARKER = re.compile(r"^\s*(?:[-*+>•]+|#+|\d+[.)]|[a-z][.)])\s+")
LABEL_PREFIX = re.compile(r"^(?:\*\*[^*]{1,60}\*\*|[A-Z][\w /&-]{0,40}):\s+")
IF_CLAUSE = re.compile(r"^(?:If|When|Whenever|Before|After|Once|Unless)\b[^,]{1,120},\s+", re.I)
#: The words of a modal instruction that are no verb of `IMPERATIVE_VERBS` (a capitals heading holds none of them).
MODAL_VERB = re.compile(r"\b(?:MUST|NEVER|ALWAYS|DON'T|SHOULD|SHALL|CANNOT|CAN'T)\b")
MODAL_STRONG = re.compile(r"\b(?:MUST|NEVER|ALWAYS|ONLY|DO NOT|DON'T|CRITICAL|IMPORTANT|REQUIRED|MANDATORY)\b")
MODAL = re.compile(
    r"\b(?:must|never|don't|do not|always|only|cannot|can't|should|shall|required|mandatory|avoid|prefer|need to|make sure|ensure)\b", re.I
)
SPECIFIC = re.compile(r"\d|`[^`]+`|/\w")
PIN = re.compile(r"\b[\w.-]+(?:==|>=|<=|~=)\d[\w.]*|\b(?:Python|Node|version) \d+(?:\.\d+)+")
IMPERATIVE_VERBS = frozenset(
    "add analyze apply ask avoid break build call capture check choose clean commit confirm continue convert copy create define delete "
    "deploy describe document do download edit enable ensure execute explain export extract fill find fix follow generate get give "
    "group handle identify implement import include install keep limit list load log make map mark match merge move name note open "
    "output parse pass pin place prefer prepare print put read record refactor remember remove rename replace report request "
    "reset restart restore return review rewrite run save say search send set show skip sort specify split start stop store "
    "submit summarize switch test toggle track try turn update upgrade use validate verify wait write".split()
)
DECISION = re.compile(
    r"\b(?:because|instead of|rather than|decided|decide to|I chose|we chose|so that|better|for consistency|follow (?:that|the same) pattern"
    r"|the fix (?:should|is|will)|approach|we need to|I need to|I plan to|I'll use|I will use|going with|opt for|trade-?off|prefer)\b"
    r"|^Since\b|\bbessere\b|\bAnsatz\b|\bOption \d",
    re.I,
)
CONTINUATION = re.compile(
    r"\b(?:next,? I|I'll|I will|let me|let's|then I|my plan|the plan is|I'm going to|I am going to|now I|the next step|next steps?"
    r"|now let me|Jetzt|Lass mich|Ich werde)\b",
    re.I,
)
PLAN_HEADING = re.compile(r"\b(?:next steps?|plan|todo|steps|NEXT|Plan zur|Nächste Schritte)\b[^\n]{0,40}:?\s*\**\s*$", re.I)
HEADING_LINE = re.compile(r"^\s*\*\*([^*\n]{4,80})\*\*\s*$")
WORD = re.compile(r"[^\W\d_][\w.-]{3,}")
#: A constraint's values: numbers, versions, names in backticks, paths.
VALUE = re.compile(r"`[^`\n]+`|(?<![\w.])\d+(?:[.:]\d+)*(?![\w])|(?<!\w)[\w.-]*/[\w./-]+")
#: A later instruction that changes an earlier one: `instead`, `no longer`, `anymore`, or a change verb and its target
#: (`switch to`, `change the port to`), at most three words apart: the noun in `after this change those queues will never
#: be consumed and any job routed to them` or `a change fee if needed, up to $100` is not one.
CHANGE = re.compile(r"\b(?:instead|no longer|any ?more)\b|\b(?:change|switch|move|update)\w*\s+(?:\S+\s+){0,3}?to\b", re.I)
REVOKE = re.compile(r"\b(?:no longer|any ?more)\b", re.I)
#: The change verbs themselves: a change word two sentences share is not a subject they share.
CHANGE_WORD = re.compile(r"(?:change|move|update)[sd]?|(?:chang|mov|updat)ing|switch(?:es|ed|ing)?")
#: How far (normalized characters) a call's command may be from the output it anchors (RE2 repeats at most 1000).
MAX_GAP = 800
#: How much of a command's first line (normalized characters) names it in evidence.
COMMAND_HEAD = 60
#: How a summary words an exit code just before the number (normalized): `exit code 1`, `exit code: 1`, `exited with 1`,
#: `exited with code 1`, `returned 1`, `returned non-zero exit status 1`, `return code 1`, `status 1`, `(exit 1)`,
#: `rc=1`. A verb that names no code by itself needs a code word (`failed with exit code 1`, not `failed 1`).
CODE_WORD = r"(?:an? )?(?:non-?zero )?(?:exit |return |status )?(?:code|status)"
CODE_STATEMENT = (
    rf"\b(?:(?:exit(?:ed|s)?|return(?:ed|s)?)(?: with)?(?: {CODE_WORD})?|(?:failed|finished|ended|terminated)(?: with)? {CODE_WORD}"
    rf"|{CODE_WORD}|returncode|rc)(?: (?:of|was|is|=))?[:=]? ?\(?"
)
#: What may follow a stated code: the end, punctuation, a non-letter or a word that opens a clause, not a noun the
#: number counts (`returned 1 match`, `exited with 1 error`).
CODE_END = r"(?:$|[^\w\s.]|\.(?:$|\W)|\s(?:[^a-z\s]|(?:and|but|so|then|after|because|since|while|when|as|on|in|with|due|from|at|for)\b))"
#: Between a command (and its closing backtick) and the statement of its code: at most this many characters (or
#: pairs), none a backtick (another quoted command) and no sentence or list-item end (`. `, `! `, `? `, `- `).
STATED_GAP = 60
#: At most this much of a command after its head may come before its code (a longer command is cut short in a summary).
STATED_REST = 300
STATED_LINK = rf"(?:[^`.!?-]|[.!?-][^\s`]){{0,{STATED_GAP}}}?"
CD_PREFIX = re.compile(r"^cd\s+\S+\s*(?:&&|;)\s*")
STOPWORDS = frozenset(
    "this that with from have will would should could there their them then than what when where which while "
    "your yours into about just also only must never always don't make sure like want need here some more "
    "because instead rather decided next plan going let's each every please these those other".split()
)


@dataclass(frozen=True)
class _Candidate:
    kind: str
    rule: str
    question: str
    answer: str | tuple[str, ...]
    source: str
    match: str = "contains"
    evidence: str | None = None
    strength: int = 1  # 0 strongest: taken first within its kind and position
    key: str = field(default="", compare=False)  # dedupe key (default: the normalized answer)


# --------------------------------------------------------------------------- text helpers
def _arguments(item: Item) -> dict:
    try:
        data = json.loads(item.arguments or "")
    except (json.JSONDecodeError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _command(item: Item) -> str:
    """The shell command a call ran ('' for an editor tool, whose `command` is its sub-command, `view`)."""
    if (item.tool_name or "").lower() in EDITOR_TOOLS:
        return ""
    args = _arguments(item)
    for key in COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, list) and value:
            value = value[-1]  # ["bash", "-lc", "..."]: the script
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _in(item: Item, text: str) -> bool:
    """The text occurs verbatim in the item (its text or its call arguments)."""
    return bool(text) and (text in item.text or text in (item.arguments or ""))


def _short(text: str, limit: int = 80) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _lines(text: str) -> list[str]:
    """The meaningful lines of a tool output: tags, wrappers and shell chrome removed, stripped."""
    out = []
    for raw in TAGS.sub("\n", RETURNCODE.sub("\n", text)).splitlines():
        line = raw.strip()
        if line and not NOISE_LINE.match(line):
            out.append(line)
    return out


def _clean(line: str) -> str:
    """A line without its list marker or decorative rule (`=== 3 passed ===`), still a substring."""
    line = LIST_MARKER.sub("", line, count=1).strip()
    return line.strip("=").strip() or line


def _sentences(text: str) -> Iterator[str]:
    for raw in SENTENCE_SPLIT.split(text):
        sentence = LIST_MARKER.sub("", raw.strip(), count=1).strip()
        if MIN_SENTENCE <= len(sentence) <= MAX_ANSWER and sentence in text:
            yield sentence


def _topic(sentence: str, exclude: re.Pattern[str] | None = None) -> str:
    """A few content words of the sentence that point a question at it."""
    text = exclude.sub(" ", sentence) if exclude else sentence
    words = [w.strip(".-`*") for w in WORD.findall(text) if w.lower() not in STOPWORDS]
    return ", ".join(dict.fromkeys(w for w in words if len(w) > 3)) if words else ""


def _topic_words(sentence: str, exclude: re.Pattern[str] | None = None, n: int = 4) -> str:
    return ", ".join(_topic(sentence, exclude).split(", ")[:n])


def _evidence(answer: str, line: str) -> str | None:
    """A regex of the normalized line that states a short answer (None when the answer is long enough)."""
    if not is_short(answer) or answer not in line:
        return None
    return re.escape(normalize(line))


def _evidence_in(item: Item, answer: str, reach: int = 60) -> str | None:
    """The evidence of a short answer in its source item: the words around it on its line."""
    for text in (item.text, item.arguments or ""):
        at = text.find(answer)
        if at >= 0:
            start = max(text.rfind("\n", 0, at) + 1, at - reach)
            end = text.find("\n", at + len(answer))
            end = min(end if end >= 0 else len(text), at + len(answer) + reach)
            return _evidence(answer, text[start:end])
    return None


def _token_regex(phrase: str) -> str:
    """A regex (RE2: no look-around) of the normalized phrase as a whole token, as grading takes one."""
    return rf"(?:^|[^\w.]){re.escape(normalize(phrase))}(?:$|[^\w.]|\.(?:$|\W))"


def _has_token(phrase: str, text: str) -> bool:
    """The phrase occurs in the text: normalized, and as a whole token when it is short."""
    if not is_short(phrase):
        return normalize(phrase) in normalize(text)
    return re.search(_token_regex(phrase), normalize(text)) is not None


def _call_anchor(call: Item) -> str:
    """A distinctive normalized piece of a call that every rendering of it holds (the transcript's `name {arguments}`,
    Aider's `name(arguments)`): the first line of its command as the arguments hold it (as written, else JSON-escaped),
    else the start of its arguments, else its name."""
    arguments = normalize(call.arguments or "")
    line = _command(call).split("\n")[0]
    for form in (line, json.dumps(line, ensure_ascii=False)[1:-1]):
        command = normalize(form)[:COMMAND_HEAD].strip()
        if len(command) >= 4 and command in arguments:
            return command
    head = arguments[:COMMAND_HEAD].strip()
    return head if len(head) >= 4 else normalize(call.tool_name or "")


def _output_evidence(transcript: Transcript, call: Item | None, result: Item, phrase: str) -> str | None:
    """The evidence of a short fact of a call's output: the call (its command) and, at most `MAX_GAP` later, the
    phrase as a whole token (None: no call, or too far apart to anchor, and then no probe)."""
    if call is None:
        return None
    start, end = transcript.position(call.id), transcript.position(result.id)
    segment = normalize_joined(context_parts([message_from_item(i) for i in transcript.items[start : end + 1] if i.kind != "marker"]))
    head = _call_anchor(call)
    at = segment.find(head)
    found = re.compile(_token_regex(phrase)).search(segment, at + len(head)) if at >= 0 else None
    if found is None or found.start() - (at + len(head)) > MAX_GAP:
        return None
    return f"{re.escape(head)}.{{0,{min(1000, found.start() - at - len(head) + 200)}}}?{_token_regex(phrase)}"


def _stated_code_evidence(call: Item, code: str) -> str | None:
    """The evidence of an exit code stated in words, as a summary keeps it: the command (the start of its first line,
    without a leading `cd DIR &&`), the rest of it and a closing backtick, then `STATED_LINK` and a statement of the
    code (`CODE_STATEMENT`, then the code as a whole number, `CODE_END`). The code stays tied to its command: the `1` of
    `line 1`, or of `exit code 1` after another quoted command or in the next sentence, is not in it. None: no command."""
    line = _command(call).split("\n")[0].strip()
    line = CD_PREFIX.sub("", line) or line
    command = normalize(line)
    head = command[:COMMAND_HEAD].strip()
    if len(head) < 4:
        return None
    rest = min(STATED_REST, len(command) - len(head))
    return f"{re.escape(head)}[^`]{{0,{rest}}}`?{STATED_LINK}{CODE_STATEMENT}{re.escape(code)}{CODE_END}"


def _request_label(user: Item | None) -> str:
    return f"the request that begins {_short(user.text, 60)!r}" if user and user.text.strip() else "the opening request"


def _results(transcript: Transcript) -> dict[str, list[Item]]:
    """The results of each call, by the call's item id. A result answers a call before it with its call id that is
    not answered yet, as the wire pairs them (`answered_call`: the oldest such call in the newest response that has
    one), else the last call of its id (another result of an answered call): a recorder may reuse a call id once its
    call is answered (`scenarios/builder.py`; 71 ids in tau-bench's `gpt-4o-airline.json`, 8 in SWE-agent's
    marshmallow replays), and a call left unanswered (aborted) does not take the result of a later call of its id.
    Grouped by call id alone, each call of a reused id took every result of it (`get_reservation_details` on
    `MUGYUB` "output" `Transfer successful`)."""
    items = transcript.items
    waiting: dict[str, list[int]] = {}  # call id -> positions of its calls not answered yet, oldest first
    last: dict[str, int] = {}
    by_call: dict[str, list[Item]] = {}
    for n, item in enumerate(items):
        call_id = item.call_id or ""
        if item.kind == "tool_call" and call_id:
            waiting.setdefault(call_id, []).append(n)
            last[call_id] = n
        elif item.kind == "tool_result" and call_id in last:
            pending = waiting[call_id]
            by_call.setdefault(items[answered_call(pending, items) if pending else last[call_id]].id, []).append(item)
    return by_call


def _calls(transcript: Transcript) -> Iterator[tuple[Item, list[Item]]]:
    by_call = _results(transcript)
    for item in transcript.items:
        if item.kind == "tool_call":
            yield item, by_call.get(item.id, [])


def _tool_label(call: Item | None) -> str:
    """The call named by its command, else its sub-command and target (the file or first argument)."""
    if call is None:
        return "a tool call"
    name = call.tool_name or "tool"
    what = _short(_command(call) or "", 70)
    if what:
        return f"the `{name}` call `{what}`"
    args = _arguments(call)
    sub = args.get("command") if (call.tool_name or "").lower() in EDITOR_TOOLS else None
    target = next((args[k] for k in PATH_KEYS if isinstance(args.get(k), str) and args[k].strip()), None)
    target = target or next((v for v in args.values() if isinstance(v, str) and v.strip() and v != sub), None)
    parts = [f"`{name}`"] + ([f"`{sub}`"] if isinstance(sub, str) and sub.strip() else [])
    return f"the {' '.join(parts)} call" + (f" on `{_short(target, 70)}`" if target else "")


def _reads_file(call: Item | None) -> bool:
    """A call whose output is a file's contents (an error-looking line there is code, not a failure)."""
    if call is None:
        return False
    name = (call.tool_name or "").lower()
    args = _arguments(call)
    if name in READ_TOOLS or (name in EDITOR_TOOLS and args.get("command") == "view"):
        return True
    command = _command(call)
    programs = [p for p in _programs(command) if p != "cd"]  # `cd /testbed && cat f` reads f
    return bool(programs) and all(p in READ_COMMANDS for p in programs) and next(_shell_artifacts(command), None) is None


def _programs(command: str) -> list[str]:
    """The program of each simple command of a shell script (heredoc bodies left out)."""
    return [words[0] for words in (segment.split() for segment in _segments(command)) if words]


def _exit_code(text: str) -> re.Match[str] | None:
    """The exit code a tool output reports (at its start or its end, where tools put it)."""
    return EXIT_CODE.search(text[:400]) or (EXIT_CODE.search(text[-400:]) if len(text) > 400 else None)


def _failed(result: Item) -> bool:
    code = _exit_code(result.text)
    return result.is_error or bool(code and (code.group(1) or code.group(2)) not in ("0", None))


# --------------------------------------------------------------------------- errors
def _error_like(text: str) -> bool:
    return bool(ERROR_HINT.search(text)) and bool(ERROR_LINE.search(text))


def _error_lines(text: str, call: Item | None, failed: bool) -> list[str]:
    reads = _reads_file(call)
    own = tuple(f"{p}: " for p in _programs(_command(call))) if call else ()  # `cat: f: No such file or directory`
    hits = []
    for raw in _lines(text):
        line = _clean(raw)
        if not (8 <= len(line) <= MAX_ANSWER) or not _error_like(line) or line.startswith("Traceback"):
            continue
        if CODE_LINE.match(raw) and not STRONG_ERROR.search(line):
            continue
        if reads and not failed and not line.startswith(own):
            continue  # a file's or a search's contents, not the tool's own failure
        hits.append(line)
    return hits


def _errors(transcript: Transcript) -> Iterator[_Candidate]:
    for call, results in _calls(transcript):
        for result in results:
            if not result.text.strip():
                continue
            subject = _tool_label(call)
            inner = TAGS.sub("", result.text).strip()
            if _has_token(inner, call.arguments or ""):
                continue  # the call printed its own argument (`echo "error: …"`): not a fact of the output
            if result.is_error and 8 <= len(inner) <= MAX_ANSWER and inner.count("\n") <= 2 and _in(result, inner):
                yield _Candidate("error", "error.flagged-result", f"What error did {subject} return?", inner, result.id, strength=0)
                continue
            lines = _error_lines(result.text, call, _failed(result))
            # the last line that names an error (`E999 IndentationError: …`, not a tool's advice after it), unless that is
            # the first line (`error: linker …` before `make: *** … Error 1`): then the last line; and the first (the cause)
            named = [line for line in lines if NAMED_ERROR.search(line)][-1:]
            last = named if named and named != lines[:1] else lines[-1:]
            picked = dict.fromkeys([*last, *lines[:1]])
            for n, line in enumerate(p for p in picked if not _has_token(p, call.arguments or "")):
                rule = "error.last-line" if n == 0 else "error.first-line"
                question = f"What exact error did {subject} report?" if n == 0 else f"What error did {subject} report first?"
                yield _Candidate("error", rule, question, line, result.id, strength=0 if STRONG_ERROR.search(line) else 1)
    for item in transcript.real_user_messages():
        for raw in _lines(item.text):
            line = _clean(raw)
            if 8 <= len(line) <= MAX_ANSWER and STRONG_ERROR.search(line) and _in(item, line):
                question = f"Which error did the user quote in the message that begins {_short(item.text, 50)!r}?"
                yield _Candidate("error", "error.user-quoted", question, line, item.id, strength=0)


# --------------------------------------------------------------------------- artifacts
def _segments(command: str) -> Iterator[str]:
    """The simple commands of a shell script (heredoc bodies left out)."""
    body_end: str | None = None
    for line in command.splitlines():
        if body_end is not None:
            if line.strip() == body_end:
                body_end = None
            continue
        heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if heredoc:
            body_end = heredoc.group(1)
        yield from (s.strip() for s in re.split(r"&&|\|\||;|\|", line) if s.strip())


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=False)
    except ValueError:
        return []


def _shell_artifacts(command: str) -> Iterator[tuple[str, str]]:
    """(verb, path) for files a shell command writes, creates, moves or deletes."""
    for segment in _segments(command):
        for target in re.findall(r"(?<![0-9&>=])>{1,2}(?!=)\s*([^\s;&|<>]+)", segment):
            target = target.strip("'\"")
            if PATH_LIKE.match(target) and not target.startswith("/dev/"):
                yield "wrote", target
        if (segment.split() or [""])[0] not in SHELL_VERBS:
            continue
        words = _words(re.sub(r"<<-?\s*['\"]?\w+['\"]?", " ", re.sub(r"(?<![0-9&>])>{1,2}\s*[^\s;&|<>]+", " ", segment)))
        if not words:
            continue
        head, args = words[0], [w for w in words[1:] if not w.startswith("-")]
        if head == "git" and args[:1] in (["mv"], ["rm"]):
            head, args = args[0], args[1:]
        args = [a for a in args if PATH_LIKE.match(a)]
        if head in ("touch", "create") and args:
            yield from (("created", a) for a in args)
        elif head == "rm" and args:
            yield from (("deleted", a) for a in args)
        elif head in ("mv", "cp") and len(args) >= 2:
            yield ("moved" if head == "mv" else "copied"), args[-1]
        elif head == "mkdir" and args:
            yield from (("created the directory", a) for a in args)
        elif head == "sed" and any(w.startswith("-i") for w in words[1:]) and len(args) >= 2:
            yield "edited", args[-1]
        elif head == "tee" and args:
            yield from (("wrote", a) for a in args)


def _content_hint(call: Item) -> str:
    """A short excerpt of what a write or edit put in (or replaced), to tell files apart in a question."""
    args = _arguments(call)
    for key in ("old_string", "content", "file_text", "new_string"):
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return _short(value, 50)
    edits = args.get("edits")
    if isinstance(edits, list) and edits and isinstance(edits[0], dict) and isinstance(edits[0].get("old_string"), str):
        return _short(edits[0]["old_string"], 50)
    command = _command(call)
    if command:  # a heredoc's or a patch's first telling line
        body = command.splitlines()[1:]
        lines = [b[1:] if b.startswith(("+", "-")) and not b.startswith(("+++", "---", "***")) else b for b in body]
    else:
        lines = [b[1:] for b in (call.arguments or "").replace("\\n", "\n").splitlines() if b.startswith(("+", "-"))]
    for line in lines:
        if len(line.strip()) > 10 and not GENERIC_LINE.match(line) and not line.startswith("***"):
            return _short(line, 50)
    return ""


def _call_artifacts(call: Item) -> Iterator[tuple[str, str]]:
    name = (call.tool_name or "").lower()
    args = _arguments(call)
    for verb, path, moved in PATCH_HEADER.findall(call.arguments or ""):
        if moved:
            yield "moved", moved.strip()
        else:
            yield {"Add": "created", "Update": "edited", "Delete": "deleted"}[verb], path.strip()
    path = next((args[k] for k in PATH_KEYS if isinstance(args.get(k), str) and args[k].strip()), None)
    if path and name not in READ_TOOLS:
        if name in EDITOR_TOOLS:
            command = args.get("command")
            if command != "view":
                yield ("created" if command == "create" else "edited"), path
        elif name in WRITE_TOOLS:
            yield "wrote", path
        elif name in EDIT_TOOLS:
            yield "edited", path
    command = _command(call)
    if command:
        yield from _shell_artifacts(command)


def _artifact_question(verb: str, call: Item | None, label: str) -> str:
    hint = _content_hint(call) if call is not None else ""
    if verb in ("edited",) and hint:
        return f"Which file did the assistant edit to change {hint!r} (while working on {label})?"
    if verb in ("wrote", "created") and hint:
        return f"Which file did the assistant write with content beginning {hint!r}?"
    what = "directory" if verb.endswith("directory") else "file"
    verb = verb.removesuffix(" the directory")
    tool = f" with `{call.tool_name}`" if call is not None and call.tool_name else ""
    return f"Which {what} did the assistant {_present(verb)}{tool} while working on {label}?"


def _present(verb: str) -> str:
    return {"wrote": "write", "created": "create", "edited": "edit", "deleted": "delete", "moved": "move a file to", "copied": "copy a file to"}.get(
        verb, verb
    )


def _artifacts(transcript: Transcript) -> Iterator[_Candidate]:
    by_call = _results(transcript)
    for turn in transcript.turns():
        label = _request_label(turn.user)
        reads: list[str] = []
        complete = ""  # the read that completed the set: the first read of its last member in this turn
        for call in (i for i in turn.items if i.kind == "tool_call"):
            name = (call.tool_name or "").lower()
            path = next((_arguments(call)[k] for k in PATH_KEYS if isinstance(_arguments(call).get(k), str)), None)
            if path and (name in READ_TOOLS or (name in EDITOR_TOOLS and _arguments(call).get("command") == "view")):
                if path not in reads and _in(call, path):
                    reads.append(path)
                    complete = call.id
            for verb, target in _call_artifacts(call):
                if _in(call, target) and len(target) > 1:
                    question = _artifact_question(verb, call, label)
                    yield _Candidate("artifact", f"artifact.{'call' if _command(call) == '' else 'shell'}-{verb.split()[0]}", question,
                                     target, call.id, strength=0, key=target)
            for result in by_call.get(call.id, []):
                for match in RESULT_PATH.finditer(TAGS.sub("", result.text)):
                    if match.group("opened") and name != "edit":
                        continue
                    target = next(g for g in (match.group(k) for k in ("created", "updated", "applied", "listed", "opened")) if g)
                    verb = "created" if match.group("created") else VERB.get(match.group("flag") or "M", "edited")
                    if _in(result, target):
                        question = _artifact_question(verb, call, label)
                        yield _Candidate("artifact", f"artifact.result-{verb}", question, target, result.id, strength=0, key=target)
        if reads:
            question = f"Which files did the assistant read while working on {label}?"
            yield _Candidate("artifact", "artifact.read-set", question, tuple(reads), complete, match="set",
                             strength=1, key="read:" + "|".join(reads))


# --------------------------------------------------------------------------- constraints
def _demonstration(item: Item) -> bool:
    """A demonstration: an example of another task shown to the agent (`meta["demonstration"]`). Its
    sentences are that task's: one states an instruction here only where this session's own messages
    say it too, and none changes an instruction."""
    return bool(item.meta.get("demonstration"))


def _imperative(sentence: str) -> bool:
    text = IF_CLAUSE.sub("", LABEL_PREFIX.sub("", sentence, count=1), count=1)
    first = re.match(r"[A-Za-z]+", text)
    return first is not None and first.group(0).lower() in IMPERATIVE_VERBS and first.group(0)[0].isupper()


def _heading(sentence: str) -> bool:
    """A title in capitals with no verb of an instruction (`MANDATORY RESPONSE FORMAT`; `NEVER COMMIT SECRETS` is one)."""
    words = re.findall(r"[A-Za-z']+", sentence)
    return (
        sentence == sentence.upper() and not sentence.rstrip("*_ ").endswith((".", "!"))
        and not any(w.lower() in IMPERATIVE_VERBS for w in words) and not MODAL_VERB.search(sentence)
    )


def _introduced(text: str, sentence: str) -> str | None:
    """What a lead-in (`You MUST use this EXACT command to submit:`) introduces when that is one line of code:
    the only line of the fenced block right after it. None for anything else (a list, prose, a longer block)."""
    rest = text[text.find(sentence) + len(sentence):].lstrip("*_ \t").lstrip("\n")
    if not rest.startswith("```"):
        return None
    lines = rest.split("\n")[1:]
    end = next((n for n, line in enumerate(lines) if line.strip().startswith("```")), None)
    body = [line.strip() for line in lines[:end] if line.strip()] if end is not None else []
    return body[0] if len(body) == 1 and MIN_SENTENCE <= len(body[0]) <= MAX_ANSWER else None


def _constraints(transcript: Transcript) -> Iterator[_Candidate]:
    # a message the agent program composed itself (`meta["from_agent"]`: Aider's command output or lint errors
    # sent as a user message) carries tool output and the program's boilerplate, no one's instructions
    users = [i for i in transcript.items if i.kind == "user" and not i.meta.get("from_agent")]
    own = {normalize(s) for i in users if not _demonstration(i) for s in _sentences(i.text)}
    for item in users:
        who = "the user" if item.is_real_user else "the injected instructions"
        for sentence in _sentences(item.text):
            if CODE_LINE.match(sentence) or _error_like(sentence) or sentence.endswith("?") or len(sentence.split()) < 3:
                continue  # pasted code, a pasted error, a question or a heading: not an instruction
            if _demonstration(item) and normalize(sentence) not in own:
                continue  # another task's sentence (the session's own restatement is asked from the demonstration)
            if _heading(sentence):
                continue
            # a lead-in to one line (`You MUST use this EXACT command to submit:` and the command) asks for that
            # line with the lead-in's words; a lead-in to a list or a block is asked as it is (it may state a rule)
            introduced = _introduced(item.text, sentence) if sentence.rstrip("*_ ").endswith(":") else None
            answer = introduced or sentence
            if MODAL_STRONG.search(sentence):
                rule, strength = "constraint.modal", 0
            elif MODAL.search(sentence):
                rule, strength = "constraint.modal", 1
            elif PIN.search(sentence):
                rule, strength = "constraint.pin", 1
            elif _imperative(sentence):
                rule, strength = "constraint.imperative", 2
            else:
                continue
            topic = _topic_words(sentence, MODAL)
            if topic:
                strength -= item.is_real_user  # what a real user typed comes first
                strength -= bool(SPECIFIC.search(sentence))  # a number, a name in backticks, a path
                question = f"What did {who} say about {topic}?"
                yield _Candidate("constraint", rule, question, answer, item.id, strength=strength)


# --------------------------------------------------------------------------- receipts
def _utf16_length(text: str) -> int:
    """A JavaScript string's `length` (UTF-16 code units): what Pi's receipts count as characters and bytes."""
    return len(text.encode("utf-16-le")) // 2


def _named_paths(call: Item) -> list[str]:
    """The paths a file-tool call names: its path arguments, else the words of its command after the program
    (SWE-agent's `create reproduce.py`)."""
    args = _arguments(call)
    named = [v.strip() for k in PATH_KEYS if isinstance(v := args.get(k), str) and v.strip()]
    return named or _words(_command(call))[1:]


def _names(call: Item, path: str) -> bool:
    """The receipt's path is one the call names, as given or made absolute (SWE-agent prints `realpath`)."""
    return any(path == p or path.endswith("/" + p.removeprefix("./")) for p in _named_paths(call))


def _pi_edit_stated(call: Item, found: re.Match[str]) -> bool:
    args = _arguments(call)
    old, new = args.get("oldText"), args.get("newText")
    if not _names(call, found["path"]):
        return False
    if found["old"] is None:
        return True
    return isinstance(old, str) and isinstance(new, str) and (int(found["old"]), int(found["new"])) == (_utf16_length(old), _utf16_length(new))


def _pi_write_stated(call: Item, found: re.Match[str]) -> bool:
    content = _arguments(call).get("content")
    return _names(call, found["path"]) and isinstance(content, str) and int(found["size"]) == _utf16_length(content)


def _path_stated(call: Item, found: re.Match[str]) -> bool:
    return _names(call, found["path"])


def _replace_all_stated(call: Item, found: re.Match[str]) -> bool:
    return _names(call, found["path"]) and _arguments(call).get("replace_all") is True


def _patch_stated(call: Item, found: re.Match[str]) -> bool:
    """Every file the summary lists is a file header of the patch the call sent (`*** Update File: f` → `M f`)."""
    headers = {(m.group(2) or m.group(3)).strip() for m in PATCH_HEADER.finditer(call.arguments or "")}
    return all(line[2:] in headers for line in found["listed"].split("\n") if line)


def _called(*names: str) -> Callable[[Item, re.Match[str]], bool]:
    """A wording with no variable part is the acknowledgement only of the tool that words it so (by its name)."""
    return lambda call, _found: (call.tool_name or "") in names


#: Tools' fixed acknowledgements (`pattern`, matched against the whole of the output's meaningful lines, `_lines`,
#: or the text of an MCP `TextContent` recorded whole, `_mcp_text`) and whether the call's arguments state all the
#: rest of one (`stated`): edit and write receipts, and the fixed words of tools that edit nothing. Such a receipt
#: answers nothing the call did not say: a probe on it rewards keeping raw recent tool output, not knowing a fact.
#: One that says more (a diff or a `cat -n` snippet, a warning but bash's here-document one, a note that the user changed the edit, an id or a
#: file name the tool made, a verdict such as tau-bench's `Error: not enough seats on flight HAT290` or EnIGMA's
#: `Wrong flag!`) is no receipt.
RECEIPTS: tuple[tuple[re.Pattern[str], Callable[[Item, re.Match[str]], bool]], ...] = (
    # Pi `edit`: `Successfully replaced text in ${path}. Changed ${oldText.length} characters to ${newText.length}
    # characters.` (badlogic/pi-mono packages/coding-agent/src/core/tools/edit.ts@65fb9116 L239; from 8c43a9fb on
    # only `Successfully replaced text in ${path}.`, the diff going to `details`, edit.ts@83378aad L205)
    (re.compile(r"Successfully replaced text in (?P<path>.+?)\.(?: Changed (?P<old>\d+) characters to (?P<new>\d+) characters\.)?"),
     _pi_edit_stated),
    # Pi `write`: `Successfully wrote ${content.length} bytes to ${path}` (pi-mono packages/coding-agent/src/core/tools/write.ts@83378aad L97)
    (re.compile(r"Successfully wrote (?P<size>\d+) bytes to (?P<path>.+)"), _pi_write_stated),
    # Claude Code `Write` of a new file: `File created successfully at: ${filePath}` (BelovedYaoo/claude-code-source
    # src/tools/FileWriteTool/FileWriteTool.ts@1e87ff61 L405; so recorded by Claude Code 1.0.98 and 2.0.57 in the
    # corpora); OpenHands' `str_replace_editor` `create` words it alike (OpenHands/software-agent-sdk
    # openhands-tools/openhands/tools/file_editor/editor.py@611629e6 L128)
    (re.compile(r"File created successfully at: (?P<path>.+)"), _path_stated),
    # later Claude Code `Edit`/`Write` of an existing file (FileEditTool.ts@1e87ff61 L569 and L562, FileWriteTool.ts L411);
    # before, `… has been updated. Here's the result of running `cat -n` on a snippet of the edited file:` and the
    # snippet, which is no receipt
    (re.compile(r"The file (?P<path>.+) has been updated successfully\."), _path_stated),
    (re.compile(r"The file (?P<path>.+) has been updated\. All occurrences were successfully replaced\."), _replace_all_stated),
    # Codex `apply_patch`: `Success. Updated the following files:` and a line `A|M|D path` per file (bfloat16/codex
    # codex-rs/apply-patch/src/lib.rs@3aae5d88 L876, print_summary); `BOILERPLATE` kept it from being asked whole, not
    # its lines (`M opk/cli/__main__.py` was asked as a line with a file name)
    (re.compile(r"Success\. Updated the following files:(?P<listed>(?:\n[AMD] .+)+)"), _patch_stated),
    # SWE-agent `create f`: writes one empty line and opens the file, `[File: $(realpath f) (1 lines total)]` and
    # `1:` (SWE-agent/SWE-agent config/commands/defaults.sh@5b143857 L159-176, `_print` L3); with the cursor commands
    # between cursor marks, the cursors moved to that line (config/commands/cursors_defaults.sh@5b143857 L6-80)
    (re.compile(r"\[File: (?P<path>.+) \(1 lines total\)\]\n(?:<<<<< START CURSOR >>>>>\n1:\n<<<<< END CURSOR >>>>>"
                r"(?:\n(?:START|END)_CURSOR moved to 1){0,2}|1:)"), _path_stated),
    # tau-bench `transfer_to_human_agents`: `Transfer successful`, whatever the summary (sierra-research/tau-bench
    # tau_bench/envs/airline/tools/transfer_to_human_agents.py@59a200c6 L13, retail/tools/… L11)
    (re.compile(r"Transfer successful"), _called("transfer_to_human_agents")),
    # OpenHands `think`: `Your thought has been logged.` (All-Hands-AI/OpenHands openhands/runtime/base.py@156d0686
    # L972, AgentThinkObservation; OpenHands/software-agent-sdk openhands-sdk/openhands/sdk/tool/builtins/think.py@611629e6 L78)
    (re.compile(r"Your thought has been logged\."), _called("think")),
    # Pi `bash` when the command printed nothing and exited 0 (a non-zero exit is an error result): `(no output)`
    # (badlogic/pi-mono packages/coding-agent/src/core/tools/bash.ts@83378aad L259; src/tools/bash.ts@ffc9be88 L29),
    # as SWE-agent's `Your command ran successfully and did not produce any output.` (`BOILERPLATE`)
    (re.compile(r"\(no output\)"), _called("bash")),
    # ElevenLabs MCP `play_audio`: `Successfully played audio file: {file_path}`, the `input_file_path` it was given
    # resolved (elevenlabs/elevenlabs-mcp elevenlabs_mcp/server.py@c93b790e L1298-1301, utils.py handle_input_file L191)
    (re.compile(r"Successfully played audio file: (?P<path>.+)"), _path_stated),
)


def _mcp_text(body: str) -> str | None:
    """The text of an MCP `TextContent` recorded whole, as the corpora's Claude Code sessions record the ElevenLabs
    server's (`{"type":"text","text":"…","annotations":null,"_meta":null}`; modelcontextprotocol/python-sdk
    src/mcp-types/mcp_types/_types.py@57394b05 L1150), its meaningful lines; None for any other output."""
    if not body.startswith("{"):
        return None
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return None
    if isinstance(data, dict) and data.get("type") == "text" and isinstance(text := data.get("text"), str):
        return "\n".join(_lines(text))
    return None


#: bash's warning for a here-document whose delimiter never came (`bash: line 3: warning: here-document at line 1
#: delimited by end-of-file (wanted `PATCH')`; GNU bash 5.2, printed as such by `bash -c 'cat <<EOF'` with no `EOF`
#: line): the shell ran the command anyway, and the warning says nothing of what the command did. Codex rollouts put
#: it before `apply_patch` summaries sent through a here-document (5 recall probes of OpenPrintKit's two rollouts asked for it).
HEREDOC_WARNING = re.compile(r"(?:[\w./-]+: (?:line \d+: )?)?warning: here-document at line \d+ delimited by end-of-file \(wanted `[^']*'\)")


def _receipt(call: Item, lines: Sequence[str]) -> bool:
    """The output, its meaningful lines (`_lines`) or the text of an MCP `TextContent` they are (`_mcp_text`), is a
    tool's fixed acknowledgement of this call (`RECEIPTS`), a shell's here-document warning before it or not
    (`HEREDOC_WARNING`)."""
    body = "\n".join(line for line in lines if not HEREDOC_WARNING.fullmatch(line))
    for text in dict.fromkeys(t for t in (body, _mcp_text(body)) if t is not None):
        for pattern, stated in RECEIPTS:
            found = pattern.fullmatch(text)
            if found and stated(call, found):
                return True
    return False


# --------------------------------------------------------------------------- recall
def _fact_lines(lines: Sequence[str]) -> Iterator[tuple[str, str]]:
    for raw in lines:
        line = _clean(raw)
        if not (4 <= len(line) <= MAX_LINE) or TRACE_FRAME.match(line):
            continue  # (the last traceback frame is its own rule)
        for name, pattern in FACT_TOKENS:
            if pattern.search(line if name not in ("grep-hit", "json") else raw):
                yield name, line
                break
        else:
            if FILENAME.search(line) and len(line) <= 120:
                yield "filename", line


def _describe(transcript: Transcript, call: Item) -> str:
    """What a call was for: its description argument, else the reasoning heading or sentence just before it."""
    description = _arguments(call).get("description")
    if isinstance(description, str) and description.strip():
        return description.strip().rstrip(".")
    position = transcript.position(call.id)
    for item in reversed(transcript.items[max(0, position - 4) : position]):
        if item.turn != call.turn:
            break  # a closing message of the previous request is not this call's purpose
        if item.kind in ("assistant", "reasoning") and item.text.strip():
            heading = HEADING_LINE.match(item.text.strip().splitlines()[0])
            if heading:
                return heading.group(1).strip()
            sentences = [s for s in _sentences(item.text)]
            if sentences:
                return sentences[-1].rstrip(":.")
    return ""


def _recalls(transcript: Transcript) -> Iterator[_Candidate]:
    for call, results in _calls(transcript):
        command = _command(call)
        for result in results:
            text = result.text
            if not text.strip() or result.is_error:
                continue
            lines = _lines(text)
            if _receipt(call, lines):
                continue  # a tool's fixed acknowledgement of what the call said
            subject = _tool_label(call)
            code = _exit_code(text)
            value = code and (code.group(1) or code.group(2))
            if code and value and value != "0" and not _has_token(code.group(0), call.arguments or ""):
                evidence = _output_evidence(transcript, call, result, code.group(0))  # `exit code: 1` of this command
                stated = _stated_code_evidence(call, value)  # `pytest -x` exited with 1, as a summary says it
                if evidence and stated:
                    evidence = f"(?:{evidence})|(?:{stated})"
                if evidence:
                    yield _Candidate("recall", "recall.exit-code", f"What exit code did {subject} return?", value, result.id,
                                     match="number", evidence=evidence, strength=0)
            if _reads_file(call) and len(lines) > 6:
                continue
            body = "\n".join(lines)
            if lines and len(body) <= MAX_LINE and len(lines) <= 6 and not BOILERPLATE.match(lines[0]) and not _error_like(body) \
                    and "Traceback" not in body:
                start, end = text.find(lines[0]), text.rfind(lines[-1]) + len(lines[-1])
                answer = text[start:end] if 0 <= start < end else ""
                if answer and any(c.isalnum() for c in answer):
                    yield from _output_fact(transcript, call, result, "recall.short-output", f"What did {subject} output?", answer)
                continue
            frames = TRACE_FRAME.findall(text)
            if frames:
                yield from _output_fact(transcript, call, result, "recall.traceback-frame",
                                        f"Where was the exception raised that {subject} printed?", frames[-1].strip())
            for n, (name, line) in enumerate(_fact_lines(lines)):
                if n >= 3:
                    break
                if _in(result, line) and not _error_like(line):
                    question = f"Which line with a {name.replace('-', ' ')} did {subject} output?"
                    yield from _output_fact(transcript, call, result, f"recall.{name}", question, line, 0 if name != "filename" else 1)
        if command and not is_short(command) and len(command) <= MAX_LINE and _in(call, command) and "\n" not in command:
            purpose = _describe(transcript, call)
            if purpose and command not in purpose:
                question = f"What exact command did the assistant run for {purpose!r}?"
                yield _Candidate("recall", "recall.command", question, command, call.id, strength=1)


def _output_fact(transcript: Transcript, call: Item, result: Item, rule: str, question: str, answer: str,
                 strength: int = 0) -> Iterator[_Candidate]:
    """A fact of a call's output, unless the call's own arguments state it (then they, not the output, would
    answer it); a short one anchored to its call (`_output_evidence`), else not asked."""
    if _has_token(answer, call.arguments or ""):
        return
    evidence = _output_evidence(transcript, call, result, answer) if is_short(answer) else None
    if is_short(answer) and evidence is None:
        return
    yield _Candidate("recall", rule, question, answer, result.id, evidence=evidence, strength=strength)


# --------------------------------------------------------------------------- decisions and continuations
def _model_texts(transcript: Transcript) -> Iterator[Item]:
    return (i for i in transcript.items if i.kind in ("assistant", "reasoning") and i.text.strip())


def _plan_items(text: str) -> Iterator[str]:
    """The items of a list that follows a plan or next-steps heading (or an inline `Next steps: 1) …`)."""
    in_list = False
    for line in text.splitlines():
        stripped = line.strip()
        if PLAN_HEADING.search(stripped.rstrip("*: ")) and len(stripped) <= 60:
            in_list = True
            continue
        if in_list:
            if LIST_MARKER.match(stripped):
                item = LIST_MARKER.sub("", stripped, count=1).strip()
                if MIN_SENTENCE // 2 <= len(item) <= MAX_ANSWER:
                    yield item
            elif stripped:
                in_list = False
    for inline in re.finditer(r"Next steps?:\s*(1\)[^\n]{8,}?)(?=,?\s*2\)|$)", text, re.M | re.I):
        yield inline.group(0).rstrip(", ")


def _decisions(transcript: Transcript) -> Iterator[_Candidate]:
    last_by_turn: dict[int | None, Item] = {}
    for item in _model_texts(transcript):
        if item.kind == "assistant":
            last_by_turn[item.turn] = item
        for sentence in _sentences(item.text):
            if DECISION.search(sentence) and not CONTINUATION.match(sentence):
                topic = _topic_words(sentence, DECISION)
                if topic:
                    question = f"What did the assistant decide about {topic}, and why?"
                    yield _Candidate("decision", "decision.reason", question, sentence, item.id, match="judge", strength=0)
        heading = HEADING_LINE.match(item.text.strip().splitlines()[0]) if item.kind == "reasoning" else None
        if heading and DECISION.search(heading.group(1)) or (heading and re.search(r"\b(?:Switching|Choosing|Using|Handling)\b", heading.group(1))):
            answer = heading.group(0).strip()
            yield _Candidate("decision", "decision.reasoning-heading", "Which approach did the assistant choose at this step "
                             f"(reasoning about {_topic_words(heading.group(1))})?", answer, item.id, match="judge", strength=2)
    for item in last_by_turn.values():
        for raw in item.text.splitlines():
            if LIST_MARKER.match(raw) and not raw.lstrip().startswith("#"):
                line = LIST_MARKER.sub("", raw.strip(), count=1).strip()
                if MIN_SENTENCE <= len(line) <= MAX_ANSWER + 100 and _in(item, line):
                    question = f"What did the assistant's closing summary say about {_topic_words(line)}?"
                    yield _Candidate("decision", "decision.summary-item", question, line, item.id, match="judge", strength=1)


def _continuations(transcript: Transcript) -> Iterator[_Candidate]:
    for item in _model_texts(transcript):
        for step in _plan_items(item.text):
            if _in(item, step):
                question = f"Which step did the assistant list in its plan or next steps about {_topic_words(step)}?"
                yield _Candidate("continuation", "continuation.plan-item", question, step, item.id, match="judge", strength=0)
        for sentence in _sentences(item.text):
            if CONTINUATION.search(sentence):
                topic = _topic_words(sentence, CONTINUATION)
                if topic:
                    question = f"What did the assistant say it would do next about {topic}?"
                    yield _Candidate("continuation", "continuation.stated", question, sentence, item.id, match="judge", strength=1)


MINERS: dict[str, Callable[[Transcript], Iterator[_Candidate]]] = {
    "error": _errors,
    "artifact": _artifacts,
    "constraint": _constraints,
    "recall": _recalls,
    "decision": _decisions,
    "continuation": _continuations,
}


# --------------------------------------------------------------------------- selection
def _spread(candidates: Sequence[_Candidate], limit: int) -> list[_Candidate]:
    """At most `limit` candidates: the strongest rules first, each strength taken evenly across its span."""
    chosen: list[_Candidate] = []
    for strength in sorted({c.strength for c in candidates}):
        pool = [c for c in candidates if c.strength == strength]
        room = limit - len(chosen)
        if room <= 0:
            break
        if len(pool) <= room:
            chosen += pool
        elif room == 1:
            chosen.append(pool[-1])
        else:
            chosen += [pool[round(i * (len(pool) - 1) / (room - 1))] for i in range(room)]
    return chosen


def _bucket(transcript: Transcript, source: str) -> int:
    return min(len(BUCKETS) - 1, len(BUCKETS) * transcript.position(source) // max(1, len(transcript.items)))


def select(transcript: Transcript, candidates: Iterable[_Candidate], per_bucket: int = PER_BUCKET) -> list[_Candidate]:
    """Deduplicated (by answer, first occurrence wins) and capped per kind and position third."""
    seen: set[str] = set()
    unique: list[_Candidate] = []
    for c in sorted(candidates, key=lambda c: (KIND_ORDER.index(c.kind), transcript.position(c.source))):
        answer = normalize(json.dumps(c.answer, ensure_ascii=False))
        key = f"{c.kind}:{c.key}" if c.key else answer  # a file is asked once, whatever was done to it
        if key not in seen:
            seen.update((key, answer))
            unique.append(c)
    chosen: list[_Candidate] = []
    for kind in KIND_ORDER:
        of_kind = [c for c in unique if c.kind == kind]
        limit = per_bucket * CONSTRAINT_FACTOR if kind == "constraint" else per_bucket
        for bucket in range(len(BUCKETS)):
            chosen += _spread([c for c in of_kind if _bucket(transcript, c.source) == bucket], limit)
        stated = [c for c in of_kind if c.kind == "continuation"]
        if stated and stated[-1] not in chosen:
            chosen.append(stated[-1])  # the last next step the assistant stated
    return _judged_capped(transcript, chosen)


def _judged_capped(transcript: Transcript, chosen: list[_Candidate]) -> list[_Candidate]:
    deterministic = [c for c in chosen if c.match != "judge"]
    judged = [c for c in chosen if c.match == "judge"]
    budget = int(len(deterministic) * JUDGED_SHARE / (1 - JUDGED_SHARE))
    if len(judged) > budget:
        last = [c for c in judged if c.kind == "continuation"][-1:]
        rest = [c for c in judged if c not in last]
        judged = _spread(sorted(rest, key=lambda c: transcript.position(c.source)), max(0, budget - len(last))) + last if budget else []
    return deterministic + judged


def _probe(transcript: Transcript, c: _Candidate, probe_id: str = "candidate") -> Probe:
    return Probe(
        id=probe_id,
        kind=c.kind,
        question=c.question,
        answer=list(c.answer) if isinstance(c.answer, tuple) else c.answer,
        match=c.match,
        source=c.source,
        evidence=c.evidence if c.evidence or not isinstance(c.answer, str) else _evidence_in(transcript.by_id[c.source], c.answer),
        meta={"mined": True, "rule": c.rule, "position": BUCKETS[_bucket(transcript, c.source)]},
    )


def _answers(c: _Candidate) -> tuple[str, ...]:
    return c.answer if isinstance(c.answer, tuple) else (c.answer,)


def _subject(sentence: str) -> set[str]:
    """The content words of an instruction: no values, stopwords, modal words, leading verbs or change verbs."""
    words = {w.lower().strip(".-") for w in WORD.findall(VALUE.sub(" ", sentence))}
    return {w for w in words if w not in STOPWORDS and w not in IMPERATIVE_VERBS and not MODAL.fullmatch(w) and not CHANGE_WORD.fullmatch(w)}


def _values(sentence: str) -> set[str]:
    return {v.strip("`").lower() for v in VALUE.findall(sentence)}


def _frame(sentence: str) -> str:
    """The sentence with its values blanked out: `timeouts must stay at # seconds`."""
    return " ".join(VALUE.sub("#", sentence).lower().rstrip(".!").split())


def _supersedes(old: str, new: str) -> bool:
    """`new`, a sentence of a later message, changes the instruction `old`. The two share a subject word, `old` has a value
    (a number, a name in backticks, a path), and `new`

    - withdraws that value: `Keep the logs in /tmp/dev.log`, then `Logs no longer go to /tmp/dev.log`;
    - or names a new value with a change word (`CHANGE`): `Use port 8080`, then `Use port 9090 instead`;
    - or is the very same sentence with another value: `Timeouts must stay at 30 seconds`, then `… 60 seconds`.

    A new value in other words is no change: "make `test_subtree_only` use GitTemporaryDirectory" after "don't use
    `IgnorantTemporaryDirectory` use GitTemporaryDirectory" (aider's chat history) says it again for one test."""
    old_values, new_values = _values(old), _values(new)
    if not old_values or not _subject(old) & _subject(new):
        return False
    if REVOKE.search(new) and old_values <= new_values:
        return True
    if not new_values - old_values:
        return False  # no new value
    return bool(CHANGE.search(new)) or _frame(old) == _frame(new)


def _superseded(transcript: Transcript, candidates: Sequence[_Candidate]) -> set[_Candidate]:
    """Constraints a later user or injected message changes (`_supersedes`). They are dropped, not re-answered: a probe is
    asked at every checkpoint after its source, so the old value would be wrong after the change, and the new value is
    the later instruction's own probe (`mine_probes`).

    Only a later message changes an instruction, and only one after its last restatement. The sentences of one message
    stand together: in the SWE-agent CTF prompt's tips, "Please DO NOT run commands in python or sage through the `-c`
    flag, you should create files instead." does not change the tip before it to bound `nc -w5 127.0.0.1 80`, nor does
    a demonstration change or restate one (`_demonstration`). A later message that says the instruction again (the same sentence,
    as a repeated prompt or AGENTS.md does) re-issues it, with everything else it says, so a repetition is never a change."""
    users = [i for i in transcript.items if i.kind == "user"]
    index = {item.id: n for n, item in enumerate(users)}
    sentences = [list(_sentences(item.text)) for item in users]
    said = [{normalize(s) for s in of_item} for of_item in sentences]
    out = set()
    for c in candidates:
        if c.kind != "constraint" or not isinstance(c.answer, str) or c.source not in index:
            continue
        changed = False
        for n in range(index[c.source] + 1, len(users)):
            if _demonstration(users[n]):
                continue
            if normalize(c.answer) in said[n]:
                changed = False  # restated
            elif any(_supersedes(c.answer, s) for s in sentences[n]):
                changed = True
        if changed:
            out.add(c)
    return out


def _in_question(c: _Candidate) -> bool:
    """The question gives away its answer, or a member of its set (a request that names a file it asks to read)."""
    return any(_has_token(a, c.question) for a in _answers(c))


def _answers_by_question(candidates: Iterable[_Candidate]) -> dict[str, set[str]]:
    answers: dict[str, set[str]] = {}
    for c in candidates:
        answers.setdefault(c.question, set()).add(normalize(json.dumps(c.answer, ensure_ascii=False)))
    return answers


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _by_run(transcript: Transcript, candidates: list[_Candidate]) -> list[_Candidate]:
    """A question that several runs of the same call share with different answers (`pytest -x` failing one way,
    then another) names its run: `… the 2nd time it ran?`."""
    answers = _answers_by_question(candidates)
    runs: dict[str, list[str]] = {}
    call_of: dict[str, Item] = {}
    for call, results in _calls(transcript):
        runs.setdefault(_tool_label(call), []).append(call.id)
        call_of.update((r.id, call) for r in results)
    out = []
    for c in candidates:
        ran = call_of.get(c.source)
        if len(answers[c.question]) > 1 and ran is not None and c.question.endswith("?"):
            same = runs[_tool_label(ran)]
            if len(same) > 1:
                c = replace(c, question=f"{c.question[:-1]} the {_ordinal(same.index(ran.id) + 1)} time it ran?")
        out.append(c)
    return out


def _usable(transcript: Transcript, candidates: list[_Candidate]) -> list[_Candidate]:
    """The candidates a probe can be built on, in order:

    - not superseded by a later instruction (`_superseded`);
    - the answer not in the question (as a whole token when short);
    - a question with one answer: a run of a call repeated with different outputs is named by its run (`_by_run`),
      and questions that several candidates with different answers still share are dropped;
    - the answer not already graded present (`metrics.grading.presence`, its evidence from its source) in the
      transcript before its source: a fact stated earlier (a file read before it is edited, a demonstration in the
      system prompt) would be counted retained from that earlier place."""
    old = _superseded(transcript, candidates)
    kept = [c for c in candidates if c not in old and not _in_question(c)]
    kept = [c for c in _by_run(transcript, kept) if not _in_question(c)]
    answers = _answers_by_question(kept)
    kept = [c for c in kept if len(answers[c.question]) == 1]
    parts = [normalize_joined(context_parts([message_from_item(i)])) if i.kind != "marker" else "" for i in transcript.items]
    offsets = [0]
    for part in parts:
        offsets.append(offsets[-1] + (len(part) + 1 if part else 0))
    whole = " ".join(p for p in parts if p)
    out = []
    for c in kept:
        position = transcript.position(c.source)
        end = max(0, offsets[position] - 1)
        first = [whole.find(normalize(a)) for a in _answers(c)]  # cheap: the whole answer occurs before at all?
        if all(0 <= f and f + len(normalize(a)) <= end for f, a in zip(first, _answers(c), strict=True)):
            probe = _probe(transcript, c)
            source = transcript.items[position]
            evidence = anchor(probe, "\n".join(t for t in (source.text, source.arguments) if t))
            if presence(probe, "", whole[:end], evidence).present:
                continue
        out.append(c)
    return out


def mine_probes(transcript: Transcript, *, per_bucket: int = PER_BUCKET) -> list[Probe]:
    """Deterministic probes for one transcript (same transcript, same probes)."""
    candidates = _usable(transcript, [c for miner in MINERS.values() for c in miner(transcript)])
    counters: dict[str, int] = {}
    probes = []
    for c in sorted(select(transcript, candidates, per_bucket), key=lambda c: (transcript.position(c.source), KIND_ORDER.index(c.kind))):
        counters[c.kind] = counters.get(c.kind, 0) + 1
        probes.append(_probe(transcript, c, f"{c.kind}-{counters[c.kind]:02d}"))
    return probes


def mine_transcripts(transcripts: Sequence[Transcript], *, per_bucket: int = PER_BUCKET) -> list[Probe]:
    """Probes of every session of a file; with several sessions each names its session (`session`, which a run
    asks it in: the sessions of one file number their items alike) and its id is prefixed by the session's id."""
    if len(transcripts) == 1:
        return mine_probes(transcripts[0], per_bucket=per_bucket)
    return [replace(p, id=f"{t.id}/{p.id}", session=t.id) for t in transcripts for p in mine_probes(t, per_bucket=per_bucket)]
