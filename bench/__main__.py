"""``python -m bench [all|drain|tick|latency|memory|sqlite|cpu|single|reads|backfill|cleanup|
console|report] [--smoke]``: see docs/benchmarks.md (``report`` draws its figures as charts)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys

SMOKE = {
    "entries": 200,
    "repeat": 1,
    "ticks": (1_000, 10_000),
    "latency": 10,
    "memory": 1_500,
    "reads": (2_000, 1_000, 20, 5, 2.0),
    "cleanup": (2_000, 1_000, 300, 5.0, 1.0),
    "console": (2_000, 1_000, 300, 5),
}
# reads: (entries, library items, samples, HTTP clients, HTTP seconds); cleanup: (entries,
# used library items, unused library items, writes/s, seconds of the writer's baseline);
# console: (entries, used library items, unused library items, fetches of each page)
FULL = {"entries": 20_000, "repeat": 3, "ticks": (1_000, 100_000, 1_000_000), "latency": 200,
        "memory": 100_000, "reads": (100_000, 50_000, 400, 50, 30.0),
        "cleanup": (100_000, 40_000, 10_000, 20.0, 10.0),
        "console": (100_000, 40_000, 10_000, 100)}  # fmt: skip


def machine() -> str:
    import celery
    import psutil
    import sqlalchemy

    return (f"{os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
            f"Python {platform.python_version()}, Celery {celery.__version__}, "
            f"SQLAlchemy {sqlalchemy.__version__}")  # fmt: skip


def _server_shapes(workers: list[int], threads: list[int] | None) -> list[tuple[int, int]]:
    """Every (processes, threads) the reads benchmark loads, the first the baseline; no
    threads given: the server's default."""
    from media_usage_worker.http.settings import DEFAULT_THREADS

    return [(w, t) for t in threads or [DEFAULT_THREADS] for w in workers]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument(
        "which",
        nargs="?",
        default="all",
        choices=[
            "all",
            "drain",
            "tick",
            "latency",
            "memory",
            "sqlite",
            "cpu",
            "single",
            "reads",
            "backfill",
            "cleanup",
            "console",
            "report",
        ],
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check the harness")
    parser.add_argument("--entries", type=int)
    parser.add_argument("--repeat", type=int)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--memory-items", type=int)
    parser.add_argument(
        "--server-workers",
        type=int,
        nargs="+",
        default=[1, 2],
        help="reads: serve --workers for each HTTP load, alternating (1 2)",
    )
    parser.add_argument(
        "--server-threads",
        type=int,
        nargs="+",
        default=None,
        help="reads: MEDIA_USAGE_API_THREADS for each HTTP load, with each --server-workers "
        "(default: the server's default)",
    )
    parser.add_argument(
        "--dialects", nargs="+", choices=["postgresql", "sqlite"], default=["postgresql", "sqlite"]
    )
    parser.add_argument(
        "--backfill-only", action="store_true", help="backfill: the activation alone, once"
    )
    parser.add_argument(
        "--write-rate",
        type=float,
        nargs="+",
        help="backfill: new entries/s written during it, each rate a run (0 1 10 50)",
    )
    parser.add_argument(
        "--new-user",
        action="store_true",
        help="backfill: a new user's first run with 2,000 updates and 1,000 deletes, beside "
        "Wagtail's rebuild (PostgreSQL)",
    )
    parser.add_argument("--latency-writes", type=int)
    parser.add_argument(
        "--capacity",
        type=float,
        default=None,
        help="items/s the latency load is half of (default: measured drain)",
    )
    args = parser.parse_args(argv)  # fmt: skip
    if args.which == "report":  # draws recorded figures: no servers, no machine line
        from bench import report

        print("\n".join(report.run()), flush=True)
        return 0
    size = dict(SMOKE if args.smoke else FULL)
    entries = args.entries or size["entries"]
    repeat = args.repeat or size["repeat"]

    from bench import backfill, cleanup, console, cpu, drain, latency, memory, reads, single, tick
    from bench.env import Bench

    print(machine(), flush=True)
    capacity = args.capacity
    with Bench() as bench:

        def report(lines: list[str]) -> None:
            print("\n".join(lines), flush=True)

        if args.which in ("all", "drain"):
            # (c) is an optional extra: without procrastinate installed, (a) and (b) still run.
            with_c = importlib.util.find_spec("procrastinate") is not None
            if not with_c:
                report(["(c) procrastinate skipped: not installed (pip install -e '.[bench]')"])
            report(drain.run(bench, entries, repeat, tuple(args.workers), with_c))
        if args.which in ("all", "sqlite"):
            report(drain.run_sqlite(bench, entries, repeat))
        if args.which in ("all", "tick"):
            report(tick.run(bench, size["ticks"], max(repeat, 3)))
        if args.which in ("all", "latency"):
            if capacity is None:
                capacity = drain.pipeline(bench, "postgresql", min(entries, 2000), 2)
            report(latency.run(bench, capacity, args.latency_writes or size["latency"]))
        if args.which in ("all", "memory"):
            report(memory.run(bench, args.memory_items or size["memory"]))
        if args.which in ("all", "cpu"):
            report(cpu.run(bench, entries, repeat, args.workers[0]))
        if args.which in ("all", "single"):
            report(single.run(bench, entries, repeat, items=min(entries, 1000)))
        if args.which == "backfill" and args.new_user:
            from bench import new_user

            report(new_user.run(bench, entries, repeat, args.workers[0]))
        elif args.which == "backfill" and args.write_rate:
            from bench import converge

            report(
                converge.run(
                    bench, entries, repeat, args.workers[0], args.write_rate,
                    tuple(args.dialects),
                )
            )  # fmt: skip
        elif args.which in ("all", "backfill"):
            report(
                backfill.run(
                    bench, entries, repeat, args.workers[0], dialects=tuple(args.dialects),
                    only_backfill=args.backfill_only,
                )
            )  # fmt: skip
        if args.which in ("all", "reads"):
            site, library, samples, clients, seconds = size["reads"]
            if args.entries:  # --entries N sizes the site; the library is half of it
                site, library = args.entries, max(1, args.entries // 2)
            report(
                reads.run(
                    bench, site, library, samples, clients, seconds,
                    tuple(_server_shapes(args.server_workers, args.server_threads)), repeat,
                    tuple(args.dialects),
                )
            )  # fmt: skip
        if args.which in ("all", "cleanup"):
            report(cleanup.run(bench, *size["cleanup"]))
        if args.which in ("all", "console"):
            report(console.run(bench, *size["console"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
