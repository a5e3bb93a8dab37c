"""What ``critical`` and ``report`` cost against a summary conversion, on every real sample.

    TRACE2PERFETTO_REALDATA=../shared/data/real python -m bench.analysis_cost [--repeat N] [SAMPLE ...]

For each sample folder under ``$TRACE2PERFETTO_REALDATA`` (or the ones named): the CPU seconds
(user + system of the process and the workers it waited for, ``bench.run.measure``; of ``--repeat``
runs, the least, as a shared machine's load only adds to it) of

- ``trace2perfetto DIR --kind summary -o x.pftrace`` (the reference),
- ``trace2perfetto critical DIR`` (a table on stdout),
- ``trace2perfetto report DIR -o x.html``,

and each analysis's ratio to the summary conversion (issue 44's target: at most 3x). Prints a
Markdown table. A sample that is not one job (``mindspore-cpu``: three runs; ``kineto-h100-mi300-
bert``: two) is measured per run (each folder, else each file in it); one no reader reads is a row
saying so.
"""

from __future__ import annotations

import argparse
import os
import subprocess
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


def runs(sample: Path) -> list[Path]:
    """The sample, or where it is not one job (its summary fails), each folder or file in it."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = commands(sample, Path(tmp))["summary"]
        if subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
            return [sample]
    inside = sorted(p for p in sample.iterdir() if p.is_dir()) or sorted(
        p for p in sample.iterdir() if p.name.endswith((".json", ".json.gz")))
    return inside or [sample]


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

    name = str(sample.relative_to(REAL)) if sample.is_relative_to(REAL) else str(sample)
    if base is None:
        return f"| {name} | not read (no reader, or not one job) | - | - | - | - |"
    return f"| {name} | {base:.2f} | {cell('critical')} | {cell('report')} |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("samples", nargs="*", help="folders under TRACE2PERFETTO_REALDATA (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command; the least CPU s is kept")
    args = parser.parse_args(argv)
    bench_run.REPEATS = args.repeat
    names = args.samples or sorted(p.name for p in REAL.iterdir() if p.is_dir())
    print(f"CPU s, the least of {args.repeat} runs; ratio: the analysis / the summary conversion "
          f"(target <= {TARGET:g}x)\n")
    print("| sample | summary CPU s | critical CPU s | critical / summary | report CPU s | "
          "report / summary |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        for run in runs(REAL / name):
            print(row(run), flush=True)


if __name__ == "__main__":
    main()
