"""Gzip on the wire: the API's JSON answers, and the CSV and NDJSON exports.

A dashboard's JSON crosses in under half its size gzipped (tests/test_compression.py), an
export of a million events in about a seventh (README, "Export"). Plausible and Umami answer
their API gzipped, and an analyst downloading an export over a WAN waits for the bytes. A
client that takes gzip (``Accept-Encoding``; browsers and curl ``--compressed`` do) gets it, with
``Content-Encoding: gzip`` and ``Vary: Accept-Encoding``; one that does not, or refuses it with
``q=0``, gets the bytes as before.

- JSON answers of at least :data:`MINIMUM_SIZE` bytes are compressed by Litestar's middleware,
  per route (so ``POST /api/collect``'s own path, http/collect_fast.py, never meets it; its 202 is
  a few bytes anyway), at :data:`JSON_LEVEL`. The pages (http/pages.py) keep their own gzip form,
  made once per file, and the export its own (below): their handlers say ``skip_compression``.
- An export is compressed on its reading thread (http/export.py), at :data:`STREAM_LEVEL`, the
  fastest, so the event loop never spends time on it (zlib lets the other threads run meanwhile).
  Parquet is compressed inside the file already and is sent as it is.
- Secrets (the BREACH attack guesses a secret in a compressed answer from its size, over many
  requests a third-party page makes the browser send with its cookies): a new API key's answer
  is below the minimum size; the API is authenticated by a header no third-party page can set,
  and the export's cookie (the page's download link) is ``SameSite=Strict``, never sent
  cross-site; an export holds events, no secret.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Final

from litestar.config.compression import CompressionConfig
from litestar.datastructures import Headers
from litestar.enums import CompressionEncoding
from litestar.middleware.compression import CompressionMiddleware
from litestar.types import Receive, Scope, Send

MINIMUM_SIZE: Final = 1024
JSON_LEVEL: Final = 5
STREAM_LEVEL: Final = 1
# A piece of a compressed export is sent once it holds this much (or the export ended).
STREAM_PIECE: Final = 64 * 1024
SKIP: Final = "skip_compression"
NO_COMPRESSION: Final = {SKIP: True}


def accepts_gzip(header: str) -> bool:
    """Whether an ``Accept-Encoding`` value takes gzip: ``gzip`` (or ``x-gzip``, or ``*`` when
    gzip is not named) with a quality above 0 (RFC 9110, 12.5.3)."""
    named: dict[str, float] = {}
    for item in header.lower().split(","):
        coding, _, params = item.partition(";")
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        named[coding.strip()] = quality
    for coding in ("gzip", "x-gzip", "*"):
        if coding in named:
            return named[coding] > 0
    return False


class GzipMiddleware(CompressionMiddleware):
    """Litestar's gzip, on the clients :func:`accepts_gzip` says take it (Litestar's own looks
    for the word "gzip" in the header, so ``gzip;q=0`` got gzip)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if accepts_gzip(Headers.from_scope(scope).get("accept-encoding", "")):
            send = self.create_compression_send_wrapper(
                send=send, compression_encoding=CompressionEncoding.GZIP, scope=scope
            )
        await self.app(scope, receive, send)


COMPRESSION: Final = CompressionConfig(
    backend="gzip",
    minimum_size=MINIMUM_SIZE,
    gzip_compress_level=JSON_LEVEL,
    middleware_class=GzipMiddleware,
    exclude_opt_key=SKIP,
)


def gzip_stream(chunks: Iterator[bytes], level: int = STREAM_LEVEL) -> Iterator[bytes]:
    """``chunks`` as one gzip member, in pieces of at least :data:`STREAM_PIECE` bytes (the last
    may be shorter). Closing it closes ``chunks``."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    pending: list[bytes] = []
    size = 0
    try:
        for chunk in chunks:
            piece = compressor.compress(chunk)
            if piece:
                pending.append(piece)
                size += len(piece)
            if size >= STREAM_PIECE:
                yield b"".join(pending)
                pending, size = [], 0
        pending.append(compressor.flush())
        yield b"".join(pending)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
