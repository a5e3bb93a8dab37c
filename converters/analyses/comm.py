"""``trace2perfetto comm``: communication per op and rank, collectives across ranks, slow ranks,
clocks (docs/analysis.md). Each rank is read in a worker; only its ops and a few figures per step
come back, and the matching across ranks happens here (``converters.communication``)."""

from __future__ import annotations

import os
import pickle
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from .. import communication
from ..errors import Diagnostics
from ..executor import LOCAL, Where
from ..model import Layer, RankInfo, StepKey
from ..profile import Kind, Options, Profile, aligning, folded, read_profile, summed
from ..spool import Spool, SpoolFile, spooled
from .overlap import overlap_row, step_span


@dataclass(frozen=True, slots=True)
class StepTime:
    """One step of one rank: how long it took, its compute and communication, and the time it
    waited in collectives for slower ranks (suffered) and made faster ranks wait (caused)."""

    rank: int
    graph: int | None  # the graph and step as this rank numbers them
    step: int | None
    step_ns: int
    computing_ns: int | None  # None: no device tasks recorded
    communication_ns: int
    wait_suffered_ns: int = 0
    wait_caused_ns: int = 0
    key: StepKey | None = None  # the step as the job names it (None: the pseudo step)


@dataclass(frozen=True, slots=True)
class SlowRank:
    """One rank's row of the slow-rank table, over the kept steps (means per step)."""

    rank: int
    host: str
    steps: int
    wait_caused_ns: int
    wait_suffered_ns: int
    last_arrivals: int  # collectives in which it arrived last
    mean_step_ns: int
    mean_computing_ns: int | None
    mean_communication_ns: int


@dataclass(frozen=True, slots=True)
class StepSpread:
    """One step of the job across its ranks (``StepKey``: whatever each numbers its graphs): the
    fastest and slowest step time. Named by its step id and its graph's id on its lowest rank."""

    step: int | None
    graph: int | None
    ranks: int
    min_ns: int
    max_ns: int
    slowest_rank: int


@dataclass
class CommReport:
    ops: list[communication.OpComm]
    instances: int  # collectives matched across two ranks or more
    clocks: list[communication.HostClock]
    aligned: bool
    steps: list[StepTime] = field(default_factory=list)
    slow_ranks: list[SlowRank] = field(default_factory=list)  # most wait caused first
    spread: list[StepSpread] = field(default_factory=list)


def comm_report(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    step_marker: str | None = None,
    align: str | None = None,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
    each: Callable[[list[communication.OpComm]], None] | None = None,
) -> CommReport:
    """Communication of every op of every kept rank and step, matched across ranks.

    Per op: the figures of torch_npu's ``communication.json`` (``communication.op_comm``) and, where other
    ranks recorded the same collective, its arrival skew, last rank and this rank's wait for it.
    Per host: its clock offset as the collectives' ends show it (``communication.clock_offsets``); with
    ``align="collectives"`` the skews and waits are measured on the aligned clocks. ``where``: this
    machine or a Dask cluster (``executor.Where``). ``each``: the ops are handed to it step by step
    (every rank's ops of one step) and not kept, so a table of any size streams in flat memory:
    workers keep their ops in a spool file and only one step's are read back at a time.

    Raises:
        UsageError: unknown ranks or graphs, nothing recognisable under ``path``, a bad ``align``.
        InputError: an input file broken beyond recovery.
    """
    aligned = aligning(align)
    options = Options(ranks=ranks, graphs=graphs, steps=steps, kind=Kind.DETAIL,  # detail: the plane tasks
                      step_marker=step_marker)
    profile = Profile.open(path, options, where=where, diag=diag)
    spool = Spool()
    try:
        stashed, times = _read_ranks(profile, spool)
        profile.check_steps()
        infos = profile.ranks
        hosts = communication.host_names(infos)
        clocks = communication.clock_offsets(
            (inst for _, instances in _steps(stashed, spool) for inst in instances), hosts)
        policy = communication.timeline(infos, clocks, aligned)  # the one clock policy: offsets, ranks apart
        communication.say_timeline(profile.diag, policy)
        report = CommReport([], 0, clocks, aligned)
        hand = each or report.ops.extend
        waits = Waits()
        last: dict[int, int] = defaultdict(int)
        for ops, instances in _steps(stashed, spool, policy):
            report.instances += len(instances)
            for rank, count in last_arrivals(instances).items():
                last[rank] += count
            waits.add(ops)
            hand(ops)
    finally:
        spool.close()
    report.steps = waits.of([t for info in infos for t in times[info.rank]])
    report.slow_ranks = slow_ranks_of(report.steps, last, hosts)
    report.spread = spread_of(report.steps)
    return report


def _read_ranks(profile: Profile, spool: Spool
                ) -> tuple[dict[StepKey | None, list[tuple[str, int, int]]], dict[int, list[StepTime]]]:
    """Every rank read by a worker: where each step's ops lie (the step's key -> [(spool file,
    offset, length)] in rank order), and each rank's step times."""
    infos = profile.ranks
    paths = [None if profile.where.remote else spool.new_file() for _ in infos]
    found: dict[int, tuple[str, list[tuple[StepKey | None, int, int]]]] = {}
    times: dict[int, list[StepTime]] = {}

    def collect(index: int, result: tuple) -> None:
        stashed, step_times, data = result
        found[index] = (paths[index] if data is None else spool.adopt(data), stashed)  # remote: spooled here
        times[infos[index].rank] = step_times

    profile.map(rank_comm, lambda index, _: (paths[index],), each=collect)
    by_step: dict[StepKey | None, list[tuple[str, int, int]]] = {}
    for index in sorted(found):
        path, stashed = found[index]
        for step, offset, length in stashed:
            by_step.setdefault(step, []).append((path, offset, length))
    return by_step, times


_AS_RECORDED = communication.Timeline({})  # no offset, no rank apart


def _steps(stashed: dict[StepKey | None, list[tuple[str, int, int]]], spool: Spool,
           policy: communication.Timeline = _AS_RECORDED):
    """Step by step (the pseudo step first, then by graph and step), every rank's ops of the step
    and its collectives, matched under the clock policy (``communication.matched``)."""
    for step in sorted(stashed, key=lambda s: () if s is None else s):
        by_rank: dict[int, list[communication.OpComm]] = {}
        for path, offset, length in stashed[step]:
            for op in pickle.loads(spool.unstash(path, offset, length)):
                by_rank.setdefault(op.rank, []).append(op)
        yield [op for ops in by_rank.values() for op in ops], communication.matched(by_rank, policy)


def rank_comm(info: RankInfo, options: Options, diag: Diagnostics, path: str | None) -> tuple:
    """One rank's ops with their plane-task figures, stashed step by step in its spool file, and
    its step times. Runs in a worker process; with no spool file given (a worker on another
    machine), its own spool's bytes go back too."""
    return spooled(lambda own: _comm_into(info, options, diag, own), path)


def _comm_into(info: RankInfo, options: Options, diag: Diagnostics, path: str) -> tuple:
    stashed: list = []

    def timed(spool: SpoolFile) -> Iterator[tuple[tuple[int, int | None] | None, StepTime]]:
        for batch in read_profile([info], options, diag):
            ops = communication.step_ops(batch)
            if ops:
                stashed.append((batch.key, *spool.stash(pickle.dumps(ops, pickle.HIGHEST_PROTOCOL))))
            if batch.step is None and not batch.figures and all(s.layer is Layer.MEMORY
                                                                 for s in batch.slices):
                continue  # memory records outside every step (counters, allocations): no step
            row = overlap_row(batch)
            yield batch.part, StepTime(batch.rank, batch.graph, batch.step_id, step_span(batch)[1],
                                       row.computing_ns, row.communication_ns, key=batch.key)

    with SpoolFile(path) as spool:
        times = list(folded(timed(spool), lambda a, b: summed(a, b, ("step_ns", "computing_ns",
                                                                        "communication_ns"))))
    return stashed, times


class Waits:
    """Per rank and step of the job (``StepKey``: a graph's second loop is another step): the wait
    suffered (its waits for the last rank) and caused (the others' waits in the collectives where
    it came last); added to step by step."""

    def __init__(self) -> None:
        self.suffered: dict[tuple, int] = defaultdict(int)
        self.caused: dict[tuple, int] = defaultdict(int)

    def add(self, ops: list[communication.OpComm]) -> None:
        """Matched ops holding whole collectives (one step's, or all)."""
        last_op = {op.key: op for op in ops if op.key is not None and op.rank == op.last_rank}
        for op in ops:
            if op.wait_for_last_ns:
                self.suffered[op.rank, op.step_key] += op.wait_for_last_ns
                last = last_op[op.key]
                self.caused[last.rank, last.step_key] += op.wait_for_last_ns

    def of(self, times: list[StepTime]) -> list[StepTime]:
        """``times`` with their waits."""
        return [StepTime(t.rank, t.graph, t.step, t.step_ns, t.computing_ns, t.communication_ns,
                         self.suffered[t.rank, t.key], self.caused[t.rank, t.key], t.key)
                for t in times]


def with_waits(times: list[StepTime], ops: list[communication.OpComm]) -> list[StepTime]:
    """Each step with the wait it suffered and caused (``Waits``), from all the matched ops."""
    waits = Waits()
    waits.add(ops)
    return waits.of(times)


def last_arrivals(instances: Iterable[communication.Instance]) -> dict[int, int]:
    """Per rank, the collectives in which it arrived last (and someone waited)."""
    last: dict[int, int] = defaultdict(int)
    for inst in instances:
        if inst.skew_ns:
            last[inst.last_rank] += 1
    return last


def slow_ranks_of(times: list[StepTime], last: dict[int, int], hosts: dict[int, str]) -> list[SlowRank]:
    """The slow-rank table: ranks by the wait they caused (then mean step time), ``last``: the
    collectives each arrived last in (``last_arrivals``)."""
    by_rank: dict[int, list[StepTime]] = defaultdict(list)
    for t in times:
        by_rank[t.rank].append(t)
    rows = []
    for rank, mine in by_rank.items():
        n = len(mine)
        computing = [t.computing_ns for t in mine if t.computing_ns is not None]
        rows.append(SlowRank(
            rank, hosts[rank], n, sum(t.wait_caused_ns for t in mine), sum(t.wait_suffered_ns for t in mine),
            last[rank], sum(t.step_ns for t in mine) // n,
            sum(computing) // len(computing) if computing else None,
            sum(t.communication_ns for t in mine) // n,
        ))
    return sorted(rows, key=lambda r: (-r.wait_caused_ns, -r.mean_step_ns, r.rank))


def spread_of(times: list[StepTime]) -> list[StepSpread]:
    """Per step of the job (``StepKey``), the fastest and slowest rank's step time."""
    by_step: dict[StepKey | None, list[StepTime]] = defaultdict(list)
    for t in times:
        by_step[t.key].append(t)
    out = []
    for mine in by_step.values():
        slowest = max(mine, key=lambda t: (t.step_ns, -t.rank))
        fastest = min(t.step_ns for t in mine)
        named = min(mine, key=lambda t: t.rank)
        out.append(StepSpread(named.step, named.graph, len({t.rank for t in mine}), fastest, slowest.step_ns,
                              slowest.rank))
    return out
