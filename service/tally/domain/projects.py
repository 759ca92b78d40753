"""A project's own rules: its name, its time zone and its bot rule. Pure Python, no storage."""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from functools import lru_cache

NAME_MIN, NAME_MAX = 2, 60
DEFAULT_TIMEZONE = "UTC"
DEFAULT_EXCLUDE_BOTS = True
NAME_RULE = f"must be {NAME_MIN} to {NAME_MAX} characters once surrounding spaces are trimmed"
TIMEZONE_RULE = "must be an IANA time zone such as Europe/Berlin"
# The whitespace trimmed from names: ECMAScript's (what String.prototype.trim and the ``\s`` of a
# JSON Schema pattern mean), so that the page, the OpenAPI document and the server agree. Python's
# own ``str.strip()`` would also take the control characters U+001C-U+001F and U+0085.
WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
# The same rule as a pattern (for the OpenAPI document): trimmed, 2-60 characters remain.
_WS = "\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
NAME_PATTERN = f"^[{_WS}]*[^{_WS}][\\s\\S]{{0,{NAME_MAX - 2}}}[^{_WS}][{_WS}]*$"
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
    """The name as stored: surrounding whitespace trimmed, 2-60 characters left."""
    trimmed = name.strip(WHITESPACE)
    if not NAME_MIN <= len(trimmed) <= NAME_MAX:
        raise InvalidProject("name", NAME_RULE)
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
