"""The ``trace2perfetto`` command: a thin layer over :func:`converters.convert`."""

from __future__ import annotations

import argparse
import csv
import ctypes
import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from .budget import parse_size
from .cluster import comm_report
from .comm import TRANSPORTS, OpComm
from .errors import Diagnostics, Trace2PerfettoError
from .executor import Where
from .info import profile_info
from .model import step_label
from .pipeline import Format, Kind, convert, overlap_report
from .select import format_ids, parse_ids

_EXAMPLES = """\
examples:
  trace2perfetto PROFILER_DIR                         summary of every rank -> PROFILER_DIR.pftrace
  trace2perfetto PROFILER_DIR --ranks 0,1 --kind summary -o job.pftrace
  trace2perfetto PROFILER_DIR --kind detail --graphs 2 -o graph2.json.gz
  trace2perfetto PROFILER_DIR -o - | gzip > job.pftrace.gz
  trace2perfetto PROFILER_DIR --kind detail --steps 5-8 --max-size 100M -o steps5-8.pftrace
  trace2perfetto overlap PROFILER_DIR --format csv     per rank and step: Computing, Communication, ...
  trace2perfetto info PROFILER_DIR                     what the profile holds, and how big the output gets
  trace2perfetto comm PROFILER_DIR --slow-ranks        which rank the others wait for, per step
  trace2perfetto report PROFILER_DIR -o report.html    where the time goes, and the bottleneck
  trace2perfetto PROFILER_DIR --align collectives      hosts' clocks aligned by their collectives
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
    _add_align(parser)
    _add_cluster(parser)
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


def _writing(work: Callable[[], Any]) -> tuple[Any, int | None]:
    """``work()`` of a command that writes a file, and None; or None and the exit code of its
    failure, said in one line on stderr (nothing is written either way)."""
    try:
        return work(), None
    except Trace2PerfettoError as e:
        return None, _error(e)
    except KeyboardInterrupt:
        print("trace2perfetto: interrupted; nothing written", file=sys.stderr)
        return None, 130
    except Exception as e:  # a bug, not the input: one line, and how to report it
        print(f"trace2perfetto: error: internal error {type(e).__name__}: {e}; nothing written "
              "(please report this with the command line)", file=sys.stderr)
        return None, 1


def _add_cluster(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", metavar="tcp://HOST:8786",
                        help="run each rank's work on this Dask scheduler's workers (they read the profile "
                        "from the same path: a shared file system); default: $TRACE2PERFETTO_CLUSTER, "
                        "else this machine's cores")
    parser.add_argument("--skip-unreadable", action="store_true",
                        help="leave out a rank that cannot be read, with a warning naming it (default: "
                        "fail, naming the rank)")


def _where(args: argparse.Namespace) -> Where:
    return Where.of(args.cluster, args.skip_unreadable)


def _add_align(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--align", choices=("none", "collectives"), default="none",
                        help="collectives: move each host's clock by its offset to the host of the lowest "
                        "rank, estimated from the ends of the collectives they share (median over "
                        "instances; `trace2perfetto comm` prints it). Default: %(default)s, times as "
                        "recorded")


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
    _add_cluster(parser)
    return parser


def _overlap_main(argv: list[str]) -> int:
    try:
        args = build_overlap_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    header = ["Rank", "Graph", "Step", *_OVERLAP_COLUMNS]
    writer = csv.DictWriter(sys.stdout, header, lineterminator="\n")
    table: list[list[str]] = [header]
    first = True

    def write(rows: list) -> None:  # CSV and JSON stream out rank by rank; the table is aligned at the end
        nonlocal first
        for record in map(_overlap_record, rows):
            if args.format == "json":
                sys.stdout.write(("[\n  " if first else ",\n  ") + orjson.dumps(record).decode())
            elif args.format == "csv":
                if first:
                    writer.writeheader()
                writer.writerow(record)
            else:
                table.append(["-" if record[h] is None else str(record[h]) for h in header])
            first = False

    try:
        diag = Diagnostics()
        overlap_report(args.profile, ranks=args.ranks, graphs=args.graphs, steps=args.steps, diag=diag,
                       where=_where(args), each=write)
    except Trace2PerfettoError as e:
        return _error(e)
    for warning in diag.messages():
        print(f"trace2perfetto: warning: {warning}", file=sys.stderr)
    if args.format == "json":
        sys.stdout.write("[]\n" if first else "\n]\n")
    elif args.format == "csv":
        if first:
            writer.writeheader()
    else:
        _print_table(table)
        print("(µs; Stage = the step's device span - Bubble; - : not known from this input)")
    return 0


def _overlap_record(r) -> dict:
    """One row of the overlap table, in µs, under torch_npu's column names."""
    return {"Rank": r.rank, "Graph": r.graph, "Step": r.step,
            **dict(zip(_OVERLAP_COLUMNS, (None if v is None else round(v / 1000, 3) for v in (
                r.computing_ns, r.not_overlapped_ns, r.overlapped_ns, r.communication_ns, r.free_ns,
                r.stage_ns, r.bubble_ns, r.not_overlapped_excluding_receive_ns, r.preparing_ns)),
                strict=True))}


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
    _add_cluster(parser)
    return parser


def _info_main(argv: list[str]) -> int:
    try:
        args = build_info_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        contents = profile_info(args.profile, ranks=args.ranks, where=_where(args))
    except Trace2PerfettoError as e:
        return _error(e)
    for warning in contents.warnings:
        print(f"trace2perfetto: warning: {warning}", file=sys.stderr)
    if args.format == "json":
        document = {"path": contents.path, "estimated_bytes": contents.estimated_bytes,
                    "ranks": [dataclasses.asdict(r) for r in contents.ranks],
                    "clocks": _clock_records(contents.clocks)}
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
            span = (f"{(last.end_ns - first.start_ns) / 1e9:.3f} s from the first step to the end of the last"
                    if first.start_ns is not None and last.end_ns is not None else
                    "their bounds not recorded (the profiler's analysis only)")
            print(f"rank {r.rank}: steps {first.step}-{last.step}, {span}")
    _print_clocks(contents.clocks, aligned=False)
    return 0


def _reuse_freed_memory() -> None:
    """Ask glibc's malloc to keep memory freed for reuse (up to 64 MiB) and to serve blocks below
    32 MiB from it: by default each batch of a few MiB is mapped afresh and returned when freed,
    and its pages faulted in again for the next (a tenth of a conversion's CPU time). The
    process, and the workers it forks, take it; elsewhere (not glibc) nothing changes."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    trim_threshold, mmap_threshold = -1, -3  # malloc.h's M_TRIM_THRESHOLD, M_MMAP_THRESHOLD
    mallopt(mmap_threshold, 32 << 20)
    mallopt(trim_threshold, 64 << 20)


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code (0 written, 1 broken input, 2 usage)."""
    argv = sys.argv[1:] if argv is None else argv
    _reuse_freed_memory()
    if argv[:1] == ["overlap"]:
        return _overlap_main(argv[1:])
    if argv[:1] == ["info"]:
        return _info_main(argv[1:])
    if argv[:1] == ["comm"]:
        return _comm_main(argv[1:])
    if argv[:1] == ["report"]:
        from .report import report_main  # only here: matplotlib is not needed otherwise

        return report_main(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.open and args.output == "-":
        print("trace2perfetto: error: --open serves a file; give -o FILE, not -o -", file=sys.stderr)
        return 2
    result, failed = _writing(lambda: convert(
        args.profile, args.output, ranks=args.ranks, graphs=args.graphs, steps=args.steps,
        kind=args.kind, fmt=args.format, merge_graphs=args.merge_graphs, host_level=args.host_level,
        max_bytes=args.max_size, align=args.align, where=_where(args),
        strict=args.strict, progress=None if args.quiet or not sys.stderr.isatty() else _progress,
    ))
    if failed is not None:
        return failed
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


def build_comm_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trace2perfetto comm",
        description="Communication per op and rank, with the figures of torch_npu's communication.json "
        "(Elapse, Transit, Wait, Synchronization and Idle time from the HCCL plane tasks, and transit "
        "size, time and bandwidth per transport), each collective matched across its ranks (arrival "
        "skew, the rank that came last, each rank's wait for it), and each host's clock offset as "
        "the collectives' ends show it. Times in ms.",
        epilog="examples:\n"
        "  trace2perfetto comm PROFILER_DIR                      every op of every rank\n"
        "  trace2perfetto comm PROFILER_DIR --slow-ranks          ranks by the wait they cause\n"
        "  trace2perfetto comm PROFILER_DIR --format csv > comm.csv\n\n"
        "The JSON output is described by schemas/comm.schema.json.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("profile", metavar="PROFILER_DIR")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table",
                        help="output on stdout (default: %(default)s)")
    parser.add_argument("--slow-ranks", action="store_true",
                        help="the slow-rank table instead of the ops: ranks ordered by the wait they cause "
                        "the others, with their step, compute and communication time, and the spread of "
                        "step time across ranks per step")
    _add_align(parser)
    _add_selection(parser)
    _add_cluster(parser)
    return parser


def _ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 6)


def _op_record(op) -> dict:
    record = {
        "Rank": op.rank, "Graph": op.graph, "Step": op.step, "Group": op.group, "Op": op.name,
        "Start Timestamp(us)": op.start_ns / 1000, "Elapse Time(ms)": _ms(op.elapse_ns),
        "Transit Time(ms)": _ms(op.transit_ns), "Wait Time(ms)": _ms(op.wait_ns),
        "Synchronization Time(ms)": _ms(op.sync_ns), "Idle Time(ms)": _ms(op.idle_ns),
        "Wait Time Ratio": op.wait_ratio, "Synchronization Time Ratio": op.sync_ratio,
        "Ranks": op.ranks, "Arrival Skew(ms)": _ms(op.skew_ns), "Last Rank": op.last_rank,
        "Wait For Last Rank(ms)": _ms(op.wait_for_last_ns),
    }
    record["Bandwidth"] = {
        name: {"Transit Size(MB)": t.size_bytes / 1e6, "Transit Time(ms)": _ms(t.time_ns),
               "Bandwidth(GB/s)": t.gb_per_s, "Large Packet Ratio": t.large_packet_ratio(name),
               "Size Distribution": {str(size / 1e6): [count, _ms(ns)]
                                     for size, (count, ns) in t.sizes.items()}}
        for name, t in op.transports.items()
    }
    return record


def _clock_records(clocks) -> list[dict]:
    return [{"Host": c.host, "Ranks": list(c.ranks), "Offset(us)": c.offset_ns / 1000,
             "Spread(us)": c.spread_ns / 1000, "Collectives": c.instances} for c in clocks]


def _comm_main(argv: list[str]) -> int:
    try:
        args = build_comm_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    stream = None if args.slow_ranks or args.format == "table" else _OpsStream(args.format)
    try:
        diag = Diagnostics()
        report = comm_report(args.profile, ranks=args.ranks, graphs=args.graphs, steps=args.steps,
                             align=args.align, diag=diag, where=_where(args), each=stream)
    except Trace2PerfettoError as e:
        return _error(e)
    for warning in diag.messages():
        print(f"trace2perfetto: warning: {warning}", file=sys.stderr)
    if not (stream.count if stream else report.ops or report.steps):
        print(f"trace2perfetto: warning: {args.profile}: no communication ops in the kept ranks and steps",
              file=sys.stderr)
    if args.slow_ranks:
        _print_slow_ranks(report, args.format)
    elif stream:
        stream.close(report)
    else:
        _print_ops_table(report)
    return 0


_BANDWIDTH_FIELDS = ("Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)")


class _OpsStream:
    """Writes the ops as ``comm_report`` hands them over, step by step: CSV rows (a column set for
    every transport, so the header is known first), or the JSON document's ``ops`` array."""

    def __init__(self, fmt: str) -> None:
        self.fmt, self.count = fmt, 0
        columns = [k for k in _op_record(OpComm(0, None, None, "", "", 0, 0)) if k != "Bandwidth"]
        columns += [f"{name} {field}" for name in (*TRANSPORTS, "NCCL") for field in _BANDWIDTH_FIELDS]
        self.writer = csv.DictWriter(sys.stdout, columns, lineterminator="\n") if fmt == "csv" else None

    def __call__(self, ops: list) -> None:
        for op in ops:
            record = _op_record(op)
            if self.writer is not None:
                if not self.count:
                    self.writer.writeheader()
                bandwidth = record.pop("Bandwidth")
                self.writer.writerow({**record, **{f"{name} {field}": figures.get(field)
                                                   for name, figures in bandwidth.items()
                                                   for field in _BANDWIDTH_FIELDS}})
            else:
                start = '{"ops": [\n  ' if not self.count else ",\n  "
                sys.stdout.write(start + orjson.dumps(record).decode())
            self.count += 1

    def close(self, report) -> None:
        if self.writer is not None:
            if not self.count:
                self.writer.writeheader()
            return
        tail = {"collectives": report.instances, "aligned": report.aligned,
                "clocks": _clock_records(report.clocks)}
        rest = orjson.dumps(tail).decode()[1:]  # the document's other keys, after its ops
        sys.stdout.write(('{"ops": [],' if not self.count else "\n],") + rest + "\n")


def _print_ops_table(report) -> None:
    records = [_op_record(op) for op in report.ops]
    header = ["Rank", "Step", "Op", "Elapse", "Transit", "Wait", "Sync", "Idle", "Skew", "Last", "Waited",
              "Bandwidth (GB/s)"]
    rows = [header]
    for op, r in zip(report.ops, records, strict=True):
        links = [name for name, t in op.transports.items() if t.time_ns and name != "SDMA"]  # SDMA: their sum
        links = links or [name for name, t in op.transports.items() if t.time_ns]
        bandwidth = ", ".join(f"{name} {op.transports[name].gb_per_s:g}" for name in links) or "-"
        rows.append([str(op.rank), "-" if op.step is None else str(op.step), op.name] + [
            "-" if r[k] is None else f"{r[k]:.3f}" for k in (
                "Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)",
                "Idle Time(ms)", "Arrival Skew(ms)")
        ] + ["-" if op.last_rank is None else str(op.last_rank),
             "-" if op.wait_for_last_ns is None else f"{op.wait_for_last_ns / 1e6:.3f}", bandwidth])
    _print_table(rows)
    print(f"(ms; {report.instances} collectives matched across ranks; Skew: last arrival - first; "
          "Waited: this rank's wait for the last; - : not known from this input)")
    _print_clocks(report.clocks, report.aligned)


def _print_clocks(clocks, aligned: bool) -> None:
    if len(clocks) < 2:
        return
    state = "applied" if aligned else "not applied; --align collectives applies it"
    print(f"clock offsets from the collectives' ends ({state}):")
    for c in clocks:
        who = c.host if c.host.startswith("rank ") else f"{c.host} (rank {format_ids(c.ranks)})"
        print(f"  {who}: {c.offset_ns / 1000:+.3f} µs" + (
            f", spread {c.spread_ns / 1000:.3f} µs over {c.instances} collectives" if c.instances else
            " (the reference)"))


def _print_slow_ranks(report, fmt: str) -> None:
    ranks = [{"Rank": r.rank, "Host": r.host, "Steps": r.steps, "Wait Caused(ms)": _ms(r.wait_caused_ns),
              "Wait Suffered(ms)": _ms(r.wait_suffered_ns), "Last Arrivals": r.last_arrivals,
              "Mean Step(ms)": _ms(r.mean_step_ns), "Mean Computing(ms)": _ms(r.mean_computing_ns),
              "Mean Communication(ms)": _ms(r.mean_communication_ns)} for r in report.slow_ranks]
    steps = [{"Rank": t.rank, "Graph": t.graph, "Step": t.step, "Step Time(ms)": _ms(t.step_ns),
              "Computing(ms)": _ms(t.computing_ns), "Communication(ms)": _ms(t.communication_ns),
              "Wait Suffered(ms)": _ms(t.wait_suffered_ns), "Wait Caused(ms)": _ms(t.wait_caused_ns)}
             for t in report.steps]
    spread = [{"Graph": s.graph, "Step": s.step, "Ranks": s.ranks, "Fastest(ms)": _ms(s.min_ns),
               "Slowest(ms)": _ms(s.max_ns), "Slowest Rank": s.slowest_rank} for s in report.spread]
    if fmt == "json":
        document = {"slow_ranks": ranks, "steps": steps, "spread": spread, "aligned": report.aligned,
                    "clocks": _clock_records(report.clocks)}
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if fmt == "csv":
        writer = csv.DictWriter(sys.stdout, list(ranks[0]) if ranks else ["Rank"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(ranks)
        return
    header = list(ranks[0]) if ranks else ["Rank"]
    _print_table([header] + [["-" if v is None else str(v) for v in r.values()] for r in ranks])
    print("(ms, means per step; ranks ordered by the wait they caused the others in collectives)")
    for s in spread:
        label = "step -" if s["Step"] is None else step_label(s["Graph"], s["Step"]).lower()
        print(f"{label}: step time {s['Fastest(ms)']:.3f}-{s['Slowest(ms)']:.3f} ms across "
              f"{s['Ranks']} ranks, slowest rank {s['Slowest Rank']}")
    _print_clocks(report.clocks, report.aligned)
