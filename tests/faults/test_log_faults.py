"""The ingest log's disk failing under a real `tally serve`, with ``strace`` making a running
worker's system calls fail (its error injection; skipped where strace is absent).

A commit whose ``fsync`` fails is refused (503) and undone: the segment is cut back to its last
acknowledged record. When the cut (``ftruncate``) failed too, the refused record stayed whole in
the file, the loader read the file to its end and stored it: a batch answered 503, which its
client then sent again, was stored twice (found by a review injecting both failures).
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import pytest
from syscalls import Injection, require_strace
from test_crash import new_key, stored_ids
from test_wal_crash import backlog_loaded, wait_for

from served import Server

pytestmark = pytest.mark.slow


def test_a_refused_commit_whose_undo_failed_is_never_stored(tmp_path):
    require_strace()
    # One segment for the whole run: the failing fsync is a commit's, not a new segment's.
    server = Server(tmp_path, TALLY_LOG_SEAL_AGE_MS="4000")
    acked: set[str] = set()
    refused: set[str] = set()
    try:
        key = new_key(server.url)
        [worker] = server.workers()
        # In every thread of the worker, the 6th fsync fails, and then the first ftruncate: in
        # the commits' thread, a commit (after the segment's header and a few commits) and its
        # undo. Nothing else of the worker fsyncs while it runs.
        with (
            Injection(worker, "fsync:error=EIO:when=6", "ftruncate:error=EIO:when=1"),
            httpx.Client(timeout=10) as http,
        ):
            for batch in range(12):
                ids = [f"b{batch}-{n}" for n in range(20)]
                body = {"events": [{"name": "pageview", "metadata": {"uid": u}} for u in ids]}
                answer = http.post(
                    f"{server.url}/api/collect", json=body, headers={"x-api-key": key}
                )
                assert answer.status_code in (202, 503), answer.text
                (acked if answer.status_code == 202 else refused).update(ids)
        wait_for(lambda: backlog_loaded(server.url), "the backlog to be loaded")
    finally:
        assert server.stop() == 0
    assert refused, "no commit was refused: the injection missed"
    stored = stored_ids(tmp_path)
    stored.pop("", None)
    assert acked <= stored.keys(), f"{len(acked - stored.keys())} acknowledged events lost"
    assert not {uid for uid, n in stored.items() if n > 1}, "events stored twice"
    assert not refused & stored.keys(), f"{len(refused & stored.keys())} refused events stored"
