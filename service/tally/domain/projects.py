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
    trimmed = name.strip()
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
