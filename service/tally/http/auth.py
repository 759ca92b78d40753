"""Credentials: identity-provider sessions (JWT) and project API keys, checked by Litestar guards.

Guards run before the request body is read, so a request without valid credentials is answered
401 whatever its body is. Only a declared ``Content-Length`` over the body cap comes first: it is
413 from the headers alone, whatever the credentials (http/limits.py; README, "Errors").
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

import jwt
from jwt import PyJWK, PyJWKClient
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler

from ..config import Settings, dev_secret
from ..domain.ids import hash_key

log = logging.getLogger("tally.auth")

SESSION_COOKIE = "tally_session"
# The OpenAPI security of every session route: a bearer token or the same JWT as the cookie.
SESSION_SECURITY: list[dict[str, list[str]]] = [{"session": []}, {"sessionCookie": []}]
LEEWAY_SECONDS = 30


class Unauthorized(NotAuthorizedException):
    """401 with the error string the contract names."""

    def __init__(self, error: str = "Unauthorized") -> None:
        super().__init__(detail=error)


class JwksKeys:
    """Signing keys from the identity provider's JWKS endpoint.

    Keys are cached for ``cache_seconds``; a token with an unknown ``kid`` triggers a refetch, but
    at most once per ``cooldown_seconds``, so forged kids cannot make Tally hammer the provider.
    Fetches run in a worker thread, never on the event loop.
    """

    def __init__(self, url: str, cache_seconds: float = 300.0, cooldown_seconds: float = 30.0):
        self._client = PyJWKClient(url, cache_jwk_set=False, cache_keys=False, timeout=5)
        self.cache_seconds = cache_seconds
        self.cooldown_seconds = cooldown_seconds
        self._keys: dict[str, PyJWK] = {}
        self._fetched_at = -float("inf")
        self._lock = asyncio.Lock()
        self.fetches = 0

    async def get(self, kid: str) -> PyJWK | None:
        fresh = time.monotonic() - self._fetched_at < self.cache_seconds
        if kid in self._keys and fresh:
            return self._keys[kid]
        async with self._lock:
            elapsed = time.monotonic() - self._fetched_at
            stale = elapsed >= self.cache_seconds
            if (kid not in self._keys and elapsed >= self.cooldown_seconds) or stale:
                await self._fetch()
        return self._keys.get(kid)

    async def _fetch(self) -> None:
        self._fetched_at = time.monotonic()
        self.fetches += 1
        try:
            jwk_set = await asyncio.to_thread(self._client.get_jwk_set, True)
        except Exception as exc:
            log.warning("JWKS fetch failed: %s", exc)
            return
        self._keys = {k.key_id: k for k in jwk_set.keys if k.key_id}


# The JWK key type ("kty") each family of signing algorithms needs (RFC 7518).
KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "HS": "oct", "Ed": "OKP"}


class SessionVerifier:
    """Verifies session tokens: pinned algorithms, ``exp`` and ``sub`` required, iss/aud if set."""

    def __init__(self, settings: Settings) -> None:
        self.algorithms = settings.algorithms
        self.issuer = settings.jwt_issuer or None
        self.audience = settings.jwt_audience or None
        self.jwks: JwksKeys | None = None
        self.secret = ""
        if settings.jwks_url:
            self.jwks = JwksKeys(
                settings.jwks_url,
                settings.jwks_cache_seconds,
                settings.jwks_refetch_cooldown_seconds,
            )
        else:
            self.secret = settings.jwt_secret or dev_secret(settings)

    async def verify(self, token: str) -> str:
        """The ``sub`` of a valid token; raises Unauthorized otherwise."""
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") not in self.algorithms:
                raise Unauthorized
            key: Any = self.secret
            if self.jwks is not None:
                kid = header.get("kid")
                jwk = await self.jwks.get(kid) if isinstance(kid, str) else None
                # A kid is public (the provider's JWKS is): a token may name an RSA key with
                # "alg": "ES256". PyJWT then fails with a TypeError before any signature check.
                if jwk is None or KEY_TYPES.get(str(header["alg"])[:2]) != jwk.key_type:
                    raise Unauthorized
                key = jwk.key
            claims = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "sub"], "verify_aud": self.audience is not None},
            )
        except (jwt.PyJWTError, TypeError, ValueError):  # a key unfit for the token's alg too
            raise Unauthorized from None
        # PyJWT reads these with int(), so "exp": "9999999999" passed; RFC 7519 makes each a
        # NumericDate, a JSON number.
        if not all(_numeric_date(claims[name]) for name in TIME_CLAIMS if name in claims):
            raise Unauthorized
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise Unauthorized
        try:
            sub.encode()  # stored as the owner: a lone surrogate (JSON's \ud800) has no UTF-8
        except UnicodeEncodeError:
            raise Unauthorized from None
        return sub


TIME_CLAIMS = ("exp", "nbf", "iat")


def _numeric_date(value: Any) -> bool:
    """A JSON number (RFC 7519 NumericDate): not a string of digits, not true or false, and
    one a double holds (an integer of 309 digits overflowed ``math.isfinite``: a 500)."""
    if type(value) not in (int, float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def issue_token(
    secret: str, sub: str, ttl: int = 3600, *, algorithm: str = "HS256", **claims: Any
) -> str:
    """A session token signed with ``secret`` (HS256, or the HS ``algorithm`` given), for local
    use and tests."""
    now = int(time.time())
    return jwt.encode({"sub": sub, "iat": now, "exp": now + ttl, **claims}, secret, algorithm)


def _bearer(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    headers = connection.headers.getall("authorization", [])
    if len(headers) > 1:
        # Two credentials are one too many: which one a proxy or a server reads differs, so
        # neither is taken (401), rather than the first one.
        return None
    header = headers[0] if headers else ""
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    named = [
        part
        for line in connection.headers.getall("cookie", [])
        for part in line.split(";")
        if part.strip().partition("=")[0].strip() == SESSION_COOKIE
    ]
    if len(named) > 1:
        # Two session cookies (one per path or domain, say one planted from a sibling
        # subdomain): the last was taken within one Cookie line and the first across two.
        return None
    cookie = connection.cookies.get(SESSION_COOKIE) or None
    if cookie and connection.scope.get("method") == "POST":
        # CSRF: a cross-site page can make a browser send the cookie with a "simple" POST
        # (text/plain or a form, no preflight). A JSON content type forces a CORS preflight,
        # which a credentialed cross-origin request fails (Tally never allows credentials), so
        # a cookie authenticates a POST only when it declares JSON. (DELETE is always preflighted.)
        content_type = connection.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return None
    return cookie


async def session_guard(
    connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler
) -> None:
    if connection.scope.get("method") == "OPTIONS":
        return  # it lists the path's methods (access.true_allow) and reads nothing
    token = _bearer(connection)
    if token is None:
        raise Unauthorized
    verifier: SessionVerifier = connection.app.state.sessions
    connection.state.user_id = await verifier.verify(token)


async def api_key_guard(
    connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler
) -> None:
    # The header wins over the query parameter when both are present.
    # (A parameter given twice is refused before this: http/query.py.)
    headers = connection.headers.getall("x-api-key", [])
    if len(headers) > 1:
        raise Unauthorized("Invalid API key")  # two keys: neither is taken
    key = (headers[0] if headers else "") or connection.query_params.get("apiKey")
    if not key:
        raise Unauthorized("Missing API key")
    record = await connection.app.state.registry.resolve(hash_key(key))
    if record is None:
        raise Unauthorized("Invalid API key")
    connection.state.api_key = record
