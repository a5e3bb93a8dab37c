"""A hash of every output the converters write for a set of inputs, to show a change to the hot
path is byte for byte the same: run it before and after, then diff.

    python -m bench.fingerprint > before.txt     # on the commit before
    python -m bench.fingerprint > after.txt      # on the change
    diff before.txt after.txt                    # nothing: the same bytes

Inputs: every real sample, and every folder in one, under ``$TRACE2PERFETTO_REALDATA`` (default
``../shared/data/real``) and the generated profiles already under build/bench (``make bench``
makes them; pass ``--quick`` to take only the real samples and one generated rank), each in
summary and detail, Perfetto and JSON, capped at 1 MiB and uncapped; and what every analysis
command prints or writes for them (``info``, ``overlap``, ``comm`` and ``comm --slow-ranks`` in
each of their formats, ``ops`` in each format, by name, shape and step, and ``--across``,
``pipeline`` by each, ``report`` as JSON and HTML), through the CLI as a user runs it, stdout and
exit code alike; and ``diff -o``'s comparison trace of each input against itself, Perfetto and JSON.

``--unordered`` hashes each trace as the set of what it holds, in any order (its JSON events, its
protobuf packets): to show that a change of the order a trace is written in changes nothing else.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path

from converters import convert
from converters.analyses import diff
from converters.analyses.diff import Side
from converters.cli import main as cli
from converters.comparison import write_comparison

ROOT = Path(__file__).resolve().parent.parent
REAL = Path(os.environ.get("TRACE2PERFETTO_REALDATA", ROOT.parent / "shared" / "data" / "real"))
GENERATED = ROOT / "build" / "bench"
CAPS = (1 << 20, None)


def inputs(quick: bool) -> list[Path]:
    samples = sorted(p for p in REAL.iterdir() if p.is_dir()) if REAL.is_dir() else []
    # each sample, and each folder in it (one run of mindspore-cpu, one rank of msprof-2rank, ...)
    found = [q for p in samples for q in (p, *sorted(c for c in p.iterdir() if c.is_dir()))]
    torch_npu = sorted(GENERATED.glob("gen-torch-npu-8x*/*_ascend_pt"))[:1]
    if quick:
        return found + torch_npu
    small = [p for p in sorted(GENERATED.glob("gen-*")) if p.is_dir() and _size(p) < 3e8]
    return found + torch_npu + small


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


ANALYSES = (
    *(["info", "--format", f] for f in ("table", "json")),
    *(["overlap", "--format", f] for f in ("table", "csv", "json")),
    *(["memory", "--format", f] for f in ("table", "csv", "json")),
    *(["memory", "--allocations", "--format", f] for f in ("csv", "json")),
    *(["comm", "--format", f] for f in ("table", "csv", "json")),
    *(["comm", "--slow-ranks", "--format", f] for f in ("table", "csv", "json")),
    *(["comm", "--matrix", "--format", f] for f in ("table", "csv", "json")),
    *(["ops", "--format", f] for f in ("table", "csv", "json")),
    *(["ops", "--by", by, "--format", "json"] for by in ("name", "shape", "step")),
    *(["ops", "--across", "--format", f] for f in ("table", "json")),
    ["critical", "--format", "json"],
    *(["pipeline", "--by", by, "--format", "json"] for by in ("stage", "microbatch", "p2p")),
    *(["report", "--format", f] for f in ("json", "html")),
    *(["diff", "--by", by, "--format", "json"] for by in diff.BY),  # the sample twice
    ["diff", "--by", "type", "--format", "csv", "--fail-above", "1"],
)


def trace_digest(path: Path, unordered: bool = False) -> str:
    """The hash of a trace's bytes; ``unordered``: of its sorted events (JSON, one a line as the
    writer puts them) or packets (protobuf)."""
    data = path.read_bytes()
    if unordered:
        lines = [line.rstrip(b",") for line in data.split(b"\n")]
        parts = _packets(data) if path.suffix == ".pftrace" else lines
        data = b"\0".join(sorted(parts))
    return hashlib.sha256(data).hexdigest()[:16]


def _packets(data: bytes) -> list[bytes]:
    """A Trace's packets (field 1, length-delimited, each after its tag and length)."""
    packets, at = [], 0
    while at < len(data):
        at += 1  # the tag: 0x0a
        length = shift = 0
        while True:
            byte = data[at]
            length, at, shift = length | (byte & 0x7F) << shift, at + 1, shift + 7
            if byte < 0x80:
                break
        packets.append(data[at:at + length])
        at += length
    return packets


def analysis_digest(argv: list[str]) -> str:
    """The hash of what one command prints on stdout, and its exit code."""
    saved = os.dup(1)
    with tempfile.TemporaryFile() as captured:
        sys.stdout.flush()
        os.dup2(captured.fileno(), 1)
        try:
            code = cli([*argv, "-q"])
            sys.stdout.flush()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        captured.seek(0)
        return f"exit {code} {hashlib.sha256(captured.read()).hexdigest()[:16]}"


def comparison_digest(source: Path, out: Path, unordered: bool = False) -> str:
    """The hash of ``diff SOURCE SOURCE -o OUT``'s trace (uncapped), or the error it ended in."""
    try:
        write_comparison(Side(source), Side(source), str(out), max_bytes=None)
        return trace_digest(out, unordered)
    except Exception as e:  # noqa: BLE001 - an input that fails is a line too
        return f"error {type(e).__name__}: {e}"[:120]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="real samples and one generated rank only")
    parser.add_argument("--unordered", action="store_true",
                        help="a trace as its events or packets, in any order")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for source in inputs(args.quick):
            label = source.relative_to(REAL if source.is_relative_to(REAL) else ROOT)
            for kind in ("summary", "detail"):
                for suffix in (".pftrace", ".json"):
                    for cap in CAPS:
                        out = Path(tmp) / f"out{suffix}"
                        try:
                            convert(source, out, kind=kind, max_bytes=cap)
                            digest = trace_digest(out, args.unordered)
                        except Exception as e:  # noqa: BLE001 - an input that fails is a line too
                            digest = f"error {type(e).__name__}: {e}"[:120]
                        print(f"{label} {kind} {suffix} cap={cap} {digest}", flush=True)
            for suffix in (".pftrace", ".json"):  # detail with each step's critical path drawn
                out = Path(tmp) / f"out{suffix}"
                try:
                    convert(source, out, kind="detail", max_bytes=None, critical_path=True)
                    digest = trace_digest(out, args.unordered)
                except Exception as e:  # noqa: BLE001 - an input that fails is a line too
                    digest = f"error {type(e).__name__}: {e}"[:120]
                print(f"{label} detail --critical-path {suffix} {digest}", flush=True)
            for command in ANALYSES:
                argv = [command[0], str(source), *command[1:]]
                if command[0] == "report":
                    argv += ["-o", "-"]
                if command[0] == "diff":  # BASE and NEW: the sample twice
                    argv.insert(2, str(source))
                print(f"{label} {' '.join(command)} {analysis_digest(argv)}", flush=True)
            for suffix in (".pftrace", ".json"):  # diff -o: the sample against itself, in one trace
                compared = comparison_digest(source, Path(tmp) / f"cmp{suffix}", args.unordered)
                print(f"{label} diff -o cmp{suffix} {compared}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
