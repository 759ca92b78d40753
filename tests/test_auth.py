"""Session tokens: HS256 with a shared secret, and RS256 keys from a JWKS endpoint on loopback."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from conftest import JWT_SECRET, new_project, stored


def bearer(tok: str) -> dict[str, str]:
    return {"authorization": f"Bearer {tok}"}


def hs(claims: dict, secret: str = JWT_SECRET, alg: str = "HS256", headers=None) -> str:
    return jwt.encode(claims, secret, alg, headers=headers)


def claims(**extra):
    now = int(time.time())
    return {"sub": "alice", "iat": now, "exp": now + 600, **extra}


def status(client, tok):
    return client.get("/api/projects", headers=bearer(tok)).status_code


def unsigned(payload: dict) -> str:
    def b64(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(payload)}."


# --- HS256 ------------------------------------------------------------------------------------
def test_valid_hs256(client):
    assert status(client, hs(claims())) == 200


@pytest.mark.parametrize(
    "tok",
    [
        pytest.param(lambda: hs(claims(exp=int(time.time()) - 120)), id="expired"),
        pytest.param(lambda: hs({"sub": "alice"}), id="no exp"),
        pytest.param(lambda: hs({k: v for k, v in claims().items() if k != "sub"}), id="no sub"),
        pytest.param(lambda: hs(claims(sub="")), id="empty sub"),
        pytest.param(lambda: hs(claims(sub=42)), id="sub not a string"),
        # Signed, but no text: a lone surrogate has no UTF-8 (it was a 503, then a 500).
        pytest.param(lambda: hs(claims(sub="\ud800")), id="sub a lone surrogate"),
        pytest.param(
            lambda: hs(claims(), secret="another-secret-of-sufficient-length!!"), id="wrong secret"
        ),
        pytest.param(
            lambda: hs(claims(), alg="HS512"),
            id="other algorithm",
            # Signed with the server's own (HS256-sized) secret: the token is forged on purpose.
            marks=pytest.mark.filterwarnings("ignore:The HMAC key is"),
        ),
        pytest.param(lambda: unsigned(claims()), id="alg none"),
        pytest.param(lambda: hs(claims())[:-4] + "AAAA", id="tampered signature"),
        pytest.param(lambda: hs(claims(nbf=int(time.time()) + 600)), id="not yet valid"),
        # Times are JSON numbers (RFC 7519 NumericDate), never strings or booleans.
        pytest.param(lambda: hs(claims(exp="9999999999")), id="exp a string of digits"),
        pytest.param(lambda: hs(claims(exp=str(int(time.time()) + 600))), id="exp a string"),
        pytest.param(lambda: hs(claims(nbf=str(int(time.time()) - 60))), id="nbf a string"),
        pytest.param(lambda: hs(claims(iat=str(int(time.time())))), id="iat a string"),
        pytest.param(lambda: hs(claims(iat=True)), id="iat a boolean"),
    ],
)
def test_invalid_hs256(client, tok):
    response = client.get("/api/projects", headers=bearer(tok()))
    assert (response.status_code, response.json()) == (401, {"error": "Unauthorized"})


def test_times_may_be_any_json_number(client):
    now = time.time()
    assert status(client, hs(claims(exp=now + 600.5, iat=now - 0.25, nbf=now - 1.5))) == 200
    assert status(client, hs(claims(exp=int(now) + 600, nbf=int(now) - 60))) == 200


def test_leeway_of_thirty_seconds(client):
    assert status(client, hs(claims(exp=int(time.time()) - 10))) == 200
    assert status(client, hs(claims(exp=int(time.time()) - 60))) == 401


def test_issuer_and_audience_when_configured(make_client):
    with make_client(jwt_issuer="https://idp.example", jwt_audience="tally") as client:
        good = claims(iss="https://idp.example", aud="tally")
        assert status(client, hs(good)) == 200
        assert status(client, hs({**good, "iss": "https://evil.example"})) == 401
        assert status(client, hs({**good, "aud": "other"})) == 401
        assert status(client, hs(claims(aud="tally"))) == 401  # no iss
        assert status(client, hs(claims(iss="https://idp.example"))) == 401  # no aud


# --- JWKS -------------------------------------------------------------------------------------
class Jwks:
    """An identity provider's JWKS endpoint, served by the test on loopback."""

    def __init__(self) -> None:
        self.keys: dict[str, rsa.RSAPrivateKey] = {}
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.hits += 1
                body = json.dumps(
                    {
                        "keys": [
                            {
                                **json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(k.public_key())),
                                "kid": kid,
                                "use": "sig",
                                "alg": "RS256",
                            }
                            for kid, k in outer.keys.items()
                        ]
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"

    def add(self, kid: str) -> rsa.RSAPrivateKey:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return self.keys[kid]

    def token(self, kid: str, **extra) -> str:
        return jwt.encode(claims(**extra), self.keys[kid], "RS256", headers={"kid": kid})


@pytest.fixture
def jwks():
    provider = Jwks()
    provider.add("k1")
    yield provider
    provider.server.shutdown()


def test_jwks_tokens(make_client, jwks):
    with make_client(jwt_secret="", jwks_url=jwks.url, jwks_refetch_cooldown_seconds=0.2) as client:
        assert status(client, jwks.token("k1")) == 200
        assert status(client, jwks.token("k1", exp=int(time.time()) - 120)) == 401
        # A key the provider rotated in is fetched on first sight of its kid.
        jwks.add("k2")
        time.sleep(0.3)
        assert status(client, jwks.token("k2")) == 200
        # A kid the provider does not know: refused.
        stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        forged = jwt.encode(claims(), stranger, "RS256", headers={"kid": "k9"})
        assert status(client, forged) == 401
        # Signed by a different private key under a known kid: refused.
        wrong = jwt.encode(claims(), stranger, "RS256", headers={"kid": "k1"})
        assert status(client, wrong) == 401


def test_a_token_naming_a_key_of_another_type_is_refused(make_client, jwks):
    """A kid is public: "alg": "ES256" on the provider's RSA key made PyJWT raise a TypeError
    before any signature check, a 500 for anyone (and a traceback per request in the log)."""
    with make_client(jwt_secret="", jwks_url=jwks.url) as client:

        def part(value: dict) -> str:
            return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

        for alg in ("ES256", "ES384", "HS256", "PS256"):
            forged = f"{part({'alg': alg, 'kid': 'k1'})}.{part(claims())}.AAAA"
            response = client.get("/api/projects", headers={"authorization": f"Bearer {forged}"})
            assert response.status_code == 401, (alg, response.text)
            assert response.json() == {"error": "Unauthorized"}
        assert status(client, jwks.token("k1")) == 200


def test_unknown_kids_do_not_hammer_the_provider(make_client, jwks):
    with make_client(jwt_secret="", jwks_url=jwks.url, jwks_refetch_cooldown_seconds=60) as client:
        assert status(client, jwks.token("k1")) == 200
        hits = jwks.hits
        stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        for i in range(20):
            forged = jwt.encode(claims(), stranger, "RS256", headers={"kid": f"x{i}"})
            assert status(client, forged) == 401
        assert jwks.hits - hits <= 1


def test_hs256_signed_with_the_public_key_is_refused(make_client, jwks):
    """Algorithm confusion: an HS256 token whose 'secret' is the provider's public key."""
    with make_client(jwt_secret="", jwks_url=jwks.url) as client:
        public_pem = (
            jwks.keys["k1"]
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        header = base64.urlsafe_b64encode(
            json.dumps({"alg": "HS256", "kid": "k1"}).encode()
        ).rstrip(b"=")
        payload = base64.urlsafe_b64encode(json.dumps(claims()).encode()).rstrip(b"=")
        import hashlib
        import hmac

        signature = base64.urlsafe_b64encode(
            hmac.new(public_pem, header + b"." + payload, hashlib.sha256).digest()
        ).rstrip(b"=")
        forged = b".".join([header, payload, signature]).decode()
        assert status(client, forged) == 401
        assert status(client, unsigned(claims())) == 401


# --- one credential per request ----------------------------------------------------------------
def test_two_authorization_headers_are_refused(client, user):
    """A proxy and Tally could each read a different one of two Authorization headers, so a
    request with two is refused whole (401), even when both are the same valid token; one of
    them alone passes."""
    valid = f"Bearer {hs(claims(sub=user))}"
    for second in (valid, "Bearer not-a-token", f"Bearer {hs(claims(sub='mallory'))}"):
        response = client.get(
            "/api/projects", headers=[("authorization", valid), ("authorization", second)]
        )
        assert response.status_code == 401, (second, response.text)
        assert response.json() == {"error": "Unauthorized"}
    assert client.get("/api/projects", headers=[("authorization", valid)]).status_code == 200


def test_two_session_cookies_are_refused(client, user):
    """Two ``tally_session`` cookies (one per path or domain: a ``Path=/`` cookie planted from a
    sibling subdomain beside the page's own) are 401, in one Cookie line or across two; the last
    was taken in one line and the first across two. Other cookies beside one are fine."""
    mine, other = hs(claims(sub=user)), hs(claims(sub="mallory"))
    for headers in (
        [("cookie", f"tally_session={mine}; tally_session={other}")],
        [("cookie", f"tally_session={mine}"), ("cookie", f"tally_session={other}")],
        [("cookie", f"tally_session={mine}; tally_session={mine}")],
    ):
        response = client.get("/api/projects", headers=headers)
        assert (response.status_code, response.json()) == (401, {"error": "Unauthorized"})
    one = [("cookie", f"theme=dark; tally_session={mine}; tally_session_x=1")]
    assert client.get("/api/projects", headers=one).status_code == 200


def test_two_api_keys_are_refused(client, user):
    """Two keys in one collect request: two ``x-api-key`` headers are 401 ``Invalid API key``,
    on the fast path and the route alike; two ``apiKey`` parameters are a 400 of the query check,
    as any parameter given twice. Nothing of them is stored; one key alone is accepted."""
    project, key = new_project(client, user)
    _, other = new_project(client, user, name="Other")
    event = {"events": [{"name": "pageview", "path": "/two-keys"}]}
    for headers in (
        [("x-api-key", key), ("x-api-key", key)],
        [("x-api-key", key), ("x-api-key", other)],
    ):
        response = client.post("/api/collect", json=event, headers=headers)
        assert response.status_code == 401, response.text
        assert response.json() == {"error": "Invalid API key"}
    response = client.post(f"/api/collect?apiKey={key}&apiKey={other}", json=event)
    assert response.status_code == 400, response.text
    assert "more than once" in response.text
    assert client.post("/api/collect", json=event, headers={"x-api-key": key}).status_code == 202
    rows = stored(
        client, "SELECT count() FROM {db}.events WHERE project_id = {p:String}", p=project
    )
    assert rows == [(1,)]
