"""A session's values as numbers (schema 012), and filters matched on them.

``sessions_quarter`` keeps each session dimension's first value (the exit page's last) per
session and 15 minutes as one unsigned 128-bit number: the event's time (and its row in its
INSERT) above cityHash64 of the value. The minimum (maximum) over a session's rows in the window
is its value there, merged as a plain number rather than a string state. ``toUInt64`` of it is
the value's hash; ``session_values`` names the hashes, one row per project, dimension and value.

A filter on a session dimension is matched on the hashes: the hashes of the stored values that
match it (found in ``session_values`` by the same string comparison as the raw path's,
query/filtered.py) and, when the empty value matches it, the hashes that stand for no value."""

from __future__ import annotations

from ..domain.filters import Filter
from .model import Query
from .sql import bots

# Per session dimension: sessions_quarter's merge of its number (the aggregate and the column), and
# session_values' dimension.
NUMBERS: dict[str, tuple[str, str, str]] = {
    "source": ("min", "source_first", "source"),
    "channel": ("min", "channel_first", "channel"),
    "utmSource": ("min", "utm_source_first", "utm_source"),
    "utmMedium": ("min", "utm_medium_first", "utm_medium"),
    "utmCampaign": ("min", "utm_campaign_first", "utm_campaign"),
    "utmContent": ("min", "utm_content_first", "utm_content"),
    "utmTerm": ("min", "utm_term_first", "utm_term"),
    "entryPage": ("min", "entry_page_first", "path"),
    "exitPage": ("max", "exit_page_last", "path"),
}
# The hashes that stand for the empty value: the neutral numbers' low 64 bits (a session without
# a pageview has no entry or exit page) and the empty string's.
NO_VALUE = "(0, 18446744073709551615, cityHash64(''))"


def hash_of(dimension: str) -> str:
    """The session's value hash of ``dimension``, an aggregate over its sessions_quarter rows."""
    merge, column, _ = NUMBERS[dimension]
    return f"toUInt64({merge}({column}))"


def row_hash_of(dimension: str) -> str:
    """The value hash of ``dimension`` in one sessions_quarter row: the session's own when the
    row is the one its merge picks (the minimum's, or the maximum's, low 64 bits)."""
    return f"toUInt64({NUMBERS[dimension][1]})"


def hit(expr: str, flt: Filter, param: str) -> str:
    """``expr`` (a string) is one of the filter's values, or contains one ignoring case: the
    positive form of every operator; the filter values are the ``param`` parameter."""
    values = f"{{{param}:Array(String)}}"
    if flt.substring:
        return f"arrayExists(v -> position(lowerUTF8({expr}), lowerUTF8(v)) > 0, {values})"
    # ``IN`` a constant set rather than ``has``: on a LowCardinality column it is decided once
    # per distinct value (its dictionary), and the sort keys' index reads it as key ranges.
    return f"({expr} IN {values})"


def found(h: str, flt: Filter, param: str) -> str:
    """The value hash ``h`` is one that ``flt``'s positive form keeps (its operator without
    the negation)."""
    kind = NUMBERS[flt.dimension.name][2]
    named = (
        f"SELECT value_hash FROM {{db}}.session_values WHERE project_id = {{p:String}} "
        f"AND dimension = '{kind}' AND {hit('value', flt, param)}"
    )
    return f"({h} GLOBAL IN ({named}) OR ({h} IN {NO_VALUE} AND {hit(chr(39) * 2, flt, param)}))"


def match(h: str, flt: Filter, param: str) -> str:
    """The session whose value hash is ``h`` passes ``flt`` (the raw path's meaning, as
    query/filtered.py's ``match`` on the value itself)."""
    kept = found(h, flt, param)
    return f"NOT {kept}" if flt.negated else kept


def named_rows(rows: str, dimension: str) -> str:
    """Breakdown rows (value, visitors, pageviews, events) in the contract's order, from ``rows``
    by value hash (h, visitors, pageviews, events; ``h`` not a no-value hash): the top
    ``limit`` by visitors and pageviews and every row tied with the last of them, named from
    ``session_values``, then ordered with the names."""
    return f"""
        SELECT value, visitors, pageviews, events
        FROM ({rows} ORDER BY visitors DESC, pageviews DESC LIMIT {{limit:UInt32}} WITH TIES)
             AS top
        INNER JOIN (SELECT value_hash, any(value) AS value FROM {{db}}.session_values
                    WHERE project_id = {{p:String}} AND dimension = '{NUMBERS[dimension][2]}'
                    GROUP BY value_hash) AS named ON named.value_hash = top.h
        ORDER BY visitors DESC, pageviews DESC, value ASC LIMIT {{limit:UInt32}}"""


def candidate_keys(query: Query, quarters: str) -> str:
    """A condition on ``session_key`` that every session passing the session filters meets,
    decided row by row: for each filter that keeps some values (not a negated one) the session
    has a row of sessions_quarter in the window whose own value hash it keeps, since the row
    that the session's merge picks is one. Grouping only those sessions' rows gives the sessions
    that grouping all of the window's gives, at a fraction of the cost when the filter keeps a
    fraction of the sessions. ``quarters`` is the window's condition on the rows; the filter values
    are the ``f0``, ``f1``, ... parameters. "1" when no filter narrows them."""
    return (
        " AND ".join(
            f"session_key IN (SELECT session_key FROM {{db}}.sessions_quarter "
            f"WHERE {quarters}{bots(query)} AND {found(row_hash_of(f.dimension.name), f, f'f{i}')})"
            for i, f in enumerate(query.filters)
            if f.dimension.is_session and not f.negated
        )
        or "1"
    )
