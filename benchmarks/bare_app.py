"""The framework's own ceiling: a bare Litestar + msgspec handler under granian.

``POST /api/collect`` reads the body, decodes it with ``msgspec.json.Decoder(CollectBody)`` (the
same Struct, and so the same validation of the shape, as Tally's collect) and answers 202
``{"accepted": n}``. Nothing else: no API key, no rate limits, no body cap or deadline, no
duplicate-key or number checks, no enrichment, no security headers, no storage. It runs under
granian with the settings ``tally serve`` uses (ASGI interface, the same worker count, granian's
default event loop, no access log), so ``ingest.<shape>.ceiling_over_framework`` says how much
of the HTTP stack's capacity Tally's request path keeps.

``python -m benchmarks.bare_app --port 8001 [--workers 1]`` serves it by itself.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
from litestar import Litestar, Request, get, post
from litestar.status_codes import HTTP_202_ACCEPTED

from tally.http.schemas import Accepted, CollectBody

from .common import free_port, stop, stop_timeout, wait_up

_decode = msgspec.json.Decoder(CollectBody).decode


@post("/api/collect", status_code=HTTP_202_ACCEPTED)
async def collect(request: Request) -> Accepted:  # type: ignore[type-arg]
    body = _decode(await request.body())
    return Accepted(accepted=len(body.events))


@get("/health")
async def health() -> str:
    return "ok"


def app_factory() -> Litestar:
    return Litestar(route_handlers=[collect, health], logging_config=None, debug=False)


def granian_server(port: int, workers: int = 1, host: str = "127.0.0.1") -> object:
    """granian as ``tally serve`` configures it (tally/cli.py), serving the bare app."""
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings

    from tally.config import Settings

    return Granian(
        "benchmarks.bare_app:app_factory",
        factory=True,
        interface=Interfaces.ASGI,
        address=host,
        port=port,
        workers=workers,
        log_access=False,
        http=HTTPModes.http1,  # as tally serve: HTTP/1 only (granian's default also takes h2c)
        # tally serve's default header deadline (TALLY_HEADER_TIMEOUT_SECONDS)
        http1_settings=HTTP1Settings(
            header_read_timeout=int(Settings().header_timeout_seconds * 1000)
        ),
    )


@contextmanager
def serve_bare(log_dir: Path, workers: int = 1) -> Iterator[str]:
    """The bare app in its own process on a loopback port; yields its URL."""
    port = free_port()
    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    url = f"http://127.0.0.1:{port}"
    log = open(log_dir / f"bare-{port}.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.bare_app",
            "--port",
            str(port),
            "--workers",
            f"{workers}",
        ],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_up(proc, f"{url}/health", Path(log.name), "the bare app", timeout=60, step=0.1)
        yield url
    except BaseException as exc:
        stop(proc, log, timeout=min(30, stop_timeout(exc)))
        raise
    stop(proc, log, timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bare_app", description=__doc__)
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    granian_server(args.port, args.workers).serve()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
