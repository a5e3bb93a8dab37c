"""The ``trace2perfetto`` command: a thin layer over :func:`converters.convert`."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys
from pathlib import Path

import orjson

from .budget import parse_size
from .errors import Diagnostics, Trace2PerfettoError
from .info import profile_info
from .pipeline import Format, Kind, convert, overlap_report
from .select import parse_ids

_EXAMPLES = """\
examples:
  trace2perfetto PROFILER_DIR                         summary of every rank -> PROFILER_DIR.pftrace
  trace2perfetto PROFILER_DIR --ranks 0,1 --kind summary -o job.pftrace
  trace2perfetto PROFILER_DIR --kind detail --graphs 2 -o graph2.json.gz
  trace2perfetto PROFILER_DIR -o - | gzip > job.pftrace.gz
  trace2perfetto PROFILER_DIR --kind detail --steps 5-8 --max-size 100M -o steps5-8.pftrace
  trace2perfetto overlap PROFILER_DIR --format csv     per rank and step: Computing, Communication, ...
  trace2perfetto info PROFILER_DIR                     what the profile holds, and how big the output gets
  trace2perfetto PROFILER_DIR -o job.pftrace --open    convert, then open it in ui.perfetto.dev

Open the result at https://ui.perfetto.dev (Open trace file, or drag it in).
exit codes: 0 written, 1 input broken beyond recovery, 2 usage error.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trace2perfetto",
        description="Convert NPU and GPU profiler output (CANN msprof PROF_* directories, torch_npu and "
        "MindSpore *_ascend_pt / *_ascend_ms directories, MindSpore 1.x profiler folders, MindSpore "
        "host_info, PyTorch profiler *.pt.trace.json / *.json.gz, Paddle *.paddle_trace.json / .pb) "
        "into one Perfetto trace with every rank "
        "on one timeline: step trace, compute/communication overlap lanes and, with --kind detail, "
        "device streams, communication ops, HCCL planes and host activity.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("profile", metavar="PROFILER_DIR",
                        help="a PROF_* or *_ascend_pt directory, a profiler output holding several, "
                        "a parent of several nodes' outputs, a folder of PyTorch or Paddle profiler "
                        "files, or one such file")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="output file (.pftrace or .json, optionally .gz); '-' for stdout; "
                        "default: PROFILER_DIR.pftrace beside the input")
    parser.add_argument("--format", choices=[f.value for f in Format],
                        help="output format; default: from the output name (perfetto for '-')")
    parser.add_argument("--kind", choices=[k.value for k in Kind], default=Kind.SUMMARY.value,
                        help="summary: step trace and overlap lanes (small, the cluster view); "
                        "detail: also device streams, communication ops and HCCL planes, "
                        "host activity (default: %(default)s)")
    _add_selection(parser)
    parser.add_argument("--merge-graphs", action="store_true",
                        help="draw the steps of all kept graphs on one lane per rank")
    parser.add_argument("--host-level", type=int, choices=(0, 1), default=0,
                        help="host stages to draw from host_info (detail only): 0 = all, those for "
                        "framework developers too; 1 = those for users only (default: %(default)s)")
    parser.add_argument("--max-size", metavar="SIZE", type=_max_size, default="20M",
                        help="never write more than SIZE bytes (K, M, G are binary; 0 = unlimited; "
                        "default: %(default)s). The summary of every step comes first, then detail "
                        "in whole steps; what is left out is said on stderr and in the trace")
    parser.add_argument("--open", action="store_true",
                        help="then serve the trace once on 127.0.0.1:9001 and open it in ui.perfetto.dev "
                        "(on a remote machine: ssh -L 9001:127.0.0.1:9001 HOST, then open the printed URL)")
    parser.add_argument("--strict", action="store_true",
                        help="treat warnings about the input (a file cut off by a crash, skipped "
                        "events) as errors: exit 1 and write nothing, for CI pipelines")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing but errors (no warnings, progress or summary line)")
    return parser


def _max_size(text: str) -> int | None:
    try:
        return parse_size(text)
    except Trace2PerfettoError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_selection(parser: argparse.ArgumentParser) -> None:
    """--ranks, --graphs, --steps: the same on every command."""
    parser.add_argument("--ranks", metavar="LIST", type=_ids("ranks"),
                        help="ranks to keep, e.g. 0,1,4-7 (default: all)")
    parser.add_argument("--graphs", metavar="LIST", type=_ids("graphs"),
                        help="graphs (CANN model ids) to keep, e.g. 2 (default: all)")
    parser.add_argument("--steps", metavar="LIST", type=_ids("steps"),
                        help="steps (iterations) to keep, e.g. 3-5 (default: all)")


def _ids(what: str):
    def parse(text: str) -> frozenset[int]:
        try:
            return parse_ids(text, what)
        except Trace2PerfettoError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


_OVERLAP_COLUMNS = ("Computing", "Communication(Not Overlapped)", "Overlapped", "Communication",
                    "Free", "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)",
                    "Preparing")  # step_trace_time.csv's, in its order


def build_overlap_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trace2perfetto overlap",
        description="Print the compute/communication overlap of every step of every rank, in µs, "
        "computed from the device tasks and communication ops: the columns of torch_npu's "
        "step_trace_time.csv (Computing, Communication(Not Overlapped), Overlapped, Communication, "
        "Free, Stage = the step's device time, Bubble = time in receive ops, Communication(Not "
        "Overlapped and Exclude Receive), Preparing = step start to first device activity).",
        epilog="example:\n  trace2perfetto overlap PROFILER_DIR --ranks 0-7 --format csv > overlap.csv\n\n"
        "The CSV has the columns of torch_npu's step_trace_time.csv, plus Rank and Graph.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("profile", metavar="PROFILER_DIR")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table",
                        help="output on stdout (default: %(default)s)")
    _add_selection(parser)
    return parser


def _overlap_main(argv: list[str]) -> int:
    try:
        args = build_overlap_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        diag = Diagnostics()
        rows = overlap_report(args.profile, ranks=args.ranks, graphs=args.graphs, steps=args.steps, diag=diag)
    except Trace2PerfettoError as e:
        return _error(e)
    for warning in diag.messages():
        print(f"trace2perfetto: warning: {warning}", file=sys.stderr)
    records = [
        {"Rank": r.rank, "Graph": r.graph, "Step": r.step,
         **dict(zip(_OVERLAP_COLUMNS, (None if v is None else round(v / 1000, 3) for v in (
             r.computing_ns, r.not_overlapped_ns, r.overlapped_ns, r.communication_ns, r.free_ns,
             r.stage_ns, r.bubble_ns, r.not_overlapped_excluding_receive_ns, r.preparing_ns)),
             strict=True))}
        for r in rows
    ]
    if args.format == "json":
        sys.stdout.write(orjson.dumps(records, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif args.format == "csv":
        writer = csv.DictWriter(sys.stdout, ["Rank", "Graph", "Step", *_OVERLAP_COLUMNS], lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
    else:
        header = ["Rank", "Graph", "Step", *_OVERLAP_COLUMNS]
        cells = [header] + [["-" if rec[h] is None else str(rec[h]) for h in header] for rec in records]
        _print_table(cells)
        print("(µs; Stage = the step's device span - Bubble; - : not known from this input)")
    return 0


def _progress(done_bytes: int, total_bytes: int, rank: int) -> None:
    """Progress on a terminal: one line, rewritten as each rank is read."""
    share = done_bytes / total_bytes if total_bytes else 1.0
    print(f"\rtrace2perfetto: read {_size(done_bytes)} of {_size(total_bytes)} ({share:.0%}), "
          f"rank {rank} done", end="", file=sys.stderr, flush=True)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _print_table(rows: list[list[str]]) -> None:
    """Rows of cells, right-aligned in columns; the first row is the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def _error(e: Trace2PerfettoError) -> int:
    """The one line a failure prints, and its exit code."""
    print(f"trace2perfetto: error: {e}", file=sys.stderr)
    return e.exit_code


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def build_info_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trace2perfetto info",
        description="Show what a profile holds before converting it: per rank its format, device, "
        "host, graphs and steps, streams and HCCL planes, record counts, input size, and an "
        "estimate of the summary and detail output sizes (to choose --steps and --ranks under "
        "the --max-size cap).",
        epilog="example:\n  trace2perfetto info PROFILER_DIR\n  trace2perfetto info PROFILER_DIR "
        "--format json | jq '.ranks[0].steps'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("profile", metavar="PROFILER_DIR")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="output on stdout (default: %(default)s); JSON follows schemas/info.schema.json")
    parser.add_argument("--ranks", metavar="LIST", type=_ids("ranks"), help="ranks to show (default: all)")
    return parser


def _info_main(argv: list[str]) -> int:
    try:
        args = build_info_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        contents = profile_info(args.profile, ranks=args.ranks)
    except Trace2PerfettoError as e:
        return _error(e)
    for warning in contents.warnings:
        print(f"trace2perfetto: warning: {warning}", file=sys.stderr)
    if args.format == "json":
        document = {"path": contents.path, "estimated_bytes": contents.estimated_bytes,
                    "ranks": [dataclasses.asdict(r) for r in contents.ranks]}
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    header = ["Rank", "Format", "Device", "Host", "Graphs", "Steps", "Streams", "Planes", "Records",
              "Input", "Summary~", "Detail~"]
    rows = [header]
    for r in contents.ranks:
        graphs = sorted({s.graph for s in r.steps if s.graph is not None})
        rows.append([
            str(r.rank), r.format + (" + host_info" if r.host_info and r.format != "host_info" else ""),
            "" if r.device is None else str(r.device), r.host or "",
            ",".join(map(str, graphs)) or "-", str(len(r.steps)),
            str(len(r.lanes.get("Ascend Hardware", []))), str(len(r.lanes.get("HCCL", []))),
            f"{sum(r.records.values()):,}", _size(r.input_bytes), _size(r.estimated_bytes["summary"]),
            _size(r.estimated_bytes["detail"]),
        ])
    _print_table(rows)
    total = contents.estimated_bytes
    print(f"\nestimated output (Perfetto): summary {_size(total['summary'])}, "
          f"detail {_size(total['detail'])}; the default --max-size is 20 MiB")
    for r in contents.ranks:
        if r.steps:
            first, last = r.steps[0], r.steps[-1]
            print(f"rank {r.rank}: steps {first.step}-{last.step}, "
                  f"{(last.end_ns - first.start_ns) / 1e9:.3f} s from the first step to the end of the last")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code (0 written, 1 broken input, 2 usage)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["overlap"]:
        return _overlap_main(argv[1:])
    if argv[:1] == ["info"]:
        return _info_main(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.open and args.output == "-":
        print("trace2perfetto: error: --open serves a file; give -o FILE, not -o -", file=sys.stderr)
        return 2
    try:
        result = convert(
            args.profile, args.output, ranks=args.ranks, graphs=args.graphs, steps=args.steps,
            kind=args.kind, fmt=args.format, merge_graphs=args.merge_graphs, host_level=args.host_level,
            max_bytes=args.max_size,
            strict=args.strict, progress=None if args.quiet or not sys.stderr.isatty() else _progress,
        )
    except Trace2PerfettoError as e:
        return _error(e)
    except KeyboardInterrupt:
        print("trace2perfetto: interrupted; nothing written", file=sys.stderr)
        return 130
    except Exception as e:  # a bug, not the input: one line, and how to report it
        print(f"trace2perfetto: error: internal error {type(e).__name__}: {e}; nothing written "
              "(please report this with the command line)", file=sys.stderr)
        return 1
    if sys.stderr.isatty() and not args.quiet:
        print("\r\033[K", end="", file=sys.stderr)  # clear the progress line
    if args.quiet:
        return 0
    for warning in result.warnings:
        print(f"trace2perfetto: warning: {warning}", file=sys.stderr)
    if result.cut:
        print(f"trace2perfetto: warning: the trace was cut to fit --max-size: kept {result.cut}",
              file=sys.stderr)
    where = "stdout" if result.output == "-" else os.path.abspath(result.output)
    print(
        f"trace2perfetto: wrote {where}: {_count(len(result.ranks), 'rank')}, "
        f"{_count(result.steps, 'step')}, {_count(result.slices, 'slice')}, "
        f"{_size(result.bytes_written)} in {result.seconds:.2f} s",
        file=sys.stderr,
    )
    if args.open:
        from .serve import serve_once  # only here: the HTTP server is not needed otherwise

        try:
            fetched = serve_once(Path(result.output),
                                 announce=lambda line: print(f"trace2perfetto: {line}", file=sys.stderr))
        except KeyboardInterrupt:
            fetched = False
        except Trace2PerfettoError as e:
            return _error(e)
        if not fetched:
            print(f"trace2perfetto: stopped before the UI fetched the trace; it stays at {where}",
                  file=sys.stderr)
    elif result.output != "-":
        print(f"trace2perfetto: open it at https://ui.perfetto.dev (Open trace file: {where}), "
              "or run again with --open", file=sys.stderr)
    return 0
