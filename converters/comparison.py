"""``trace2perfetto diff BASE NEW -o cmp.pftrace``: both runs in one trace, step-aligned
(docs/analysis.md §10, "The comparison trace").

Each run is converted as ``convert --kind detail`` converts it (``pipeline``: the same readers,
encoders, spool and size cap), into one spool, and written under one header:

- BASE's ranks are drawn as themselves, titled ``BASE rank N (...)``; NEW's are numbered after
  BASE's largest rank (``rank_offset``; the writers make rank r process r + 1, so no process, track
  or arrow of one run lands on the other's), titled ``NEW rank N (...)`` with N its own rank.
- Each NEW rank is shifted in time once, so that its first step in common with BASE (by
  ``StepKey``: the graph in order of running, the step id) starts where BASE's starts, on the BASE
  rank of the same number (else BASE's lowest). One shift per rank, not per step: a step shifted
  on its own would move the slices that cross into it apart from the step before; so later steps
  start apart by what their lengths differ by, which the counter says step by step.
- Device tasks (and host operators) whose name is a row of ``diff --by name`` carry that row's
  ``delta vs base (%)`` (of the means per step) and whether it is significant, on both runs.
- NEW's ranks hold a counter ``Step time vs BASE (us)``: at each step's start, its length minus
  BASE's step of the same key on the same BASE rank.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Iterable
from typing import Any

from . import pipeline
from .analyses import diff
from .budget import DEFAULT_MAX_BYTES, Sink, assemble
from .errors import Diagnostics
from .executor import LOCAL, Where
from .model import Layer, RankInfo, Sample, StepKey, StepRecords, decoded_args
from .output import inputs_of, open_output, refuse_inputs
from .profile import Kind, Options, Profile, read_profile
from .spool import Spool
from .writers.chrome_json import Origins, Placed, from_one_origin

BASE, NEW = "BASE", "NEW"
STEP_DELTA = "Step time vs BASE (us)"
DELTA_ARG, SIGNIFICANT_ARG = "delta vs base (%)", "delta significant"
_KINDS = {Layer.STREAM: diff.DEVICE, Layer.HOST: diff.HOST}
Bounds = dict[StepKey, tuple[int, int]]  # a rank's steps: start and end, ns


def step_bounds(info: RankInfo, options: Options, diag: Diagnostics) -> Bounds:
    """One rank's steps as the job names them, with their start and end. Runs in a worker process."""
    steps = read_profile([info], options, diag)
    return {b.key: (b.step.start_ns, b.step.end_ns) for b in steps if b.key and b.step is not None}


def _bounds(profile: Profile) -> dict[int, Bounds]:
    chosen = profile.options
    summary = Profile(profile.path, Options(ranks=chosen.ranks, graphs=chosen.graphs, steps=chosen.steps,
                                            step_marker=chosen.step_marker), profile.ranks, profile.diag,
                      profile.where)
    found = summary.map(step_bounds)
    return {info.rank: mine for info, mine in zip(summary.ranks, found, strict=True)}


def alignment(base: dict[int, Bounds], new: dict[int, Bounds], diag: Diagnostics
              ) -> tuple[dict[int, int], dict[int, int]]:
    """Per NEW rank: the shift (ns) that starts its first step in common with BASE where BASE's
    starts, and the BASE rank it is set against (its own number, else BASE's lowest). A rank with no
    step in common: its first step starts at that BASE rank's first, said in ``diag``."""
    shifts: dict[int, int] = {}
    against: dict[int, int] = {}
    for rank, mine in new.items():
        other = rank if rank in base else min(base)
        against[rank] = other
        theirs = base[other]
        common = sorted(set(mine) & set(theirs))
        if common:
            shifts[rank] = theirs[common[0]][0] - mine[common[0]][0]
        elif mine and theirs:
            shifts[rank] = theirs[min(theirs)][0] - mine[min(mine)][0]
            diag.warn("diff_no_common_step", f"NEW rank {rank}: no step in common with BASE rank {other}; "
                      "its first step is drawn at BASE's first", f"rank {rank}")
    return shifts, against


def annotate(batch: StepRecords, deltas: dict[tuple[str, str], tuple[float | None, bool]],
             step_deltas: dict[tuple[int, StepKey], float]) -> StepRecords:
    """The step with its ops' deltas in their args and, on NEW, its step time delta as a counter.
    Module-level: it runs in the worker processes (``pipeline.Drawing.transform``)."""
    slices = [s._replace(args=_with_delta(s.args, found)) if (kind := _KINDS.get(s.layer)) is not None
              and (found := deltas.get((s.name, kind))) is not None else s for s in batch.slices]
    samples = batch.samples
    value = step_deltas.get((batch.rank, batch.key)) if batch.key is not None else None
    if value is not None and batch.step is not None:
        samples = [*samples, Sample(batch.rank, STEP_DELTA, batch.step.start_ns, value)]
    return dataclasses.replace(batch, slices=slices, samples=samples)


def _with_delta(args: dict[str, Any] | bytes | None, found: tuple[float | None, bool]) -> dict[str, Any]:
    """The slice's args (a dict, or raw JSON text: bytes, ``msgspec.Raw``) with the delta added."""
    held = dict(args) if isinstance(args, dict) else {} if args is None else decoded_args(args)
    if not isinstance(held, dict):
        held = {"args": held}
    pct, significant = found
    return {**held, DELTA_ARG: None if pct is None else round(pct, 3), SIGNIFICANT_ARG: significant}


def _deltas(rows: Iterable[diff.DiffRow]) -> dict[tuple[str, str], tuple[float | None, bool]]:
    return {(row.name, row.kind): (row.delta_pct, row.significant) for row in rows}


def _step_deltas(base: dict[int, Bounds], new: dict[int, Bounds], against: dict[int, int]
                 ) -> dict[tuple[int, StepKey], float]:
    """Per NEW rank and step: its length minus its BASE rank's step of that key, in µs."""
    out = {}
    for rank, mine in new.items():
        theirs = base[against[rank]]
        for key in set(mine) & set(theirs):
            (start, end), (base_start, base_end) = mine[key], theirs[key]
            out[rank, key] = ((end - start) - (base_end - base_start)) / 1000
    return out


def write_comparison(
    base: diff.Side,
    new: diff.Side,
    output: str,
    *,
    graphs: Iterable[int] | None = None,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
) -> pipeline.Result:
    """Write both runs into ``output`` (``.pftrace`` or ``.json``, optionally ``.gz``; the format from
    its name, as ``convert``'s), detail, step-aligned; at most ``max_bytes`` (None: no limit), cut as
    ``convert`` cuts. The file appears only when complete, and never over or inside an input.

    Raises:
        UsageError: unknown ranks or graphs, nothing recognisable under a path, ``output`` names an
            input or lies inside one, or its name says no format.
        InputError: an input file broken beyond recovery.
    """
    started = time.perf_counter()
    diag = diag if diag is not None else Diagnostics()
    out_format = pipeline.output_format(output, None)
    profiles = [Profile.open(side.path, Options(ranks=side.ranks, graphs=graphs, steps=side.steps,
                                                kind=Kind.DETAIL, step_marker=side.step_marker,
                                                draws_arrows=True),
                                where=where, diag=diag)
                for side in (base, new)]
    inputs = [found for side, profile in zip((base, new), profiles, strict=True)
              for found in inputs_of(side.path, profile.ranks)]
    refuse_inputs(output, inputs)
    base_bounds, new_bounds = (_bounds(profile) for profile in profiles)
    shifts, against = alignment(base_bounds, new_bounds, diag)
    rows = diff.diff_report(base, new, by="name", graphs=graphs, diag=Diagnostics(), where=where)
    deltas = _deltas(rows)
    offset = max(info.rank for info in profiles[0].ranks) + 1
    drawings = [pipeline.Drawing(BASE, 0, 0, functools.partial(annotate, deltas=deltas, step_deltas={})),
                pipeline.Drawing(NEW, offset, 2 * len(profiles[0].ranks), functools.partial(
                    annotate, deltas=deltas, step_deltas=_step_deltas(base_bounds, new_bounds, against)))]
    side_shifts = [{}, shifts]
    spool = Spool()
    try:
        def encode(origins: Origins, afresh: bool) -> tuple[list[RankInfo], Placed, list[RankInfo]]:
            nonlocal spool
            if afresh:
                spool.close()
                spool = Spool()
            placed: dict = {}
            infos: list[RankInfo] = []
            for profile, drawing, moved in zip(profiles, drawings, side_shifts, strict=True):
                found, _, mine = pipeline.encode_ranks(profile, out_format, origins, spool, shifts=moved,
                                                        drawing=drawing)
                diag.merge(found)
                placed |= mine
                infos += [drawing.drawn(info, moved.get(info.rank, 0)) for info in profile.ranks]
            return infos, placed, infos

        drawn = [d.drawn(info, s.get(info.rank, 0)) for p, d, s in zip(profiles, drawings, side_shifts,
                                                                        strict=True) for info in p.ranks]
        origins, _, infos = from_one_origin(drawn, encode)
        encoder = pipeline.encoder_for(out_format, origins.of(infos[0]) if infos else None)
        with open_output(output, inputs) as out:
            sink = Sink(out, max_bytes, compress=output.endswith(".gz"))
            kept = assemble(sink, spool, lambda ranks: encoder.header([i for i in infos if ranks is None
                                                                       or i.rank in ranks]),
                            encoder.footer, lambda kept: pipeline.cut_marker(
                                encoder, pipeline.first_kept(infos, kept), kept), None, output)
    finally:
        spool.close()
    return pipeline.Result(
        output=output, format=out_format, ranks=[r.rank for r in infos if r.rank not in kept.ranks_left_out],
        steps=sum(unit.step is not None for unit in kept.summary_steps), slices=kept.slices,
        bytes_written=sink.written, seconds=time.perf_counter() - started, warnings=diag.messages(),
        cut=None if kept.complete else f"{kept.describe(every_rank=False)}; {kept.hint()}")
