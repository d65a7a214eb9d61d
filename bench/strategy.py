"""The strategy protocol (DESIGN §3), its options, and what a strategy may ask of the engine.

A strategy sees the transcript as an agent would, one event at a time:

- ``on_user_turn(item)``: a real user message arrives (pre-turn checks run first, then it is recorded);
- ``on_input(item)``: any other model input (system/developer context, synthetic user context,
  tool results);
- ``on_marker(item)``: a recorded agent event that is not model input (model switch, branch move,
  the recorded agent's own compaction);
- ``request()``: the `Request` it would send now (it may compact first);
- ``on_response(items, usage, needs_follow_up)``: the recorded model output and the usage the
  provider reported (None when the request overflowed); post-step checks run here;
- ``on_overflow(error)``: the provider refused the request; return True after recovering
  (compacting) to have the engine send `request()` again (bounded), False to give up the step.

Through its `StrategyContext` a strategy sends summary requests (`summarize`, which raises
`SummaryOverflow` when the summary request itself does not fit; with `in_request=True` the summary is
an iteration of the request being built, which then fails in its place), refuses to send a request itself
(`refuse_request`, an agent's client-side limit) and records each compaction (`record_compaction`).
Options are a dataclass per strategy, every field with the upstream default. A value given for an
option (`--option`, a variant) is checked when parsed: a number must be finite, at most
`MAX_NUMBER` either way, and inside its `Range`, which a field declares with
`metadata={"range": Range(...)}` or gets from its name (`NAMED_RANGES`: token and character counts
are not negative, ratios lie in (0, 1], …); an option of a few words (`Literal`) takes only those, a
`str.format` pattern (`metadata={"format_fields": ...}`) must format with its fields, and a template option
(`metadata={"template": True}`) must name a shipped template; a rule between two options is the Options
class's `__post_init__`, raising `OptionError`. What each option does is the `#:` comment above its field
(`option_comments`), which `bench list strategies ID` shows with its type, default and accepted values
(`StrategyInfo`).
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, cast

from compaction_bench.caching import CacheMarks
from compaction_bench.errors import BenchError, did_you_mean, shown, with_guesses
from compaction_bench.llm import LLMResult
from compaction_bench.profiles import ModelProfile
from compaction_bench.provider import ProviderError
from compaction_bench.request import Message, Request
from compaction_bench.transcript import Item, Usage


class OptionError(BenchError, ValueError):
    """An unknown option or a value of the wrong type; the message lists the valid options."""


class SummaryOverflow(Exception):
    """The summary request itself exceeded the context window."""

    def __init__(self, error: ProviderError, tokens: int) -> None:
        super().__init__(error.message)
        self.error = error
        self.tokens = tokens


class StrategyContext(Protocol):
    """What the engine offers a strategy."""

    profile: ModelProfile
    #: what the recording says of the session, never its later items: `id` and the importer's `source`
    #: fields (`format`, and where the format records them `session_id`, `cwd`, `version`, …)
    session: Mapping[str, Any]

    def summarize(
        self, request: Request, *, purpose: str = "summary", instructions: str | None = None, in_request: bool = False
    ) -> LLMResult:
        """Send a summary request to the summarizer model (recorded as a request of kind `summary`);
        `instructions` go to the summarizer only, after the request (an emulated server's own prompt).

        `in_request=True` (from `request()` only): the summary is an iteration of the request `request()`
        returns, one call to the provider (server-side compaction). When it does not fit, no summary
        request is recorded and that request fails with its error, fitting or not; `SummaryOverflow` is
        raised as always. A summary that fits is recorded as its own (billed) request as usual."""

    def record_compaction(
        self,
        *,
        trigger: str,
        before: Sequence[Message],
        after: Sequence[Message],
        summary: str | None,
        summarized_ids: Sequence[str] = (),
        estimate_tokens: int | None = None,
        threshold: int | None = None,
        details: Mapping[str, Any] | None = None,
        probe: bool = True,
    ) -> None:
        """Record one installed compaction: the context before and after, and what was summarized.

        `probe=False` records a rewrite that is not a probe point (continuous observation masking
        rewrites the context at every step; its retention is probed at the end)."""

    def render_prompt(self, template: str, **variables: Any) -> str:
        """Render a summary-prompt template (user overrides from `--prompt` first)."""

    def refuse_request(self, message: str) -> None:
        """From `request()` only: the agent itself will not send the request `request()` returns (a client-side limit,
        such as Claude Code's blocking limit). It reaches no model: it is recorded as failed with `message` (an error of
        provider "agent", `meta["failed_in"]` "agent"), costs and caches nothing, and `on_overflow` is told as for a
        request the provider refused."""

    def count_tokens(self, messages: Sequence[Message]) -> int:
        """True token count (the provider's tokenizer). Strategies decide with their own estimators;
        this is for strategies whose upstream asks the provider to count."""


def _coerce(name: str, value: Any, annotation: Any) -> Any:
    """Convert a command-line string to the option's declared type."""
    if isinstance(annotation, str):
        annotation = eval(annotation, {"__builtins__": {}}, {"int": int, "float": float, "bool": bool, "str": str, "None": None})
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:  # one of a few words: anything else would run as the default's rule under its own label
        if value in args:
            return value
        raise OptionError(f"option {name}: expected one of {', '.join(map(str, args))}, got {shown(value)}")
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "")):
            if type(None) in args:
                return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(name, value, arg)
            except OptionError:
                continue
        raise OptionError(f"option {name}: cannot read {shown(value)} as {annotation}")
    if not isinstance(value, str):
        if annotation is float and isinstance(value, int):
            return float(value)
        if annotation in (int, float, bool, str) and not isinstance(value, annotation):
            raise OptionError(f"option {name}: expected {annotation.__name__}, got {shown(value)}")
        return value
    try:
        if annotation is bool:
            lowered = value.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if annotation is int:
            return int(value.replace("_", ""))
        if annotation is float:
            return float(value)
        if annotation is str:
            return value
    except ValueError:
        raise OptionError(f"option {name}: expected {getattr(annotation, '__name__', annotation)}, got {shown(value)}") from None
    raise OptionError(f"option {name}: unsupported option type {annotation}")


@dataclass(frozen=True)
class Range:
    """The values a numeric option may take: from `low` to `high` (None: unbounded), each end
    included unless `low_open` / `high_open`; `what` says what the option is, for the error."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    what: str = ""

    def __contains__(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or (value < self.high or (not self.high_open and value == self.high))

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '≥'} {self.low:g}" if self.low is not None else "any number"
        if self.low is None:
            return f"{'<' if self.high_open else '≤'} {self.high:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


#: Ranges several strategies' fields declare: a token count whose name does not say so (a buffer, a
#: reserve), and a context window.
TOKEN_COUNT = Range(0, what="a number of tokens")
CONTEXT_WINDOW = Range(1, what="a context window in tokens")

#: The range an option gets from a word of its name (split at "_") when its field declares none: only
#: values that are clearly invalid are kept out (a negative count; a ratio, fraction or percentage of
#: something that is more than all of it or none of it).
NAMED_RANGES: tuple[tuple[frozenset[str], Range], ...] = (
    (frozenset({"tokens", "token", "chars"}), Range(0, what="a token or character count")),
    (frozenset({"ratio"}), Range(0, 1, low_open=True, what="a ratio")),
    (frozenset({"fraction"}), Range(0, 1, low_open=True, high_open=True, what="a fraction")),
    (frozenset({"percent"}), Range(0, 100, low_open=True, what="a percentage")),
)


#: The largest magnitude of a number option: up to it every integer is exactly a float, and the run's
#: tables hold counts as 64-bit numbers (a threshold of 10**22 tokens failed every cell as its tables
#: were written, after the replay).
MAX_NUMBER = 2**53


def option_range(name: str, spec: dataclasses.Field) -> Range | None:
    """The declared range of an option field (`metadata["range"]`), else the one its name gives, else None."""
    declared = spec.metadata.get("range")
    if declared is not None:
        return cast(Range, declared)
    words = set(name.split("_"))
    return next((named for keys, named in NAMED_RANGES if words & keys), None)


def check_value(name: str, value: Any, allowed: Range | None) -> None:
    """`OptionError` for a number that is not finite (NaN, infinity), past `MAX_NUMBER` either way,
    or outside `allowed`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise OptionError(f"option {name}={value}: not a finite number")
    if abs(value) > MAX_NUMBER:
        raise OptionError(f"option {name}={shown(value)}: too large; a number option is at most 2**53 = {MAX_NUMBER:,} either way")
    if allowed is not None and value not in allowed:
        what = f" ({allowed.what})" if allowed.what else ""
        raise OptionError(f"option {name}={value}: out of range; expected a value {allowed}{what}")


def check_pattern(name: str, value: Any, fields: Sequence[str] | None) -> None:
    """`OptionError` for a `str.format` pattern option (its field declares `metadata={"format_fields": (...)}`)
    that does not format with those fields: `{nope}`, `{0}` or a lone `{` failed every cell as it ran."""
    if fields is None or not isinstance(value, str):
        return
    try:
        value.format(**dict.fromkeys(fields, 0))
    except (KeyError, IndexError, ValueError) as exc:
        named = ", ".join(f"{{{f}}}" for f in fields)
        raise OptionError(f"option {name}={shown(value)}: not a pattern of {named} ({type(exc).__name__}: {exc}); "
                          "write a literal brace as {{ or }}") from None


def check_template(name: str, value: Any) -> None:
    """`OptionError` for a template option (`metadata={"template": True}`) that names no shipped prompt template:
    a path such as `/etc/hostname` was read as the prompt, past the checks `--prompt` gets, and a misspelt name
    failed every cell as it ran. A user's own text replaces a template with `--prompt NAME=FILE`."""
    from compaction_bench.templates import shipped_templates

    known = shipped_templates()
    if value not in known:
        raise OptionError(f"option {name}={shown(value)}: names no prompt template{did_you_mean(str(value), known)}; "
                          "to use your own text, replace a template with --prompt NAME=FILE")


@dataclass(frozen=True)
class NoOptions:
    """A strategy without options."""


class Strategy(abc.ABC):
    """Base class of strategies. Subclasses set `name`, `description`, `spec` and `Options`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: Where the rules come from (spec file and sections).
    spec: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    #: Whether the strategy's requests carry the text of each input item (a user, tool result or system
    #: message) whole, as one message's content, at least once. It changes no number, only speed: the
    #: engine then counts all these texts when the replay starts (`compaction_bench.replay`), where
    #: tiktoken runs faster than between the replay's other work. Left False by a strategy that rewrites
    #: or cuts some of them (the count of a text never sent whole would be work for nothing).
    sends_inputs_verbatim: ClassVar[bool] = False
    #: The provider whose API runs the strategy, for an edit its server applies (Anthropic's context management:
    #: "anthropic", a profile's `provider`), None for an agent's own client-side rule. At a profile of another
    #: provider the replay bills and caches as that profile's provider does, which no real API offers with this
    #: strategy: the run's notes say so (`reports.leaderboard.provider_note`).
    provider_only: ClassVar[str | None] = None

    @classmethod
    def keeps_thinking(cls, profile: ModelProfile) -> bool:
        """Whether the agent's requests to `profile`'s model ask the API to keep the thinking of every earlier turn
        (`clear_thinking_20251015` with `keep: "all"`, docs/specs/anthropic-context-management.md §3). On a model that
        drops it by default (`compaction_bench.profiles.strips_earlier_thinking`) it then stays and bills; most
        agents send no such field."""
        return False

    @classmethod
    def cache_marks(cls, options: Any) -> CacheMarks:
        """Where the agent, run with `options`, puts Anthropic cache breakpoints (`cache_control`) in its turn and
        summary requests: most coding agents mark the system prompt's end and the last messages, which the
        simulated provider bills as Anthropic caches them; an agent that marks nothing reads and writes no cache
        there (caching on Anthropic is opt-in per block). Providers that cache automatically ignore it."""
        return CacheMarks.SYSTEM_AND_TAIL

    @classmethod
    def summary_model(cls, options: Any, profile: ModelProfile) -> str | None:
        """The model the agent, run with `options` on `profile`'s model, sends its summary requests to when that is
        not the session's model (a litellm map name; Aider's weak model), None for the session's, as most agents
        summarize. The engine sends an offline summarizer's requests to that model (`replay.summary_profile`); a
        summarizer the user names is the user's choice."""
        return None

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        self.ctx = ctx
        self.options = options if options is not None else self.Options()

    # ----------------------------------------------------------------- options
    @classmethod
    def option_fields(cls) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(cls.Options)}

    @classmethod
    def parse_options(cls, values: Mapping[str, Any] | None) -> Any:
        values = dict(values or {})
        known = cls.option_fields()
        unknown = sorted(set(values) - set(known))
        if unknown:
            listing = ", ".join(f"{n}={f.default!r}" for n, f in known.items()) or "(none)"
            raise OptionError(f"unknown option(s) for strategy {cls.name!r}: {with_guesses(unknown, known)}; valid: {listing}")
        hints = typing.get_type_hints(cls.Options) if values else {}  # resolving them costs more than a short replay
        converted = {k: _coerce(f"{cls.name}.{k}", v, hints.get(k, str)) for k, v in values.items()}
        for k, v in converted.items():
            check_value(f"{cls.name}.{k}", v, option_range(k, known[k]))
            check_pattern(f"{cls.name}.{k}", v, known[k].metadata.get("format_fields"))
            if known[k].metadata.get("template"):
                check_template(f"{cls.name}.{k}", v)
        return cls.Options(**converted)

    # ----------------------------------------------------------------- protocol
    @abc.abstractmethod
    def on_user_turn(self, item: Item) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def on_input(self, item: Item) -> None:
        raise NotImplementedError

    def on_marker(self, item: Item) -> None:  # noqa: B027 - an optional hook, deliberately a no-op
        """Recorded agent events are ignored unless a strategy needs them."""

    @abc.abstractmethod
    def request(self) -> Request:
        raise NotImplementedError

    @abc.abstractmethod
    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        raise NotImplementedError

    def on_overflow(self, error: ProviderError) -> bool:
        """Default: no recovery; the step is recorded as overflowed."""
        return False

    def retry_max_tokens(self, error: ProviderError) -> int | None:
        """The `max_tokens` the agent's API call sends the same request again with after `error`, without changing its
        context (None: it does not). The engine asks it of the final context too, which is probed, not sent: a context
        such a retry would serve is no overflow."""
        return None


#: An option field's line in its class's source: `name: type` at the class body's indentation.
_FIELD_LINE = re.compile(r"^\s{4}(\w+)\s*:")


def option_comments(options: type) -> dict[str, str]:
    """Each option's `#:` comment lines above its field (Sphinx's attribute-comment convention), from the Options
    class and the dataclasses it extends, joined into one text; an option without one (or a class whose source
    cannot be read) is left out."""
    found: dict[str, str] = {}
    for klass in reversed(options.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        comment: list[str] = []
        for line in lines:
            stripped = line.strip()
            if stripped.startswith("#:"):
                comment.append(stripped[2:].strip())
                continue
            named = _FIELD_LINE.match(line)
            if named and comment:
                found[named.group(1)] = " ".join(comment)
            comment = []
    return found


def allowed_values(name: str, spec: dataclasses.Field, annotation: Any) -> str:
    """What an option accepts, in words: its words (`Literal`), its range (`option_range`), a template's or a
    pattern's rule; "" for anything of its type."""
    if typing.get_origin(annotation) is typing.Literal:
        return " | ".join(map(str, typing.get_args(annotation)))
    if spec.metadata.get("template"):
        return "a shipped prompt template's name (strategies/prompts/*.j2)"
    if fields := spec.metadata.get("format_fields"):
        return "a pattern of " + ", ".join(f"{{{f}}}" for f in fields)
    allowed = option_range(name, spec)
    if allowed is None:
        return ""
    return f"{allowed}" + (f" ({allowed.what})" if allowed.what else "")


def _type_text(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return "word"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("NoneType", "None")


@dataclass
class StrategyInfo:
    """What `bench list strategies` shows: each option's default, and for one strategy (`details`) its type, the
    values it accepts and what it does (the `#:` comment above its field)."""

    name: str
    description: str
    spec: str
    options: dict[str, Any] = field(default_factory=dict)
    details: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, strategy: type[Strategy], *, details: bool = False) -> StrategyInfo:
        fields_ = strategy.option_fields()
        rows = []
        if details and fields_:
            hints = typing.get_type_hints(strategy.Options)
            comments = option_comments(strategy.Options)
            rows = [{"option": n, "type": _type_text(hints.get(n)), "default": f.default, "accepts": allowed_values(n, f, hints.get(n)),
                     "meaning": comments.get(n, "")} for n, f in fields_.items()]
        return cls(
            name=strategy.name,
            description=strategy.description,
            spec=strategy.spec,
            options={n: f.default for n, f in fields_.items()},
            details=rows,
        )
