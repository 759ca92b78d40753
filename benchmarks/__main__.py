"""Run Tally's benchmarks: `python -m benchmarks [--quick] [--only ingest|dashboard|queries|export]
[--clickhouse-url URL --workers N]`.

Prints a table and writes benchmarks/results/latest.json (and a PNG plot of dashboard latency
against tenant size when matplotlib is installed: `pip install ".[bench]"`). Exits with 1 when a
served answer differs from raw SQL or an acknowledged event is lost or stored twice. SIGTERM
stops it as Ctrl-C does: the servers, wrk and workers it started are stopped and its temporary
folders removed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from . import dashboard, export, ingest, queries
from .common import (
    flatten,
    git_commit,
    machine,
    output_paths,
    output_problem,
    positive,
    stop_on_sigterm,
    storage_kind,
    write_results,
)

MODES: dict[str, dict[str, Any]] = {
    # A few minutes on a quiet 2-core machine; the queries module takes the most.
    "quick": {
        "sizes": [100_000, 1_000_000],
        "repeat": 8,
        "http_repeat": 10,
        "seconds": 5,
        "connections": {"batch": 64, "single": 64},
        "backlog_events": 100_000,
        "export_events": 1_000_000,
        "export_repeat": 2,
        "cost_events": 100_000,
        "cost_inserts": 20,
        "queries_repeat": 5,
    },
    "full": {
        "sizes": [1_000_000, 10_000_000, 100_000_000],
        "repeat": 20,
        "http_repeat": 30,
        "seconds": 20,
        "connections": {"batch": 256, "single": 256},
        "sweep": [16, 64],
        "backlog_events": 1_000_000,
        "export_events": 1_000_000,
        "export_repeat": 5,
        "cost_events": 1_000_000,
        "cost_inserts": 50,
        "queries_repeat": 20,
    },
    # For the test suite: proves the suite runs, measures nothing worth keeping.
    "smoke": {
        "sizes": [2_000, 20_000],
        "repeat": 2,
        "http_repeat": 2,
        "seconds": 1,
        # One connection count: a sweep point is the same measurement at another count (its
        # merging into by_connections is tested alone), and each cost the smoke run ~19 s.
        "connections": {"batch": 2, "single": 2},
        "sweep": [],
        "backlog_events": 2_000,
        "export_events": 2_000,
        "export_repeat": 1,
        "cost_events": 2_000,
        "cost_inserts": 3,
        "queries_repeat": 2,
    },
}


def table(results: dict[str, Any]) -> str:
    rows = [
        f"{k:<48} {v}"
        for k, v in flatten(results).items()
        if not isinstance(v, list)
        and k.split(".")[0] in ("ingest", "dashboard", "queries", "cost", "export")
    ]
    return "\n".join(rows)


def plot(results: dict[str, Any], path: Any) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    sizes = results.get("dashboard", {})
    if not sizes:
        return False
    labels = list(sizes)
    events = [sizes[label]["events"] for label in labels]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for days in dashboard.WINDOWS:
        ax.plot(
            events,
            [sizes[label][f"{days}d"]["p95_ms"] for label in labels],
            marker="o",
            label=f"GET /api/dashboard, {days} days (p95)",
        )
    ax.plot(
        events,
        [sizes[label]["90d"]["raw_p95_ms"] for label in labels],
        marker="x",
        linestyle="--",
        label="raw SQL only, 90 days (p95)",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events of the tenant (a neighbour of the same size shares the tables)")
    ax.set_ylabel("latency, ms")
    ax.set_title(
        f"Dashboard latency vs tenant size ({results['machine']['cores']} cores, "
        f"{results['storage']} storage)"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _counts(text: str) -> list[int]:
    """A comma-separated list of positive whole numbers (``--sizes``, ``--sweep``)."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of whole numbers"
        ) from None
    if any(n < 1 for n in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: each number must be at least 1")
    return counts


def _sizes(text: str) -> list[int]:
    """``--sizes``: tenant sizes, each once (one tenant and one result per size)."""
    sizes = _counts(text)
    repeated = sorted({n for n in sizes if sizes.count(n) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(
            f"{text!r}: each size once ({', '.join(map(str, repeated))} given twice)"
        )
    return sizes


def _sweep(text: str) -> list[int]:
    """``--sweep``: connection counts, or ``none`` (or empty) for no sweep."""
    return [] if text.strip() in ("", "none") else _counts(text)


def options(argv: list[str] | None = None) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The parsed arguments and the mode they make (a copy of MODES[...] with the options that
    were given); a plain error (exit status 2) for arguments that cannot run."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_const", dest="mode", const="quick")
    parser.add_argument(
        "--smoke", action="store_const", dest="mode", const="smoke", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--only",
        choices=["ingest", "dashboard", "queries", "export"],
        help="queries: the dashboard's tenants with the breakdown, filter, zone, comparison and "
        "range timings, their exactness and the cost of the dimensions (also in a full run)",
    )
    parser.add_argument(
        "--output",
        default="latest.json",
        help="where the results go: a file name goes under benchmarks/results/, a path with a "
        "folder (/tmp/x/name.json, ./name.json) goes there; the plot goes beside it as "
        "<name>.png (latest.json's is results/dashboard_latency.png)",
    )
    parser.add_argument(
        "--sizes",
        type=_sizes,
        help="tenant sizes in events, comma-separated, each once (e.g. 1000000,10000000); with "
        "--only export, the one size of the exported tenant (otherwise export uses 1M)",
    )
    parser.add_argument(
        "--seconds",
        type=positive,
        help="duration of each ingest run, whole seconds (wrk's unit; quick 5, full 20)",
    )
    parser.add_argument(
        "--sweep",
        type=_sweep,
        help="also run ingest at these connection counts, comma-separated (full mode: 16,64; "
        "'none' or empty to skip)",
    )
    parser.add_argument(
        "--clickhouse-url",
        default="",
        help="a ClickHouse server (http(s)://user:pw@host:8123) instead of the embedded engine; "
        "each run uses its own database tally_bench_*, dropped first",
    )
    parser.add_argument(
        "--workers",
        type=positive,
        default=1,
        help="tally serve worker processes (server URL only)",
    )
    args = parser.parse_args(argv)
    if args.workers > 1 and storage_kind(args.clickhouse_url) == "embedded":
        parser.error("--workers above 1 needs --clickhouse-url: the embedded engine is one process")
    mode = dict(MODES[args.mode or "full"])
    if args.sizes is not None:
        if args.only == "export":
            if len(args.sizes) > 1:
                parser.error("--only export exports one tenant: give --sizes one size")
            mode["export_events"] = args.sizes[0]
        else:
            mode["sizes"] = args.sizes
    if args.seconds is not None:
        mode["seconds"] = args.seconds
    if args.sweep is not None:
        mode["sweep"] = args.sweep
    problem = output_problem(args.output)
    if problem:
        parser.error(f"--output: {problem}")
    folder = output_paths(args.output)[0].parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--output: cannot make the folder {folder}: {exc.strerror}")
    if not os.access(folder, os.W_OK):
        parser.error(f"--output: cannot write in {folder}")
    return args, mode


def main(argv: list[str] | None = None) -> int:
    args, mode = options(argv)
    stop_on_sigterm()
    started = time.monotonic()
    results: dict[str, Any] = {
        "mode": args.mode or "full",
        "machine": machine(),
        "storage": storage_kind(args.clickhouse_url),
        "workers": args.workers,
        "git_commit": git_commit(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if args.only in (None, "ingest"):
        results["ingest"] = ingest.run(
            mode["seconds"],
            mode["connections"],
            args.clickhouse_url,
            args.workers,
            mode.get("sweep"),
            mode.get("backlog_events", 0),
        )
        results["ingest"]["connections"] = mode["connections"]
        results["ingest"]["seconds"] = mode["seconds"]
    if args.only in (None, "dashboard", "queries"):
        results["dashboard"] = dashboard.run(
            mode["sizes"],
            mode["repeat"],
            mode["http_repeat"],
            None,
            args.clickhouse_url,
            args.workers,
            with_queries=args.only != "dashboard",
            queries_repeat=mode["queries_repeat"],
        )
        for label, events in zip(results["dashboard"], mode["sizes"], strict=True):
            results["dashboard"][label]["events"] = events
        if args.only != "dashboard":
            queries.collect(results, mode, args.clickhouse_url)
    if args.only in (None, "export"):  # --only export --sizes N: export_events is N
        results["export"] = export.run(
            mode["export_events"],
            mode["export_repeat"],
            None,
            args.clickhouse_url,
            args.workers,
        )
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    path = write_results(results, args.output)
    # Named after the results (latest.json: dashboard_latency.png, as before), so that a run
    # with --output does not overwrite another run's plot; beside the results.
    picture = output_paths(args.output)[1]
    if plot(results, picture):
        print(f"plot: {picture}")
    print(table(results))
    print(f"results: {path}")
    failed = 0
    mismatches = queries.all_exact(results)
    if mismatches:
        print(f"served answers differ from raw SQL: {', '.join(mismatches)}", file=sys.stderr)
        failed = 1
    ingested = results.get("ingest", {})
    if ingested.get("lost_events") or ingested.get("duplicate_events"):
        print(
            f"ingest: {ingested['lost_events']} acknowledged events lost, "
            f"{ingested.get('duplicate_events', 0)} stored twice",
            file=sys.stderr,
        )
        failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
