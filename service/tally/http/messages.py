"""Validation errors in plain words: every ``details[].message`` says which rule failed.

msgspec and Litestar describe a failure in their own terms ("Expected `str` of length >= 2",
"Object missing required field `name`", a regex). :func:`plain` translates them in one place,
knowing the field the path names, so that the message states the whole rule ("must be 2 to 60
characters") and the path names the field itself (a missing or unknown field's own path).
"""

from __future__ import annotations

import re
from typing import get_args

from ..domain.metrics import MAX_DAYS
from ..domain.projects import LABEL_RULE, NAME_RULE
from ..domain.query_errors import member
from ..domain.ranges import Compare
from ..query.breakdown import MAX_LIMIT, By

# ISO 8601's extended form (RFC 3339's): its basic form, 20261123T100000Z, is refused too.
ISO_EXAMPLE = "must be an ISO 8601 date-time in its extended form, e.g. 2026-11-23T10:00:00Z"
OBJECT_ID = "must be a 24-character id (lowercase hex digits)"
DATE_MESSAGE = "must be a date as YYYY-MM-DD"
NOT_UTF8 = "is not valid UTF-8"

# Whole rules by the field's last path segment (body fields and query parameters).
_LENGTH_RULES = {
    "name": "must be 1 to 100 characters",
    "path": "must be at most 2048 characters",
    "url": "must be at most 4096 characters",
    "referrer": "must be at most 4096 characters",
    "sessionId": "must be at most 200 characters",
    "visitorId": "must be at most 200 characters",
    "label": LABEL_RULE,
}
# What the items of a body's array are called, singular and plural (`"metrics": []` "must have
# at least 1 metric", not "1 items"); other arrays have items, objects keys.
_ITEMS = {
    "metrics": ("metric", "metrics"),
    "dimensions": ("dimension", "dimensions"),
}
# The values of the query parameters that take one of a list (Litestar checks them).
ENUM_CHOICES: dict[str, tuple[str, ...]] = {
    "by": get_args(By),
    "compare": get_args(Compare),
}
# The project name (a top-level `name`) has a rule of its own; names and labels are also read
# only up to a length with their surrounding spaces.
_PROJECT_NAME = NAME_RULE
_WITH_SPACES = ", and at most {} characters with them"
_TYPE_NAMES = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "object": "an object",
    "array": "an array",
    "null": "null",
}

_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]*)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>[^`]*)`$")
_LENGTH = re.compile(r"^Expected `(?P<type>str|array|object)` of length (?P<op>[<>]=) (?P<n>\d+)$")
_BOUND = re.compile(r"^Expected `(?P<type>int|float)` (?P<op>[<>]=?) (?P<n>-?[\d.]+)$")
_REGEX = re.compile(r"^Expected `str` matching regex ")
_TYPE = re.compile(r"^Expected `(?P<want>[^`]*)`, got `(?P<got>[^`]*)`$")
# The value is quoted as Python's repr quotes it: in double quotes when it holds a '.
_ENUM = re.compile(r"^Invalid enum value (?:'.*'|\".*\")$", re.DOTALL)
_QUERY_MISSING = re.compile(r"^Missing required (?:query )?parameter '?(?P<field>[^' ]+)'?")


def _field(path: str) -> str:
    """The last named segment of a path: ``$.events[3].name`` -> ``name``."""
    tail = path.rsplit(".", 1)[-1]
    return tail.split("[", 1)[0]


def _join(path: str, field: str) -> str:
    return (path or "$") + member(field)


def _type_words(names: str) -> str:
    words = [_TYPE_NAMES.get(n.strip(), n.strip()) for n in names.split("|")]
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def plain(message: str, path: str, in_query: bool = False, in_key: bool = False) -> tuple[str, str]:
    """``(path, message)`` with the message in plain words (and the path of a missing or unknown
    field pointing at that field). ``in_key``: the failure is in an object's key (metadata)."""
    message = message.strip()
    field = _field(path)
    if in_key:
        if _LENGTH.match(message):
            return path, "keys must be 1 to 100 characters"
        return path, "keys must be strings"
    if match := _MISSING.match(message):
        return _join(path if path != "$" else "", match["field"]), "is required"
    if match := _UNKNOWN.match(message):
        return _join(path if path != "$" else "", match["field"]), "is not a known field"
    if in_query and (match := _QUERY_MISSING.match(message)):
        return f"$.{match['field']}", "is required"
    if _REGEX.match(message):
        if field in ("from", "to"):
            return path, DATE_MESSAGE
        if field == "occurredAt":
            return path, ISO_EXAMPLE
        if field in ("projectId", "keyId"):
            return path, OBJECT_ID
        if field == "site_id":
            return path, f"{OBJECT_ID}: the projectId of a project"
        return path, "does not have the expected form"
    if match := _LENGTH.match(message):
        kind, op, n = match["type"], match["op"], int(match["n"])
        if kind == "str":
            if field == "name" and path == "$.name":
                return path, _PROJECT_NAME + _WITH_SPACES.format(n) * (op == "<=")
            if field == "label" and path == "$.label":
                return path, LABEL_RULE + _WITH_SPACES.format(n) * (op == "<=")
            if field in _LENGTH_RULES:
                return path, _LENGTH_RULES[field]
            if "metadata" in path and path.endswith("]"):
                return path, "metadata strings must be at most 1024 characters"
            unit = "character" if n == 1 else "characters"
            return path, f"must be {'at least' if op == '>=' else 'at most'} {n} {unit}"
        if kind == "array" and field == "events":
            if op == "<=":
                return path, "must be at most 100 events"
            return path, "must have at least 1 event"
        if kind == "object" and field == "metadata":
            return path, "must have at most 50 keys"
        one, many = (
            _ITEMS.get(field) or {"array": ("item", "items"), "object": ("key", "keys")}[kind]
        )
        return (
            path,
            f"must have {'at least' if op == '>=' else 'at most'} {n} {one if n == 1 else many}",
        )
    if match := _BOUND.match(message):
        if field == "days":
            return path, f"must be a whole number of days from 1 to {MAX_DAYS}"
        op = {">=": "at least", "<=": "at most", ">": "more than", "<": "less than"}[match["op"]]
        return path, f"must be {op} {match['n']}"
    if message in ("Integer value out of range", "Number out of range"):
        if field == "days":
            return path, f"must be a whole number of days from 1 to {MAX_DAYS}"
        return path, "is out of range (numbers must fit a 64-bit integer or a double)"
    if match := _TYPE.match(message):
        if field == "days":
            return path, f"must be a whole number of days from 1 to {MAX_DAYS}"
        if field == "limit" and path == "$.limit":
            return path, f"must be a whole number of rows from 1 to {MAX_LIMIT}"
        if "metadata" in path and path.endswith("[...]"):
            return path, "metadata values must be strings, numbers, booleans or null"
        return path, f"must be {_type_words(match['want'])}, not {_type_words(match['got'])}"
    if _ENUM.match(message):
        choices = ENUM_CHOICES.get(field)
        if choices:
            return path, f"must be one of {', '.join(choices)}"
        return path, "is not one of the values this parameter takes"
    if message.startswith("Expected `"):
        return path, message  # a rule msgspec states that has no wording here yet
    if message.startswith("JSON is malformed"):
        where = re.search(r"\(byte (\d+)\)", message)
        at = f" (at byte {where.group(1)})" if where else ""
        return path, f"is not valid JSON{at}"
    if message == "Input data was truncated":
        return path, "is not valid JSON: it ends too early"
    if message in ("'data'", "a JSON body is required"):
        return "$", "a JSON body is required"
    return path, message
