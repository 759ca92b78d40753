"""Stated session durations, summed exactly (schema 019).

A ``metadata.durationMs`` counts as a decimal, the shortest decimal of the double the JSON
number is read as (the number sent, for up to 15 significant digits and every integer up to
2^53; a longer one is its nearest double's: 9007199254740993 counts as 9007199254740992): 74.3
is 74.3, not the double nearest to it, and 74.3 + 65.1 + 15.1 is 154.5 where doubles give
154.49999999999997 (a mean of 51.5, rounded half up to 52, not 51). A duration is kept as its
shortest decimal form, the one ``toString`` writes for the stored double (Python's ``repr``
gives the same digits), split into an integer significand and a power of ten:
``events.duration_digits`` and ``events.duration_exponent``. Every query gives the stated
durations as (exponent, sum of significands) pairs, which ``domain.metrics.stated_total`` adds
in exact integers: summed per exponent (``sumMap``, a few exponents) where one aggregate covers
every row, and per session as one count of 10^-20 ms plus the rare durations out of that scale,
where a ``sumMap`` state per session cost too much.

The SQL lives here once: the schema file writes it out for ``events.duration_*`` and for
``session_days``' sums (tests/test_durations.py checks that they are the same text), and the
queries over ``sessions_quarter.ends_stated`` (the doubles' bits) split each value when read."""

from __future__ import annotations

# A session_end event with a stated duration (events.duration_ms not NULL).
STATED = "name = 'session_end' AND duration_ms IS NOT NULL"
# What every query gives for stated durations: an array of (exponent, sum of significands)
# pairs, an exponent possibly more than once; their sum is the stated total.
NO_PAIRS = "CAST([], 'Array(Tuple(Int16, UInt256))')"


def _pieces(x: str) -> tuple[str, str, str, str]:
    """(the text of ``x``'s shortest decimal form without its exponent, the exponent's text
    (empty when none), that text without the point, and the same without trailing zeros)."""
    text = f"toString(abs({x}))"
    mantissa = f"splitByChar('e', {text})[1]"
    exponent = f"splitByChar('e', {text})[2]"
    digits = f"replaceOne({mantissa}, '.', '')"
    trimmed = f"trim(TRAILING '0' FROM {digits})"
    return mantissa, exponent, digits, trimmed


def digits_sql(x: str) -> str:
    """The significand of the Float64 ``x`` (finite, >= 0) written as its shortest decimal, as a
    UInt64 without trailing zeros (at most 17 digits): 743 for 74.3, 0 for 0."""
    return f"toUInt64OrZero({_pieces(x)[3]})"


def exponent_sql(x: str) -> str:
    """The power of ten that goes with :func:`digits_sql`: -1 for 74.3, 29 for 1e29, 0 for 0.
    The written exponent, less the digits after the point, plus the trailing zeros dropped."""
    mantissa, exponent, digits, trimmed = _pieces(x)
    point = f"position({mantissa}, '.')"
    after_point = f"if({point} = 0, 0, length({mantissa}) - {point})"
    dropped = f"length({digits}) - length({trimmed})"
    return (
        f"if({trimmed} = '', toInt16(0), "
        f"toInt16(toInt16OrZero({exponent}) - {after_point} + {dropped}))"
    )


# The stored columns' expressions (schema 019), from duration_ms.
STORED = "ifNull(duration_ms, 0)"


def pairs_of_map(summed: str) -> str:
    """The pairs of a ``sumMap`` result ``summed`` ((exponents), (sums))."""
    return f"arrayZip({summed}.1, arrayMap(x -> toUInt256(x), {summed}.2))"


def stated_parts(condition: str = STATED) -> str:
    """The pairs of the raw events' stated durations where ``condition`` holds: one aggregate
    over every row (a ``sumMap``, a few exponents)."""
    summed = f"sumMapIf([duration_exponent], [toUInt128(duration_digits)], {condition})"
    return pairs_of_map(summed)


def parts_of_doubles(values: str) -> str:
    """The pairs of an array of Float64 durations ``values`` (every element split): an
    aggregate over every row, as :func:`stated_parts`."""
    keys = f"arrayMap(v -> {exponent_sql('v')}, {values})"
    sums = f"arrayMap(v -> toUInt128({digits_sql('v')}), {values})"
    return pairs_of_map(f"sumMap({keys}, {sums})")


# Per session (an aggregate per group of a GROUP BY with many groups, where a sumMap's state
# per group cost 35% more time on a v2 query): the durations whose exponent is in -SCALE..19 as
# one UInt256 count of 10^-SCALE ms (a 17-digit significand times at most 10^39: room for 10^21
# of them), and the others (a tiny or a huge number: rare) as pairs. An event without a stated
# duration has significand 0 and exponent 0 (in scale, adding 0), so these read the two
# columns and ``name`` only, not duration_ms.
SCALE = 20
# 10^0 .. 10^(2 * SCALE - 1) as UInt256, a constant: the text of each is a one and i zeros.
_POW10 = f"CAST(arrayMap(i -> concat('1', repeat('0', i)), range({2 * SCALE})), 'Array(UInt256)')"
_IN_SCALE = f"duration_exponent BETWEEN -{SCALE} AND {SCALE - 1}"
SESSION_END = "name = 'session_end'"
_PAIR = "(duration_exponent, toUInt256(duration_digits))"


def _outside(condition: str) -> str:
    return f"NOT ({_IN_SCALE}) AND {condition}"


def scaled_value(condition: str = SESSION_END) -> str:
    """One event's stated duration in scale, in 10^-SCALE ms (0 when not stated, or out of
    scale, or ``condition`` does not hold)."""
    value = f"toUInt256(duration_digits) * {_POW10}[duration_exponent + {SCALE + 1}]"
    return f"if({_IN_SCALE} AND {condition}, {value}, 0)"


def outside_value(condition: str = SESSION_END) -> str:
    """One event's stated duration out of scale as a pair in an array (else empty)."""
    return f"if({_outside(condition)}, [{_PAIR}], {NO_PAIRS})"


def scaled_sum(condition: str = SESSION_END) -> str:
    """Per group: the stated durations in scale where ``condition`` holds, in 10^-SCALE ms."""
    return f"sum({scaled_value(condition)})"


def outside_count(condition: str = SESSION_END) -> str:
    """Per group: how many stated durations are out of scale where ``condition`` holds."""
    return f"countIf({_outside(condition)})"


def outside_pairs(condition: str = SESSION_END) -> str:
    """Per group: the pairs of the stated durations out of scale where ``condition`` holds."""
    return f"groupArrayIf({_PAIR}, {_outside(condition)})"


def scaled_pairs(scaled: str, outside: str) -> str:
    """The pairs of :func:`scaled_sum` and :func:`outside_pairs` results (summed over groups:
    ``sum`` and ``groupArrayArray``)."""
    return f"arrayPushFront({outside}, (toInt16(-{SCALE}), toUInt256({scaled})))"
