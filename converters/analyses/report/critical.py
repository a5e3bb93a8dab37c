"""The report's detail read (``detail_read``): for the job's slowest steps, the chain of work across
ranks that set their time and the what-ifs that would save most (``analyses.critical``;
docs/analysis.md, sections 6 and 11), and in the same read the links ranked (``comm_matrix``). The
summary read the rest of the report rests on has no host launches and no HCCL tasks: one detail
read of every rank gives both, on the profile the report opened."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from ...errors import Diagnostics
from ...model import RankInfo, StepKey
from ...profile import Kind, Options, Profile, TooLarge, read_profile, whole_steps
from ...select import format_ids
from ...spool import Spool, SpoolFile, spooled
from ..comm_matrix import (
    LinkRow,
    MatrixReport,
    add_totals,
    profiler_rows,
    ranked,
    step_links,
    warn_unprofiled_peers,
)
from ..critical import (
    StepPath,
    TaskTypes,
    own_clocks,
    paths_of,
    read_ranks,
    stash_step,
    warn_unjoined,
)
from ..host_work import note_host_work
from .text import change, ms
from .types import SlowStep, StepFacts

SLOWEST_STEPS = 3  # the job's steps whose critical path the report gives


def detail_read(profile: Profile, facts: list[StepFacts], shifts: dict[int, int], links: bool
                ) -> tuple[MatrixReport | None, list[SlowStep]]:
    """What the summary read cannot give, from one detail read of every kept rank (in workers):
    where ``links`` (the job communicates), the links ranked (``comm_matrix``: the HCCL plane
    tasks), and the slowest steps' critical paths (``analyses.critical``: host launches, device
    tasks; ``shifts``: ns added to each rank's times, the clocks aligned). Where the job does not
    communicate, only the slowest steps are read."""
    slow = _slowest(facts, SLOWEST_STEPS)
    if not slow and not links:
        return None, []
    own = own_clocks(profile.ranks, aligned=shifts)  # the report's shifts, not Profile.align's
    keys = frozenset() if own else frozenset(f.key for f in slow)  # no path across clocks of their own
    marked = sorted({f.key.step for f in slow if f.key is not None})
    steps = profile.options.steps if links or not marked else marked
    options = dataclasses.replace(profile.options, kind=Kind.DETAIL, steps=steps)
    detail = dataclasses.replace(profile, options=options, ranks=list(profile.ranks), diag=Diagnostics())
    kept = frozenset(info.rank for info in detail.ranks)
    sums: dict[tuple[int, int, str], list[int]] = defaultdict(lambda: [0, 0])
    planes = False
    from_profiler: dict[int, str] = {}

    def add_links(index: int, more: list) -> None:
        nonlocal planes
        rows, has_planes, source = more
        planes |= has_planes
        if source is not None:
            from_profiler[detail.ranks[index].rank] = source
        add_totals(sums, rows)

    spool = Spool()
    try:
        stashed = read_ranks(detail, spool, rank_detail,
                             lambda index, info: (shifts.get(info.rank, 0), kept, keys, links), add_links)
        named = _names_by_lowest_rank(facts)
        paths = {}
        for found in paths_of(spool, stashed):
            warn_unjoined(profile.diag, found)
            note_host_work(profile.diag, found.host_work)
            key = named.get((found.graph, found.step), ())
            if key != () and key in keys:
                paths[key] = found
    finally:
        spool.close()
    several = len({f.key.graph for f in facts if f.key is not None}) > 1
    apart = {"unknown": f"rank {format_ids(own)}: times on clocks of their own, not aligned"} if own else {}
    critical = [_slow_step(f, paths.get(f.key), _name(f, several), apart) for f in slow]
    if not links:
        return None, critical
    found = MatrixReport([], ranked(sums), planes, from_profiler)
    warn_unprofiled_peers(profile.diag, found.slowest, profile.ranks)
    return found, critical


def _slow_step(f: StepFacts, found: StepPath | None, name: str, apart: dict[str, str]) -> SlowStep:
    if found is not None and found.unknown is not None:  # a path the input cannot give
        found, apart = None, {"unknown": found.unknown}
    return SlowStep(f.key, f.graph, f.step, f.step_ns, f.rank, found, name, **apart)


def rank_detail(info: RankInfo, options: Options, diag: Diagnostics, shift: int, kept: frozenset[int],
                keys: frozenset[StepKey | None], links: bool, path: str | None) -> tuple:
    """One rank's detail read for the report, in a worker: its link rows (where ``links``), and its
    steps of ``keys`` contracted and stashed in ``path`` (``analyses.critical.stash_step``)."""
    return spooled(lambda own: _detail_into(info, options, diag, shift, kept, keys, links, own), path)


def _detail_into(info: RankInfo, options: Options, diag: Diagnostics, shift: int, kept: frozenset[int],
                 keys: frozenset[StepKey | None], links: bool, path: str) -> tuple:
    stashed: list = []
    rows: list[LinkRow] = []
    planes = False
    types = TaskTypes(info)
    with SpoolFile(path) as spool:  # neither links nor paths use memory records: none is read
        for batch in whole_steps(read_profile([info], dataclasses.replace(options, memory=False), diag)):
            if type(batch) is TooLarge:  # no path (``stash_step``), and its links unread with it
                if None in keys:
                    stash_step(spool, batch, shift, kept, stashed, types)
                continue
            if links:
                found, has_planes = step_links(batch)
                rows += found
                planes |= has_planes
            if batch.key in keys:
                stash_step(spool, batch, shift, kept, stashed, types)
    source = None
    if links and not planes:  # the link matrix the profiler wrote, where it did
        rows, source = profiler_rows(info, options, diag)
    return stashed, rows, planes, source


def _slowest(facts: list[StepFacts], n: int) -> list[StepFacts]:
    """Per step of the job its slowest rank's facts, the ``n`` slowest steps, slowest first; the
    graph and step as the lowest rank names them. A step whose device side a rank does not record
    is not ranked (its critical path would run through that work as idle), unless no rank records
    any device work (the steps are then what the report can name)."""
    worst: dict[StepKey | None, StepFacts] = {}
    lowest: dict[StepKey | None, StepFacts] = {}
    if any(f.has_device for f in facts):
        blind = {f.key for f in facts if not f.has_device}
        facts = [f for f in facts if f.key not in blind]
    for f in facts:
        if f.step_ns > 0 and (f.key not in worst or f.step_ns > worst[f.key].step_ns):
            worst[f.key] = f
        if f.key not in lowest or f.rank < lowest[f.key].rank:
            lowest[f.key] = f
    ranked = sorted(worst.values(), key=lambda f: (-f.step_ns, f.key or (-1, -1)))[:n]
    return [dataclasses.replace(f, graph=lowest[f.key].graph, step=lowest[f.key].step) for f in ranked]


def _names_by_lowest_rank(facts: list[StepFacts]) -> dict[tuple[int | None, int | None], StepKey | None]:
    """(graph, step) as a rank names them -> the job's step; where ranks name two steps alike, the
    lower rank's naming (``critical`` names a step as the lowest rank with work in it does)."""
    return {(f.graph, f.step): f.key for f in sorted(facts, key=lambda f: -f.rank)}


def _name(f: StepFacts, several: bool) -> str:
    if f.step is None:
        return "the whole run"
    return f"step {f.step}" + (f" of graph {f.graph}" if several and f.graph is not None else "")


def critical_json(steps: list[SlowStep]) -> list[dict[str, Any]]:
    """The report's ``critical`` key (``schemas/report.schema.json``): per slowest step, its path's
    time per rank and kind and its top what-ifs; null where no device work was recorded."""
    return [{
        "graph": s.graph, "step": s.step, "step_ms": ms(s.step_ns), "slowest_rank": s.slowest_rank,
        "summary": s.summary,
        "path_ms": None if s.found is None else ms(s.found.step_ns),
        "path_by_rank": None if s.found is None else [
            {"rank": rank, "kind": kind, "ms": ms(ns)} for (rank, kind), ns in s.by_rank_and_kind().items()],
        "what_if": None if s.found is None else [
            {"rank": w.rank, "kind": w.kind, "what": change(w), "target": w.target,
             "saved_ms": ms(w.saved_ns)} for w in s.what_if],
    } for s in steps]
