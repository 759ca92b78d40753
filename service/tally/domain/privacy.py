"""The IP privacy option: store a salted hash of the client IP instead of the IP."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, date, datetime

from ..config import Settings, dev_secret

IP_SECRET_FILE = "ip-hash-secret"


class IpHasher:
    """``ip -> hex``: HMAC-SHA-256 under a salt that changes every UTC day.

    The same visitor hashes alike within a day (so per-day counts by IP still work) and unlike
    across days, and the salt of a past day cannot be rebuilt without the secret.
    """

    def __init__(self, settings: Settings) -> None:
        secret = settings.ip_hash_secret or dev_secret(settings, name=IP_SECRET_FILE)
        self._secret = secret.encode()
        self._day: date | None = None
        self._salt = b""

    def salt(self, day: date) -> bytes:
        if day != self._day:
            self._salt = hmac.new(self._secret, day.isoformat().encode(), hashlib.sha256).digest()
            self._day = day
        return self._salt

    def __call__(self, ip: str, now: datetime | None = None) -> str:
        day = (now or datetime.now(UTC)).date()
        return hmac.new(self.salt(day), ip.encode(), hashlib.sha256).hexdigest()[:32]
