"""``make bench``: conversion speed and peak memory on generated profiles and the real sample.

Each measurement runs in its own process, so its peak RSS (``ru_maxrss`` from ``wait4``) is its
own. The floor is the cheapest possible reading of the same input: ``orjson.loads`` of every
JSON file. Results go to stdout as a Markdown table; ``--write`` puts them into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
FLOOR = (
    "import orjson, sys, pathlib\n"
    "n = 0\n"
    "for p in sorted(pathlib.Path(sys.argv[1]).rglob('*.json')):\n"
    "    n += len(orjson.loads(p.read_bytes()))\n"
    "print(n)\n"
)


@dataclass
class Run:
    label: str
    seconds: float
    peak_rss_mib: float
    output_bytes: int


def measure(label: str, argv: list[str], output: Path | None = None) -> Run:
    """Run ``argv`` in a child process; wall time and that child's own peak RSS."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{label} failed: {child.stderr.read().decode()}")
    size = output.stat().st_size if output and output.exists() else 0
    return Run(label, seconds, usage.ru_maxrss / 1024, size)


def profile_stats(root: Path) -> tuple[int, int]:
    """(input bytes, events) of every JSON file under ``root``."""
    import orjson

    size = events = 0
    for path in root.rglob("*.json"):
        size += path.stat().st_size
        events += len(orjson.loads(path.read_bytes()))
    return size, events


def generated(name: str, **options) -> Path:
    root = BUILD / name
    if not (root / ".done").exists():
        from fixtures.msprof_gen import write_msprof_profile

        write_msprof_profile(root, **options)
        (root / ".done").write_text("")
    return root


def bench_profile(name: str, root: Path) -> list[str]:
    size, events = profile_stats(root)
    runs = [measure("parse-only floor (orjson)", [sys.executable, "-c", FLOOR, str(root)])]
    for kind, suffix in (("summary", ".pftrace"), ("detail", ".pftrace"), ("detail", ".json")):
        out = BUILD / f"{name}-{kind}{suffix}"
        argv = [sys.executable, "-m", "converters", str(root), "--kind", kind, "-o", str(out)]
        runs.append(measure(f"trace2perfetto {kind} {suffix}", argv, out))
    floor = runs[0].seconds
    rows = [f"\n**{name}**: {size / 2**20:.1f} MiB of JSON, {events:,} events\n",
            "| run | wall s | events/s | MB/s | peak RSS MiB | output MiB | x floor |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        rows.append(
            f"| {r.label} | {r.seconds:.2f} | {events / r.seconds:,.0f} | {size / 1e6 / r.seconds:.1f} "
            f"| {r.peak_rss_mib:.0f} | {r.output_bytes / 2**20:.1f} | {r.seconds / floor:.1f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small profiles only")
    args = parser.parse_args()
    BUILD.mkdir(parents=True, exist_ok=True)
    profiles = [("8 ranks x 10 steps x 1,000 tasks (80k device tasks)",
                 generated("small", ranks=8, graphs=(2,), steps=10, tasks_per_step=1000, seed=1))]
    if not args.quick:
        profiles.append(("8 ranks x 10 steps x 12,500 tasks (1M device tasks)",
                         generated("1m", ranks=8, graphs=(2,), steps=10, tasks_per_step=12500, seed=1)))
    real = ROOT.parent / "shared" / "data" / "real" / "msprof-2rank"
    if real.is_dir():
        profiles.append(("real msprof-2rank", real))
    lines = [f"Command: `make bench` ({'--quick' if args.quick else 'full'}), "
             f"{os.cpu_count()} cores, Python {sys.version.split()[0]}"]
    for name, root in profiles:
        lines += bench_profile(name, root)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
