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
from .model import Layer, RankInfo, Sample, Slice, Step, StepKey, StepRecords, step_label
from .output import inputs_of, open_output, refuse_inputs
from .overlap import Interval, StepIntervals
from .readers import READERS, host_info
from .select import check_graphs, check_steps, format_ids, select_ranks
from .writers.chrome_json import EXACT_NS, ChromeJsonEncoder, Origins, Placed, inexact
from .writers.perfetto import PerfettoEncoder

CUT_GROUP = "Trace cut"
_DAY_NS = 86_400 * 10**9


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
    origins = Origins.from_starts(infos)
    spool = Spool()
    try:
        # detail past the cap is never encoded (a rank's alone could not fit); compressed, it might
        limit = max_bytes if options.kind is Kind.DETAIL and not target.endswith(".gz") else None
        def encode(origins: Origins, spool: Spool) -> tuple[Diagnostics, tuple[list[int], str], Placed]:
            return _encode_ranks(infos, options, out_format, origins, spool, found, where, progress, shifts,
                                 limit)

        diag, interest, placed = encode(origins, spool)
        origins, again = origins.settle(infos, placed)
        if again:  # JSON times before their origin, or ranks on wall time apart: once more
            spool.close()
            spool = Spool()
            diag, interest, placed = encode(origins, spool)
        if far := inexact(placed):
            diag.note("json_inexact", f"rank {format_ids(far)}: times more than {EXACT_NS // _DAY_NS} days "
                      "after the first, which Chrome JSON holds to the µs only (Perfetto reads them as "
                      "doubles); a .pftrace holds them to the ns")
        diag.merge(found)
        check_steps(options.steps, diag)
        if not spool.chunks:  # not one slice or counter value
            diag.warn("empty_output", f"{path}: nothing to draw in {options.kind.value} from rank "
                      f"{format_ids(r.rank for r in infos)}" + ("" if options.kind is Kind.DETAIL else
                                                                "; --kind detail may show host activity"))
        if strict and diag:
            raise StrictError(diag.messages())
        encoder = _encoder(out_format, origins.of(infos[0]) if infos else None)
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
        warnings=diag.messages(),
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
    """One step's row of the overlap report, as torch_npu's TraceStepTimeParser defines it; the
    profiler's own figures where they stand for the step's records."""
    o = step_overlap(batch)
    low, high = owned(batch.step, o.computing) or (None, None)
    bubble = sum(overlap.total_ns(overlap.clip([(s.start_ns, s.end_ns)], low, high)) for s in batch.slices
                 if s.layer is Layer.COMM_OP and is_receive(s.name))
    if batch.figures is not None:
        f = batch.figures
        communication = o.communication_ns if f.communication_ns is None else f.communication_ns
        return StepOverlap(batch.rank, batch.graph, batch.step_id, f.computing_ns, f.not_overlapped_ns,
                           f.overlapped_ns, communication, f.free_ns, f.stage_ns,
                           bubble if f.bubble_ns is None else f.bubble_ns,
                           f.not_overlapped_excluding_receive_ns, f.preparing_ns)
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


def step_span(batch: StepRecords) -> tuple[int, int, bool]:
    """(start, duration, whether it starts where the host began the step) of one step: its bounds;
    else, where the profiler's figures stand for it, its time from them (``StepFigures.step_ns``)
    from its first op (its start is not recorded); else its first to its last device work (and
    where Free is measured)."""
    if batch.step is not None:
        return batch.step.start_ns, batch.step.end_ns - batch.step.start_ns, batch.step.host_start
    o = step_overlap(batch)
    busy = o.computing + o.communication + ([batch.device_span] if batch.device_span else [])
    start = min((a for a, _ in busy), default=batch.start_ns)
    figures = batch.figures
    if figures is not None and figures.step_ns is not None:
        return start, figures.step_ns, figures.preparing_ns is not None
    return start, (max(b for _, b in busy) - start) if busy else 0, False


def is_receive(op_name: str) -> bool:
    """A receive op, whose time is a pipeline bubble: torch_npu counts ``hcom_receive*`` only (not
    ``hcom_batchSendRecv``); MindSpore names them ``Receive-op12``."""
    name = op_name.lower()
    return name.startswith(("hcom_receive", "receive"))


def _encoder(out_format: Format, origin_ns: int | None, rank_index: int = -1, first_tid: int = 1,
             wall_clock: bool = False) -> PerfettoEncoder | ChromeJsonEncoder:
    """The writer's encoder; for JSON, ``origin_ns`` None: its first chunk sets its origin, a whole
    hour for a rank on ``wall_clock``."""
    if out_format is Format.PERFETTO:
        return PerfettoEncoder(rank_index)
    return ChromeJsonEncoder(origin_ns, first_tid, whole_hours=wall_clock)


def _placed(encoder: PerfettoEncoder | ChromeJsonEncoder) -> tuple[int | None, tuple[int, int] | None]:
    """A JSON encoder's origin and the span of the events it placed; (None, None) for Perfetto."""
    return getattr(encoder, "origin_ns", None), getattr(encoder, "span", None)


def _encode_ranks(
    infos: list[RankInfo], options: Options, out_format: Format, origins: Origins, spool: Spool,
    left_out: Diagnostics, where: Where = LOCAL, progress: Progress | None = None,
    shifts: dict[int, int] | None = None, detail_limit: int | None = None,
) -> tuple[Diagnostics, tuple[list[int], str], Placed]:
    """Encode every rank into the spool, ranks in parallel: they are independent until written,
    except for their communication ops, which are drawn last, once matched across ranks. Workers
    on other machines (``where.remote``) send their spool file back with their result, and it is
    spooled here as it arrives. Ranks left out as unreadable are taken out of ``infos`` and named in
    ``left_out`` (a second encoding, which no longer reads them, must not forget them). Returns
    what needed recovery, the ranks in order of interest for the size cap (with its policy), and
    per rank the origin and the span of the events of each JSON encoder that placed any (for
    ``Origins.settle``). A rank's detail chunks after the first ``detail_limit`` bytes of them
    are not encoded (see ``_encode_into``)."""
    jobs = [(index, info, options, out_format, origins.of(info), None if where.remote else spool.new_file(),
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

    skipped = each_rank(_encode_rank, jobs, [info.rank for info in infos], collect, where, left_out)
    for index in reversed(skipped):
        del infos[index], held[index]
    writers = [_OpsWriter(info, out_format, mine.origin_ns, len(jobs) + index)
               for index, (info, mine) in enumerate(zip(infos, held, strict=True))]
    caused = _encode_collectives(infos, held, writers, options, spool)
    step_ns = {info.rank: mine.step_ns / mine.step_count for info, mine in zip(infos, held, strict=True)
               if mine.step_count}
    placed = {info.rank: [(origin, span) for origin, span in ((mine.origin_ns, mine.span),
                                                              _placed(writer.encoder)) if span is not None]
              for info, mine, writer in zip(infos, held, writers, strict=True)}
    return diag, interest_order([info.rank for info in infos], step_ns, caused), placed


class RankOps(NamedTuple):
    """Where one rank's communication op slices lie, step by step, held back from its chunks in its
    spool file (their args and arrows need the other ranks). ``origin_ns``: the origin of its JSON
    chunks, ``span`` the earliest start and latest end placed in them."""

    origin_ns: int | None
    path: str
    # graph, step (as the rank numbers them), the step's key, chunk start, offset, length
    steps: list[tuple[int | None, int | None, StepKey | None, int, int, int]]
    step_ns: int = 0  # the steps' time added up (for the size cap's order of interest)
    step_count: int = 0
    span: tuple[int, int] | None = None


_COLLECTIVE_SEQUENCES = 1000  # sequence numbers of the ops' chunks, apart from the rank's own
_COLLECTIVE_TIDS = 500_000  # and their JSON thread numbers


class _OpsWriter:
    """Encodes one rank's communication ops and Wait lane, step by step, on sequences of their own
    (its encoder id ``encoder_id`` is unused by the rank's own encoder)."""

    def __init__(self, info: RankInfo, out_format: Format, origin_ns: int | None, encoder_id: int) -> None:
        self.rank = info.rank
        self.encoder = _encoder(out_format, origin_ns, encoder_id, _COLLECTIVE_TIDS, info.wall_clock)
        self.lanes = Lanes()
        self.sequences: dict[tuple, int] = {}

    def add(self, file: SpoolFile, step: StepKey | None, graph: int | None, start_ns: int, part: str,
            slices: list[Slice]) -> None:
        if slices:
            key = (part, graph, step is None)
            sequence = _COLLECTIVE_SEQUENCES + self.sequences.setdefault(key, len(self.sequences))
            events = self.lanes.place(sorted(slices, key=by_lane_and_start))
            data = self.encoder.chunk(sequence, events)
            file.add(step, start_ns, self.rank, part, data, len(slices), sequence, graph)


def _encode_collectives(infos: list[RankInfo], held: list[RankOps], writers: list[_OpsWriter],
                        options: Options, spool: Spool) -> dict[int, int]:
    """Step by step (one step's ops of every rank in memory), match the ops across ranks, then
    spool per rank (by its writer) the op slices (detail) with their instance's skew, last rank
    and arrows, and the Wait lane (summary). Returns the wait each rank caused the others, in ns."""
    caused: dict[int, int] = defaultdict(int)
    # the step's key -> rank index -> that rank's parts of the step (graph, step as it numbers them)
    parts_of: dict[StepKey | None, dict[int, list[tuple]]] = {}
    for index, mine in enumerate(held):
        for graph, step, key, start_ns, offset, length in mine.steps:
            part = (graph, step, start_ns, mine.path, offset, length)
            parts_of.setdefault(key, {}).setdefault(index, []).append(part)
    # in key order, as each rank's own chunks: a graph's keys rise in the order its steps were read
    order = sorted(parts_of, key=lambda key: () if key is None else key)
    with SpoolFile(spool.new_file()) as file:
        for key in order:
            parts = {index: [(graph, step, start_ns, pickle.loads(spool.unstash(path, offset, length)))
                             for graph, step, start_ns, path, offset, length in found]
                     for index, found in parts_of[key].items()}
            ops = {index: [comm.light_ops(infos[index].rank, graph, step, key, slices)
                           for graph, step, _, slices in found] for index, found in parts.items()}
            instances = comm.match({infos[i].rank: [op for part in mine for op in part]
                                    for i, mine in ops.items()})
            for inst in instances:
                caused[inst.last_rank] += sum(inst.wait_ns(rank) for rank in inst.starts)
            waiters = comm.waiting_ranks(instances)
            for index, found in parts.items():
                for (graph, _, start_ns, slices), step_ops in zip(found, ops[index], strict=True):
                    writers[index].add(file, key, graph, start_ns, SUMMARY, comm.wait_slices(step_ops))
                    if options.kind is Kind.DETAIL:
                        writers[index].add(file, key, graph, start_ns, DETAIL,
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


def _encode_into(index: int, info: RankInfo, options: Options, out_format: Format, origin_ns: int | None,
                 path: str, shift_ns: int,
                 detail_limit: int | None = None) -> tuple[list[Chunk], Diagnostics, RankOps]:
    """One rank's chunks into the spool file at ``path``. Once its detail chunks pass
    ``detail_limit`` bytes, later ones are placed but not encoded: the cap writes detail step by
    step in time order, all ranks of a step or none, so none of them could be written. They are
    filed as chunks that never fit (``SpoolFile.add_unwritten``), and what encoding them would
    have numbered is numbered (``reserve``), so every other chunk is the same byte for byte."""
    diag, lanes = Diagnostics(), Lanes()
    detail_bytes = 0
    encoder = _encoder(out_format, origin_ns, index, wall_clock=info.wall_clock)
    sequences: dict[tuple[str, int | None, bool], int] = {}
    held: list[tuple[int | None, int | None, StepKey | None, int, int, int]] = []
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
                held.append((batch.graph, batch.step_id, batch.key, batch.start_ns,
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
                        spool.add_unwritten(batch.key, batch.start_ns, batch.rank, part, len(mine), sequence,
                                            batch.graph)
                        continue
                    data = encoder.chunk(sequence, events)
                    detail_bytes += len(data) if part is DETAIL else 0
                    spool.add(batch.key, batch.start_ns, batch.rank, part, data, len(mine), sequence,
                              batch.graph)
    origin, span = _placed(encoder)
    return spool.chunks, diag, RankOps(origin, path, held, step_ns, step_count, span)


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
    return dataclasses.replace(
        batch, step=step,
        slices=[Slice(*s[:4], s.start_ns + shift_ns, *s[5:]) for s in batch.slices],
        samples=[Sample(v.rank, v.lane, v.start_ns + shift_ns, v.value) for v in batch.samples],
        device_span=None if span is None else (span[0] + shift_ns, span[1] + shift_ns),
        intervals=None if batch.intervals is None else StepIntervals(
            *([(a + shift_ns, b + shift_ns) for a, b in lane] for lane in batch.intervals[:3]),
            batch.intervals.ops_seen),
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
                      f"{infos[0].rank}, so its clock was not aligned", f"rank {info.rank}")
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
           for op in comm.light_ops(batch.rank, batch.graph, batch.step_id, batch.key,
                                    (s for s in batch.slices if s.layer is Layer.COMM_OP))]
    return ops, diag


def _first_kept(infos: list[RankInfo], kept: Kept) -> RankInfo:
    return next(info for info in infos if info.rank not in kept.ranks_left_out)


def _cut_marker(encoder, first: RankInfo, kept: Kept) -> bytes:
    track = Track(first.rank, CUT_GROUP, len(GROUP_ORDER), "size cap", 0)
    text = f"Trace cut by --max-size: {kept.describe()}"
    return encoder.marker(track, kept.first_left_out_ns or 0, text, {"how to see the rest": kept.hint()})


def read_profile(infos: list[RankInfo], options: Options, diag: Diagnostics) -> Iterator[StepRecords]:
    """The kept steps of every rank in ``infos``, rank by rank, each rank's in time order, each
    with the key that names it across the job (``keyed``). The ids of the steps of the kept graphs
    go to ``diag.steps``, kept or not (``select.check_steps``)."""
    readers = {r.NAME: r for r in READERS}
    detail = options.kind is Kind.DETAIL
    for info in infos:
        steps = readers[info.format].read(info, diag, detail=detail)
        if detail and info.host_paths:
            steps = host_info.attach(steps, info, diag, min_level=options.host_level)
        for batch in carried_on(keyed(steps)):
            if options.graphs is not None and batch.graph not in options.graphs:
                continue
            if batch.step_id is not None:
                diag.steps.add(batch.step_id)
            if options.steps is None or batch.step_id in options.steps:
                yield batch


def keyed(steps: Iterable[StepRecords]) -> Iterator[StepRecords]:
    """One rank's steps, in the order read, each with its ``StepKey``: the run of its graph, by
    the order in which the rank's runs began, and its step id. A run begins with a graph not seen
    before, or with a step id not above the last of its graph (CANN numbers each graph's iterations
    from 1, and a second training or evaluation loop counts from 1 again), so the keys of one
    graph's steps rise in the order read: chunks encoded in that order are never written out of it
    (``budget.assemble``). Every step is keyed, also those ``--graphs`` or ``--steps`` leave out."""
    latest: dict[int | None, StepKey] = {}  # graph id -> the key of its latest step
    runs = 0
    for batch in steps:
        if batch.step_id is not None:
            before = latest.get(batch.graph)
            if before is None or batch.step_id <= before.step:  # a run begins
                run, runs = runs, runs + 1
            else:
                run = before.graph
            batch.key = latest[batch.graph] = StepKey(run, batch.step_id)
        yield batch


def carried_on(steps: Iterable[StepRecords]) -> Iterator[StepRecords]:
    """One rank's steps, in time order, each with its ``StepIntervals``: what it computed and
    communicated within the time it owns (``owned``), and the communication of earlier steps that
    ran on into it. A step's figures never exceed its time: a collective that outlasts its step (a
    gloo range waiting a second for a slow peer) counts up to the step's end there, and the rest in
    the steps it runs into (in none where it runs between steps). torch_npu files an op whole under
    the step it starts in, so its figures can exceed the step; where nothing outlasts its step
    (every real sample), the two agree. The pseudo step (no step bounds it) takes no part."""
    carried: tuple[list[Interval], list[Interval]] = ([], [])
    for batch in steps:
        if batch.step is not None:
            batch.intervals, carried = step_intervals_of(batch, carried)
        else:  # once, here: its overlap row and its span both ask for them
            batch.intervals = step_intervals_of(batch)[0]
        yield batch


def owned(step: Step | None, compute: list[Interval]) -> Interval | None:
    """The time a step owns in the overlap analysis: from its start to its end, or on to the end of
    its last compute task where the device runs behind the host (torch_npu's step range ends at
    the last task the step launched, or the step's end if later). None: the pseudo step."""
    if step is None:
        return None
    return step.start_ns, max(step.end_ns, compute[-1][1]) if compute else step.end_ns


def step_intervals_of(batch: StepRecords, carried: tuple[list[Interval], list[Interval]] = ([], [])
                      ) -> tuple[StepIntervals, tuple[list[Interval], list[Interval]]]:
    """The step's ``StepIntervals``, with the ops and plane tasks ``carried`` into it from earlier
    steps; and the ops and tasks that run on past the time it owns, for the next step."""
    compute, ops, tasks, ops_seen = step_intervals(  # C: the unions of each kind, in one pass
        batch.slices, Layer.STREAM, Layer.COMM_OP, Layer.COMM_TASK, overlap.is_compute)
    if carried[0] or carried[1]:
        ops, tasks = overlap.union(ops + carried[0]), overlap.union(tasks + carried[1])
        ops_seen = ops_seen or bool(carried[0])
    window = owned(batch.step, compute)
    if window is None:
        return StepIntervals(compute, ops, tasks, ops_seen), ([], [])
    low, high = window
    on = (overlap.clip(ops, high, None), overlap.clip(tasks, high, None))
    return StepIntervals(*(overlap.clip(x, low, high) for x in (compute, ops, tasks)), ops_seen), on


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
    """Overlap analysis of one step: compute tasks against communication ops (design §5), within
    the time the step owns (``carried_on``; a step read otherwise has nothing carried into it)."""
    compute, ops, tasks, ops_seen = batch.intervals or step_intervals_of(batch)[0]
    if not ops_seen and not batch.ops_recorded:  # no op level recorded: plane tasks stand for communication
        ops = tasks
    span, window = batch.device_span, owned(batch.step, compute)
    if span is not None and window is not None:
        span = (max(span[0], window[0]), min(span[1], window[1]))
    return overlap.analyse_unions(compute, ops, span)


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
