"""The ``filters`` parameter: ``[[operator, dimension, [values...]], ...]`` (the shape of
Plausible's Stats API v2), validated into frozen values the query layer turns into SQL.

Rules (issue 17, README "Filters, ranges and comparison"):

- Operators: ``is``, ``is_not`` (exact, case-sensitive), ``contains``, ``contains_not``
  (substring after lowercasing both sides with Unicode's full lowercase mapping, as Python's
  ``str.lower`` and ClickHouse's ``lowerUTF8`` do: ``position(lowerUTF8(col), lowerUTF8(v)) > 0``,
  pinned by tests/test_filter_matching_engine.py; no wildcards, ``%`` and ``_`` are text).
  The values of one filter combine with OR (``is_not`` and ``contains_not`` keep what matches
  none of them); several filters combine with AND.
- Session dimensions (``source``, ``channel``, ``utm*``, ``entryPage``, ``exitPage``) keep the
  sessions whose value matches, with all their events; event dimensions keep the matching events.
- Limits: at most ``MAX_FILTERS`` filters, ``MAX_VALUES`` values per filter, ``MAX_VALUE_LENGTH``
  characters per value; values are strings of valid Unicode text (no lone surrogates).

Nothing here knows SQL or HTTP: the parser raises ``InvalidQuery`` with the part that is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from .query_errors import LONE_SURROGATE, NO_SURROGATES, TOO_DEEP, InvalidQuery

MAX_FILTERS = 20
MAX_VALUES = 100  # per filter; not in the issue, a bound on work per request (README)
MAX_VALUE_LENGTH = 2048  # characters (code points)

Operator = Literal["is", "is_not", "contains", "contains_not"]
OPERATORS: tuple[Operator, ...] = ("is", "is_not", "contains", "contains_not")
Scope = Literal["session", "event"]
# How a session dimension's value is taken from the session's events in the range.
SessionValue = Literal["first_event", "first_pageview", "last_pageview"]


@dataclass(frozen=True)
class Dimension:
    """A filterable (and breakdown) dimension: its API name, scope and stored column.

    ``column`` is the ``events`` column the value comes from. For a session dimension,
    ``session_value`` says which event of the session carries it: the first event of the session
    in the range (acquisition), its first pageview (``entryPage``) or its last pageview
    (``exitPage``, both of ``path``).
    """

    name: str
    scope: Scope
    column: str
    session_value: SessionValue | None = None

    @property
    def is_session(self) -> bool:
        return self.scope == "session"


def _session(name: str, column: str, value: SessionValue = "first_event") -> Dimension:
    return Dimension(name, "session", column, value)


def _event(name: str, column: str) -> Dimension:
    return Dimension(name, "event", column)


# In the order of issue 16's `by` list (the breakdown dimensions, which filters share).
DIMENSIONS: Mapping[str, Dimension] = {
    d.name: d
    for d in (
        _event("path", "path"),
        _session("entryPage", "path", "first_pageview"),
        _session("exitPage", "path", "last_pageview"),
        _session("source", "source"),
        _session("channel", "channel"),
        _event("referrer", "referrer"),
        _session("utmSource", "utm_source"),
        _session("utmMedium", "utm_medium"),
        _session("utmCampaign", "utm_campaign"),
        _session("utmContent", "utm_content"),
        _session("utmTerm", "utm_term"),
        _event("country", "country"),
        _event("browser", "browser"),
        _event("os", "os"),
        _event("deviceType", "device_type"),
        _event("event", "name"),
    )
}


@dataclass(frozen=True)
class Filter:
    """One validated filter. ``values`` keep the order given (duplicates dropped)."""

    operator: Operator
    dimension: Dimension
    values: tuple[str, ...]

    @property
    def negated(self) -> bool:
        """``is_not`` / ``contains_not``: keeps what matches none of the values."""
        return self.operator in ("is_not", "contains_not")

    @property
    def substring(self) -> bool:
        """``contains`` / ``contains_not``: case-insensitive substring match."""
        return self.operator in ("contains", "contains_not")

    def to_json(self) -> list[Any]:
        """The filter as the API spells it (for echoing a query back, or a URL)."""
        return [self.operator, self.dimension.name, list(self.values)]


Filters = tuple[Filter, ...]


def _one_of(names: Any) -> str:
    return "must be one of " + ", ".join(names)


def parse_filters(raw: str | None, *, path: str = "$.filters") -> Filters:
    """The ``filters`` query parameter (already URL-decoded): JSON text, or None/"" for none."""
    if raw is None or raw.strip() == "":
        return ()
    try:
        value = msgspec.json.decode(raw.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidQuery(path, NO_SURROGATES) from None
    except RecursionError:
        raise InvalidQuery(path, f"must be a JSON array of filters; it {TOO_DEEP}") from None
    except msgspec.DecodeError as exc:
        if LONE_SURROGATE.search(raw.encode("utf-8")):  # an escape such as \ud800, alone
            raise InvalidQuery(path, NO_SURROGATES) from None
        # msgspec refuses lone \ud800-style escapes as malformed JSON too.
        raise InvalidQuery(
            path, f"must be a JSON array of filters; not valid JSON ({exc})"
        ) from None
    return validate_filters(value, path=path)


def validate_filters(
    value: Any, *, path: str = "$.filters", aliases: Mapping[str, str] | None = None
) -> Filters:
    """Filters already decoded from JSON (e.g. a v2 query body's ``filters``).

    ``aliases`` maps other spellings of a dimension (Plausible's ``event:page``) to Tally's name.
    """
    if not isinstance(value, list):
        raise InvalidQuery(path, "must be a JSON array of [operator, dimension, [values...]]")
    if len(value) > MAX_FILTERS:
        raise InvalidQuery(path, f"must have at most {MAX_FILTERS} filters, got {len(value)}")
    return tuple(_filter(item, f"{path}[{i}]", aliases or {}) for i, item in enumerate(value))


def _filter(item: Any, path: str, aliases: Mapping[str, str]) -> Filter:
    if not isinstance(item, list) or len(item) != 3:
        raise InvalidQuery(path, "must be an array of three: [operator, dimension, [values...]]")
    operator, name, values = item
    if operator not in OPERATORS:
        raise InvalidQuery(f"{path}[0]", _one_of(OPERATORS))
    if isinstance(name, str) and name in aliases:
        name = aliases[name]
    if not isinstance(name, str) or name not in DIMENSIONS:
        raise InvalidQuery(f"{path}[1]", _one_of(DIMENSIONS))
    if not isinstance(values, list):
        raise InvalidQuery(f"{path}[2]", "must be an array of strings")
    if not values:
        raise InvalidQuery(f"{path}[2]", "must have at least one value")
    if len(values) > MAX_VALUES:
        raise InvalidQuery(f"{path}[2]", f"must have at most {MAX_VALUES} values")
    for j, text in enumerate(values):
        where = f"{path}[2][{j}]"
        if not isinstance(text, str):
            raise InvalidQuery(where, "must be a string")
        if len(text) > MAX_VALUE_LENGTH:
            raise InvalidQuery(where, f"must be at most {MAX_VALUE_LENGTH} characters")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidQuery(where, "must be valid UTF-8 text (no lone surrogates)") from None
    return Filter(operator, DIMENSIONS[name], tuple(dict.fromkeys(values)))


def session_filters(filters: Filters) -> Filters:
    return tuple(f for f in filters if f.dimension.is_session)


def event_filters(filters: Filters) -> Filters:
    return tuple(f for f in filters if not f.dimension.is_session)


def to_param(filters: Filters) -> str:
    """The JSON text of ``filters`` as the ``filters`` parameter spells it (compact)."""
    return json.dumps([f.to_json() for f in filters], ensure_ascii=False, separators=(",", ":"))
