"""A project's own rules: its name, its time zone and its bot rule. Pure Python, no storage."""

from __future__ import annotations

import re
import unicodedata
import zoneinfo
from dataclasses import dataclass
from functools import lru_cache

NAME_MIN, NAME_MAX = 2, 60
LABEL_MIN, LABEL_MAX = 1, 60  # an API key's label
DEFAULT_TIMEZONE = "UTC"
DEFAULT_EXCLUDE_BOTS = True
NAME_RULE = f"must be {NAME_MIN} to {NAME_MAX} characters once surrounding spaces are trimmed"
LABEL_RULE = f"must be {LABEL_MIN} to {LABEL_MAX} characters once surrounding spaces are trimmed"
CONTROL_RULE = "must not contain control characters (U+0000 to U+001F, U+007F to U+009F)"
VISIBLE_RULE = (
    "must contain a visible character, not only spaces, combining marks and invisible "
    "characters such as U+200B"
)
TIMEZONE_RULE = "must be an IANA time zone such as Europe/Berlin"
# The whitespace trimmed from names: ECMAScript's (what String.prototype.trim and the ``\s`` of a
# JSON Schema pattern mean), so that the page, the OpenAPI document and the server agree. Python's
# own ``str.strip()`` would also take the control characters U+001C-U+001F and U+0085.
WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
# Control characters (Unicode's Cc: C0, DEL and C1), refused anywhere in a name or label once
# trimmed: NUL and the like break logs, CSV files and terminals that show the name.
_CONTROL = re.compile("[\\x00-\\x1f\\x7f-\\x9f]")


def _format_characters() -> str:
    """Unicode's format characters (Cf: U+200B ZERO WIDTH SPACE, U+2060 WORD JOINER, U+FEFF, the
    bidirectional controls, tags...), invisible on their own, as this Python's Unicode database
    has them. Unicode assigns them in planes 0, 1 and 14 only, which are all that is scanned."""
    planes = (range(0x20000), range(0xE0000, 0xE1000))
    return "".join(
        chr(c) for plane in planes for c in plane if unicodedata.category(chr(c)) == "Cf"
    )


FORMAT_CHARACTERS = _format_characters()


def _marks_and_fillers() -> str:
    """What else shows nothing on its own: combining marks (Mn, Me: a mark with no letter to sit
    on, and the variation selectors) and the default-ignorable code points that are not format
    characters (U+034F COMBINING GRAPHEME JOINER is a mark; the Hangul fillers U+115F, U+1160,
    U+3164 and U+FFA0 are letters that draw nothing)."""
    planes = (range(0x20000), range(0xE0000, 0xE1000))
    marks = "".join(
        chr(c) for plane in planes for c in plane if unicodedata.category(chr(c)) in ("Mn", "Me")
    )
    return marks + "\u115f\u1160\u3164\uffa0"


MARKS_AND_FILLERS = _marks_and_fillers()
# What shows nothing on its own: format characters, marks and fillers, and Unicode's spaces and
# separators (Z*, all of them in WHITESPACE). A name or label made only of these is refused,
# once trimmed.
INVISIBLE = (
    frozenset(FORMAT_CHARACTERS)
    | frozenset(MARKS_AND_FILLERS)
    | frozenset(c for c in WHITESPACE if unicodedata.category(c).startswith("Z"))
)


def _class(characters: str) -> str:
    """``characters`` as the inside of a regex character class, in ranges: BMP characters as
    \\uXXXX escapes (ECMAScript and Python read them alike), the others as themselves."""
    codes = sorted(map(ord, characters))
    runs: list[list[int]] = []
    for code in codes:
        if runs and runs[-1][1] == code - 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])

    def one(code: int) -> str:
        return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)

    return "".join(one(a) if a == b else f"{one(a)}-{one(b)}" for a, b in runs)


# The same rules as patterns (for the OpenAPI document): once trimmed, 2-60 (a label: 1-60)
# characters remain, none of them a control character, one of them visible.
_WS = "\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_CC = "\\u0000-\\u001f\\u007f-\\u009f"
_EDGE = f"[^{_WS}{_CC}]"
_VISIBLE_AHEAD = f"(?=[^{_CC}]*[^{_WS}{_CC}{_class(FORMAT_CHARACTERS + MARKS_AND_FILLERS)}])"
NAME_PATTERN = f"^[{_WS}]*{_VISIBLE_AHEAD}{_EDGE}[^{_CC}]{{0,{NAME_MAX - 2}}}{_EDGE}[{_WS}]*$"
LABEL_PATTERN = (
    f"^[{_WS}]*{_VISIBLE_AHEAD}{_EDGE}(?:[^{_CC}]{{0,{LABEL_MAX - 2}}}{_EDGE})?[{_WS}]*$"
)
# In the tz database but not a place: the machine's own zone and the "zone not set" placeholder.
_NOT_PLACES = frozenset({"localtime", "Factory"})


@dataclass(frozen=True)
class ProjectSettings:
    """What the dashboard needs to know about a project besides its id."""

    timezone: str = DEFAULT_TIMEZONE
    exclude_bots: bool = DEFAULT_EXCLUDE_BOTS


class InvalidProject(ValueError):
    """A project field breaks its rule; ``field`` names it as the API spells it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field} {message}")
        self.field = field
        self.message = message


def clean_name(name: str) -> str:
    """The name as stored: surrounding whitespace trimmed, 2-60 characters left, no control
    character, a visible one."""
    return _clean_text(name, "name", NAME_MIN, NAME_MAX, NAME_RULE)


def clean_label(label: str) -> str:
    """An API key's label as stored: the name's rules, with 1-60 characters."""
    return _clean_text(label, "label", LABEL_MIN, LABEL_MAX, LABEL_RULE)


def _clean_text(value: str, field: str, low: int, high: int, length_rule: str) -> str:
    trimmed = value.strip(WHITESPACE)
    if not low <= len(trimmed) <= high:
        raise InvalidProject(field, length_rule)
    if _CONTROL.search(trimmed):
        raise InvalidProject(field, CONTROL_RULE)
    if all(c in INVISIBLE for c in trimmed):
        raise InvalidProject(field, VISIBLE_RULE)
    return trimmed


@lru_cache(maxsize=1)
def iana_zones() -> frozenset[str]:
    """IANA zone names Python knows (from the system or the tzdata package)."""
    return frozenset(zoneinfo.available_timezones()) - _NOT_PLACES


def check_timezone(name: str) -> str:
    """``name`` when it is an IANA time zone (exact spelling, e.g. ``America/New_York``)."""
    if name not in iana_zones():
        raise InvalidProject("timezone", TIMEZONE_RULE)
    return name
