"""The benchmark suite's own logic: percentiles, the lost-events check, wrk parsing, the
generator's determinism, and a smoke run of the whole suite on tiny sizes (no timings asserted)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from benchmarks.__main__ import MODES, options
from benchmarks.common import (
    RESULTS,
    bench_url,
    drop_bench_database,
    duplicate_events,
    flatten,
    git_commit,
    loader_insert,
    lost_events,
    output_paths,
    percentile,
    serve,
    tree,
)
from benchmarks.dashboard import add_growth, size_label
from benchmarks.export import median_seconds
from benchmarks.generate import generate, settle_merges
from benchmarks.ingest import (
    acknowledged_and_stored,
    fsync_figures,
    parse_wrk,
    tree_cpu_s,
    with_by_connections,
)
from benchmarks.profile import rows_insert
from benchmarks.queries import BY, FILTERS, TARGETS, all_exact, targets

from tally.query import Query
from tally.query.sql import dashboard_sql

ROOT = Path(__file__).resolve().parents[1]


# A child that starts a grandchild; each burns CPU, then reports its own CPU seconds (os.times)
# and sleeps, so that the tree's total stays still while the test reads /proc.
_BURNER = """
import os, subprocess, sys, time
def burn(seconds):
    while sum(os.times()[:2]) < seconds:
        pass
if sys.argv[1] == "child":
    grandchild = subprocess.Popen([sys.executable, "-c", sys.argv[2], "grandchild", ""],
                                  stdout=subprocess.PIPE, text=True)
    burn(0.3)
    mine = sum(os.times()[:2])
    theirs = float(grandchild.stdout.readline())
    print(mine + theirs, flush=True)
    time.sleep(60)
else:
    burn(0.2)
    print(sum(os.times()[:2]), flush=True)
    time.sleep(60)
"""


def test_tree_cpu_counts_a_process_and_the_processes_below_it():
    """The worker CPU figures: what /proc says a process tree used, against what each process
    of the tree says it used itself (os.times), to within a few clock ticks."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _BURNER, "child", _BURNER], stdout=subprocess.PIPE, text=True
    )
    try:
        reported = float(proc.stdout.readline())  # type: ignore[union-attr]
        measured = tree_cpu_s(proc.pid)
        assert reported >= 0.5
        assert reported - 0.05 <= measured <= reported + 0.25, (reported, measured)
    finally:
        for pid in reversed(_children(proc.pid)):
            subprocess.run(["kill", str(pid)], check=False)
        proc.kill()
        proc.wait()


def _children(pid: int) -> list[int]:
    from benchmarks.common import tree

    return tree(pid)[1:]


def test_percentile_interpolates_between_ranks():
    assert percentile([5], 99) == 5
    assert percentile([1, 2, 3, 4], 0) == 1 and percentile([1, 2, 3, 4], 100) == 4
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1], 101)


def test_lost_events_counts_only_missing_acknowledged_events():
    assert lost_events(acknowledged=100, stored=100) == 0
    assert lost_events(acknowledged=100, stored=97) == 3
    # Requests cut off by the load generator's deadline may be stored without an answer.
    assert lost_events(acknowledged=100, stored=104) == 0
    # Against what the server acknowledged, the other way is checked too: stored twice.
    assert duplicate_events(acknowledged=100, stored=104) == 4
    assert duplicate_events(acknowledged=100, stored=97) == 0


def test_the_loss_check_counts_what_the_server_acknowledged(tmp_path):
    """/api/health's acknowledgedEvents (the worker's own count of events appended to its log
    and answered 202) and the stored count, read at one moment: the loss check compares them,
    both ways, instead of wrk's count of the 202s it saw before its deadline."""
    with serve(tmp_path) as server:
        project_id, key = server.new_project()
        headers = server.headers()
        acked, stored, _ = acknowledged_and_stored(server.url, project_id, headers)
        assert (acked, stored) == (0, 0)
        for n in (1, 5, 100):
            response = httpx.post(
                f"{server.url}/api/collect",
                json={"events": [{"name": "pageview", "path": f"/{i}"} for i in range(n)]},
                headers={"x-api-key": key},
                timeout=30,
            )
            assert response.status_code == 202
        acked, stored, counters = acknowledged_and_stored(server.url, project_id, headers)
        assert (acked, stored) == (106, 106)
        assert counters["loadedEvents"] == 106
        assert lost_events(acked, stored) == duplicate_events(acked, stored) == 0


def test_parse_wrk_reads_the_script_summary():
    out = (
        "Running 1s test @ http://127.0.0.1:1\n"
        'TALLY_RESULT {"accepted_requests": 10, "refused_requests": 1, "events_per_request": 100,'
        ' "duration_s": 1.0, "p50_ms": 3.5, "p99_ms": 9.0, "errors": 0}\n'
    )
    assert parse_wrk(out)["accepted_requests"] == 10
    with pytest.raises(ValueError):
        parse_wrk("no summary")


def test_flatten_and_labels():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}}) == {"a.b": 1, "a.c.d": 2}
    assert [size_label(n) for n in (1_000_000, 10_000_000, 20_000, 1234)] == [
        "1M",
        "10M",
        "20k",
        "1234",
    ]


def test_generator_is_deterministic_and_realistic(client):
    from datetime import UTC, datetime

    storage = client.app.state.storage
    now = datetime(2026, 6, 1, 12, tzinfo=UTC)
    a, b, c = (uuid.uuid4().hex[:24] for _ in range(3))
    generate(storage, a, 6_000, seed=5, now=now)
    generate(storage, b, 6_000, seed=5, now=now)
    generate(storage, c, 6_000, seed=6, now=now)

    def shape(project: str) -> list[tuple]:
        return storage.query(
            f"SELECT name, path, referrer, session_id, visitor_id, browser, device_type, "
            f"occurred_at, duration_ms FROM {storage.database}.events "
            "WHERE project_id = {p:String} ORDER BY occurred_at, session_id, name, path",
            {"p": project},
        )

    assert shape(a) == shape(b)
    assert shape(a) != shape(c)
    stats = storage.query(
        f"SELECT count(), countIf(name = 'pageview'), countIf(name = 'session_end'), "
        f"uniqExact(session_id), uniqExact(visitor_id), uniqExact(toDate(occurred_at)), "
        f"max(occurred_at) <= {{now:DateTime64(3, 'UTC')}} "
        f"FROM {storage.database}.events WHERE project_id = {{p:String}}",
        {"p": a, "now": now},
    )[0]
    total, pageviews, ends, sessions, visitors, days, not_future = stats
    assert total == 6_000 and ends == sessions == 1_000
    assert 1_000 <= pageviews <= 4_000 and visitors < sessions and days > 60 and not_future


def test_generator_stores_what_collect_would_compute(client):
    """Every stored dimension equals what collect's domain functions make of the row's url,
    referrer, client IP and User-Agent; the traffic has the shape the benchmarks rely on."""
    from tally.domain.acquisition import acquire
    from tally.domain.bots import client_of
    from tally.domain.geo import CountryReader

    storage = client.app.state.storage
    project = uuid.uuid4().hex[:24]
    generate(storage, project, 30_000, seed=9, now=datetime(2026, 6, 1, 12, tzinfo=UTC))
    rows = storage.query(
        f"SELECT url, referrer, ip, user_agent, browser, os, device_type, source, channel, "
        f"utm_source, utm_medium, utm_campaign, utm_content, utm_term, country, is_bot, name, "
        f"session_id, occurred_at FROM {storage.database}.events WHERE project_id = {{p:String}} "
        "ORDER BY session_id, occurred_at",
        {"p": project},
    )
    reader = CountryReader()
    for url, referrer, ip, ua, browser, system, device, *dims, _name, _, _ in rows:
        assert tuple(dims[:7]) == tuple(acquire(url, referrer)), (url, referrer)
        described, bot = client_of(ua)
        assert dims[7] == reader.country(ip) and dims[8] == bot
        assert (browser, system, device) == tuple(described)
    reader.close()
    first = {}  # the tracker sends the referrer with a session's first pageview only
    for row in rows:
        sid = row[17]
        assert row[1] == "" or sid not in first
        first.setdefault(sid, row)
        assert first[sid][16] == "pageview"
    times = [(r[17], r[18]) for r in rows]
    assert len(set(times)) == len(times)  # no two events of a session at the same time
    bots = sum(r[15] for r in rows) / len(rows)
    countries = {r[14] for r in rows}
    channels = {r[8] for r in rows}
    assert 0.01 < bots < 0.06 and len(countries) >= 20 and "Unknown" in countries
    assert {"Direct", "Organic Search", "Paid Search", "Organic Social", "Email"} <= channels
    assert {"Google", "Bing", "Twitter", "newsletter"} <= {r[7] for r in rows}
    assert any(r[12] for r in rows) and any(r[13] for r in rows)  # utm_campaign, utm_content
    assert any(r[0] and "?" not in r[0] and r[16] == "pageview" for r in rows)


def test_settling_waits_for_a_quiet_spell_without_merges(client):
    storage = client.app.state.storage
    for seed in range(3):  # several loads leave parts for the engine to merge
        generate(storage, uuid.uuid4().hex[:24], 12_000, seed=seed)
    waited = settle_merges(storage, quiet_seconds=0.5)
    assert waited >= 0.5
    running = f"SELECT count() FROM system.merges WHERE database = '{storage.database}'"
    assert storage.query(running) == [(0,)]


def test_profiles_run_and_cover_every_case():
    """The README's profiles come from `python -m benchmarks.profile` (timings not asserted). Each
    runs in its own process: the embedded engine allows one data folder per process."""

    def profile(*args: str) -> list[str]:
        command = [sys.executable, "-m", "benchmarks.profile", *args, "--repeat", "1"]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.splitlines()

    inserts = [line.split("  ")[0] for line in profile("insert", "--rows", "4")]
    # Every materialized view the schema files create on events, and the profile drops each.
    created = re.compile(r"CREATE MATERIALIZED VIEW (?:IF NOT EXISTS )?([$\w.{}]+)")
    schema = [sql.read_text() for sql in (ROOT / "schema").glob("*.sql")]
    views = len({name for text in schema for name in created.findall(text)})
    assert views >= 10  # through schema 008's sessions_quarter_mv
    every = f"{views} views"
    assert inserts[:3] == [every, f"{every}, no deduplication", f"{every}, side by side"]
    assert inserts[3] == f"{every}, no projections"
    assert inserts[4:] == [f"{n} views" for n in range(views - 1, -1, -1)]
    timed = profile("queries", "--events", "6000", "--threads", "1")
    queries = [line.split()[:3] for line in timed]
    names = [
        *dashboard_sql(Query("p" * 24, 7, datetime.now(UTC))),
        "dashboard",
    ]  # each query alone, then all of them as served
    assert queries == [[str(days), "days", name] for days in (7, 30, 90) for name in names]
    assert all("of CPU" in line for line in timed if line.split()[2] == "dashboard")


@pytest.mark.slow
@pytest.mark.timeout(1200)  # every module, each starting its own processes and engines
def test_smoke_run_of_the_suite(tmp_path):
    args = [sys.executable, "-m", "benchmarks", "--smoke", "--output", "smoke.json"]
    if shutil.which("wrk") is None:
        args += ["--only", "dashboard"]  # the ingest part needs wrk (Debian: apt-get install wrk)
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=1100)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((ROOT / "benchmarks" / "results" / "smoke.json").read_text())
    keys = flatten(results)
    for size in ("2k", "20k"):
        for days in (7, 30, 90):
            row = results["dashboard"][size][f"{days}d"]
            assert row["exact"] is True  # rollups and raw SQL agree to the number
            assert {"p50_ms", "p95_ms", "raw_over_rollup"} <= set(row)
        assert results["dashboard"][size]["merge_settle_seconds"] >= 0
    assert {"machine.cores", "storage", "git_commit"} <= set(keys)
    # The queries module runs in the suite; its own smoke run (another 90 s) checked the same.
    check_queries(results)
    # The export module too (a run of its own with --only export took another 13 s).
    check_export(results)
    if importlib.util.find_spec("matplotlib"):  # the plot is named after the results
        assert f"plot: {ROOT / 'benchmarks' / 'results' / 'smoke.png'}" in done.stdout
    if "ingest" in results:
        assert results["ingest"]["lost_events"] == 0
        for name in (
            "ingest.batch.events_per_s",
            "ingest.batch.p99_ms",
            "ingest.batch.ceiling_ratio",
            "ingest.single.requests_per_s",
            "ingest.single.p99_ms",
            "ingest.single.ceiling_ratio",
            "ingest.batch.by_connections.2.p99_ms",
            "ingest.single.by_connections.2.ceiling_ratio",
            "ingest.single.worker_cpu_s_per_s",
            "ingest.single.ceiling_worker_cpu_s_per_s",
        ):
            assert name in keys


def check_export(results: dict) -> None:
    """The export module's figures, from the smoke run of the whole suite."""
    assert results["export"]["events"] == 2_000
    for fmt in ("csv", "ndjson", "parquet", "csv_gzip", "ndjson_gzip"):
        row = results["export"][fmt]
        # Every figure comes from an export that carried all the events (checked in the run).
        assert row["events_per_s"] > 0 and row["bytes"] > 0 and row["seconds"] > 0
    for fmt in ("csv", "ndjson"):
        plain, gzipped = results["export"][fmt], results["export"][f"{fmt}_gzip"]
        assert plain["wire_bytes"] == plain["bytes"]  # sent as the file is
        assert gzipped["bytes"] == plain["bytes"] and gzipped["wire_bytes"] < plain["bytes"] / 3


def test_a_failure_while_serving_carries_the_end_of_the_server_log(tmp_path):
    # The suite serves from temporary folders that go with the run; a request that fails
    # (an export cut off mid-stream, say) must still say what the server logged.
    with (
        pytest.raises(RuntimeError, match="a request failed") as caught,
        serve(tmp_path, log_level="INFO") as server,
    ):
        httpx.get(f"{server.url}/api/health").raise_for_status()
        raise RuntimeError("a request failed")
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "the end of tally serve's log" in notes
    assert "Tally starting on" in notes
    assert server.proc.poll() is not None  # and the server was stopped


def test_runs_against_a_server_get_their_own_databases(tmp_path):
    assert bench_url("", "ingest_batch_256_real", tmp_path) == f"chdb://{tmp_path}/clickhouse"
    assert (
        bench_url("chdb:///srv/bench/", "dashboard_1m", tmp_path)
        == "chdb:///srv/bench/dashboard_1m"
    )
    # The server's credentials and address are kept; the database the URL names is never used.
    assert (
        bench_url("https://u:p%40w@ch.example:8443/tally?x=1", "dashboard_1m", tmp_path)
        == "https://u:p%40w@ch.example:8443/tally_bench_dashboard_1m"
    )
    with pytest.raises(ValueError):
        bench_url("ftp://ch.example/", "x", tmp_path)
    # Only databases the suite made are ever dropped (checked before connecting).
    with pytest.raises(ValueError, match="not a benchmark database"):
        drop_bench_database("http://127.0.0.1:9/tally")


def test_a_run_on_a_chdb_path_starts_from_an_empty_folder(tmp_path):
    """Two runs with --clickhouse-url chdb:///path: the second measured the first's tenants as
    well (four of 2,000 events where the dashboard has two), as a server's database is dropped."""
    url = bench_url(f"chdb://{tmp_path}", "dashboard_2k", tmp_path / "unused")
    # the engine's folder as a run leaves it (one engine per process: not opened here)
    (tmp_path / "dashboard_2k" / "store" / "a1b").mkdir(parents=True)
    (tmp_path / "dashboard_2k" / "metadata").mkdir()
    drop_bench_database(url)
    assert not (tmp_path / "dashboard_2k").exists()
    drop_bench_database(url)  # nothing there: nothing to do
    assert tmp_path.is_dir()


@pytest.mark.parametrize("output", ["", ".", "./", "..", "x/", "/tmp", "benchmarks/results/"])
def test_an_output_naming_a_folder_is_refused_before_the_run(output, capsys):
    """A folder given as --output ran to the end (hours, in a full run) and then failed with
    IsADirectoryError, writing nothing; ./ failed with a traceback."""
    with pytest.raises(SystemExit) as stopped:
        options(["--output", output])
    assert stopped.value.code == 2
    assert "names a folder; name the results file in it" in capsys.readouterr().err


def test_workers_need_a_server():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--workers", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "needs --clickhouse-url" in done.stderr


@pytest.mark.slow
def test_smoke_run_on_a_given_storage_url(tmp_path):
    """--clickhouse-url puts each run's data where it says (a chdb path here; a server's
    tally_bench_* databases where one is available)."""
    args = [sys.executable, "-m", "benchmarks", "--smoke", "--only", "dashboard", "--sizes", "2000"]
    args += ["--clickhouse-url", f"chdb://{tmp_path}/store", "--output", "smoke-url.json"]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((ROOT / "benchmarks" / "results" / "smoke-url.json").read_text())
    assert results["storage"] == "embedded"
    assert all(results["dashboard"]["2k"][f"{days}d"]["exact"] for days in (7, 30, 90))
    assert (tmp_path / "store" / "dashboard_2k").is_dir()


def test_growth_is_reported_for_every_larger_size():
    def sizes(*p95s: float) -> dict:
        return {
            label: {f"{days}d": {"p95_ms": p95 * days} for days in (7, 30, 90)}
            for label, p95 in zip(("1M", "10M", "100M"), p95s, strict=False)
        }

    out = sizes(10, 25, 80)
    add_growth(out, ["1M", "10M", "100M"])
    assert "p95_growth_from_1M" not in out["1M"]["90d"]
    assert out["10M"]["90d"]["p95_growth_from_1M"] == 2.5
    assert out["100M"]["7d"]["p95_growth_from_1M"] == 8.0
    single = sizes(10)
    add_growth(single, ["1M"])
    assert single == sizes(10)


def test_zones_benchmark_runs_on_a_small_tenant(tmp_path):
    """python -m benchmarks.zones loads a tenant and times the dashboard in each zone (smoke
    run: no timings asserted)."""
    command = [sys.executable, "-m", "benchmarks.zones", "--url", f"chdb://{tmp_path}/ch"]
    command += ["--events", "600", "--repeat", "1", "--days", "7"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    timed = {(line[:28].strip(), line[28:47].strip()) for line in lines[2:]}
    for zone in ("UTC", "Asia/Kathmandu", "America/Los_Angeles", "Pacific/Chatham"):
        assert (f"{zone} bots out", "dashboard") in timed
        assert (f"{zone} bots out", "visitors") in timed
    assert ("Asia/Kathmandu bots out", "session_ends_edge") in timed  # the raw partial day
    assert ("UTC bots out", "session_ends_edge") not in timed


def check_queries(results: dict) -> None:
    """The queries module's results: every breakdown, filtered view, zone, comparison and range
    timed on the dashboard's tenants, each served answer equal to raw SQL (else the run fails),
    the targets judged and the cost against schema 004 reported (timings not asserted)."""
    keys = flatten(results)
    for size in ("2k", "20k"):
        q = results["queries"][size]
        assert q["exact_all"] is True and q["mismatches"] == []
        assert set(q["exact"]) == {f"breakdown.{by}" for by in BY} | {
            f"filtered_{kind}.{dim}" for kind in ("dashboard", "breakdown") for dim in FILTERS
        }
        for name in ("dashboard_utc", "dashboard_kathmandu", "range_366d"):
            assert {"p50_ms", "p95_ms"} <= set(q[name])
        assert set(q["breakdown"]) == set(BY) and set(q["filters"]) == set(FILTERS)
        assert q["filters"]["source"] != "Direct / None"
        for view in ("dashboard", "filtered_dashboard_country"):
            assert {"p95_ms", "without_p95_ms", "ratio"} <= set(q["compare"][view])
        assert results["cost"]["disk"][size]["tables"]["events"]["rows"] == 2 * (
            2_000 if size == "2k" else 20_000
        )
    target = results["queries"]["targets"]
    assert target["size"] == "20k" and target["growth_from"] == "2k"
    assert set(target) - {"size", "growth_from"} == set(TARGETS)
    assert all(isinstance(t["pass"], bool) for k, t in target.items() if isinstance(t, dict))
    vs = results["cost"]["vs_004"]
    assert vs["events"] == 2_000 and vs["inserts"] == 3
    assert "source" not in vs["004"]["bytes"] and "events_quarter" in vs["now"]["bytes"]
    for name in (
        "cost.vs_004.insert_ratio",
        "cost.vs_004.bytes_ratio",
        "cost.vs_004.now.bytes.events",
    ):
        assert name in keys


def test_targets_are_judged_at_10m_with_growth_from_1m():
    def sizes(p95: float, compare: float = 1.2) -> dict:
        row = {"p95_ms": p95, "p50_ms": p95}
        return {
            "dashboard_utc": row,
            "dashboard_kathmandu": {"p95_ms": p95 + 10},
            "breakdown_max_p95_ms": 120,
            "filtered_dashboard": {"path": {"p95_ms": 390}, "source": {"p95_ms": 410}},
            "filtered_breakdown": {"path": {"p95_ms": 100}},
            "compare": {"dashboard": {"ratio": compare}, "filtered": {"ratio": 1.1}},
            "range_366d": {"p95_ms": 900},
            "mismatches": [],
        }

    out = targets(
        {"1M": sizes(100), "10M": sizes(240), "100M": sizes(2000, 3)}, ["1M", "10M", "100M"]
    )
    assert out["size"] == "10M" and out["growth_from"] == "1M"
    assert out["dashboard_p95_ms"] == {"value": 250, "limit": 250, "pass": True}
    assert out["breakdown_p95_ms"]["pass"] and out["range_366d_p95_ms"]["pass"]
    assert out["filtered_dashboard_p95_ms"] == {"value": 410, "limit": 400, "pass": False}
    assert out["compare_ratio"]["value"] == 1.2 and out["compare_ratio"]["pass"]
    assert out["dashboard_p95_growth"] == {"value": 2.4, "limit": 3, "pass": True}
    single = targets({"1M": sizes(100)}, ["1M"])
    assert "dashboard_p95_growth" not in single and single["size"] == "1M"
    results = {"queries": {"1M": {"mismatches": []}, "10M": {"mismatches": ["breakdown.os"]}}}
    results["queries"]["targets"] = out
    assert all_exact(results) == ["10M: breakdown.os"]


BAD_ARGUMENTS = {
    "sweep not numbers": (["--sweep", "abc"], "argument --sweep: 'abc' is not a comma-separated"),
    "sizes not numbers": (["--sizes", "1,x"], "argument --sizes: '1,x' is not a comma-separated"),
    "no workers": (["--workers", "0"], "argument --workers: 0 must be at least 1"),
    # A traceback once the servers had started (wrk takes whole seconds).
    "fractional seconds": (["--seconds", "2.5"], "argument --seconds: '2.5' is not a whole"),
    "server not there": (
        ["--only", "export", "--clickhouse-url", "http://u:p@127.0.0.1:1/x"],
        "benchmarks: cannot reach ClickHouse server http://127.0.0.1:1",
    ),
}


@pytest.mark.parametrize(("args", "said"), BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_the_suite_says_what_is_wrong_with_its_arguments(args, said):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode != 0
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "u:p@" not in done.stderr  # credentials are not printed


def test_the_generator_loads_a_tenant_into_a_fresh_engine(tmp_path):
    """``python -m benchmarks.generate`` on a folder no Tally has opened: it applies the schema
    (it failed with "Table tally.events does not exist")."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.generate",
            *("--url", f"chdb://{tmp_path}/ch", "--project", "p" * 24, "--events", "2000"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr
    assert "generated 2000 events" in done.stdout


def test_options_keep_the_default_only_when_an_option_is_absent():
    _, quick = options(["--quick"])
    assert quick["seconds"] == MODES["quick"]["seconds"] == 5
    assert options(["--quick", "--seconds", "7"])[1]["seconds"] == 7
    assert options(["--seconds", "1"])[1]["seconds"] == 1
    # --sizes sets the exported tenant's size with --only export (it was ignored), and the
    # dashboard's sizes otherwise.
    _, export = options(["--only", "export", "--sizes", "20000"])
    assert export["export_events"] == 20_000 and export["sizes"] == MODES["full"]["sizes"]
    _, dash = options(["--only", "dashboard", "--sizes", "2000,20000"])
    assert dash["sizes"] == [2_000, 20_000]
    assert dash["export_events"] == MODES["full"]["export_events"]


REFUSED = {
    # wrk takes whole seconds; a negative one never stopped, 0 silently ran the default.
    "negative seconds": (["--seconds", "-4"], "argument --seconds: -4 must be at least 1"),
    "no seconds": (["--seconds", "0"], "argument --seconds: 0 must be at least 1"),
    "fractional seconds": (["--seconds", "2.5"], "argument --seconds: '2.5' is not a whole"),
    "nan seconds": (["--seconds", "nan"], "argument --seconds: 'nan' is not a whole number"),
    "inf seconds": (["--seconds", "inf"], "argument --seconds: 'inf' is not a whole number"),
    # One tenant and one result per size: a repeated one crashed after the whole measurement.
    "a size twice": (
        ["--sizes", "2000,20000,2000"],
        "argument --sizes: '2000,20000,2000': each size once (2000 given twice)",
    ),
    "export of two sizes": (
        ["--only", "export", "--sizes", "2000,20000"],
        "--only export exports one tenant: give --sizes one size",
    ),
}


def test_bad_arguments_are_refused_in_words_before_anything_runs(capsys):
    """Refused as the arguments are read, before any server or worker starts (in process:
    the subprocess test above shows the same parser's refusals carry no traceback)."""
    for args, said in REFUSED.values():
        with pytest.raises(SystemExit) as exit_:
            options(args)
        assert exit_.value.code == 2
        assert said in capsys.readouterr().err


def test_the_generator_refuses_a_count_that_is_not_positive():
    for events in ("-5", "0"):
        command = [sys.executable, "-m", "benchmarks.generate", "--url", "chdb:///nowhere"]
        done = subprocess.run(
            [*command, "--project", "p" * 24, "--events", events],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert done.returncode == 2, done.stdout
        assert f"argument --events: {events} must be at least 1" in done.stderr
        assert "generated" not in done.stdout


def test_targets_say_so_when_no_size_is_judged():
    """--only queries with every size above MAX_EVENTS: no size has the queries' figures."""
    out = targets({}, [])
    assert out["size"] is None and out["growth_from"] is None
    assert "no target judged" in out["note"]
    assert all_exact({"queries": {"targets": out}}) == []


def test_every_connection_count_is_under_by_connections_sweep_or_not():
    main = {"events_per_s": 10.0, "lost_events": 0}
    alone = with_by_connections(main, {64: main})
    assert alone["by_connections"] == {"64": main}  # --quick, --sweep none
    swept = with_by_connections(main, {256: main, 16: {"events_per_s": 2.0}, 64: {"x": 1}})
    assert list(swept["by_connections"]) == ["16", "64", "256"]
    assert "by_connections" not in swept["by_connections"]["256"]
    assert swept["events_per_s"] == 10.0


def test_fsync_and_export_figures_are_the_suites_percentiles():
    took = [float(n) for n in range(1, 201)]  # 200 samples, as measured
    figures = fsync_figures(list(reversed(took)))
    assert figures["fsync_p50_ms"] == round(percentile(took, 50), 3) == 100.5
    assert figures["fsync_p99_ms"] == round(percentile(took, 99), 3) == 198.01
    assert figures["samples"] == 200
    # The median of two exports is their mean, not the slower one.
    assert median_seconds([{"seconds": 3.0}, {"seconds": 1.0}]) == 2.0
    assert median_seconds([{"seconds": 3.0}, {"seconds": 1.0}, {"seconds": 9.0}]) == 3.0


class _Recording:
    """A storage that notes the settings of each INSERT it makes (and makes it)."""

    def __init__(self, storage):
        self._storage, self.settings = storage, []

    def __getattr__(self, name):
        return getattr(self._storage, name)

    def raw_insert(self, table, columns, data, fmt, settings=None):
        self.settings.append(dict(settings or {}))
        return self._storage.raw_insert(table, columns, data, fmt=fmt, settings=settings)


def test_the_profile_and_the_cost_time_the_loaders_insert_settings_included(client):
    """`python -m benchmarks.profile insert` and cost.vs_004 time the INSERT the loader runs:
    with the embedded engine, one thread and the views one after another."""
    from tally.storage import writer

    storage = _Recording(client.app.state.storage)
    now = time.time()
    row = ("p" * 24, "pageview", now, now, "/", "", "", "s", "v", "Chrome", "Linux")
    row += ("desktop", None, "{}", "127.0.0.1", "ua", "k")
    row += ("Direct / None", "Direct", "", "", "", "", "", "Unknown", 0)
    rows_insert(storage)([row], uuid.uuid4().hex)  # the profile's
    body = json.dumps(list(row[:2])).encode() + b"\n"
    loader_insert(storage)(["project_id", "name"], body, uuid.uuid4().hex)  # the cost's
    background = writer.EMBEDDED_INSERT_SETTINGS if storage.target.kind == "chdb" else {}
    expected = {**writer.INSERT_SETTINGS, **background}
    assert len(storage.settings) == 2
    for settings in storage.settings:
        assert settings.pop("insert_deduplication_token")
        assert settings == expected
        if storage.target.kind == "chdb":
            assert settings["parallel_view_processing"] == 0 and settings["max_threads"] == 1


def test_output_paths_put_the_plot_beside_the_results(tmp_path):
    assert output_paths("latest.json") == (
        RESULTS / "latest.json",
        RESULTS / "dashboard_latency.png",
    )
    assert output_paths("run.json") == (RESULTS / "run.json", RESULTS / "run.png")
    given = f"{tmp_path}/x/name.json"
    assert output_paths(given) == (tmp_path / "x" / "name.json", tmp_path / "x" / "name.png")
    assert output_paths("./here.json") == (Path("here.json"), Path("here.png"))
    args, _ = options(["--output", given])  # the folder is made when the options are read
    assert (tmp_path / "x").is_dir() and args.output == given


def test_git_commit_is_dirty_with_a_new_file_not_ignored(tmp_path):
    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("results/\n")
    (tmp_path / "service").mkdir()
    (tmp_path / "service" / "a.py").write_text("a = 1\n")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    clean = git_commit(tmp_path)
    assert clean != "unknown" and not clean.endswith("-dirty")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "latest.json").write_text("{}")  # ignored: still clean
    assert git_commit(tmp_path) == clean
    (tmp_path / "service" / "new.py").write_text("b = 2\n")  # new, not committed
    assert git_commit(tmp_path) == f"{clean}-dirty"


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as fh:
            return fh.read().replace("\0", " ")
    except OSError:
        return ""


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
@pytest.mark.timeout(120)
def test_sigterm_stops_the_servers_and_removes_the_temporary_data(tmp_path):
    """What `timeout` and a cancelled CI job send: the suite stops as on Ctrl-C, with no
    `tally serve` (nor its worker, nor wrk) left running and no temporary folder left."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    command = [sys.executable, "-m", "benchmarks", "--smoke", "--only", "ingest"]
    command += ["--output", str(tmp_path / "never.json")]
    suite = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until tally serve and its worker are there
            for pid in tree(suite.pid)[1:]:
                seen.setdefault(pid, _cmdline(pid))
            if sum("tally serve" in c for c in seen.values()) >= 2 and list(temp.iterdir()):
                break
            assert suite.poll() is None, suite.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("tally serve did not start within 60 s")
        suite.send_signal(signal.SIGTERM)
        _, err = suite.communicate(timeout=60)
        assert suite.returncode == 128 + signal.SIGTERM, err[-2000:]
        assert "stopped by SIGTERM" in err
        left = [pid for pid in seen if _state(pid) not in ("", "Z")]
        assert not left, [seen[pid] for pid in left]
        assert list(temp.iterdir()) == []
        assert not (tmp_path / "never.json").exists()
    finally:
        for pid, cmdline in seen.items():  # whatever a failed run left behind
            if _state(pid) not in ("", "Z") and _cmdline(pid) == cmdline:
                os.kill(pid, signal.SIGKILL)
        if suite.poll() is None:
            suite.kill()
            suite.communicate()
