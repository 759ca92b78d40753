"""Country of a client IP, from a MaxMind-format database read with ``maxminddb``.

Tally ships DB-IP's *IP to Country Lite* database (CC BY 4.0, ``tally/data/README.md``); the
setting ``geoip_db`` (``TALLY_GEOIP_DB``) names another MaxMind-format file instead. Both record
shapes are read: the ip-location-db one (``{"country_code": "US"}``) and MaxMind's GeoIP2/GeoLite2
and DB-IP's own (``{"country": {"iso_code": "US"}}``, else ``registered_country``).

The lookup takes the raw client IP: the collect handler resolves the country before the IP
privacy option replaces the address with its hash.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import maxminddb

UNKNOWN = "Unknown"


def packaged_db() -> Path:
    """The database that ships with Tally."""
    return Path(str(resources.files("tally") / "data" / "dbip-country.mmdb"))


def _iso_code(record: Any) -> str | None:
    if not isinstance(record, dict):
        return None
    code = record.get("country_code")
    if isinstance(code, str):
        return code
    for key in ("country", "registered_country"):
        part = record.get(key)
        if isinstance(part, dict) and isinstance(part.get("iso_code"), str):
            return str(part["iso_code"])
    return None


def _unmapped(ip: str) -> str:
    """The IPv4 address an IPv4-mapped IPv6 address stands for (``::ffff:81.2.69.142``,
    ``::ffff:5102:458e``, ``0:0:0:0:0:ffff:5102:458e``: ``81.2.69.142``); any other text as is."""
    try:
        mapped = ipaddress.IPv6Address(ip).ipv4_mapped
    except ValueError:
        return ip
    return str(mapped) if mapped is not None else ip


class CountryReader:
    """``ip -> ISO 3166-1 alpha-2`` (``Unknown`` when the database cannot tell). Open once per
    process: the file is memory-mapped and shared by every request."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path else packaged_db()
        try:
            self._reader = maxminddb.open_database(str(self.path), maxminddb.MODE_AUTO)
        except (OSError, ValueError, maxminddb.InvalidDatabaseError) as exc:  # not a MaxMind DB
            raise ValueError(
                f"cannot open the IP-to-country database {self.path} (TALLY_GEOIP_DB): {exc}"
            ) from None
        # Recent addresses: a visitor sends many events, and a lookup is a tree walk.
        self.country = lru_cache(maxsize=16384)(self._lookup)

    @classmethod
    def from_settings(cls, settings: Any) -> CountryReader:
        return cls(getattr(settings, "geoip_db", "") or None)

    def _lookup(self, ip: str) -> str:
        if ":" in ip:  # IPv4-mapped IPv6, from a dual-stack socket or a proxy, in any spelling
            ip = _unmapped(ip)
        try:
            record = self._reader.get(ip)
        except (ValueError, TypeError):  # not an IP address (e.g. "testclient")
            return UNKNOWN
        code = _iso_code(record)
        if not code or len(code) != 2 or not code.isalpha():
            return UNKNOWN
        return code.upper()

    @property
    def build_epoch(self) -> int:
        """When the database was built (seconds since the epoch)."""
        return int(self._reader.metadata().build_epoch)

    def close(self) -> None:
        self._reader.close()
