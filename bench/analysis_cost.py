"""What ``critical`` and ``report`` cost against a summary conversion, on every real sample.

    TRACE2PERFETTO_REALDATA=../shared/data/real python -m bench.analysis_cost [--repeat N] [SAMPLE ...]

For each sample folder under ``$TRACE2PERFETTO_REALDATA`` (or the ones named): the CPU seconds
(user + system of the process and the workers it waited for, ``bench.run.measure``; of ``--repeat``
runs, the least, as a shared machine's load only adds to it) of

- ``trace2perfetto DIR --kind summary -o x.pftrace`` (the reference),
- ``trace2perfetto critical DIR`` (a table on stdout),
- ``trace2perfetto report DIR -o x.html``,

and each analysis's ratio to the summary conversion (issue 44's target: at most 3x). Prints a
Markdown table; a command that fails on a sample is a cell saying so.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench import run as bench_run

ROOT = Path(__file__).resolve().parent.parent
REAL = Path(os.environ.get("TRACE2PERFETTO_REALDATA", ROOT.parent / "shared" / "data" / "real"))
TARGET = 3.0


def commands(sample: Path, out: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "converters"]
    return {
        "summary": [*cli, str(sample), "--kind", "summary", "-o", str(out / "x.pftrace"), "-q"],
        "critical": [*cli, "critical", str(sample), "-q"],
        "report": [*cli, "report", str(sample), "-o", str(out / "x.html"), "-q"],
    }


def cpu_seconds(label: str, argv: list[str]) -> float | None:
    try:
        return bench_run.measure(label, argv).cpu_seconds
    except SystemExit:  # the command failed on this sample: a cell says so
        return None


def row(sample: Path) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        cost = {name: cpu_seconds(f"{sample.name} {name}", argv)
                for name, argv in commands(sample, Path(tmp)).items()}
    base = cost["summary"]

    def cell(name: str) -> str:
        seconds = cost[name]
        if seconds is None:
            return "failed | -"
        ratio = seconds / base if base else None
        mark = "" if ratio is None or ratio <= TARGET else " (over)"
        return f"{seconds:.2f} | {'-' if ratio is None else f'{ratio:.1f}x'}{mark}"

    summary = "failed" if base is None else f"{base:.2f}"
    return f"| {sample.name} | {summary} | {cell('critical')} | {cell('report')} |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("samples", nargs="*", help="sample folder names under TRACE2PERFETTO_REALDATA (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command; the least CPU s is kept")
    args = parser.parse_args(argv)
    bench_run.REPEATS = args.repeat
    names = args.samples or sorted(p.name for p in REAL.iterdir() if p.is_dir())
    print(f"CPU s, the least of {args.repeat} runs; ratio: the analysis / the summary conversion (target <= {TARGET:g}x)\n")
    print("| sample | summary CPU s | critical CPU s | critical / summary | report CPU s | report / summary |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        print(row(REAL / name), flush=True)


if __name__ == "__main__":
    main()
