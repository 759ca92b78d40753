"""Identifiers, API keys and times as CONTRACT.md defines them."""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import time
from datetime import UTC, datetime

KEY_PREFIX = "tk_"
# ``(?!\n)``: Python's ``$`` also matches before a last newline ("<id>\n" would pass); in the
# JSON Schema (ECMA-262) reading of the API docs it changes nothing.
OBJECT_ID_PATTERN = "^[0-9a-f]{24}$(?!\n)"


def object_id(now: float | None = None) -> str:
    """24 lowercase hex characters: 4-byte creation time (seconds) + 8 random bytes."""
    seconds = int(time.time() if now is None else now) & 0xFFFFFFFF
    return f"{seconds:08x}{os.urandom(8).hex()}"


def new_api_key() -> str:
    """A new API key: the ``tk_`` prefix and 192 random bits, URL-safe."""
    return KEY_PREFIX + secrets.token_urlsafe(24)


def hash_key(key: str) -> str:
    """What is stored instead of the key. Keys carry 192 random bits, so a fast hash suffices."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_preview(key: str) -> str:
    """First 7 characters, an ellipsis (U+2026), the last 4."""
    return f"{key[:7]}\u2026{key[-4:]}"


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(dt: datetime) -> datetime:
    """Aware UTC datetime; naive values (as some engines return them) are taken as UTC."""
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def iso(dt: datetime) -> str:
    """ISO 8601 UTC with milliseconds and ``Z``, e.g. ``2026-11-22T10:12:26.123Z``."""
    dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


# Row versions of the versioned tables (projects, api_keys: ReplacingMergeTree keeps a row's
# highest version). Microseconds since the epoch, but never trusted to be above what is stored:
# the wall clock may be set back (an NTP correction, a VM restored) while the process runs or
# between two runs. So a version is also above the last one this process handed out, above the
# versions it saw stored (:func:`follow_version`), and above the version of the row it
# supersedes (``above``), whatever the clock says.
# Versions from here up are deleted markers' (storage/projects.py adds 2^62): never followed, or
# every later version would be a marker's.
MARKER_VERSIONS = 1 << 62
_last_version = 0
_version_lock = threading.Lock()


def next_version(above: int = 0) -> int:
    """A row version: strictly increasing in this process, above ``above`` (the version of the
    row it replaces, read in the same operation) and at least the wall clock's microseconds."""
    global _last_version
    with _version_lock:
        now = time.time_ns() // 1000
        floor = above if above < MARKER_VERSIONS else 0
        _last_version = max(now, _last_version + 1, floor + 1)
        return _last_version


def follow_version(seen: int) -> None:
    """Versions handed out from now on exceed ``seen``, a version read from storage (written
    by another process, or before this process started with its clock set back)."""
    global _last_version
    if seen >= MARKER_VERSIONS:
        return
    with _version_lock:
        _last_version = max(_last_version, seen)
