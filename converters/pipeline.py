"""The conversion: open the profile (``profile``) → read each rank's steps → lay out → encode →
match the collectives across ranks → keep what fits the size cap (``budget``) → write
(docs/design.md §1)."""

from __future__ import annotations

import bisect
import dataclasses
import os
import pickle
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from . import communication
from .budget import DEFAULT_MAX_BYTES, Kept, Sink, assemble, interest_order
from .errors import Diagnostics, Trace2PerfettoError, UsageError
from .executor import LOCAL, Where
from .layout import CUT_ORDER, TIMES_SIZE, JobProcess, Lanes, Track, of_layer, release, sorted_and_timed
from .model import RECV, SEND, Layer, RankInfo, Slice, StepKey, StepRecords, comm_kind, step_label
from .output import Format, inputs_of, open_output, refuse_inputs
from .profile import Kind, Options, Profile, input_bytes, overlap_slices, read_profile, renumbered, shifted
from .select import check_steps, format_ids
from .spool import DETAIL, SUMMARY, Chunk, Spool, SpoolFile, spooled
from .writers.chrome_json import EXACT_NS, ChromeJsonEncoder, Origins, Placed, from_one_origin, inexact
from .writers.perfetto import PerfettoEncoder

CUT_GROUP = "Trace cut"
_DAY_NS = 86_400 * 10**9


class StrictError(Trace2PerfettoError):
    """``--strict``: the input needed recovery, so nothing was written. Exit code 1."""

    def __init__(self, warnings: list[str]) -> None:
        self.warnings = warnings
        super().__init__("--strict: " + "; ".join(warnings) + "; nothing written")


_SUFFIXES = {".pftrace": Format.PERFETTO, ".perfetto-trace": Format.PERFETTO,
             ".perfetto": Format.PERFETTO, ".pb": Format.PERFETTO, ".json": Format.JSON}


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
    step_marker: str | None = None,
    kind: Kind | str = Kind.SUMMARY,
    fmt: Format | str | None = None,
    merge_graphs: bool = False,
    host_level: int = 0,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    strict: bool = False,
    align: str | None = None,
    critical_path: bool = False,
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
    of the collectives it shares with other hosts (``communication.clock_offsets``; read once more first).
    ``critical_path`` (detail only) draws each step's critical path across ranks above the ranks
    (``path_drawing``; read once more, before writing).
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
                      step_marker=step_marker, host_level=host_level, draws_arrows=True)
    if critical_path and options.kind is not Kind.DETAIL:
        raise UsageError("--critical-path runs through the device tasks, communication ops and host launches "
                         "that only --kind detail draws: add --kind detail (or print the paths with "
                         "trace2perfetto critical)")
    target = _default_output(Path(path)) if output is None else str(output)
    out_format = output_format(target, fmt)
    profile = Profile.open(path, options, where=where)
    inputs = inputs_of(path, profile.ranks)
    refuse_inputs(target, inputs)  # now, not after reading: the same check guards the opening
    shifts = profile.timeline(align, move_own=False)  # drawn as recorded unless --align
    infos = profile.ranks
    opened = len(infos)
    spool = Spool()
    job: tuple[JobProcess, ...] = ()  # the processes of the job's own (--critical-path)
    try:
        # detail past the cap is never encoded (a rank's alone could not fit); compressed, it might
        limit = max_bytes if options.kind is Kind.DETAIL and not target.endswith(".gz") else None
        def encode(origins: Origins, afresh: bool) -> tuple[list[RankInfo], Placed, tuple]:
            nonlocal spool
            if afresh:
                spool.close()
                spool = Spool()
            found, interest, placed = encode_ranks(profile, out_format, origins, spool, progress, shifts,
                                                   limit)
            return profile.ranks, placed, (found, interest)  # the ranks: those left out as unreadable gone

        origins, placed, (diag, interest) = from_one_origin(infos, encode)
        infos = profile.ranks
        if critical_path and infos:
            from .path_drawing import draw_paths  # here: only this conversion needs it

            # its encoder id past the ranks' (0 to n - 1) and their ops' (n to 2n - 1): its own sequences
            own = encoder_for(out_format, origins.of(infos[0]), 2 * opened)
            job = draw_paths(profile, shifts, own, spool, diag)
        if far := inexact(placed):
            diag.note("json_inexact", f"rank {format_ids(far)}: times more than {EXACT_NS // _DAY_NS} days "
                      "after the first, which Chrome JSON holds to the µs only (Perfetto reads them as "
                      "doubles); a .pftrace holds them to the ns")
        diag.merge(profile.diag)
        check_steps(options.steps, diag, options.step_marker)
        if not spool.chunks:  # not one slice or counter value
            diag.warn("empty_output", f"{path}: nothing to draw in {options.kind.value} from rank "
                      f"{format_ids(r.rank for r in infos)}" + ("" if options.kind is Kind.DETAIL else
                                                                "; --kind detail may show host activity"))
        if strict and diag:
            raise StrictError(diag.messages())
        encoder = encoder_for(out_format, origins.of(infos[0]) if infos else None)
        with open_output(target, inputs) as out:
            sink = Sink(out, max_bytes, compress=target.endswith(".gz"))
            kept = assemble(sink, spool, lambda ranks: encoder.header([i for i in infos if ranks is None
                                                                       or i.rank in ranks],
                                                                      job if ranks is None else ()),
                            encoder.footer, lambda kept: cut_marker(encoder, first_kept(infos, kept), kept),
                            None if options.ranks is not None or len(infos) < 2 else interest, target)
    finally:
        spool.close()
    return Result(
        output=target, format=out_format, ranks=[r.rank for r in infos if r.rank not in kept.ranks_left_out],
        steps=sum(unit.step is not None for unit in kept.summary_steps), slices=kept.slices,
        bytes_written=sink.written, seconds=time.perf_counter() - started,
        warnings=diag.messages(),
        cut=None if kept.complete else f"{kept.describe(every_rank=False)}; {kept.hint()}",
    )


def encoder_for(out_format: Format, origin_ns: int | None, rank_index: int = -1, first_tid: int = 1,
             wall_clock: bool = False) -> PerfettoEncoder | ChromeJsonEncoder:
    """The writer's encoder; for JSON, ``origin_ns`` None: its first chunk sets its origin, a whole
    hour for a rank on ``wall_clock``."""
    if out_format is Format.PERFETTO:
        return PerfettoEncoder(rank_index)
    return ChromeJsonEncoder(origin_ns, first_tid, whole_hours=wall_clock)


def _placed(encoder: PerfettoEncoder | ChromeJsonEncoder) -> tuple[int | None, tuple[int, int] | None]:
    """A JSON encoder's origin and the span of the events it placed; (None, None) for Perfetto."""
    return getattr(encoder, "origin_ns", None), getattr(encoder, "span", None)


class Drawing(NamedTuple):
    """How a profile's ranks are drawn beside another's in one trace (``diff -o``; the default: as
    themselves). Each rank is drawn as ``drawn(info)``: its records' ranks moved by ``rank_offset``
    (the writers make rank r process r + 1, so the two runs' processes do not collide), its title
    naming ``label``; its encoders numbered from ``first_encoder`` (ids unique in the output), and
    each step, once shifted, passed through ``transform`` (module-level, for the worker processes)."""

    label: str = ""
    rank_offset: int = 0
    first_encoder: int = 0
    transform: Callable[[StepRecords], StepRecords] | None = None

    def drawn(self, info: RankInfo, shift_ns: int = 0) -> RankInfo:
        if not (self.label or self.rank_offset or shift_ns):
            return info
        start = None if info.start_ns is None else info.start_ns + shift_ns
        return dataclasses.replace(info, rank=info.rank + self.rank_offset, side=self.label,
                                   rank_offset=self.rank_offset, start_ns=start)


AS_ITSELF = Drawing()


def encode_ranks(
    profile: Profile, out_format: Format, origins: Origins, spool: Spool, progress: Progress | None = None,
    shifts: dict[int, int] | None = None, detail_limit: int | None = None, drawing: Drawing = AS_ITSELF,
) -> tuple[Diagnostics, tuple[list[int], str], Placed]:
    """Encode every rank into the spool, ranks in parallel: they are independent until written,
    except for their communication ops, which are drawn last, once matched across ranks. Workers
    on other machines (``where.remote``) send their spool file back with their result, and it is
    spooled here as it arrives. Ranks left out as unreadable leave ``profile.ranks`` and are named
    in ``profile.diag`` (a second encoding, which no longer reads them, must not forget them).
    Returns what needed recovery, the ranks in order of interest for the size cap (with its
    policy), and per rank the origin and the span of the events of each JSON encoder that placed
    any (for ``Origins.settle``). A rank's detail chunks after the first ``detail_limit`` bytes of
    them are not encoded (see ``_encode_into``)."""
    infos, options, remote = profile.ranks, profile.options, profile.where.remote
    sizes = [input_bytes(info) for info in infos]
    done_bytes = 0
    diag = Diagnostics()
    held: list[RankOps | None] = [None] * len(infos)

    def collect(index: int, result: tuple[list[Chunk], RankOps, bytes | None]) -> None:
        nonlocal done_bytes
        chunks, ops, data = result
        if data is not None:  # from another machine: into this one's spool
            path = spool.adopt(data)
            chunks = [dataclasses.replace(c, path=path) for c in chunks]
            ops = ops._replace(path=path)
        spool.chunks.extend(chunks)
        held[index] = ops
        done_bytes += sizes[index]
        if progress is not None:
            progress(done_bytes, sum(sizes), infos[index].rank)

    shifts = shifts or {}
    profile.map(encode_rank, lambda index, info: (
        drawing.first_encoder + index, out_format, origins.of(drawing.drawn(info, shifts.get(info.rank, 0))),
        None if remote else spool.new_file(), shifts.get(info.rank, 0), detail_limit, drawing),
        each=collect, diag=diag)
    ranks_read = len(infos)
    infos = [drawing.drawn(info, shifts.get(info.rank, 0)) for info in profile.ranks]
    held = [mine for mine in held if mine is not None]
    writers = [_OpsWriter(info, out_format, mine.origin_ns, drawing.first_encoder + ranks_read + index)
               for index, (info, mine) in enumerate(zip(infos, held, strict=True))]
    apart = {drawn.rank for drawn, info in zip(infos, profile.ranks, strict=True)
             if info.rank in profile.apart}
    caused = _encode_collectives(infos, held, writers, options, spool, apart)
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
    # graph, step (as the rank numbers them), the step's key, chunk start, its part, offset, length
    steps: list[tuple[int | None, int | None, StepKey | None, int, int, int, int]]
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
        self.encoder = encoder_for(out_format, origin_ns, encoder_id, _COLLECTIVE_TIDS, info.wall_clock)
        self.lanes = Lanes()
        self.sequences: dict[tuple, int] = {}

    def add(self, file: SpoolFile, step: StepKey | None, graph: int | None, start_ns: int, part: int,
            kind: str, slices: list[Slice]) -> None:
        if slices:
            key = (kind, graph, step is None)
            sequence = _COLLECTIVE_SEQUENCES + self.sequences.setdefault(key, len(self.sequences))
            ordered, times = sorted_and_timed(slices)
            data = self.encoder.chunk(sequence, self.lanes.placement(ordered, times=times))
            file.add(step, start_ns, self.rank, kind, data, len(slices), sequence, graph, part)


def _encode_collectives(infos: list[RankInfo], held: list[RankOps], writers: list[_OpsWriter],
                        options: Options, spool: Spool, apart: set[int]) -> dict[int, int]:
    """Step by step (one step's ops of every rank in memory), match the ops across ranks, then
    spool per rank (by its writer) the op slices (detail) with their instance's skew, last rank
    and arrows, and the Wait lane (summary); the ranks ``apart`` are matched with no other (a clock
    of its own no collective ties to the others': ``communication.timeline``). Returns the wait each rank
    caused the others, in ns."""
    caused: dict[int, int] = defaultdict(int)
    # the step's key -> rank index -> that rank's parts of the step (graph, step as it numbers them)
    parts_of: dict[StepKey | None, dict[int, list[tuple]]] = {}
    for index, mine in enumerate(held):
        for graph, step, key, start_ns, number, offset, length in mine.steps:
            part = (graph, step, start_ns, number, mine.path, offset, length)
            parts_of.setdefault(key, {}).setdefault(index, []).append(part)
    # in key order, as each rank's own chunks: a graph's keys rise in the order its steps were read
    order = sorted(parts_of, key=lambda key: () if key is None else key)
    with SpoolFile(spool.new_file()) as file:
        for key in order:
            parts = {index: [(graph, step, start_ns, number, pickle.loads(spool.unstash(path, at, length)))
                             for graph, step, start_ns, number, path, at, length in found]
                     for index, found in parts_of[key].items()}
            ops = {index: [communication.light_ops(infos[index].rank, graph, step, key, slices)
                           for graph, step, _, _, slices in found] for index, found in parts.items()}
            instances = communication.match({infos[i].rank: [op for part in mine for op in part]
                                    for i, mine in ops.items() if infos[i].rank not in apart})
            for inst in instances:
                caused[inst.last_rank] += sum(inst.wait_ns(rank) for rank in inst.starts)
            waiters = communication.waiting_ranks(instances)
            for index, found in parts.items():
                for (graph, _, start_ns, number, slices), step_ops in zip(found, ops[index], strict=True):
                    writers[index].add(file, key, graph, start_ns, number, SUMMARY,
                                       communication.wait_slices(step_ops))
                    if options.kind is Kind.DETAIL:
                        writers[index].add(file, key, graph, start_ns, number, DETAIL,
                                           communication.annotated(slices, step_ops, waiters))
    spool.chunks.extend(file.chunks)
    return caused


Progress = Callable[[int, int, int], None]  # (input bytes read, of total, rank just finished)


def encode_rank(info: RankInfo, options: Options, diag: Diagnostics, index: int, out_format: Format,
                origin_ns: int | None, path: str | None, shift_ns: int, detail_limit: int | None,
                drawing: Drawing = AS_ITSELF) -> tuple[list[Chunk], RankOps, bytes | None]:
    """Read one rank's kept steps and spool their summary and detail chunks, one packet
    sequence per part and graph; hand back its communication ops. Runs in a worker process; with
    no spool file given (a worker on another machine), its own spool's bytes go back too."""
    return spooled(lambda own: _encode_into(index, info, options, diag, out_format, origin_ns, own, shift_ns,
                                            detail_limit, drawing), path)


def _encode_into(index: int, info: RankInfo, options: Options, diag: Diagnostics, out_format: Format,
                 origin_ns: int | None, path: str, shift_ns: int,
                 detail_limit: int | None = None, drawing: Drawing = AS_ITSELF
                 ) -> tuple[list[Chunk], RankOps]:
    """One rank's chunks into the spool file at ``path``. Once its detail chunks pass
    ``detail_limit`` bytes, later ones are placed but not encoded: the cap writes detail step by
    step in time order, all ranks of a step or none, so none of them could be written. They are
    filed as chunks that never fit (``SpoolFile.add_unwritten``), and what encoding them would
    have numbered is numbered (``reserve``), so every other chunk is the same byte for byte."""
    lanes = Lanes()
    detail_bytes = 0
    encoder = encoder_for(out_format, origin_ns, index, wall_clock=info.wall_clock)
    sequences: dict[tuple[str, int | None, bool], int] = {}
    held: list[tuple[int | None, int | None, StepKey | None, int, int, int, int]] = []
    step_ns = step_count = 0
    with SpoolFile(path) as spool:
        for batch in read_profile([info], options, diag):
            if shift_ns:
                batch = shifted(batch, shift_ns)
            if drawing.transform is not None:
                batch = drawing.transform(batch)
            if drawing.rank_offset:
                batch = renumbered(batch, drawing.rank_offset)
            if batch.step is not None:
                step_ns, step_count = step_ns + batch.step.end_ns - batch.step.start_ns, step_count + 1
            part = batch.part[0] if batch.part is not None else 0
            start_ns = batch.start_ns  # a part's is its slices' least start: found once
            summary, detail = _parts(*sorted_and_timed(records_to_write(batch, options)))
            ops = of_layer(batch.slices, Layer.COMM_OP)
            if ops:  # in summary, where they are not drawn, as matching needs them (comm.for_matching)
                kept = ops if options.kind is Kind.DETAIL else [communication.for_matching(s) for s in ops]
                held.append((batch.graph, batch.step_id, batch.key, start_ns, part,
                             *spool.stash(pickle.dumps(kept, pickle.HIGHEST_PROTOCOL))))
            samples = batch.samples if options.kind is Kind.DETAIL else []
            for kind, (mine, times), values in ((SUMMARY, summary, ()), (DETAIL, detail, samples)):
                if mine or values:
                    # the pseudo step (no step trace) is a sequence apart: it has no place in time
                    key = (kind, batch.graph, batch.step_id is None)
                    sequence = sequences.setdefault(key, len(sequences))
                    events = lanes.placement(mine, values, times)
                    if kind is DETAIL and detail_limit is not None and detail_bytes > detail_limit:
                        encoder.reserve(sequence, events)
                        spool.add_unwritten(batch.key, start_ns, batch.rank, kind, len(mine), sequence,
                                            batch.graph, part)
                        continue
                    data = encoder.chunk(sequence, events)
                    detail_bytes += len(data) if kind is DETAIL else 0
                    spool.add(batch.key, start_ns, batch.rank, kind, data, len(mine), sequence,
                              batch.graph, part)
            # the step's slices freed now, while what encoding read of them is in the cache (the
            # generators that read the step hold it until they have read the next one), the rest of
            # each asked for ahead (``release``): 0.06 -> 0.03 CPU s a torch_npu rank
            summary = detail = mine = events = ops = kept = None
            release(batch.slices)
    origin, span = _placed(encoder)
    return spool.chunks, RankOps(origin, path, held, step_ns, step_count, span)


Timed = tuple[list[Slice], bytes]  # slices and their times, as sorted_and_timed gives them


def _parts(ordered: list[Slice], times: bytes) -> tuple[Timed, Timed]:
    """Slices sorted by ``by_lane_and_start`` (layer first), and their times, as (summary, detail)
    in that order, without the communication ops (the driver encodes them, matched across ranks)."""
    def first(layer: Layer) -> int:
        return bisect.bisect_left(ordered, layer.order, key=_layer_order)

    ops, after_ops = first(Layer.COMM_OP), first(_AFTER_OPS)
    summary_end = first(_FIRST_DETAIL)
    summary = ordered[:summary_end], times[:summary_end * TIMES_SIZE]
    detail = (ordered[summary_end:ops] + ordered[after_ops:],
              times[summary_end * TIMES_SIZE:ops * TIMES_SIZE] + times[after_ops * TIMES_SIZE:])
    return summary, detail


def _layer_order(s: Slice) -> int:
    return s.layer.order


_FIRST_DETAIL = min((layer for layer in Layer if not layer.is_summary), key=lambda layer: layer.order)
_AFTER_OPS = next(layer for layer in Layer if layer.order == Layer.COMM_OP.order + 1)
assert all(layer.is_summary == (layer.order < _FIRST_DETAIL.order) for layer in Layer)  # summary first


def first_kept(infos: list[RankInfo], kept: Kept) -> RankInfo:
    """The first rank the size cap kept: the size cap's marker is drawn there."""
    return next(info for info in infos if info.rank not in kept.ranks_left_out)


def cut_marker(encoder, first: RankInfo, kept: Kept) -> bytes:
    """The *Trace cut* instant on rank ``first``: what the size cap left out, and how to see it."""
    track = Track(first.rank, CUT_GROUP, CUT_ORDER, "size cap", 0)
    text = f"Trace cut by --max-size: {kept.describe()}"
    return encoder.marker(track, kept.first_left_out_ns or 0, text, {"how to see the rest": kept.hint()})


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
    if options.kind is Kind.DETAIL:
        out.extend(_pipeline_slices(batch))
    return out


def _pipeline_slices(batch: StepRecords) -> list[Slice]:
    """The step's micro-batches on a *Pipeline* lane (``analyses.pipeline``), where it sends or
    receives: the analysis is loaded only then."""
    # the ops picked in C: a loop in Python over every slice of a step cost a torch_npu detail 3%
    if not any(comm_kind(s) in (SEND, RECV) for s in of_layer(batch.slices, Layer.COMM_OP)):
        return []
    from .analyses.pipeline import pipeline_slices

    return pipeline_slices(batch)


def _merged_step(s: Slice, batch: StepRecords) -> Slice:
    name = step_label(batch.graph, batch.step_id) if s.name.startswith("Step ") else s.name
    return Slice(s.rank, s.layer, "Steps", name, s.start_ns, s.dur_ns, s.args)


def _default_output(path: Path) -> str:
    return str(path.resolve().parent / (path.resolve().name + ".pftrace"))


def output_format(target: str, fmt: Format | str | None) -> Format:
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
