"""``trace2perfetto critical``: per step, the critical path across ranks and what fixing each piece
of it would save (docs/analysis.md, section 11).

Each rank is read in a worker, which builds its step's dependency graph (``converters.dependency_graph``)
and contracts it to what crosses ranks: the longest local chain between each pair of its
synchronisation points (its collectives' arrivals and completions, its sends and receives) and its
end. Those go to a spool file step by step, as ``comm``'s ops do; the driver reads back one step of
every rank at a time, joins the ranks at their collectives (``communication.match``) and send/receive pairs,
walks the longest path and recomputes the step on that graph for each what-if.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pickle
from array import array
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from .. import communication, dependency_graph, readers
from ..dependency_graph import NO_CHAINS, Contracted, Graph, Node, Segment, StepChains, built, contract, cycle
from ..errors import Diagnostics, UsageError
from ..executor import LOCAL, Where
from ..intervals import is_compute
from ..model import (
    COLLECTIVE,
    RECV,
    SEND,
    SENDRECV,
    Layer,
    RankInfo,
    Slice,
    StepKey,
    StepRecords,
    decoded_args,
)
from ..profile import Kind, Options, Profile, RankWork, TooLarge, read_profile, shifted, whole_steps
from ..select import format_ids
from ..spool import Spool, SpoolFile, spooled
from .host_work import host_compute, note_host_work
from .ops import op_type

__all__ = ["Segment", "StepPath", "TaskTypes", "WhatIf", "critical_report", "keyed_paths", "own_clocks",
           "paths_of", "read_ranks", "record", "stash_step"]

KINDS = ("compute", "communication", "wait", "idle", "host")
# after an op's last profiled arrival, its time where no task of it splits wait from transfer (no
# HCCL plane tasks: profiler level 0, an NCCL kernel): communication or wait, the input cannot say
UNSPLIT = "communication_or_wait"
SEGMENT_KINDS = (*KINDS[:3], UNSPLIT, *KINDS[3:])
NO_DEVICE = "the device side of the step is not recorded on rank {ranks}"
# ``contract`` schedules a rank's step once per communication op over the nodes after it, and holds
# every (completion, arrival) pair one reaches at once (~40 bytes each): past this many ops times
# nodes (rocprof-908's one step: 1,310 x 48,000, 0.2 s in C) or ops squared, the path is left
# unknown rather than taking minutes or filling memory
CONTRACT_BUDGET = 200_000_000
PAIRS_BUDGET = 4_000_000
TOO_LARGE = ("rank {rank}'s step holds {syncs:,} communication ops among {nodes:,} tasks: too many to "
             "contract in memory (mark shorter steps: --step-marker)")


class WhatIf(NamedTuple):
    """One change and the step time it saves, recomputed on the step's graph."""

    rank: int | None  # the rank it applies to; None: every rank
    kind: str  # late_arrival, op_type, overlap_comm
    what: str
    target: str  # the collective's name (late_arrival, overlap_comm) or the op type (op_type)
    saved_ns: int


@dataclass(frozen=True, slots=True)
class StepPath:
    """One step of the job: its span over the kept ranks, its critical path, its what-ifs."""

    graph: int | None  # the graph id where the profile has graphs (as the lowest rank numbers it)
    step: int | None  # the step id (None: the pseudo step)
    step_ns: int
    start_ns: int
    path: list[Segment]
    what_if: list[WhatIf] = field(default_factory=list)
    # collectives (and sends or receives) whose matching across ranks contradicted a rank's own order
    # (a cycle: ``_join``), each rank's side left to complete after its own arrival
    unjoined: int = 0
    # why the path is unknown (a rank whose device tasks of the step are not recorded: the path and
    # the what-ifs would run through work the input lacks, shown as idle); None: known
    unknown: str | None = None
    host_work: bool = False  # its compute is host operators (a CPU-only job: ``host_work``)


# -- one rank's step, in a worker -----------------------------------------------------------------

class Sync(NamedTuple):
    """One communication op of one rank: its arrival (a sink of the local graph) and completion (a
    source), how the ranks name it, and what the driver needs to join it."""

    key: communication.Key | None  # None: a send or receive
    name: str
    arrival: int  # local node indices
    done: int
    start_ns: int
    end_ns: int
    sync_ns: int | None  # its wait before its first transit (None: no plane tasks)
    transit_ns: int | None  # its time in transit (None: no plane tasks)
    outside: bool  # its tasks name a rank outside the kept ranks: a participant the profile lacks
    group: str  # the communicator (``communication.group_of``)
    peer: int | None  # a send's or receive's other rank, where its tasks name it
    p2p: str  # "send", "receive", "both" (a batched send and receive); "" for a collective


class RankStep(NamedTuple):
    """What crosses ranks of one rank's step: its synchronisation points, the contracted local
    chains between them (their lags), and the slices each chain holds, by source (kept apart in the
    spool: the driver reads only those of the ranks its path crosses)."""

    rank: int
    graph: int | None
    step: int | None
    key: StepKey | None
    first_ns: int
    end: int  # the local node of the rank's end
    syncs: list[Sync]
    edges: list[Contracted]
    chains: StepChains
    has_device: bool = True  # False: its device tasks are not recorded (``StepRecords.has_device``)
    host_work: bool = False  # True: no device work recorded, its host operators are the compute
    too_large: str | None = None  # why it was not contracted (``CONTRACT_BUDGET``); None: it was
    last_ns: int = 0  # its last work's end


def rank_step(batch: StepRecords, kept: frozenset[int] | None = None,
              type_of: Callable[[Slice], str] = op_type) -> RankStep | None:
    """One rank's step as a dependency graph, contracted (``converters.dependency_graph.contract``);
    None without device work. ``kept``: the ranks read (None: every rank its ops name);
    ``type_of``: a device task's op type."""
    tasks = [s for s in batch.slices if s.layer is Layer.STREAM and is_compute(s.task_type)]
    host_work = not batch.has_device and not tasks and bool(tasks := host_compute(batch.slices))
    pairs = communication.op_tasks(batch)
    ops = [communication.op_comm(op, mine, batch.graph, batch.step_id, batch.key) for op, mine in pairs]
    if not tasks and not ops:
        return None
    launches = [] if host_work else _launches(batch.slices, tasks, pairs)  # host work launches nothing
    nodes = len(launches) + len(tasks) + 2 * len(ops)  # the graph's: an op is an arrival and a completion
    if len(ops) * nodes > CONTRACT_BUDGET or len(ops) ** 2 > PAIRS_BUDGET:  # known before it is built
        return _too_large(batch, launches + tasks, ops, nodes, host_work)
    graph, syncs = _rank_graph(batch.rank, tasks, pairs, ops, launches, kept, type_of)
    return reduced(RankStep(batch.rank, batch.graph, batch.step_id, batch.key, 0, 0, syncs, [], NO_CHAINS,
                            batch.has_device, host_work), graph)


def _too_large(batch: StepRecords, slices: list[Slice], ops: list[communication.OpComm], nodes: int,
               host_work: bool) -> RankStep:
    """A step ``reduced`` would not contract, with the bounds its graph would have had and why."""
    first = min([s.start_ns for s in slices] + [op.start_ns for op in ops])
    last = max([s.end_ns for s in slices] + [op.start_ns + op.elapse_ns for op in ops])
    why = TOO_LARGE.format(rank=batch.rank, syncs=len(ops), nodes=nodes)
    return RankStep(batch.rank, batch.graph, batch.step_id, batch.key, first, 0, [], [], NO_CHAINS,
                    batch.has_device, host_work, too_large=why, last_ns=last)


def reduced(step: RankStep, graph: Graph) -> RankStep:
    """``step`` (its rank, step and syncs) with its graph's start, end and contracted chains, their
    slices the graph's own nodes. A graph past ``CONTRACT_BUDGET`` is never built (``rank_step``)."""
    nodes = graph.nodes
    step = step._replace(first_ns=min(n.start_ns for n in nodes), last_ns=max(n.end_ns for n in nodes))
    ends = [i for i, n in enumerate(graph.nodes) if n.kind]
    end = graph.add_lagged(Node(step.rank, "", "end", max(graph.nodes[i].end_ns for i in ends), 0),
                           [(i, 0) for i in dependency_graph.unfollowed(graph, ends)])  # at the last end
    syncs = step.syncs
    edges, chains = contract(graph, [s.done for s in syncs], [s.arrival for s in syncs] + [end],
                             {s.arrival: s.done for s in syncs})
    return step._replace(end=end, edges=edges, chains=StepChains(graph.nodes, chains))


def _launches(slices: list[Slice], tasks: list[Slice], pairs: list) -> list[Slice]:
    """The host slices that launched device work of the step (their arrows end on it)."""
    landing = {f for s in tasks for f in s.flows_in} | {f for op, _ in pairs for f in op.flows_in}
    return [s for s in slices if s.layer is Layer.HOST and not landing.isdisjoint(s.flows_out)]


def _rank_graph(rank: int, tasks: list[Slice], pairs: list, ops: list[communication.OpComm],
                launches: list[Slice], kept: frozenset[int] | None, type_of: Callable[[Slice], str]
                ) -> tuple[Graph, list[Sync]]:
    """Device work in stream order, each after the latest work that ended before it began on the
    rank (no holes in a path) and after its host launch; each host launch after the one before on
    its thread and after the latest device work that ended before it began (a host that waited for
    the device, in a sync the trace does not show); each op an arrival and a completion. The
    edges are made in C (``dependency_graph.rank_edges``), the nodes here in the order it takes."""
    op_slices = [s for s, _ in pairs]
    lanes: dict[tuple[str, str], int] = {}  # a host thread and a device stream apart
    arrows: dict[int, int] = {}
    hosts, devices = len(launches), len(tasks)

    def numbered(flows: tuple[int, ...]) -> list[int]:
        return [arrows.setdefault(f, len(arrows)) for f in flows]

    kinds = [dependency_graph.HOST] * hosts + [dependency_graph.TASK] * devices
    items = dependency_graph.RankItems(
        array("q", kinds + [dependency_graph.OP] * len(ops)),
        array("q", [s.start_ns for s in launches + tasks] + [op.start_ns for op in ops]),
        array("q", [s.start_ns for s in launches + tasks + op_slices]),
        array("q", [s.dur_ns for s in launches + tasks] + [op.elapse_ns for op in ops]),
        array("q", [0] * hosts + [s.end_ns for s in tasks + op_slices]),
        array("q", [lanes.setdefault((s.lane, "host"), len(lanes)) for s in launches]
              + [lanes.setdefault((s.lane, "device"), len(lanes)) for s in tasks + op_slices]),
        *_packed([[]] * hosts + [numbered(s.flows_in) for s in tasks + op_slices]),
        *_packed([numbered(s.flows_out) for s in launches] + [[]] * (devices + len(ops))))
    order, offsets, preds, lags = dependency_graph.rank_edges(items)
    graph = Graph()
    nodes, keys, syncs = graph.nodes, communication.keys(ops), []
    for i in order:
        if i < hosts:
            s = launches[i]
            nodes.append(Node(rank, "host", s.name, s.start_ns, s.dur_ns))
        elif i < hosts + devices:
            s = tasks[i - hosts]
            nodes.append(Node(rank, "compute", s.name, s.start_ns, s.dur_ns, type_of(s)))
        else:
            k = i - hosts - devices
            op, (_, op_tasks), key = ops[k], pairs[k], keys[k]
            arrival = len(nodes)
            nodes += [Node(rank, "", op.name, op.start_ns, 0),
                      Node(rank, "communication", op.name, op.start_ns, op.elapse_ns)]
            named = _named(rank, op_tasks)
            syncs.append(Sync(key, op.name, arrival, arrival + 1, op.start_ns, op.start_ns + op.elapse_ns,
                              op.sync_ns, op.transit_ns, kept is not None and not named.keys() <= kept,
                              op.group, next(iter(named), None) if key is None else None,
                              "" if key is not None else _P2P_KINDS.get(op.kind, "send")))
    graph.preds = [list(zip(preds[a:b], lags[a:b], strict=True)) for a, b in itertools.pairwise(offsets)]
    return graph, syncs


def _packed(per_item: list[list[int]]) -> tuple[array, array]:
    """Lists of ints as ``RankItems`` holds them: their offsets and their values, one after another."""
    return array("q", [0, *itertools.accumulate(map(len, per_item))]), array("q", itertools.chain(*per_item))


def _named(rank: int, tasks: list[Slice]) -> dict[int, None]:
    """The other ranks an op's tasks name (src and dst rank), in the order they name them (a send's
    or receive's peer: the first)."""
    named: dict[int, None] = {}
    for t in tasks:
        args = t.args if type(t.args) is dict else decoded_args(t.args) if t.args is not None else {}
        if not isinstance(args, dict):
            continue
        for name in ("dst rank", "src rank"):
            value = args.get(name)
            if type(value) is int and value not in (rank, communication.NO_RANK):
                named[value] = None
    return named


_P2P_KINDS = {RECV: "receive", SENDRECV: "both", SEND: "send"}  # a Sync's p2p by what its op does


def rank_critical(info: RankInfo, options: Options, diag: Diagnostics, shift: int, kept: frozenset[int],
                  path: str | None) -> tuple:
    """One rank's contracted steps, stashed step by step in its spool file (``comm.rank_comm``'s
    way). Runs in a worker process."""
    return spooled(lambda own: _critical_into(info, options, diag, shift, kept, own), path)


def _critical_into(info: RankInfo, options: Options, diag: Diagnostics, shift: int, kept: frozenset[int],
                   path: str) -> tuple:
    stashed: list = []
    types = TaskTypes(info)
    with SpoolFile(path) as spool:  # a path runs through no memory record: none is read
        for batch in whole_steps(read_profile([info], dataclasses.replace(options, memory=False), diag)):
            stash_step(spool, batch, shift, kept, stashed, types)
    return (stashed,)


class TaskTypes:
    """A rank's device tasks' op types as ``ops --by type`` names them, where its reader finds
    them in another file than the one it reads (torch_npu's kernel_details.csv beside
    trace_view.json, ``readers.kernel_types``), else from the task itself (``ops.op_type``). That
    file is read a step at a time as the rank's steps come, in time order: only its steps whose
    time overlaps the step's tasks are held."""

    def __init__(self, info: RankInfo) -> None:
        self._steps = readers.kernel_types(info, Diagnostics())  # its warnings are ops' to give
        self._next = next(self._steps, None)  # the file is read (filed by step) here, once
        self._held: list[tuple[int, int, dict[tuple[int, str], str]]] = []

    def of(self, batch: StepRecords, shift: int = 0) -> Callable[[Slice], str]:
        """The op type of a task of ``batch`` (read on the rank's clock), once shifted by ``shift``."""
        starts = [s.start_ns for s in batch.slices if s.layer is Layer.STREAM]
        if not starts or (self._next is None and not self._held):
            return op_type
        first, last = min(starts), max(starts)
        while self._next is not None and self._next[0] <= last:
            self._held.append(self._next)
            self._next = next(self._steps, None)
        self._held = [held for held in self._held if held[1] >= first]
        known = [types for _, _, types in self._held]

        def type_of(s: Slice) -> str:
            key = (s.start_ns - shift, s.name)
            return next((types[key] for types in known if key in types), None) or op_type(s)
        return type_of


def stash_step(spool: SpoolFile, batch: StepRecords | TooLarge, shift: int, kept: frozenset[int],
               stashed: list, types: TaskTypes) -> None:
    """One rank's step contracted (``rank_step``, on its clock shifted by ``shift``, its tasks' op
    types from ``types``) into ``spool``, its place added to ``stashed``; nothing where it has no
    device work. A pseudo step too large to hold (``TooLarge``): its bounds, and why no path."""
    if type(batch) is TooLarge:
        found = None if batch.first_ns is None or batch.last_ns is None else RankStep(
            batch.rank, None, None, None, batch.first_ns + shift, 0, [], [], NO_CHAINS, batch.has_device,
            too_large=batch.why, last_ns=batch.last_ns + shift)
    else:
        found = rank_step(shifted(batch, shift) if shift else batch, kept, types.of(batch, shift))
    if found is not None:
        light = spool.stash(pickle.dumps(found._replace(chains=NO_CHAINS), pickle.HIGHEST_PROTOCOL))
        nodes = spool.stash(pickle.dumps(found.chains, pickle.HIGHEST_PROTOCOL))
        stashed.append((batch.key, light, nodes))


# -- across ranks, in the driver ------------------------------------------------------------------

def critical_report(
    path: str | os.PathLike[str] | Profile,
    *,
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    step_marker: str | None = None,
    align: str | None = None,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
) -> Iterator[StepPath]:
    """Per step of the job (the pseudo step first, then in step order), its critical path over the
    kept ranks and its what-ifs, largest saving first. ``path``: a profile's folder, or an open
    ``Profile`` (its selection then stands; read in detail whatever its kind). One step of every
    rank is in memory at a time.

    Raises:
        UsageError: unknown ranks or graphs, nothing recognisable under ``path``, a bad ``align``;
            ranks on clocks of their own kept with others and not aligned (``--align collectives``
            aligns those that share collectives).
        InputError: an input file broken beyond recovery.
    """
    if isinstance(path, Profile):  # its selection, read in detail (the device tasks)
        profile = dataclasses.replace(path, options=dataclasses.replace(path.options, kind=Kind.DETAIL))
    else:
        options = Options(ranks=ranks, graphs=graphs, steps=steps, kind=Kind.DETAIL,
                          step_marker=step_marker)
        profile = Profile.open(path, options, where=where, diag=diag)
    shifts = profile.timeline(align)
    _check_one_timeline(profile.ranks)  # after the clock policy: the ranks it could not align
    for _, found in keyed_paths(profile, shifts):
        warn_unjoined(profile.diag, found)
        warn_unknown(profile.diag, found)
        note_host_work(profile.diag, found.host_work)
        yield found


def warn_unjoined(diag: Diagnostics, found: StepPath) -> None:
    """Say where the step's path left matches of collectives out (``_join``)."""
    if found.unjoined:
        diag.warn("critical_unjoined", f"step {found.step}: {found.unjoined} collective(s) matched across "
                  "ranks against a rank's own order of its collectives (one ran an op of another step "
                  "late); there the critical path waits only on the op's own rank")


def warn_unknown(diag: Diagnostics, found: StepPath) -> None:
    """Say, once per kind, where the input cannot give the path or its split of an op."""
    if found.unknown is not None:
        diag.warn("critical_unknown", f"step {found.step}: {found.unknown}, so its critical path is "
                  "unknown (that work would show as idle): no figures or what-ifs for it")
    elif any(s.kind == UNSPLIT for s in found.path):
        diag.note("critical_unsplit", "ops without HCCL plane tasks (profiler level 0) or other tasks that "
                  "split their wait from their transfer: their time after the last profiled arrival is "
                  f"'{UNSPLIT}' in the JSON, and Communication and Wait are unknown (-) where the path "
                  "crosses one")


def keyed_paths(profile: Profile, shifts: dict[int, int]) -> Iterator[tuple[StepKey | None, StepPath]]:
    """``critical_report`` of a profile whose clocks are already aligned (``shifts``: ns to add to
    each rank's times, as ``Profile.align`` returned them), each step with its key as the
    conversion files it (``convert --critical-path`` draws the paths in the steps' chunks). The
    profile's options are read as they are: give it ``Kind.DETAIL``."""
    kept = frozenset(info.rank for info in profile.ranks)
    spool = Spool()
    try:
        stashed = read_ranks(profile, spool, rank_critical,
                             lambda index, info: (shifts.get(info.rank, 0), kept))
        profile.check_steps()
        yield from keyed(spool, stashed)
    finally:
        spool.close()


def own_clocks(infos: list[RankInfo], aligned: Collection[int] = ()) -> list[int]:
    """The ranks whose times cannot be laid on one timeline with the others' (after ``--align
    collectives``, which marks the ranks it aligned as on wall time, or those not in ``aligned``):
    a path crosses ranks only where they can. A rank on a clock of its own (MindSpore 1.x without
    host_start.log: device ticks since the device started) beside others made a step span of days,
    nearly all idle."""
    if len(infos) < 2:
        return []
    return [info.rank for info in infos if not info.wall_clock and info.rank not in aligned]


def _check_one_timeline(infos: list[RankInfo]) -> None:
    if own := own_clocks(infos):
        raise UsageError(f"rank {format_ids(own)}: times on a clock of its own (no wall time) that no "
                         "collective ties to the other ranks' (no offset to estimate), so no path runs "
                         "across them: keep ranks that share collectives or a clock (--ranks)")


def keyed(spool: Spool, stashed: dict) -> Iterator[tuple[StepKey | None, StepPath]]:
    """Per step of the ranks' stashes (``read_ranks``; the pseudo step first, then in step order),
    its key and its critical path with what-ifs."""
    for step in sorted(stashed, key=lambda s: () if s is None else s):
        found = [pickle.loads(spool.unstash(file, *light)) for file, light, _ in stashed[step]]
        yield step, step_path(found, _nodes_in(spool, found, stashed[step]))


def paths_of(spool: Spool, stashed: dict) -> Iterator[StepPath]:
    """``keyed`` without the keys: each step's critical path and what-ifs, in step order."""
    for _, found in keyed(spool, stashed):
        yield found


def _nodes_in(spool: Spool, found: list[RankStep], stashed: list) -> Callable[[RankStep], StepChains]:
    """Where each rank's chain nodes of the step lie: read only for the ranks the path crosses."""
    held = {r.rank: (file, nodes) for r, (file, _, nodes) in zip(found, stashed, strict=True)}
    return lambda r: pickle.loads(spool.unstash(held[r.rank][0], *held[r.rank][1]))


def read_ranks(profile: Profile, spool: Spool, work: RankWork, args: Callable[[int, RankInfo], tuple],
               each: Callable[[int, list], None] | None = None) -> dict:
    """Every rank's contracted steps by step: ``work(info, options, diag, *args(index, info), path)``
    stashes them (``stash_step``) in ``path`` and returns ``spooled``'s (their places, *more, data);
    ``each(index, more)``: what else it found, in rank order."""
    infos = profile.ranks
    paths = [None if profile.where.remote else spool.new_file() for _ in infos]
    by_step: dict[StepKey | None, list[tuple[str, tuple[int, int], tuple[int, int]]]] = defaultdict(list)
    found: dict[int, tuple[str, list]] = {}

    def collect(index: int, result: tuple) -> None:
        stashed, *more, data = result
        found[index] = (paths[index] if data is None else spool.adopt(data), stashed)
        if each is not None:
            each(index, more)

    profile.map(work, lambda index, info: (*args(index, info), paths[index]), each=collect, ordered=True)
    for index in sorted(found):
        file, stashed = found[index]
        for step, light, nodes in stashed:
            by_step[step].append((file, light, nodes))
    return by_step


class _Joined(NamedTuple):
    graph: Graph
    ends: list[int]  # per rank, its end node
    edge_of: dict[tuple[int, int], tuple[RankStep, Contracted]]  # (source, sink) in graph -> its chain
    dones: dict[tuple[int, str], list[int]]  # (rank, op name) -> its completion's nodes (wait, communication)
    late: list[tuple[int, int, str, int]]  # per collective with a last rank: (rank, node, name, delay)
    unjoined: int  # matches left out: they made a cycle


def step_path(found: list[RankStep], nodes_of: Callable[[RankStep], StepChains] | None = None
              ) -> StepPath:
    """One step of every rank joined (``_join``), its longest path and its what-ifs. ``nodes_of``:
    the slices of a rank's chains, where they are not in its ``RankStep``."""
    if large := [r for r in found if r.too_large]:  # not contracted: no path, and it is said why
        lowest, first = min(found, key=lambda r: r.rank), min(r.first_ns for r in found)
        return StepPath(lowest.graph, lowest.step, max(r.last_ns for r in found) - first, first, [], [],
                        unknown=large[0].too_large)
    joined = _join(found)
    graph = joined.graph
    durs = graph.durations()
    starts = graph.schedule(durs)
    end_node = max(joined.ends, key=lambda i: (starts[i], -i))
    first = min(r.first_ns for r in found)
    end_ns = starts[end_node]
    chain = graph.chain(end_node, starts, durs)
    lowest = min(found, key=lambda r: r.rank)
    blind = [r.rank for r in found if not r.has_device and not r.host_work]
    if blind:  # its path would cross the work the input lacks as idle: unknown, and not ranked
        return StepPath(lowest.graph, lowest.step, end_ns - first, first, [], [], joined.unjoined,
                        NO_DEVICE.format(ranks=format_ids(blind)))
    path = _path(joined, chain, starts, durs, first, end_ns, nodes_of or (lambda r: r.chains))
    return StepPath(lowest.graph, lowest.step, end_ns - first, first, path,
                    what_ifs(joined, chain, path, end_ns, starts), joined.unjoined,
                    host_work=any(r.host_work for r in found))


def _join(found: list[RankStep]) -> _Joined:
    """The step's graph across ranks: per rank its syncs and end, the contracted chains between
    them, each collective's completion after every participant's arrival (through one join node
    per instance: edges linear in the ranks), each receive's after its send's. Where that makes a
    cycle (the k-th instance of a collective matched across ranks that ran their collectives in
    different orders: an NCCL kernel of one step run after the next one began on one rank only),
    the matches on it are left out, one cycle at a time: each side completes after its own arrival."""
    unjoined: set = set()
    while True:
        step = _step_graph(found, unjoined)
        try:
            return step.joined(found, len(unjoined))
        except ValueError:
            crossing = {step.crossing[n] for n in cycle(len(step.nodes), step.preds) if n in step.crossing}
            if not crossing - unjoined:
                raise  # a cycle no match closes: a bug
            unjoined |= crossing


def _step_graph(found: list[RankStep], unjoined: set) -> _StepGraph:
    """``_join``'s graph with the matches in ``unjoined`` left out (a collective by its key, a send or
    receive by (rank, its arrival))."""
    step = _StepGraph()
    for r in found:
        for s in r.syncs:
            step.local[r.rank, s.arrival] = step.add(Node(r.rank, "", s.name, s.start_ns, 0), [])
        step.local[r.rank, r.end] = step.add(Node(r.rank, "", "end", 0, 0), [])
    syncs = {r.rank: [_light(r, s) for s in r.syncs if s.key is not None] for r in found}
    instances = [inst for inst in communication.match(syncs) if inst.key not in unjoined]
    joins = {inst.key: step.add(Node(inst.last_rank, "", inst.key.name, max(inst.starts.values()), 0),
                                [(step.arrival(found, rank, inst.key), 0) for rank in inst.starts])
             for inst in instances}
    step.crossing.update({node: key for key, node in joins.items()})
    members = {inst.key: inst for inst in instances}
    partner = {side: other for side, other in _pairs(found).items() if side not in unjoined}
    for r in found:
        for s in r.syncs:
            inst = members.get(s.key) if s.key is not None else None
            if inst is not None:
                step.complete(r, s, [joins[s.key]], max(inst.starts.values()))
                if inst.last_rank == r.rank and inst.skew_ns:
                    step.late.append((r.rank, step.local[r.rank, s.arrival], s.name,
                                      s.start_ns - sorted(inst.starts.values())[-2]))
            elif (r.rank, s.arrival) in partner:
                step.complete_pair(r, s, *partner[r.rank, s.arrival])
            else:
                step.complete(r, s, [step.local[r.rank, s.arrival]], s.start_ns)
    return step


class _StepGraph:
    """The step's graph across ranks as it is built: nodes in any order, then ``built``."""

    def __init__(self) -> None:
        self.nodes: list[Node] = [Node(-1, "", "start", 0, 0)]  # node 0: the step's origin, time 0
        self.preds: list[list[tuple[int, int]]] = [[]]
        self.local: dict[tuple[int, int], int] = {}  # (rank, local node) -> its node here
        self.dones: dict[tuple[int, str], list[int]] = defaultdict(list)
        self.late: list[tuple[int, int, str, int]] = []
        self.arrivals: dict[tuple[int, communication.Key], int] | None = None
        self.crossing: dict[int, object] = {}  # a node that joins ranks -> its match (_step_graph's)

    def add(self, node: Node, edges: list[tuple[int, int]]) -> int:
        self.nodes.append(node)
        self.preds.append(edges)
        return len(self.nodes) - 1

    def arrival(self, found: list[RankStep], rank: int, key: communication.Key) -> int:
        if self.arrivals is None:
            self.arrivals = {(r.rank, s.key): self.local[r.rank, s.arrival]
                             for r in found for s in r.syncs if s.key is not None}
        return self.arrivals[rank, key]

    def complete(self, r: RankStep, s: Sync, after: list[int], latest: int) -> None:
        """The op's completion on its rank: after ``after`` (arrivals, or a collective's join) at
        ``latest``, its wait, then its communication, to its observed end."""
        post = s.end_ns - latest
        wait = _wait_share(s, latest, max(post, 0))
        kind = "communication" if wait is not None else UNSPLIT
        wait = wait or 0
        waiting = self.add(Node(r.rank, "wait", s.name, latest, wait), [(p, min(post, 0)) for p in after])
        done = self.add(Node(r.rank, kind, s.name, latest + wait, max(post, 0) - wait), [(waiting, 0)])
        self.local[r.rank, s.done] = done
        self.dones[r.rank, s.name] += [waiting, done]

    def complete_pair(self, r: RankStep, s: Sync, other: RankStep, theirs: Sync) -> None:
        """A receive completes after its send arrived; a send after its receive, where it ended
        after that arrival (a rendezvous, as HCCL's); the later of the two arrived late."""
        after, latest = [self.local[r.rank, s.arrival]], s.start_ns
        if s.p2p != "send" or s.end_ns > theirs.start_ns:
            after.append(self.local[other.rank, theirs.arrival])
            latest = max(latest, theirs.start_ns)
            if theirs.start_ns < s.start_ns and (s.p2p != "receive" or s.end_ns > theirs.start_ns):
                delay = s.start_ns - theirs.start_ns
                self.late.append((r.rank, self.local[r.rank, s.arrival], s.name, delay))
        self.complete(r, s, after, latest)
        self.crossing[self.dones[r.rank, s.name][-2]] = (r.rank, s.arrival)  # its wait: the edge in

    def joined(self, found: list[RankStep], unjoined: int) -> _Joined:
        """The graph with each rank's contracted chains between its points.

        Raises:
            ValueError: it has a cycle.
        """
        edge_of = {}
        for r in found:
            for c in r.edges:
                source = 0 if c.source is None else self.local[r.rank, c.source]
                sink = self.local[r.rank, c.sink]
                self.preds[sink].append((source, c.lag_ns))
                edge_of[source, sink] = (r, c)
        graph, where = built(self.nodes, self.preds)
        ends = [where[self.local[r.rank, r.end]] for r in found]
        return _Joined(graph, ends, {(where[a], where[b]): v for (a, b), v in edge_of.items()},
                       {op: [where[i] for i in mine] for op, mine in self.dones.items()},
                       [(rank, where[i], name, delay) for rank, i, name, delay in self.late], unjoined)


def _wait_share(s: Sync, latest: int, post: int) -> int | None:
    """The part of an op after its last (profiled) arrival that waits: where participants are
    outside the kept ranks, all but its transit (at its end); else its wait before its first
    transit that follows that arrival (the handshake). None where the op has no tasks to say
    (no plane tasks: neither its transit nor whether it waits for ranks the profile lacks)."""
    if s.outside:  # its tasks named them: it has tasks
        return post - min(post, s.transit_ns or 0)
    return None if s.sync_ns is None else min(max(s.start_ns + s.sync_ns - latest, 0), post)


def _light(r: RankStep, s: Sync) -> communication.OpComm:
    """A sync as ``communication.match`` takes an op; its key is made again from the name and group (or
    from what it does and its sequence number)."""
    key, dur = s.key, s.end_ns - s.start_ns
    kind, seq = (key.name, key.occurrence) if key.by_seq else (COLLECTIVE, None)
    return communication.OpComm(r.rank, r.graph, r.step, key.group, s.name, s.start_ns, dur, r.key, kind=kind,
                           seq=seq)


def _pairs(found: list[RankStep]) -> dict[tuple[int, int], tuple[RankStep, Sync]]:
    """Each send, receive or batched pair's other side, by (rank, its arrival node): the k-th send
    from a to b pairs with the k-th receive on b from a (batches: the k-th both ways). The other
    rank is the one its tasks name, else the other of the two ranks of the step that ran point-to-
    point ops on its group."""
    on_group: dict[str, set[int]] = defaultdict(set)
    for r in found:
        for s in r.syncs:
            if s.p2p:
                on_group[s.group].add(r.rank)
    queues: dict[tuple[str, int, int], list[tuple[RankStep, Sync]]] = defaultdict(list)
    for r in found:
        for s in r.syncs:
            peer = s.peer
            if s.p2p and peer is None and len(on_group[s.group]) == 2:
                peer = next(rank for rank in on_group[s.group] if rank != r.rank)
            if s.p2p and peer is not None:
                src, dst = (peer, r.rank) if s.p2p == "receive" else (r.rank, peer)
                queues[s.p2p, src, dst].append((r, s))
    out = {}
    for (kind, src, dst), mine in queues.items():
        if kind == "receive":
            continue
        others = queues.get(("receive", src, dst) if kind == "send" else ("both", dst, src), [])
        for (r, s), (o, t) in zip(mine, others, strict=False):
            out[r.rank, s.arrival] = (o, t)
            out[o.rank, t.arrival] = (r, s)
    return out


def _path(joined: _Joined, chain: list[int], starts: list[int], durs: list[int], first: int,
          end_ns: int, nodes_of: Callable[[RankStep], StepChains]) -> list[Segment]:
    """The longest path as segments: each contracted edge opened into its local chain of slices."""
    items: list[tuple[Node, int, int]] = []
    graph = joined.graph
    loaded: dict[int, StepChains] = {}
    for a, b in zip(chain, chain[1:], strict=False):
        held = joined.edge_of.get((a, b))
        if held is not None:
            r, c = held
            if r.rank not in loaded:
                loaded[r.rank] = nodes_of(r)
            nodes = loaded[r.rank].chain(c.source, c.sink)
            inner = nodes[1:] if c.source is not None else nodes  # its source is the completion
            items += [(node, node.start_ns, node.dur_ns) for node in inner]
        else:
            node = graph.nodes[b]
            items.append((node, starts[b], durs[b]))
    return dependency_graph.segments(items, first, end_ns)


def what_ifs(joined: _Joined, chain: list[int], path: list[Segment], end_ns: int, observed: list[int]
             ) -> list[WhatIf]:
    """Each what-if recomputed on the step's graph (the same lags; ``observed``: its schedule
    unchanged), those that save time, largest saving first."""
    graph = joined.graph
    durs = graph.durations()
    schedules = dependency_graph.Schedules(graph)
    found: list[WhatIf] = []

    def end_with(**change) -> int:
        starts = schedules.starts(**change)
        return max(starts[i] + durs[i] for i in joined.ends if starts[i] != dependency_graph.NEVER)

    on_chain = set(chain)
    for rank, node, name, delay in joined.late:
        if node not in on_chain:
            continue  # a change off the longest path leaves it as long: it saves nothing
        lags = _delay_removed(joined, observed, durs, rank, node, delay)
        saved = end_ns - (end_with(lags=lags) if lags else end_with(shift={node: -delay}))
        what = f"rank {rank} arrives at {name} with the others"
        found.append(WhatIf(rank, "late_arrival", what, name, saved))
    on_path = {(s.rank, s.name) for s in path if s.kind in ("communication", "wait", UNSPLIT)}
    for (rank, name) in sorted(on_path):
        nodes = joined.dones[rank, name]
        saved = end_ns - end_with(durs=dict.fromkeys(nodes, 0))
        found.append(WhatIf(rank, "overlap_comm", f"{name} on rank {rank} fully hidden", name, saved))
    shorter_lags: dict[tuple[int, str], dict[tuple[int, int], int]] = defaultdict(dict)  # its edges' lags
    for pair, (r, c) in joined.edge_of.items():
        for op_type_, lag in c.by_type.items():
            shorter_lags[r.rank, op_type_][pair] = lag
    for rank, op_type_ in sorted(_path_types(joined, chain)):
        saved = end_ns - end_with(lags=shorter_lags[rank, op_type_])
        found.append(WhatIf(rank, "op_type", f"every {op_type_} on rank {rank} 10% shorter", op_type_, saved))
    return sorted((w for w in found if w.saved_ns > 0), key=lambda w: (-w.saved_ns, w.kind, w.target))


def _delay_removed(joined: _Joined, observed: list[int], durs: list[int], rank: int, arrival: int,
                   delay: int) -> dict[tuple[int, int], int]:
    """The lags of ``rank``'s chains without its delay before ``arrival``: the work that made it
    late lies between the chain's source and that arrival, so every chain of the rank from a
    source that ended before that work began (``delay`` before the arrival) to a point at or after
    the arrival is ``delay`` shorter, the rank's later work moved up with it; a point inside the
    late work (another op the rank called during it: on a CPU job, the call of the collective whose
    execution arrives late) moves up to where that work began, no further (a lag never drops below
    0: such a chain is at least that long). Empty where no chain qualifies."""
    began = observed[arrival] - delay
    out = {}
    for (source, sink), (r, c) in joined.edge_of.items():
        if r.rank != rank or observed[source] + durs[source] > began or observed[sink] <= began:
            continue
        cut = min(delay, observed[sink] - began)
        if c.lag_ns >= cut:
            out[source, sink] = c.lag_ns - cut
    return out


def _path_types(joined: _Joined, chain: list[int]) -> set[tuple[int, str]]:
    """(rank, op type) of the compute slices on the path: those of its contracted chains."""
    out = set()
    for a, b in zip(chain, chain[1:], strict=False):
        held = joined.edge_of.get((a, b))
        if held is not None:
            out.update((held[0].rank, op_type) for op_type in held[1].by_type)
    return out


# -- printing -------------------------------------------------------------------------------------

def record(step_path: StepPath) -> dict:
    """The JSON object of one step (schemas/critical.schema.json); a step whose path is unknown has
    null span, path and what-ifs, and says why."""
    if step_path.unknown is not None:
        return {"graph": step_path.graph, "step": step_path.step, "step_us": None, "start_us": None,
                "path": None, "what_if": None, "unknown": step_path.unknown}
    return {
        "graph": step_path.graph, "step": step_path.step, "step_us": step_path.step_ns / 1000,
        "start_us": step_path.start_ns / 1000,
        "path": [{"rank": s.rank, "kind": s.kind, "name": s.name, "start_us": s.start_ns / 1000,
                  "dur_us": s.dur_ns / 1000} for s in step_path.path],
        "what_if": [{"rank": w.rank, "kind": w.kind, "what": w.what, "target": w.target,
                     "saved_us": w.saved_ns / 1000} for w in step_path.what_if],
    }


NOTE = ("(per step: the critical path's time per kind, the ranks it crosses, the three what-ifs that save "
        "most; --format json: every segment and what-if)")
COLUMNS = ["Graph", "Step", "Step(us)", *(f"{k.capitalize()}(us)" for k in KINDS), "Ranks on path",
           "What-if 1", "What-if 2", "What-if 3"]


def table_record(step_path: StepPath) -> dict:
    """One line per step: the path's time per kind and its ranks, the top three what-ifs; unknown
    (``-``) where the input cannot give them: every figure of a step whose path is unknown, and
    Communication and Wait where the path holds an op that nothing splits (``UNSPLIT``)."""
    if step_path.unknown is not None:
        return {"Graph": step_path.graph, "Step": step_path.step, "Step(us)": None,
                **{f"{k.capitalize()}(us)": None for k in KINDS}, "Ranks on path": None,
                **{f"What-if {i + 1}": None for i in range(3)}}
    per_kind: dict[str, int | None] = dict.fromkeys(SEGMENT_KINDS, 0)
    for s in step_path.path:
        per_kind[s.kind] += s.dur_ns
    if per_kind.pop(UNSPLIT):
        per_kind["communication"] = per_kind["wait"] = None
    ranks = sorted({s.rank for s in step_path.path if s.rank >= 0})
    tops = [f"{w.what}: -{w.saved_ns / 1000:.1f} us" for w in step_path.what_if[:3]]
    return {"Graph": step_path.graph, "Step": step_path.step, "Step(us)": round(step_path.step_ns / 1000, 3),
            **{f"{k.capitalize()}(us)": None if v is None else round(v / 1000, 3)
               for k, v in per_kind.items()},
            "Ranks on path": ",".join(map(str, ranks)),
            **{f"What-if {i + 1}": tops[i] if i < len(tops) else None for i in range(3)}}
