"""The one error of query validation: which part of the request is wrong, in plain words.

Raised by the domain parsers of filters, ranges and the v2 query body (``filters``, ``ranges``,
``stats_v2``); the HTTP layer turns it into 400 with ``{"error": <error>, "details": [{path,
message}]}``. ``error`` is ``Invalid query`` for query-string parameters and ``Invalid payload``
for a JSON body, as CONTRACT.md's error table says.
"""

from __future__ import annotations

import json
import re

INVALID_QUERY = "Invalid query"
INVALID_PAYLOAD = "Invalid payload"
# JSON nested deeper than the decoder follows (about a thousand levels; no valid input nests
# more than three).
TOO_DEEP = "nests arrays or objects too deeply to be read"
# A \u escape of a UTF-16 surrogate that is not part of a high+low pair (JSON text as bytes).
LONE_SURROGATE = re.compile(
    rb"(?<!\\)(?:\\\\)*\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    rb"|(?<!\\)(?:\\\\)*(?<![dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
NO_SURROGATES = "must be valid UTF-8 text (no lone surrogates)"
_SHORTHAND = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def member(name: str) -> str:
    """A key as the last step of a path: ``.browser``, or ``["page title"]`` when the name is
    not a plain identifier (JSONPath, RFC 9535; the string quoted as JSON quotes it), so that
    ``{"a.b": 1}`` is not read as ``$.a.b``."""
    if _SHORTHAND.match(name):
        return f".{name}"
    return f"[{json.dumps(name, ensure_ascii=False)}]"


class InvalidQuery(ValueError):
    """A request part that breaks a rule: ``path`` (JSONPath-like) and a plain-word ``message``."""

    def __init__(self, path: str, message: str, error: str = INVALID_QUERY) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
        self.error = error

    def as_payload(self) -> InvalidQuery:
        """The same error reported against a JSON body (``Invalid payload``)."""
        return InvalidQuery(self.path, self.message, INVALID_PAYLOAD)
