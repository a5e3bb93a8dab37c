"""The pipeline: discover → read → select → analyse → layout → write (design §1)."""

from __future__ import annotations

import bisect
import dataclasses
import os
import pickle
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import NamedTuple

from . import comm, overlap
from ._overlap import slices as overlap_as_slices
from ._overlap import step_intervals
from .budget import (
    DEFAULT_MAX_BYTES,
    DETAIL,
    SUMMARY,
    Chunk,
    Kept,
    Sink,
    Spool,
    SpoolFile,
    assemble,
    interest_order,
    spooled,
)
from .discover import discover
from .errors import Diagnostics, Trace2PerfettoError, UsageError
from .executor import LOCAL, Where, each_rank
from .layout import GROUP_ORDER, Lanes, Track, by_lane_and_start
from .model import Layer, RankInfo, Sample, Slice, Step, StepRecords, step_label
from .output import inputs_of, open_output, refuse_inputs
from .readers import READERS, host_info
from .select import check_graphs, check_steps, format_ids, select_ranks
from .writers.chrome_json import ChromeJsonEncoder, wall_origin
from .writers.perfetto import PerfettoEncoder

CUT_GROUP = "Trace cut"


class StrictError(Trace2PerfettoError):
    """``--strict``: the input needed recovery, so nothing was written. Exit code 1."""

    def __init__(self, warnings: list[str]) -> None:
        self.warnings = warnings
        super().__init__("--strict: " + "; ".join(warnings) + "; nothing written")


class Kind(str, Enum):
    """How much to write: the cluster overview, or everything."""

    SUMMARY = "summary"  # step trace and overlap lanes
    DETAIL = "detail"  # plus device streams, communication ops and planes, host activity


class Format(str, Enum):
    PERFETTO = "perfetto"
    JSON = "json"


_SUFFIXES = {".pftrace": Format.PERFETTO, ".perfetto-trace": Format.PERFETTO,
             ".perfetto": Format.PERFETTO, ".pb": Format.PERFETTO, ".json": Format.JSON}


@dataclass(frozen=True)
class Options:
    """What to convert; every field has the CLI's default. Ranks, graphs and steps: any iterable
    (kept as a frozenset), None for all."""

    ranks: frozenset[int] | None = None
    graphs: frozenset[int] | None = None
    steps: frozenset[int] | None = None
    kind: Kind = Kind.SUMMARY
    merge_graphs: bool = False
    host_level: int = 0  # host stages of lower levels are left out (1: the users' stages only)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))
        for name in ("ranks", "graphs", "steps"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, frozenset(getattr(self, name)))


@dataclass
class Result:
    """What a conversion wrote, for the summary line and for callers."""

    output: str
    format: Format
    ranks: list[int] = field(default_factory=list)
    steps: int = 0
    slices: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    cut: str | None = None  # what the size cap kept, and how to see the rest; None: all written


def convert(
    path: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    *,
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    kind: Kind | str = Kind.SUMMARY,
    fmt: Format | str | None = None,
    merge_graphs: bool = False,
    host_level: int = 0,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    strict: bool = False,
    align: str | None = None,
    where: Where = LOCAL,
    progress: Progress | None = None,
) -> Result:
    """Convert the profile under ``path`` into one Perfetto or Chrome JSON trace.

    ``output`` is a file name (``.pftrace``, ``.json``, either with ``.gz``), ``"-"`` for
    stdout, or None for ``<input name>.pftrace`` beside the input. The file appears only when
    complete: it is written under a temporary name and renamed. At most ``max_bytes`` are
    written (None: no limit); what does not fit is chosen by policy and reported in
    ``Result.cut`` and by a marker inside the trace (see ``budget``). ``strict`` turns the
    warnings about the input (a cut-off file, skipped events) into an error, and nothing is
    written. ``host_level`` 1 keeps only the host stages that MindSpore marks for users.
    ``align="collectives"`` moves each host's times by its clock offset as estimated from the ends
    of the collectives it shares with other hosts (``comm.clock_offsets``; read once more first).
    ``where``: the ranks' work runs on this machine's cores (default) or on a Dask cluster, and a
    rank that cannot be read fails the conversion or is left out (``executor.Where``).
    ``progress`` is called as each rank is read: (bytes read, of total, rank).

    Example::

        convert("PROF_dir", "job.pftrace", ranks=[0, 1], kind="detail")

    Raises:
        UsageError: bad options, unknown ranks or graphs, nothing recognisable under ``path``.
        InputError: an input file broken beyond recovery, or, with ``strict``, any warning.
    """
    started = time.perf_counter()
    options = Options(ranks=ranks, graphs=graphs, steps=steps, kind=kind, merge_graphs=merge_graphs,
                      host_level=host_level)
    target = _default_output(Path(path)) if output is None else str(output)
    out_format = _output_format(target, fmt)
    found = Diagnostics()
    infos = select_ranks(discover(Path(path), found), options.ranks)
    check_graphs(infos, options.graphs)
    inputs = inputs_of(path, infos)
    refuse_inputs(target, inputs)  # now, not after reading: the same check guards the opening
    shifts = _aligned(infos, options, found, where) if _align(align) else {}
    origin = wall_origin(infos)
    spool = Spool()
    try:
        # detail past the cap is never encoded (a rank's alone could not fit); compressed, it might
        limit = max_bytes if options.kind is Kind.DETAIL and not target.endswith(".gz") else None
        diag, interest = _encode_ranks(infos, options, out_format, origin, spool, where, progress, shifts,
                                       limit)
        diag.merge(found)
        check_steps(options.steps, diag)
        if not spool.chunks:  # not one slice or counter value
            diag.warn("empty_output", f"{path}: nothing to draw in {options.kind.value} from rank "
                      f"{format_ids(r.rank for r in infos)}" + ("" if options.kind is Kind.DETAIL else
                                                                "; --kind detail may show host activity"))
        if strict and diag:
            raise StrictError(diag.messages())
        encoder = _encoder(out_format, origin)
        with open_output(target, inputs) as out:
            sink = Sink(out, max_bytes, compress=target.endswith(".gz"))
            kept = assemble(sink, spool, lambda ranks: encoder.header([i for i in infos if ranks is None
                                                                       or i.rank in ranks]),
                            encoder.footer, lambda kept: _cut_marker(encoder, _first_kept(infos, kept), kept),
                            None if options.ranks is not None or len(infos) < 2 else interest)
    finally:
        spool.close()
    return Result(
        output=target, format=out_format, ranks=[r.rank for r in infos if r.rank not in kept.ranks_left_out],
        steps=sum(step is not None for step in kept.summary_steps), slices=kept.slices,
        bytes_written=sink.written, seconds=time.perf_counter() - started,
        warnings=diag.messages() + ([f"{kept.out_of_order} chunks of ranks whose step ids run in "
                                     "another order than the others' were left out"]
                                    if kept.out_of_order else []),
        cut=None if kept.complete else f"{kept.describe(every_rank=False)}; {kept.hint()}",
    )


@dataclass(frozen=True)
class StepOverlap:
    """One row of the overlap report: one step of one rank, in ns, with the columns of torch_npu's
    ``step_trace_time.csv`` and its definitions (design §5). None: unknown for this input (no
    device tasks recorded, or no host step start for Preparing), never a made-up zero."""

    rank: int
    graph: int | None
    step: int | None
    computing_ns: int | None
    not_overlapped_ns: int | None
    overlapped_ns: int | None
    communication_ns: int
    free_ns: int | None
    stage_ns: int | None  # the step's device span minus Bubble
    bubble_ns: int  # time in receive ops (pipeline bubbles): their durations added up
    not_overlapped_excluding_receive_ns: int | None  # Communication (not overlapped) - Bubble
    preparing_ns: int | None  # from the host's step start to the first compute or communication


def overlap_report(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
    each: Callable[[list[StepOverlap]], None] | None = None,
) -> list[StepOverlap]:
    """The compute/communication overlap of every kept step of every kept rank; what needed
    recovery in the input is added to ``diag``. ``where``: the ranks' work runs on this machine,
    or on a Dask cluster (``executor.Where``). ``each``: the rows are handed to it rank by rank, in
    rank order, as soon as they are known, and not kept (tables of thousands of ranks in flat
    memory); the list returned is then empty.

    Raises:
        UsageError: unknown ranks or graphs, nothing recognisable under ``path``.
        InputError: an input file broken beyond recovery.
    """
    options = Options(ranks=ranks, graphs=graphs, steps=steps)
    diag = Diagnostics() if diag is None else diag
    infos = select_ranks(discover(Path(path), diag), options.ranks)
    check_graphs(infos, options.graphs)
    kept: list[StepOverlap] = []
    hand = each or kept.extend
    waiting: dict[int, list[StepOverlap]] = {}  # ranks done before a lower one
    handed = 0

    def collect(index: int, result: tuple[list[StepOverlap], Diagnostics]) -> None:
        nonlocal handed
        waiting[index] = result[0]
        diag.merge(result[1])
        while handed in waiting:
            hand(waiting.pop(handed))
            handed += 1

    each_rank(_overlap_rows, [(info, options) for info in infos], [info.rank for info in infos], collect,
              where, diag)
    for index in sorted(waiting):  # after a rank left out as unreadable
        hand(waiting.pop(index))
    check_steps(options.steps, diag)
    return kept


def _overlap_rows(job: tuple[RankInfo, Options]) -> tuple[list[StepOverlap], Diagnostics]:
    """One rank's rows of the overlap report. Runs in a worker process."""
    info, options = job
    diag = Diagnostics()
    return [overlap_row(batch) for batch in read_profile([info], options, diag)], diag


def overlap_row(batch: StepRecords) -> StepOverlap:
    """One step's row of the overlap report, as torch_npu's TraceStepTimeParser defines it."""
    o = step_overlap(batch)
    bubble = sum(s.dur_ns for s in batch.slices if s.layer is Layer.COMM_OP and is_receive(s.name))
    if not batch.has_device:
        return StepOverlap(batch.rank, batch.graph, batch.step_id, None, None, None, o.communication_ns,
                           None, None, bubble, None, None)
    lanes = [lane for lane in (o.computing, o.communication, o.free) if lane]
    span = max(lane[-1][1] for lane in lanes) - min(lane[0][0] for lane in lanes) if lanes else 0
    first = min((lane[0][0] for lane in (o.computing, o.communication) if lane), default=None)
    step = batch.step
    preparing = first - step.start_ns if step and step.host_start and first is not None else None
    return StepOverlap(
        batch.rank, batch.graph, batch.step_id, o.computing_ns, o.not_overlapped_ns, o.overlapped_ns,
        o.communication_ns, o.free_ns, span - bubble, bubble, o.not_overlapped_ns - bubble, preparing,
    )


def is_receive(op_name: str) -> bool:
    """A receive op, whose time is a pipeline bubble: torch_npu counts ``hcom_receive*`` only (not
    ``hcom_batchSendRecv``); MindSpore names them ``Receive-op12``."""
    name = op_name.lower()
    return name.startswith(("hcom_receive", "receive"))


def _encoder(out_format: Format, origin_ns: int | None, rank_index: int = -1,
             first_tid: int = 1) -> PerfettoEncoder | ChromeJsonEncoder:
    """The writer's encoder; a JSON rank on its own clock (``origin_ns`` None) takes its own origin."""
    if out_format is Format.PERFETTO:
        return PerfettoEncoder(rank_index)
    return ChromeJsonEncoder(origin_ns, first_tid)


def _encode_ranks(
    infos: list[RankInfo], options: Options, out_format: Format, origin_ns: int, spool: Spool,
    where: Where = LOCAL, progress: Progress | None = None, shifts: dict[int, int] | None = None,
    detail_limit: int | None = None,
) -> tuple[Diagnostics, tuple[list[int], str]]:
    """Encode every rank into the spool, ranks in parallel: they are independent until written,
    except for their communication ops, which are drawn last, once matched across ranks. Workers
    on other machines (``where.remote``) send their spool file back with their result, and it is
    spooled here as it arrives. Ranks left out as unreadable are taken out of ``infos``. Returns
    what needed recovery, and the ranks in order of interest for the size cap (with its policy).
    A rank's detail chunks after the first ``detail_limit`` bytes of them are not encoded (see
    ``_encode_into``)."""
    jobs = [(index, info, options, out_format, origin_ns, None if where.remote else spool.new_file(),
             (shifts or {}).get(info.rank, 0), detail_limit) for index, info in enumerate(infos)]
    sizes = [input_bytes(info) for info in infos]
    done_bytes = 0
    diag = Diagnostics()
    held: list[RankOps | None] = [None] * len(infos)

    def collect(index: int, result: tuple[list[Chunk], Diagnostics, RankOps, bytes | None]) -> None:
        nonlocal done_bytes
        chunks, found, ops, data = result
        if data is not None:  # from another machine: into this one's spool
            path = spool.adopt(data)
            chunks = [dataclasses.replace(c, path=path) for c in chunks]
            ops = ops._replace(path=path)
        spool.chunks.extend(chunks)
        diag.merge(found)
        held[index] = ops
        done_bytes += sizes[index]
        if progress is not None:
            progress(done_bytes, sum(sizes), infos[index].rank)

    skipped = each_rank(_encode_rank, jobs, [info.rank for info in infos], collect, where, diag)
    for index in reversed(skipped):
        del infos[index], held[index]
    caused = _encode_collectives(infos, held, options, out_format, origin_ns, spool, len(jobs))
    step_ns = {info.rank: mine.step_ns / mine.step_count for info, mine in zip(infos, held, strict=True)
               if mine.step_count}
    return diag, interest_order([info.rank for info in infos], step_ns, caused)


class RankOps(NamedTuple):
    """Where one rank's communication op slices lie, step by step, held back from its chunks in its
    spool file (their args and arrows need the other ranks). ``origin_ns``: the origin of its JSON
    chunks."""

    origin_ns: int | None
    path: str
    steps: list[tuple[int | None, int | None, int, int, int]]  # graph, step, chunk start, offset, length
    step_ns: int = 0  # the steps' time added up (for the size cap's order of interest)
    step_count: int = 0


_COLLECTIVE_SEQUENCES = 1000  # sequence numbers of the ops' chunks, apart from the rank's own
_COLLECTIVE_TIDS = 500_000  # and their JSON thread numbers


class _OpsWriter:
    """Encodes one rank's communication ops and Wait lane, step by step, on sequences of their own
    (its encoder id ``encoder_id`` is unused by the rank's own encoder)."""

    def __init__(self, rank: int, out_format: Format, origin_ns: int | None, encoder_id: int) -> None:
        self.rank = rank
        self.encoder = _encoder(out_format, origin_ns, encoder_id, _COLLECTIVE_TIDS)
        self.lanes = Lanes()
        self.sequences: dict[tuple, int] = {}

    def add(self, file: SpoolFile, step: int | None, graph: int | None, start_ns: int, part: str,
            slices: list[Slice]) -> None:
        if slices:
            key = (part, graph, step is None)
            sequence = _COLLECTIVE_SEQUENCES + self.sequences.setdefault(key, len(self.sequences))
            events = self.lanes.place(sorted(slices, key=by_lane_and_start))
            data = self.encoder.chunk(sequence, events)
            file.add(step, start_ns, self.rank, part, data, len(slices), sequence)


def _encode_collectives(infos: list[RankInfo], held: list[RankOps], options: Options, out_format: Format,
                        origin_ns: int, spool: Spool, encoders_before: int) -> dict[int, int]:
    """Step by step (one step's ops of every rank in memory), match the ops across ranks, then
    spool per rank the op slices (detail) with their instance's skew, last rank and arrows, and
    the Wait lane (summary). ``encoders_before``: the rank encoders made so far (their ids are
    taken). Returns the wait each rank caused the others, in ns."""
    caused: dict[int, int] = defaultdict(int)
    # step -> rank index -> that rank's parts of the step (one per graph): ranks of one job may
    # number their graphs differently (msprof-2rank: model 2 on one rank, 0 on the other)
    parts_of: dict[int | None, dict[int, list[tuple]]] = {}
    for index, mine in enumerate(held):
        for graph, step, start_ns, offset, length in mine.steps:
            part = (graph, start_ns, mine.path, offset, length)
            parts_of.setdefault(step, {}).setdefault(index, []).append(part)
    order = sorted(parts_of, key=lambda step: min(p[1] for parts in parts_of[step].values() for p in parts))
    writers = [_OpsWriter(info.rank, out_format, origin_ns if info.wall_clock else mine.origin_ns,
                          encoders_before + index)
               for index, (info, mine) in enumerate(zip(infos, held, strict=True))]
    with SpoolFile(spool.new_file()) as file:
        for step in order:
            parts = {index: [(graph, start_ns, pickle.loads(spool.unstash(path, offset, length)))
                             for graph, start_ns, path, offset, length in found]
                     for index, found in parts_of[step].items()}
            ops = {index: [comm.light_ops(infos[index].rank, graph, step, slices)
                           for graph, _, slices in found] for index, found in parts.items()}
            instances = comm.match({infos[i].rank: [op for part in mine for op in part]
                                    for i, mine in ops.items()})
            for inst in instances:
                caused[inst.last_rank] += sum(inst.wait_ns(rank) for rank in inst.starts)
            waiters = comm.waiting_ranks(instances)
            for index, found in parts.items():
                for (graph, start_ns, slices), step_ops in zip(found, ops[index], strict=True):
                    writers[index].add(file, step, graph, start_ns, SUMMARY, comm.wait_slices(step_ops))
                    if options.kind is Kind.DETAIL:
                        writers[index].add(file, step, graph, start_ns, DETAIL,
                                           comm.annotated(slices, step_ops, waiters))
    spool.chunks.extend(file.chunks)
    return caused


Progress = Callable[[int, int, int], None]  # (input bytes read, of total, rank just finished)


def input_bytes(info: RankInfo) -> int:
    """The size of what a rank's reader reads (files, or all files in a folder)."""
    total = 0
    for source in info.source_paths + info.host_paths:
        if source.is_dir():
            total += sum(p.stat().st_size for p in source.iterdir() if p.is_file())
        elif source.is_file():
            total += source.stat().st_size
    return total


def _encode_rank(job: tuple) -> tuple[list[Chunk], Diagnostics, RankOps, bytes | None]:
    """Read one rank's kept steps and spool their summary and detail chunks, one packet
    sequence per part and graph; hand back its communication ops. Runs in a worker process; with
    no spool file given (a worker on another machine), its own spool's bytes go back too."""
    *head, path, shift_ns, detail_limit = job
    return spooled(lambda own: _encode_into(*head, own, shift_ns, detail_limit), path)


def _encode_into(index: int, info: RankInfo, options: Options, out_format: Format, origin_ns: int, path: str,
                 shift_ns: int, detail_limit: int | None = None) -> tuple[list[Chunk], Diagnostics, RankOps]:
    """One rank's chunks into the spool file at ``path``. Once its detail chunks pass
    ``detail_limit`` bytes, later ones are placed but not encoded: the cap writes detail step by
    step in time order, all ranks of a step or none, so none of them could be written. They are
    filed as chunks that never fit (``SpoolFile.add_unwritten``), and what encoding them would
    have numbered is numbered (``reserve``), so every other chunk is the same byte for byte."""
    diag, lanes = Diagnostics(), Lanes()
    detail_bytes = 0
    encoder = _encoder(out_format, origin_ns if info.wall_clock else None, index)
    sequences: dict[tuple[str, int | None, bool], int] = {}
    held: list[tuple[int | None, int | None, int, int, int]] = []
    step_ns = step_count = 0
    with SpoolFile(path) as spool:
        for batch in read_profile([info], options, diag):
            if shift_ns:
                batch = shifted(batch, shift_ns)
            if batch.step is not None:
                step_ns, step_count = step_ns + batch.step.end_ns - batch.step.start_ns, step_count + 1
            summary, detail = _parts(sorted(records_to_write(batch, options), key=by_lane_and_start))
            ops = [s for s in batch.slices if s.layer is Layer.COMM_OP]
            if ops:  # without args in summary, where they are not drawn
                kept = ops if options.kind is Kind.DETAIL else [Slice(*s[:6]) for s in ops]
                held.append((batch.graph, batch.step_id, batch.start_ns,
                             *spool.stash(pickle.dumps(kept, pickle.HIGHEST_PROTOCOL))))
            samples = batch.samples if options.kind is Kind.DETAIL else []
            for part, mine, values in ((SUMMARY, summary, ()), (DETAIL, detail, samples)):
                if mine or values:
                    # the pseudo step (no step trace) is a sequence apart: it has no place in time
                    key = (part, batch.graph, batch.step_id is None)
                    sequence = sequences.setdefault(key, len(sequences))
                    events = lanes.place(mine, values)
                    if part is DETAIL and detail_limit is not None and detail_bytes > detail_limit:
                        encoder.reserve(sequence, events)
                        spool.add_unwritten(batch.step_id, batch.start_ns, batch.rank, part, len(mine),
                                            sequence)
                        continue
                    data = encoder.chunk(sequence, events)
                    detail_bytes += len(data) if part is DETAIL else 0
                    spool.add(batch.step_id, batch.start_ns, batch.rank, part, data, len(mine), sequence)
    origin = getattr(encoder, "origin_ns", None)
    return spool.chunks, diag, RankOps(origin, path, held, step_ns, step_count)


def _parts(ordered: list[Slice]) -> tuple[list[Slice], list[Slice]]:
    """Slices sorted by ``by_lane_and_start`` (layer first) as (summary, detail) in that order,
    without the communication ops (the driver encodes them, matched across ranks)."""
    def first(layer: Layer) -> int:
        return bisect.bisect_left(ordered, layer.order, key=_layer_order)

    ops, after_ops = first(Layer.COMM_OP), first(_AFTER_OPS)
    summary_end = first(_FIRST_DETAIL)
    return ordered[:summary_end], ordered[summary_end:ops] + ordered[after_ops:]


def _layer_order(s: Slice) -> int:
    return s.layer.order


_FIRST_DETAIL = min((layer for layer in Layer if not layer.is_summary), key=lambda layer: layer.order)
_AFTER_OPS = next(layer for layer in Layer if layer.order == Layer.COMM_OP.order + 1)
assert all(layer.is_summary == (layer.order < _FIRST_DETAIL.order) for layer in Layer)  # summary first


def shifted(batch: StepRecords, shift_ns: int) -> StepRecords:
    """The step with every time moved by ``shift_ns`` (a host's clock offset taken off)."""
    step = batch.step
    if step is not None:
        step = Step(step.graph, step.step, step.start_ns + shift_ns, step.end_ns + shift_ns, step.host_start)
    span = batch.device_span
    return StepRecords(
        batch.rank, batch.graph, batch.step_id, step,
        [Slice(*s[:4], s.start_ns + shift_ns, *s[5:]) for s in batch.slices],
        [Sample(v.rank, v.lane, v.start_ns + shift_ns, v.value) for v in batch.samples],
        batch.has_device, None if span is None else (span[0] + shift_ns, span[1] + shift_ns),
        batch.ops_recorded,
    )


ALIGNMENTS = ("collectives",)


def _align(align: str | None) -> bool:
    if align not in (None, "none", *ALIGNMENTS):
        raise UsageError(f"--align: {align!r} is not one of none, {', '.join(ALIGNMENTS)}")
    return align in ALIGNMENTS


def _aligned(infos: list[RankInfo], options: Options, diag: Diagnostics,
             where: Where = LOCAL) -> dict[int, int]:
    """Estimate each host's clock offset from the collectives (one summary read of every rank),
    say it in each rank's clock description, and return the shift per rank (ns to add)."""
    clocks = collective_clocks(infos, options, diag, where)
    shifts = {}
    for clock in clocks:
        for rank in clock.ranks:
            shifts[rank] = -clock.offset_ns
    own_clocks = [info.rank for info in infos if info.rank in shifts and not info.wall_clock]
    for i, info in enumerate(infos):
        if info.rank in shifts:  # on the reference rank's clock now, one timebase with the others
            infos[i] = dataclasses.replace(
                info, start_ns=None if info.start_ns is None else info.start_ns + shifts[info.rank],
                clock=f"{info.clock}; aligned by collectives: {shifts[info.rank] / 1000:+.3f} µs",
                wall_clock=True)
        else:
            diag.warn("not_aligned", f"rank {info.rank}: shares no collective with the host of rank "
                      f"{infos[0].rank}, so its clock was not aligned")
    if own_clocks:
        diag.warn("aligned", f"rank {format_ids(own_clocks)}: own clocks aligned to rank {infos[0].rank}'s "
                  "by their collectives (each rank's description says by how much)")
    return shifts


def collective_clocks(infos: list[RankInfo], options: Options, diag: Diagnostics,
                      where: Where = LOCAL) -> list[comm.HostClock]:
    """Each host's clock offset, estimated from the ends of the collectives of the kept steps."""
    found: dict[int, list[comm.OpComm]] = {}

    def collect(index: int, result: tuple[list[comm.OpComm], Diagnostics]) -> None:
        found[infos[index].rank] = result[0]
        diag.merge(result[1])

    summary = dataclasses.replace(options, kind=Kind.SUMMARY)
    each_rank(_light_ops, [(info, summary) for info in infos], [info.rank for info in infos], collect, where,
              diag)
    return comm.clock_offsets(comm.match(found), comm.host_names(infos))


def _light_ops(job: tuple[RankInfo, Options]) -> tuple[list[comm.OpComm], Diagnostics]:
    info, options = job
    diag = Diagnostics()
    ops = [op for batch in read_profile([info], options, diag)
           for op in comm.light_ops(batch.rank, batch.graph, batch.step_id,
                                    (s for s in batch.slices if s.layer is Layer.COMM_OP))]
    return ops, diag


def _first_kept(infos: list[RankInfo], kept: Kept) -> RankInfo:
    return next(info for info in infos if info.rank not in kept.ranks_left_out)


def _cut_marker(encoder, first: RankInfo, kept: Kept) -> bytes:
    track = Track(first.rank, CUT_GROUP, len(GROUP_ORDER), "size cap", 0)
    text = f"Trace cut by --max-size: {kept.describe()}"
    return encoder.marker(track, kept.first_left_out_ns or 0, text, {"how to see the rest": kept.hint()})


def read_profile(infos: list[RankInfo], options: Options, diag: Diagnostics) -> Iterator[StepRecords]:
    """The kept steps of every rank in ``infos``, rank by rank, each rank's in time order. The ids
    of the steps of the kept graphs go to ``diag.steps``, kept or not (``select.check_steps``)."""
    readers = {r.NAME: r for r in READERS}
    detail = options.kind is Kind.DETAIL
    for info in infos:
        steps = readers[info.format].read(info, diag, detail=detail)
        if detail and info.host_paths:
            steps = host_info.attach(steps, info, diag, min_level=options.host_level)
        for batch in steps:
            if options.graphs is not None and batch.graph not in options.graphs:
                continue
            if batch.step_id is not None:
                diag.steps.add(batch.step_id)
            if options.steps is None or batch.step_id in options.steps:
                yield batch


def records_to_write(batch: StepRecords, options: Options) -> list[Slice]:
    """One step's slices to draw: its step trace, its overlap lanes, and detail if asked."""
    if options.kind is Kind.DETAIL and not options.merge_graphs:
        out = batch.slices.copy()
    else:
        steps = [s for s in batch.slices if s.layer is Layer.STEP]
        out = [_merged_step(s, batch) for s in steps] if options.merge_graphs else steps
        if options.kind is Kind.DETAIL:
            out.extend(s for s in batch.slices if s.layer is not Layer.STEP)
    out.extend(overlap_slices(batch))
    return out


def overlap_slices(batch: StepRecords) -> list[Slice]:
    """The step's Computing / Communication / not overlapped / Free lanes as slices; only
    Communication where the input records no device tasks (the others are unknown there)."""
    lanes = step_overlap(batch).lanes()
    if not batch.has_device:
        lanes = {"Communication": lanes["Communication"]}
    return overlap_as_slices(lanes, batch.rank, Layer.OVERLAP, Slice)  # C: a summary makes millions


def step_overlap(batch: StepRecords) -> overlap.Overlap:
    """Overlap analysis of one step: compute tasks against communication ops (design §5)."""
    compute, ops, tasks, ops_seen = step_intervals(  # C: the unions of each kind, in one pass
        batch.slices, Layer.STREAM, Layer.COMM_OP, Layer.COMM_TASK, overlap.is_compute)
    if not ops_seen and not batch.ops_recorded:  # no op level recorded: plane tasks stand for communication
        ops = tasks
    return overlap.analyse_unions(compute, ops, batch.device_span)


def _merged_step(s: Slice, batch: StepRecords) -> Slice:
    name = step_label(batch.graph, batch.step_id) if s.name.startswith("Step ") else s.name
    return Slice(s.rank, s.layer, "Steps", name, s.start_ns, s.dur_ns, s.args)


def _default_output(path: Path) -> str:
    return str(path.resolve().parent / (path.resolve().name + ".pftrace"))


def _output_format(target: str, fmt: Format | str | None) -> Format:
    """The format asked for, else the one the output's name says (Perfetto for stdout).

    Raises:
        UsageError: the name says none and none is asked for, or they contradict each other
            (JSON written into a ``.pftrace``).
    """
    suffixes = [] if target == "-" else Path(target).suffixes
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    named = _SUFFIXES.get(suffixes[-1].lower()) if suffixes else None
    if fmt is not None:
        if named is not None and named is not Format(fmt):
            raise UsageError(f"--format {Format(fmt).value} contradicts the output's name {target!r} (a "
                             f"{named.value} file); change one of them")
        return Format(fmt)
    if target == "-":
        return Format.PERFETTO
    if named is None:
        raise UsageError(
            f"cannot tell the output format from {target!r}; name it .pftrace or .json "
            "(optionally .gz), or pass --format perfetto|json"
        )
    return named
