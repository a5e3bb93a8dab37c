"""The ``trace2perfetto`` command: one table of subcommands (``COMMANDS``), one error boundary
(``_boundary``) and the options every subcommand shares, defined once (``_parser``).

``trace2perfetto PROFILER_DIR`` is ``trace2perfetto convert PROFILER_DIR``. Adding a subcommand is
one ``Command`` in the table: its one-line help, its own options and the function that runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import shlex
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .analyses.render import Rows, count, size
from .errors import Diagnostics, Trace2PerfettoError, UsageError, as_text
from .executor import Where, reuse_freed_memory
from .output import Format
from .select import parse_ids

# Each command's runner (and its options' definition) imports the analysis it runs, so that a
# command loads only what it needs: `info` no report, plots, writers or comm tables (issue 28).

EXIT_CODES = ("exit codes: 0 done, 1 input broken beyond recovery (or an internal error: please report it), "
              "2 usage error, 3 diff --fail-above: the new run is slower beyond it, 130 interrupted")


def _one_profile(parser: argparse.ArgumentParser) -> None:
    """The input of every command but ``diff``: one profile."""
    parser.add_argument("profile", metavar="PROFILER_DIR",
                        help="a PROF_* or *_ascend_pt directory, a profiler output holding several, "
                        "a parent of several nodes' outputs, a folder of PyTorch, Paddle, Nsight Systems, "
                        "JAX or rocprof profiler files, or one such file")


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one line for ``trace2perfetto --help``, its own options and the
    function that runs it (returns the exit code; errors it raises are handled by ``_boundary``).
    The common options come from the fields below, defined once in ``_parser``."""

    name: str
    summary: str
    description: str
    examples: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    formats: tuple[str, ...]  # --format choices (the first is the default where "table" is one)
    format_help: str
    align: bool = False  # takes --align
    writes_file: bool = False  # writes a file with -o: on failure, nothing is written
    inputs: Callable[[argparse.ArgumentParser], None] = _one_profile  # its positional arguments
    selects: bool = True  # takes --ranks and --steps (diff: one selection per side, its own options)


# -- the common options ---------------------------------------------------------------------------

def _parser(command: Command, prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=textwrap.fill(command.description, 100),
        epilog=f"{command.examples}\n\n{EXIT_CODES}.", formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.inputs(parser)
    command.arguments(parser)
    table = "table" in command.formats
    parser.add_argument("--format", choices=command.formats, default=command.formats[0] if table else None,
                        help=command.format_help + (" (default: %(default)s)" if table else ""))
    if command.selects:
        parser.add_argument("--ranks", metavar="LIST", type=_ids("ranks"),
                            help="ranks to keep, e.g. 0,1,4-7 (default: all)")
        parser.add_argument("--steps", metavar="LIST", type=_ids("steps"),
                            help="steps (iterations) to keep, e.g. 3-5 (default: all)")
    parser.add_argument("--graphs", metavar="LIST", type=_ids("graphs"),
                        help="graphs (CANN model ids) to keep, e.g. 2 (default: all)")
    parser.add_argument("--step-marker", metavar="NAME",
                        help="PyTorch traces: the ranges (record_function, user annotation, Python function) "
                        "named NAME, or beginning so for NAME*, are the steps, numbered 1, 2, ... in time "
                        "order, in place of ProfilerStep#N (serving traces have none: vLLM's execute_model)")
    if command.align:
        parser.add_argument("--align", choices=("none", "collectives"), default="none",
                            help="collectives: move each host's clock by its offset to the host of the "
                            "lowest rank, estimated from the ends of the collectives they share (median over "
                            "instances; `trace2perfetto comm` prints it). Default: %(default)s, times as "
                            "recorded")
    parser.add_argument("--cluster", metavar="tcp://HOST:8786",
                        help="run each rank's work on this Dask scheduler's workers (they read the profile "
                        "from the same path: a shared file system); default: $TRACE2PERFETTO_CLUSTER, "
                        "else this machine's cores")
    parser.add_argument("--skip-unreadable", action="store_true",
                        help="leave out a rank that cannot be read, with a warning naming it (default: "
                        "fail, naming the rank); if no rank can be read, it fails all the same")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing but errors on stderr (no warnings, progress or summary line)")
    return parser


def _ids(what: str):
    def parse(text: str) -> frozenset[int]:
        try:
            return parse_ids(text, what)
        except Trace2PerfettoError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def _where(args: argparse.Namespace) -> Where:  # with a progress line on a terminal, as each rank is read
    shown = not args.quiet and sys.stderr.isatty()
    return Where.of(args.cluster, args.skip_unreadable, _progress if shown else None)


def _selection(args: argparse.Namespace) -> dict:
    return {"ranks": args.ranks, "graphs": args.graphs, "steps": args.steps, "step_marker": args.step_marker,
            "where": _where(args)}


# -- the one error boundary -----------------------------------------------------------------------

def _boundary(command: Command, args: argparse.Namespace) -> int:
    """Run ``command``: every failure is one line on stderr and an exit code, never a traceback."""
    nothing = "; nothing written" if command.writes_file else ""
    try:
        return command.run(args)
    except Trace2PerfettoError as e:
        _end_progress()
        print(f"trace2perfetto: error: {_one_line(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        _end_progress()
        print(f"trace2perfetto: interrupted{nothing}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (`| head`): ours to stop, no error to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 1
    except OSError as e:  # the machine's, not the input's nor a bug: a full disk, a file not allowed
        _end_progress()
        where = f"{e.filename}: " if e.filename else ""
        print(f"trace2perfetto: error: {where}{e.strerror or _one_line(e)}{nothing}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - a bug, not the input: one line, and how to report it
        _end_progress()
        print(f"trace2perfetto: error: internal error {type(e).__name__}: {_one_line(e)}{nothing} (a bug: "
              "please report it with the command line)", file=sys.stderr)
        return 1


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


# -- what every command prints --------------------------------------------------------------------

_progress_shown = False


def _progress(done_bytes: int, total_bytes: int, rank: int | None) -> None:
    """Progress on a terminal: a line per pass over the ranks, rewritten as each is read, gone at its end."""
    global _progress_shown
    if rank is not None and done_bytes >= total_bytes:  # before what the command prints next
        return _end_progress()
    share = done_bytes / total_bytes if total_bytes else 1.0
    print(f"\r\033[Ktrace2perfetto: read {size(done_bytes)} of {size(total_bytes)} ({share:.0%}), "
          + ("reading" if rank is None else f"rank {rank} done"), end="", file=sys.stderr, flush=True)
    _progress_shown = True


def _end_progress() -> None:
    """Clear the progress line, if one is shown."""
    global _progress_shown
    if _progress_shown:
        print("\r\033[K", end="", file=sys.stderr)
        _progress_shown = False


def _warn(args: argparse.Namespace, warnings: list[str]) -> None:
    if not args.quiet:
        for warning in warnings:
            print(f"trace2perfetto: warning: {warning}", file=sys.stderr)


def _say(args: argparse.Namespace, line: str) -> None:
    if not args.quiet:
        print(f"trace2perfetto: {line}", file=sys.stderr)


# -- convert --------------------------------------------------------------------------------------

def _convert_arguments(parser: argparse.ArgumentParser) -> None:
    from .profile import Kind

    parser.add_argument("-o", "--output", metavar="FILE",
                        help="output file (.pftrace or .json, optionally .gz); '-' for stdout; default: "
                        "PROFILER_DIR.pftrace beside the input (.json with --open). Never an input, nor "
                        "inside one")
    parser.add_argument("--kind", choices=[k.value for k in Kind], default=Kind.SUMMARY.value,
                        help="summary: step trace and overlap lanes (small, the cluster view); "
                        "detail: also device streams, communication ops and HCCL planes, "
                        "host activity (default: %(default)s)")
    parser.add_argument("--merge-graphs", action="store_true",
                        help="draw the steps of all kept graphs on one lane per rank")
    parser.add_argument("--host-level", type=int, choices=(0, 1), default=0,
                        help="host stages to draw from host_info (detail only): 0 = all, those for "
                        "framework developers too; 1 = those for users only (default: %(default)s)")
    parser.add_argument("--critical-path", action="store_true",
                        help="with --kind detail: draw each step's critical path across ranks (as "
                        "`trace2perfetto critical` finds it) above the ranks, in a process of its own: per "
                        "step its span with the top what-ifs, inside it one slice per segment (kind, rank "
                        "and duration in args), an arrow where the path changes rank")
    parser.add_argument("--max-size", metavar="SIZE", type=_max_size, default="20M",
                        help="never write more than SIZE bytes (K, M, G are binary; 0 = unlimited; "
                        "default: %(default)s). The summary of every step comes first, then detail "
                        "in whole steps; what is left out is said on stderr and in the trace")
    parser.add_argument("--open", action="store_true",
                        help="then serve the trace once on 127.0.0.1:9001 and open it in ui.perfetto.dev "
                        "(on a remote machine: ssh -L 9001:127.0.0.1:9001 HOST, then open the printed URL); "
                        "without -o or --format it writes PROFILER_DIR.json, which the UI loads faster")
    parser.add_argument("--strict", action="store_true",
                        help="treat warnings about the input (a file cut off by a crash, skipped "
                        "events, arrows left out) as errors: exit 1 and write nothing, for CI pipelines")


def _max_size(text: str) -> int | None:
    from .budget import parse_size

    try:
        return parse_size(text)
    except Trace2PerfettoError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _run_convert(args: argparse.Namespace) -> int:
    from .pipeline import convert

    output = args.output
    if args.open:  # serve's imports only here: the HTTP server is not needed otherwise
        from .serve import output_for_ui, serve_to_ui
        output = output_for_ui(args.profile, args.output, args.format, lambda line: _say(args, line))
    result = convert(
        args.profile, output, kind=args.kind, fmt=args.format, merge_graphs=args.merge_graphs,
        host_level=args.host_level, max_bytes=args.max_size, align=args.align, strict=args.strict,
        critical_path=args.critical_path, **_selection(args))  # its progress line: Where's
    _end_progress()
    _warn(args, result.warnings)
    if result.cut:
        _warn(args, [f"the trace was cut to fit --max-size: kept {result.cut}"])
    where = "stdout" if result.output == "-" else os.path.abspath(result.output)
    _say(args, f"wrote {where}: {count(len(result.ranks), 'rank')}, {count(result.steps, 'step')}, "
         f"{count(result.slices, 'slice')}, {size(result.bytes_written)} in {result.seconds:.2f} s")
    if args.open:
        serve_to_ui(Path(result.output), where, lambda line: print(f"trace2perfetto: {line}",
                                                                   file=sys.stderr))
    elif result.output != "-":
        _say(args, f"open it at https://ui.perfetto.dev (Open trace file: {where}), or run again with --open")
    return 0


# -- overlap --------------------------------------------------------------------------------------

def _overlap_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mindinsight", action="store_true",
                        help="add MindSpore's own cluster step trace columns as MindInsight's cluster page "
                             "shows them (computation_time, communication_alone_time, stage_time, "
                             "receive_alone_time, collective_communication_alone_time), which count receive "
                             "ops otherwise than Stage and Bubble (docs/analysis.md section 2)")


def _run_overlap(args: argparse.Namespace) -> int:
    from .analyses import overlap

    theirs: tuple[str, ...] = ()
    if args.mindinsight:
        from .analyses.mindinsight import COLUMNS as theirs
    rows = Rows(args.format, ["Rank", "Graph", "Step", *overlap.COLUMNS, *theirs],
                "(µs; Stage = the step's device span - Bubble; - : not known from this input" +
                ("; *_time: MindSpore's cluster step trace, as MindInsight shows it)" if theirs else ")"))
    diag = Diagnostics()
    overlap.overlap_report(args.profile, diag=diag, each=lambda found: rows.add(map(overlap.record, found)),
                           mindinsight=args.mindinsight, **_selection(args))
    _warn(args, diag.messages())
    rows.close()
    return 0


# -- info -----------------------------------------------------------------------------------------

def _run_info(args: argparse.Namespace) -> int:
    from .analyses.info import info_report, print_info

    contents = info_report(args.profile, **_selection(args))
    _warn(args, contents.warnings)
    print_info(contents, args.format)
    return 0


# -- comm -----------------------------------------------------------------------------------------

def _comm_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--slow-ranks", action="store_true",
                        help="the slow-rank table instead of the ops: ranks ordered by the wait they cause "
                        "the others, with their step, compute and communication time, and the spread of "
                        "step time across ranks per step")
    parser.add_argument("--matrix", action="store_true",
                        help="the link matrix instead of the ops, as torch_npu's communication_matrix.json: "
                        "per rank, step, group and op type, per link (src rank -> dst rank) its transport, "
                        "transit size, time and bandwidth, for the op with the highest bandwidth on the link "
                        "(top1), the middle one, the three lowest (bottom1-3) and their total; then the "
                        "job's slowest links against the median of their transport. Needs the HCCL plane "
                        "tasks (torch_npu or msprof with them; not Kineto)")


def _run_comm(args: argparse.Namespace) -> int:
    if args.matrix:
        return _print_matrix(args)
    from .analyses import comm_tables
    from .analyses.comm import comm_report

    stream = None if args.slow_ranks or args.format == "table" else comm_tables.OpsStream(args.format)
    diag = Diagnostics()
    report = comm_report(args.profile, align=args.align, diag=diag, each=stream, **_selection(args))
    _warn(args, diag.messages())
    if not (stream.count if stream else report.ops or report.steps):
        _warn(args, [f"{args.profile}: no communication ops in the kept ranks and steps"])
    if args.slow_ranks:
        comm_tables.print_slow_ranks(report, args.format)
    elif stream:
        stream.close(report)
    else:
        comm_tables.print_ops_table(report)
    return 0


def _print_matrix(args: argparse.Namespace) -> int:
    from .analyses import comm_matrix, comm_tables

    diag = Diagnostics()
    printer = comm_tables.MatrixPrinter(args.format)
    report = comm_matrix.comm_matrix_report(args.profile, diag=diag, each=printer.add, **_selection(args))
    _warn(args, diag.messages())
    if not report.has_links:
        _warn(args, [f"{args.profile}: no HCCL plane tasks on links in the kept ranks and steps (Kineto, "
                     "msprof or torch_npu without them): no link matrix"])
    printer.close(report)
    return 0


# -- report ---------------------------------------------------------------------------------------

def _report_arguments(parser: argparse.ArgumentParser) -> None:
    from .analyses.report import Thresholds

    parser.add_argument("-o", "--output", metavar="FILE",
                        help="output file; '-' for stdout; default: PROFILER_DIR.report.html (.json) beside "
                        "the input. Never an input, nor inside one")
    parser.add_argument("--threshold", metavar="NAME=VALUE", action="append", default=[], type=_threshold,
                        help="change a diagnosis threshold, e.g. host_idle_share=0.4 (names: "
                        + ", ".join(f.name for f in dataclasses.fields(Thresholds)) + ")")
    parser.add_argument("--top", metavar="N", type=_count_of("--top"), default=20,
                        help="device ops to list, over all ranks and per rank (default: %(default)s)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="another run's profile (any format) to compare with: a section on what changed "
                        "from it, per step phase and op type, as trace2perfetto diff DIR PROFILER_DIR")


def _threshold(text: str) -> tuple[str, float]:
    from .analyses.report import Thresholds

    try:
        return Thresholds.setting(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _count_of(option: str):
    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            number = -1
        if number < 0:
            raise argparse.ArgumentTypeError(f"{option} takes a whole number >= 0, not {text!r}")
        return number

    return parse


_REPORT_SUFFIXES = {".html": "html", ".htm": "html", ".json": "json"}


def _report_output(args: argparse.Namespace) -> tuple[str, str]:
    """The report's file and format: the format from --format, else the name (.json: json), else
    html. A format the name contradicts is a usage error."""
    target, fmt = args.output, args.format
    named = None if target in (None, "-") else _REPORT_SUFFIXES.get(Path(target).suffix.lower())
    if fmt is not None and named is not None and fmt != named:
        raise UsageError(f"--format {fmt} contradicts the output's name {target!r} (a {named} file); "
                         "change one of them")
    fmt = fmt or named or "html"
    if target is None:
        path = Path(args.profile).resolve()
        target = str(path.parent / f"{path.name}.report.{fmt}")
    return target, fmt


def _run_report(args: argparse.Namespace) -> int:
    from .analyses.report import KIND_TITLES, Thresholds, report_data, verdict, write_report
    from .output import refuse_inputs

    started = time.perf_counter()
    target, fmt = _report_output(args)
    read = [args.profile] + ([args.baseline] if args.baseline else [])
    refuse_inputs(target, read)  # now, not after reading; the writing checks every input again
    report = report_data(args.profile, align=args.align, thresholds=Thresholds(**dict(args.threshold)),
                         top=args.top, baseline=args.baseline, **_selection(args))
    written = write_report(report, target, args.command_line, fmt)
    _warn(args, report.warnings)
    where = "stdout" if target == "-" else os.path.abspath(target)
    mostly = KIND_TITLES[verdict(report)["dominant"]].lower()
    _say(args, f"wrote {where}: {count(len(report.ranks), 'rank')}, "
         f"{count(len(report.steps), 'rank-step')}, {count(len(report.diagnoses), 'finding')} (mostly "
         f"{mostly}), {size(written)} in {time.perf_counter() - started:.2f} s")
    return 0


# -- ops ------------------------------------------------------------------------------------------

def _ops_arguments(parser: argparse.ArgumentParser) -> None:
    from .analyses import ops

    parser.add_argument("--by", choices=ops.BY, default="type",
                        help="type: per op type and core type, as torch_npu's op_statistic.csv; name: per "
                        "op (kernel) name; shape: per op type and input shapes; step: per op type and step "
                        "(default: %(default)s)")
    parser.add_argument("--across", action="store_true",
                        help="one row per key (per --by) across the ranks instead of one per rank and key: "
                        "how many ranks ran it, the min, median and max of their total times, max/median, "
                        "the slowest and the fastest rank; rows by max minus median, largest first")


def _run_ops(args: argparse.Namespace) -> int:
    from .analyses import ops

    of = "its step's" if args.by == "step" else "the rank's"
    note = ("(µs: each rank's total time in the key; rows by max minus median, largest first)" if args.across
            else f"(µs; Ratio: share of {of} time in these ops)")
    diag = Diagnostics()
    found = ops.ops_report(args.profile, by=args.by, diag=diag, **_selection(args))
    host, typed = ops.with_self_time(found), ops.names_types(found)
    note = note if typed else f"{note[:-1]}; by Name: the input names no op type)"
    rows = Rows(args.format, ops.columns(args.by, args.across, host, typed), note,
                cell_width=60)  # a GPU kernel's name runs to a thousand characters
    _warn(args, diag.messages())
    if args.across:
        rows.add(ops.spread_record(row, typed) for row in ops.across(found))
    else:
        rows.add(ops.record(row, host, typed) for row in found)
    rows.close()
    return 0


# -- memory ---------------------------------------------------------------------------------------

def _memory_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allocations", action="store_true",
                        help="the per-operator allocation table instead of the peaks: every allocation "
                        "with its component, size, allocation and release time and how long it lived")


def _run_memory(args: argparse.Namespace) -> int:
    from .analyses import memory

    memory.no_selection(args.steps, args.graphs, args.step_marker)
    diag = Diagnostics()
    if args.allocations:
        rows = Rows(args.format, memory.ALLOCATION_COLUMNS, "(KB; epoch µs; Release -: never within the "
                    "profile)", cell_width=60)
        rows.add(memory.allocation_record(row) for row in memory.allocations_report(
            args.profile, ranks=args.ranks, diag=diag))
    else:
        rows = Rows(args.format, memory.COLUMNS, "(MB; Peak Time: epoch µs of the Allocated peak, else "
                    "the Reserved; Held at Peak: the largest allocations alive then, MB)", cell_width=80)
        rows.add(map(memory.record, memory.memory_report(args.profile, ranks=args.ranks, diag=diag,
                                                         where=_where(args))))
    _warn(args, diag.messages())
    rows.close()
    return 0


# -- diff -----------------------------------------------------------------------------------------

def _two_profiles(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", metavar="BASE", help="the run to compare against (any input convert reads)")
    parser.add_argument("new", metavar="NEW", help="the run to compare (any format: torch_npu vs Kineto)")


def _diff_arguments(parser: argparse.ArgumentParser) -> None:
    from .analyses import diff

    parser.add_argument("--by", choices=diff.BY, default="step", help="step: the phases of a step; type: per "
                        "op type; name: per op (kernel) name; comm: per communication op type and group, "
                        "with Wait, Transit and Bandwidth; op: per framework op (aten::linear, "
                        "autograd::engine::evaluate_function: AddmmBackward0), the device time of the "
                        "kernels it launched, where the trace links them (Kineto, torch_npu's "
                        "trace_view.json), else per kernel, by family across formats; Matched says how "
                        "(default: %(default)s)")
    for side in ("base", "new"):
        for what, example in (("ranks", "0,1"), ("steps", "3-5")):
            parser.add_argument(f"--{side}-{what}", metavar="LIST", type=_ids(f"{side} {what}"),
                                help=f"{what} of {side.upper()} to keep, e.g. {example} (default: all)")
    parser.add_argument("--fail-above", metavar="PCT", type=float, help="exit 3 when NEW is slower by more "
                        "than PCT %% and significantly: its step time (--by type/name/comm/op: any row's); "
                        "for CI")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="also write both runs into one trace (.pftrace or .json, optionally .gz), "
                        "detail, each in its processes (BASE rank N, NEW rank N), NEW's ranks shifted so "
                        "that their first step in common with BASE starts with BASE's; ops carry their "
                        "delta vs base (%%) in args, and NEW a counter of step time vs BASE. Never an input, "
                        "nor inside one")
    parser.add_argument("--max-size", metavar="SIZE", type=_max_size, default="20M",
                        help="with -o: never write more than SIZE bytes, as convert (default: %(default)s)")


def _run_diff(args: argparse.Namespace) -> int:
    from .analyses import diff

    if args.output is not None:  # first: a refused output fails before the tables' reading
        _write_comparison(args)
    diag = Diagnostics()
    found = diff.diff_report(diff.Side(args.base, args.base_ranks, args.base_steps, args.step_marker),
                             diff.Side(args.new, args.new_ranks, args.new_steps, args.step_marker),
                             by=args.by, graphs=args.graphs, diag=diag, where=_where(args))
    rows = Rows(args.format, list(diff.columns(args.by)), diff.note(found, args.by), cell_width=60)
    _warn(args, diag.messages())
    rows.add(map(diff.record, found))
    rows.close()
    slower = [] if args.fail_above is None else diff.regressions(found, args.by, args.fail_above)
    _warn(args, [f"--fail-above {args.fail_above:g}: slower by more: {diff.named(slower)}"] if slower else [])
    return 3 if slower else 0


def _write_comparison(args: argparse.Namespace) -> None:
    from .analyses import diff
    from .comparison import write_comparison

    if args.output == "-":
        raise UsageError("diff -o writes a file (the table goes to stdout); give -o FILE, not -o -")
    result = write_comparison(diff.Side(args.base, args.base_ranks, args.base_steps, args.step_marker),
                              diff.Side(args.new, args.new_ranks, args.new_steps, args.step_marker),
                              args.output,
                              graphs=args.graphs, max_bytes=args.max_size, where=_where(args))
    _warn(args, result.warnings)
    if result.cut:
        _warn(args, [f"the comparison trace was cut to fit --max-size: kept {result.cut}"])
    _say(args, f"wrote {os.path.abspath(result.output)}: {count(len(result.ranks), 'rank')}, "
         f"{count(result.slices, 'slice')}, {size(result.bytes_written)} in {result.seconds:.2f} s")


# -- critical -------------------------------------------------------------------------------------

def _run_critical(args: argparse.Namespace) -> int:
    from .analyses import critical

    diag = Diagnostics()
    rows = Rows(args.format, list(critical.COLUMNS), critical.NOTE, cell_width=80)
    as_record = critical.record if args.format == "json" else critical.table_record
    for found in critical.critical_report(args.profile, align=args.align, diag=diag, **_selection(args)):
        rows.add([as_record(found)])
    rows.close()
    nothing = [] if rows.count else [f"{args.profile}: no device work in the kept ranks and steps"]
    _warn(args, diag.messages() + nothing)
    return 0


def _pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    from .analyses import pipeline

    pipeline.arguments(parser)


def _run_pipeline(args: argparse.Namespace) -> int:
    from .analyses import pipeline

    return pipeline.run(args, _selection(args), _warn)


# -- the table ------------------------------------------------------------------------------------

COMMANDS = {c.name: c for c in (
    Command(
        "convert", "the profile into one Perfetto trace or Chrome JSON (the default: trace2perfetto DIR)",
        "Convert NPU and GPU profiler output (CANN msprof PROF_*, torch_npu and MindSpore *_ascend_pt / "
        "*_ascend_ms, MindSpore 1.x profiler/ and host_info/, PyTorch *.pt.trace.json / *.json.gz, Paddle "
        "*.paddle_trace.json / .pb, Nsight Systems *.sqlite, JAX *.xplane.pb, rocprofv3 *_results.json) "
        "into one Perfetto trace with every rank on one timeline: step trace, compute/communication overlap "
        "lanes and, with --kind detail, device streams, communication ops, HCCL planes and host activity.",
        "examples:\n"
        "  trace2perfetto PROFILER_DIR                    summary of every rank -> PROFILER_DIR.pftrace\n"
        "  trace2perfetto convert PROFILER_DIR            the same\n"
        "  trace2perfetto PROFILER_DIR --ranks 0,1 --kind summary -o job.pftrace\n"
        "  trace2perfetto PROFILER_DIR --kind detail --graphs 2 -o graph2.json.gz\n"
        "  trace2perfetto PROFILER_DIR -o - | gzip > job.pftrace.gz\n"
        "  trace2perfetto PROFILER_DIR --kind detail --steps 5-8 --max-size 100M -o steps5-8.pftrace\n"
        "  trace2perfetto PROFILER_DIR --align collectives      hosts' clocks aligned by their collectives\n"
        "  trace2perfetto PROFILER_DIR -o job.pftrace --open    convert, then open it in ui.perfetto.dev\n\n"
        "Open the result at https://ui.perfetto.dev (Open trace file, or drag it in).",
        _convert_arguments, _run_convert, tuple(f.value for f in Format),
        "output format; default: from the output name (perfetto for '-'); one the name contradicts is an "
        "error", align=True, writes_file=True,
    ),
    Command(
        "info", "what a profile holds, and how big its trace gets",
        "Show what a profile holds before converting it: per rank its format, device, host, graphs and "
        "steps, streams and HCCL planes, record counts, input size, and an estimate of the summary and "
        "detail output sizes (to choose --steps and --ranks under the --max-size cap).",
        "examples:\n  trace2perfetto info PROFILER_DIR\n"
        "  trace2perfetto info PROFILER_DIR --format json | jq '.ranks[0].steps'",
        lambda parser: None, _run_info, ("table", "json"),
        "output on stdout; JSON follows schemas/info.schema.json",
    ),
    Command(
        "overlap", "compute/communication overlap per rank and step (µs), as torch_npu's step_trace_time.csv",
        "Print the compute/communication overlap of every step of every rank, in µs, computed from the "
        "device tasks and communication ops: the columns of torch_npu's step_trace_time.csv (Computing, "
        "Communication(Not Overlapped), Overlapped, Communication, Free, Stage = the step's device time, "
        "Bubble = time in receive ops, Communication(Not Overlapped and Exclude Receive), Preparing = step "
        "start to first device activity).",
        "example:\n  trace2perfetto overlap PROFILER_DIR --ranks 0-7 --format csv > overlap.csv\n\n"
        "The CSV has the columns of torch_npu's step_trace_time.csv, plus Rank and Graph.",
        _overlap_arguments, _run_overlap, ("table", "csv", "json"), "output on stdout",
    ),
    Command(
        "ops", "operator statistics per rank: count and time by op type, name, shapes or step",
        "Operator statistics of every rank, computed from its device tasks (communication left out): per "
        "op type and core type the count and the total, min, average and max time in µs, and the share of "
        "the rank's time (the columns of torch_npu's op_statistic.csv), or per op name, per type and input "
        "shapes, or per type and step. GPU kernels (Kineto, Paddle) by name, core type GPU; where Paddle "
        "ran no device work, its host operators (core type CPU). With --across, each key across the ranks: "
        "the spread of their totals and the slowest rank.",
        "examples:\n"
        "  trace2perfetto ops PROFILER_DIR                       per op type, as op_statistic.csv\n"
        "  trace2perfetto ops PROFILER_DIR --by name --ranks 0 --format csv > ops.csv\n"
        "  trace2perfetto ops PROFILER_DIR --by step --format json | jq '.[0]'\n"
        "  trace2perfetto ops PROFILER_DIR --across              per op type across ranks\n\n"
        "The JSON output is described by schemas/ops.schema.json.",
        _ops_arguments, _run_ops, ("table", "csv", "json"), "output on stdout",
    ),
    Command(
        "memory", "device memory per rank and component: peaks, what holds them, every allocation",
        "Device memory of every rank, per component as the profiler names it (PTA: torch_npu's "
        "allocator, GE: the graph engine's, PTA+GE: their sum, APP: the application as the driver sees "
        "it): the peak of allocated, reserved and active memory in MB, when the component peaked, and the "
        "largest allocations alive then; or, with --allocations, every allocation of an operator. "
        "From memory_record.csv and operator_memory.csv (or the database's MEMORY_RECORD, OP_MEMORY, "
        "NPU_OP_MEM and NPU_MEM), PyTorch's [memory] events (GPU 0, CPU; named '(since the trace began)' "
        "where only each event's Bytes are recorded: a running sum, relative) and host_info's host memory "
        "(Host); the whole collection counts (--steps and --graphs do not apply). "
        "Convert with --kind detail to see the same counters and allocations in the timeline.",
        "examples:\n"
        "  trace2perfetto memory PROFILER_DIR                    peaks per rank and component\n"
        "  trace2perfetto memory PROFILER_DIR --allocations --ranks 0 --format csv > allocations.csv\n"
        "  trace2perfetto memory PROFILER_DIR --format json | jq '.[] | select(.Component == \"PTA\")'\n\n"
        "The JSON output is described by schemas/memory.schema.json.",
        _memory_arguments, _run_memory, ("table", "csv", "json"), "output on stdout",
    ),
    Command(
        "diff", "what changed from one run to another: per step phase, op type or op name, with a CI gate",
        "Compare two runs (a new CANN or driver, a code change, GPUs against NPUs) per step phase (step "
        "time, Computing, Communication not overlapped, Free, Preparing), op type, op name or communication "
        "op type and group: each run's "
        "figures over its steps, the delta NEW - BASE and whether it is significant (beyond either run's "
        "step-to-step noise), largest regression first. Across formats op names are matched by family "
        "(converters/analyses/op_families.json); what stayed unmatched is said. To compare a GPU run "
        "with an NPU run of one model, --by op matches the kernels by the framework op that launched "
        "them (the same aten:: op on both, whatever its kernels are called).",
        "examples:\n  trace2perfetto diff BASE_DIR NEW_DIR --by type --base-ranks 0 --new-ranks 0\n"
        "  trace2perfetto diff GPU_RUN/ NPU_RUN/ --by op    kernels by the torch op that launched them\n"
        "  trace2perfetto diff BASE_DIR NEW_DIR --fail-above 5 -q || echo slower\n"
        "  trace2perfetto diff BASE_DIR NEW_DIR -o cmp.pftrace    both runs, step-aligned, in one trace\n\n"
        "The JSON output is described by schemas/diff.schema.json.",
        _diff_arguments, _run_diff, ("table", "csv", "json"), "output on stdout", inputs=_two_profiles,
        selects=False,
    ),
    Command(
        "comm", "communication per op and rank, collectives across ranks, slow ranks, host clocks",
        "Communication per op and rank, with the figures of torch_npu's communication.json (Elapse, "
        "Transit, Wait, Synchronization and Idle time from the HCCL plane tasks, and transit size, time "
        "and bandwidth per transport), each collective matched across its ranks (arrival skew, the rank "
        "that came last, each rank's wait for it), and each host's clock offset as the collectives' ends "
        "show it. Times in ms.",
        "examples:\n"
        "  trace2perfetto comm PROFILER_DIR                      every op of every rank\n"
        "  trace2perfetto comm PROFILER_DIR --slow-ranks          ranks by the wait they cause\n"
        "  trace2perfetto comm PROFILER_DIR --matrix              the link matrix, slowest links\n"
        "  trace2perfetto comm PROFILER_DIR --format csv > comm.csv\n\n"
        "The JSON output is described by schemas/comm.schema.json (--matrix: "
        "schemas/comm_matrix.schema.json).",
        _comm_arguments, _run_comm, ("table", "csv", "json"), "output on stdout", align=True,
    ),
    Command(
        "critical", "per step, the critical path across ranks and what fixing each piece would save",
        "Per step, the chain of work across ranks that set the step's time, and what changing each piece "
        "would save. Each rank's device work is a dependency graph: its tasks in stream order, each after "
        "the latest work that ended before it began on the rank and after the host call that launched it; "
        "each collective completes on every participant once the last one arrived; a receive once its "
        "send arrived. The critical path is the longest path from the step's first start to its last end: "
        "segments in time order adding up to the step, each on one rank: compute (a device task), "
        "communication (a collective after its last participant arrived: its transit), wait (in a "
        "collective after its last profiled participant arrived: for participants its tasks name outside "
        "the kept ranks; else its handshake), idle (the device waiting for nothing recorded), host (a host "
        "launch the device waited for, or the host's time between launches). What-ifs, each the same graph "
        "recomputed with the same observed gaps: late_arrival (the last rank at a collective arrives with "
        "the one before it), op_type (every op of a type on the path 10% shorter on that rank), "
        "overlap_comm (a communication op on the path fully hidden on that rank); only those that save "
        "time, largest first.",
        "examples:\n"
        "  trace2perfetto critical PROFILER_DIR                   one line per step\n"
        "  trace2perfetto critical PROFILER_DIR --steps 50 --format json | jq '.[0].what_if[:3]'\n"
        "  trace2perfetto critical PROFILER_DIR --align collectives --format csv > critical.csv\n\n"
        "The JSON output is described by schemas/critical.schema.json.",
        lambda parser: None, _run_critical, ("table", "csv", "json"), "output on stdout", align=True,
    ),
    Command(
        "pipeline", "pipeline parallelism: each micro-batch per stage, the schedule, the bubble, p2p waits",
        "Per step and stage (rank) of a pipeline-parallel job: each micro-batch's forward and backward "
        "(start, end, compute), found from the framework's own micro-batch ranges where the trace holds "
        "them, else from the order and peers of the sends and receives (no user ranges needed); the "
        "schedule it shows (GPipe, 1F1B, or unknown with the order seen); the stage's bubble (step time "
        "minus its compute) beside the ideal (p-1)/(m+p-1); each send and receive split into its wait for "
        "the peer's matching op and its transfer. Compute is host time: the records of a CPU job are its "
        "compute; on a GPU or NPU job, the host's launches.",
        "examples:\n"
        "  trace2perfetto pipeline PROFILER_DIR                  per stage and step\n"
        "  trace2perfetto pipeline PROFILER_DIR --by microbatch  each forward and backward\n"
        "  trace2perfetto pipeline PROFILER_DIR --by p2p --format csv > p2p.csv\n\n"
        "The JSON output is described by schemas/pipeline.schema.json.",
        _pipeline_arguments, _run_pipeline, ("table", "csv", "json"), "output on stdout",
    ),
    Command(
        "report", "one HTML page (or JSON): where the time goes, and the bottleneck",
        "One self-contained HTML page (no network needed to view it) on where the time goes: step time "
        "per rank and step, the breakdown of each step (Computing, Communication not overlapped, Free, the "
        "profiler's phases), the diagnosis of each step and rank (data loading, host, device, communication "
        "bound, straggler) with its evidence and the command for its timeline, the slowest ranks and "
        "collectives, the top device ops, and each rank's device time by op type. Or the same numbers as "
        "JSON.",
        "examples:\n"
        "  trace2perfetto report PROFILER_DIR -o report.html\n"
        "  trace2perfetto report PROFILER_DIR --ranks 0-7 --steps 10-20 -o report.html\n"
        "  trace2perfetto report PROFILER_DIR --format json -o - | jq .verdict\n\n"
        "The JSON output is described by schemas/report.schema.json.",
        _report_arguments, _run_report, ("html", "json"),
        "default: from the output name (.json: json), else html; one the name contradicts is an error",
        align=True, writes_file=True,
    ),
)}
CONVERT = COMMANDS["convert"]


def _top_help() -> str:
    """``trace2perfetto --help``: the subcommands, one line each, then convert's options."""
    width = max(map(len, COMMANDS))
    lines = "\n".join(f"  {c.name:<{width}}  {c.summary}" for c in COMMANDS.values())
    one = ",".join(n for n, c in COMMANDS.items() if n != "convert" and c.inputs is _one_profile)
    usage = ("usage: trace2perfetto [convert] PROFILER_DIR [options]\n"
             f"       trace2perfetto {{{one}}} PROFILER_DIR [options]\n"
             "       trace2perfetto diff BASE NEW [options]\n\n"
             f"commands (trace2perfetto COMMAND --help for each one's options):\n{lines}\n\n")
    convert_help = _parser(CONVERT, "trace2perfetto").format_help()
    return usage + convert_help[convert_help.index("\n\n") + 2:]  # its own usage line said above


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code (0 done, 1 broken input or internal error, 2 usage,
    130 interrupted)."""
    if argv is None:  # this process's own command: what it has loaded lives until it exits, so the
        gc.freeze()  # collector may leave it alone, above all at the exit (5-10 ms of a small command)
    argv = sys.argv[1:] if argv is None else argv
    reuse_freed_memory()
    if argv[:1] in (["-h"], ["--help"]):
        print(_top_help(), end="")
        return 0
    command = COMMANDS.get(argv[0]) if argv else None
    rest = argv[1:] if command else argv
    command = command or CONVERT
    prog = "trace2perfetto" + ("" if command is CONVERT and rest is argv else f" {command.name}")
    try:
        args = _parser(command, prog).parse_args(rest)
    except SystemExit as e:
        return int(e.code or 0)
    args.command_line = as_text(shlex.join(["trace2perfetto", *argv]))  # the path may not be UTF-8
    return _boundary(command, args)
