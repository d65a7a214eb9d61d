"""Off-peak prices: a model's `off_peak_pricing` in litellm's map (DeepSeek V4's), per-token prices that replace the
standard ones while the request's time falls in one of its windows, as litellm bills them
(`litellm/litellm_core_utils/llm_cost_calc/utils.py`: `apply_off_peak_pricing`, `_is_off_peak`).

A window is `HH:MM-HH:MM` in UTC, its start inclusive and its end exclusive; one that ends before it starts wraps past
midnight, and one whose start equals its end is the whole day. A window of the block's `hours_utc` applies every day;
one of its `windows` only on its weekdays (ISO: 1 is Monday), read on the calendar of `weekday_timezone` (UTC when it
names none). An off-peak price replaces the price that would apply otherwise, tiered or not; a price the block does
not name stays the standard one. A request without a time pays the standard prices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, tzinfo
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

#: The map's names of the prices a block may replace, by `Prices` field.
PRICE_KEYS = {"input": "input_cost_per_token", "output": "output_cost_per_token",
              "cached_input": "cache_read_input_token_cost", "cache_write": "cache_creation_input_token_cost"}
#: Weekday names litellm reads beside the numbers 1–7.
WEEKDAYS = {"mon": 1, "monday": 1, "tue": 2, "tues": 2, "tuesday": 2, "wed": 3, "wednesday": 3, "thu": 4, "thur": 4,
            "thurs": 4, "thursday": 4, "fri": 5, "friday": 5, "sat": 6, "saturday": 6, "sun": 7, "sunday": 7}


@dataclass(frozen=True)
class OffPeakWindow:
    """Daily hours (`HH:MM-HH:MM`, UTC) on `weekdays` (ISO numbers; None: every day)."""

    hours_utc: tuple[str, ...]
    weekdays: tuple[int, ...] | None = None


@dataclass(frozen=True)
class OffPeak:
    """A model's off-peak windows and the prices they set (None: the standard price holds)."""

    windows: tuple[OffPeakWindow, ...]
    weekday_timezone: str | None = None
    input: float | None = None
    output: float | None = None
    cached_input: float | None = None
    cache_write: float | None = None

    @classmethod
    def of(cls, block: Any) -> OffPeak | None:
        """The map's `off_peak_pricing` block as litellm reads it; None for no block, or one with no usable window
        or no price (a malformed window or weekday is left out, as litellm ignores it)."""
        if not isinstance(block, Mapping):
            return None
        windows = []
        flat = _hours(block.get("hours_utc"))
        if flat:
            windows.append(OffPeakWindow(flat))
        rules = block.get("windows")
        for rule in rules if isinstance(rules, Sequence) and not isinstance(rules, str) else ():
            hours = _hours(rule.get("hours_utc")) if isinstance(rule, Mapping) else ()
            if not hours:
                continue
            days = rule.get("weekdays")
            weekdays = None if days is None else tuple(d for d in map(_weekday, days if isinstance(days, Sequence) and not isinstance(days, str) else ()) if d)
            windows.append(OffPeakWindow(hours, weekdays))
        prices = {field: _price(block.get(key)) for field, key in PRICE_KEYS.items()}
        if not windows or all(price is None for price in prices.values()):
            return None
        zone = block.get("weekday_timezone")
        return cls(tuple(windows), zone if isinstance(zone, str) and zone.strip() else None, **prices)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OffPeak:
        """As `ModelProfile.to_dict` stored it (sequences as lists)."""
        windows = tuple(OffPeakWindow(tuple(w["hours_utc"]), None if w.get("weekdays") is None else tuple(w["weekdays"]))
                        for w in data["windows"])
        return cls(windows, data.get("weekday_timezone"), **{field: data.get(field) for field in PRICE_KEYS})

    def to_dict(self) -> dict[str, Any]:
        return {"windows": [{"hours_utc": list(w.hours_utc), "weekdays": None if w.weekdays is None else list(w.weekdays)}
                            for w in self.windows],
                "weekday_timezone": self.weekday_timezone, **{field: getattr(self, field) for field in PRICE_KEYS}}

    def applies(self, when: datetime) -> bool:
        """Whether a request at `when` (a naive time is UTC) falls in one of the windows."""
        moment = when.astimezone(UTC) if when.tzinfo is not None else when.replace(tzinfo=UTC)
        day = moment.astimezone(_calendar(self.weekday_timezone)).isoweekday()
        now = moment.time()
        return any((w.weekdays is None or day in w.weekdays) and any(_within(now, hours) for hours in w.hours_utc) for w in self.windows)


def _hours(value: Any) -> tuple[str, ...]:
    """The well-formed `HH:MM-HH:MM` windows of a `hours_utc` value (a string or a list of them)."""
    found = (value,) if isinstance(value, str) else tuple(v for v in value if isinstance(v, str)) if isinstance(value, Sequence) else ()
    return tuple(w for w in found if _bounds(w) is not None)


@lru_cache(maxsize=64)
def _bounds(window: str) -> tuple[time, time] | None:
    """A window's start and end, read once (every priced request of an off-peak model tests its windows)."""
    try:
        start, end = window.split("-")
        return datetime.strptime(start.strip(), "%H:%M").time(), datetime.strptime(end.strip(), "%H:%M").time()
    except ValueError:
        return None


def _within(now: time, window: str) -> bool:
    bounds = _bounds(window)
    if bounds is None:
        return False
    start, end = bounds
    return start <= now < end if start < end else now >= start or now < end


def _weekday(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 1 <= value <= 7 else None
    return WEEKDAYS.get(value.strip().lower()) if isinstance(value, str) else None


def _calendar(zone: str | None) -> tzinfo:
    if zone:
        try:
            return ZoneInfo(zone)
        except (ValueError, ZoneInfoNotFoundError):
            return UTC
    return UTC


def _price(value: Any) -> float | None:
    """A price as litellm reads one (`_parse_off_peak_rate`): a number, or a string of one; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None

