"""Communication analysis: each op's time and bandwidth, collectives matched across ranks, clocks.

Three parts, each a small pure function of what the readers give:

* ``op_comm``: one op on one rank, from its HCCL plane tasks, with the figures and definitions of
  the ``communication.json`` that torch_npu and msprof write (CANN's ``communication_parser``):
  Elapse = the op's span; on the master planes (Plane 0 and 1), Transit = the time covered by
  Memcpy/Reduce_Inline tasks over SDMA off chip (and RDMA payload runs), Wait = the time covered
  by Notify_Waits and no transit, Synchronization = the Wait before the first transit, Idle =
  Elapse - Transit - Wait (never negative where planes overlap, unlike CANN's older sums); and
  over every plane, transit size and time per transport (link type HCCS, PCIE, SIO, else SDMA;
  SDMA adds up all three; RDMA apart). MindSpore 1.x numbers its planes by thread: without
  Plane 0 or 1, every plane counts (its own hccl_raw csv agrees).
* ``match``: one collective across the ranks of its communicator is the same key on each: group
  (the communicator its reader found in the op's name, ``model.comm_group``, else its lane), step
  (as the job names it: ``model.StepKey``), and its sequence number on the communicator where its
  args give one (``model.COMM_SEQ_ARG``), else its name and how many ops of that name came before
  it in the step. Per instance: arrival skew, the last-arriving rank, and each rank's wait for it.
  Point-to-point ops (``model.POINT_TO_POINT``: send, receive) pair two ranks: no instance.
  What an op does is its reader's word (``model.comm_kind``), never read from its name here.
* ``clock_offsets``: a collective's ends are nearly simultaneous on all its ranks, so the median
  difference of ends between two hosts over many instances is their clock offset.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from . import intervals
from .model import (
    COLLECTIVE,
    COMM_SEQ_ARG,
    POINT_TO_POINT,
    SLICE_ARGS,
    Layer,
    Slice,
    StepKey,
    StepRecords,
    comm_group,
    comm_kind,
    decoded_args,
)

MASTER_PLANES = frozenset({"Plane 0", "Plane 1"})  # the planes CANN marks is_master (not exported)
TRANSPORTS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")
_SDMA_TRANSIT = frozenset({"Memcpy", "Reduce_Inline"})
_LARGE_PACKET_MB = {"RDMA": 0.5}  # CANN's message size thresholds; 32 MB for the others


# -- one op on one rank ---------------------------------------------------------------------------

@dataclass(slots=True)
class Transport:
    """Transit over one transport during one op (or a sum of ops)."""

    size_bytes: int = 0
    time_ns: int = 0
    sizes: dict[int, list[int]] = field(default_factory=dict)  # bytes per task -> [tasks, ns]

    def add(self, size: int, ns: int) -> None:
        self.size_bytes += size
        self.time_ns += ns
        entry = self.sizes.setdefault(size, [0, 0])
        entry[0] += 1
        entry[1] += ns

    @property
    def gb_per_s(self) -> float:
        """Bytes per ns is GB/s (CANN: MB / ms, rounded to 4 places)."""
        return round(self.size_bytes / self.time_ns, 4) if self.time_ns else 0.0

    def large_packet_ratio(self, transport: str) -> float:
        threshold = _LARGE_PACKET_MB.get(transport, 32) * 1e6
        tasks = sum(count for count, _ in self.sizes.values())
        large = sum(count for size, (count, _) in self.sizes.items() if size > threshold)
        return round(large / tasks, 4) if tasks else 0.0


@dataclass(slots=True)
class OpComm:
    """One communication op on one rank. Times in ns; None where the input has no plane tasks
    (NCCL kernels, step-trace-only profiles): Elapse is then all that is known."""

    rank: int
    graph: int | None  # the graph and step as this rank numbers them
    step: int | None
    group: str
    name: str
    start_ns: int
    elapse_ns: int
    step_key: StepKey | None = None  # the step as the job names it (None: the pseudo step)
    transit_ns: int | None = None
    wait_ns: int | None = None
    sync_ns: int | None = None
    transports: dict[str, Transport] = field(default_factory=dict)
    figures_from: str | None = None  # where Transit to Idle come from: None, the plane tasks; else in words
    # filled in by ``match`` where the op was found on other ranks too
    ranks: int = 1  # ranks that recorded this instance
    skew_ns: int | None = None
    last_rank: int | None = None
    wait_for_last_ns: int | None = None
    key: Key | None = None
    kind: str = COLLECTIVE  # what the op does (``model.comm_kind``)
    seq: int | None = None  # its sequence number on its communicator, where its args give one


    @property
    def idle_ns(self) -> int | None:
        return None if self.transit_ns is None else self.elapse_ns - self.transit_ns - self.wait_ns

    @property
    def p2p(self) -> bool:
        """A point-to-point op (send, receive): it pairs two ranks, no collective."""
        return self.kind in POINT_TO_POINT

    @property
    def wait_ratio(self) -> float | None:
        return _ratio(self.wait_ns, self.transit_ns)

    @property
    def sync_ratio(self) -> float | None:
        return _ratio(self.sync_ns, self.transit_ns)


def _ratio(part: int | None, transit: int | None) -> float | None:
    if part is None or transit is None:
        return None
    return round(part / (part + transit), 4) if part + transit else 0.0


def _args(s: Slice) -> dict[str, Any]:
    if s.args is None:
        return {}
    return s.args if type(s.args) is dict else decoded_args(s.args)


def _task_kind(s: Slice, args: dict[str, Any]) -> str:
    """``Notify_Wait``, ``Memcpy``, ...: MindSpore 1.x's HCCL traces spell them with spaces."""
    return str(args.get("task type") or s.task_type or s.name).replace(" ", "_")


def _size(args: dict[str, Any]) -> int:
    """A task's bytes: ``size(Byte)``, or MindSpore 1.x's ``size``."""
    return _int(args.get("size(Byte)", args.get("size")))


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # no number, or an infinite one (1e400)
        return 0


def op_comm(op: Slice, tasks: list[Slice], graph: int | None, step: int | None,
            step_key: StepKey | None) -> OpComm:
    """The figures of ``communication.json`` for ``op`` from its plane tasks (any order)."""
    result = light_op(op, graph, step, step_key)
    if not tasks:
        return _from_args(result, _args(op))
    planes = _planes(tasks)
    runs = _rdma_runs(result.p2p)
    window = [(op.start_ns, op.end_ns)]
    transit: list[tuple[int, int]] = []
    waits: list[tuple[int, int]] = []
    # without Plane 0 or 1 (MindSpore 1.x numbers its planes by thread), every plane is master
    master = MASTER_PLANES if MASTER_PLANES & planes.keys() else planes.keys()
    for lane, items in planes.items():
        if lane in master:
            for kind, start, ns, _, _ in _transfers(items, runs):
                (waits if kind == "wait" else transit).append((start, start + ns))
    # Each instant of the op is transit, else wait, else idle (CANN's partition since 2025; the same
    # figures as its earlier sums where the master planes do not overlap, as on the real samples)
    transit = intervals.intersect(transit, window)
    waits = intervals.subtract(intervals.intersect(waits, window), transit)
    result.transit_ns, result.wait_ns = intervals.total_ns(transit), intervals.total_ns(waits)
    before = [(transit[0][0] if transit else op.end_ns, op.end_ns)]
    result.sync_ns = intervals.total_ns(intervals.subtract(waits, before))
    transports = {name: Transport() for name in TRANSPORTS}
    for items in planes.values():
        for kind, _, ns, size, link in _transfers(items, runs):
            if kind != "wait":
                transports[kind if kind == "RDMA" else _link(link)].add(size, ns)
    sdma = transports["SDMA"]
    for name in ("HCCS", "PCIE", "SIO"):
        sdma.size_bytes += transports[name].size_bytes
        sdma.time_ns += transports[name].time_ns
    result.transports = transports
    return result


def _planes(tasks: list[Slice]) -> dict[str, list[tuple[Slice, dict[str, Any]]]]:
    """An op's tasks with their args, by plane, each plane's in time order."""
    planes: dict[str, list[tuple[Slice, dict[str, Any]]]] = defaultdict(list)
    for t in sorted(tasks, key=lambda t: t.start_ns):
        planes[t.lane.split(" #")[0]].append((t, _args(t)))
    return planes


def _rdma_runs(p2p: bool) -> int:
    """An RDMA transfer's tasks: payload, then 2 (or 4 with a barrier: collectives) closing tasks."""
    return 3 if p2p else 5


def _transfers(items: list[tuple[Slice, dict[str, Any]]], runs: int):
    """(kind, start, ns, bytes, link type) of each transit ("SDMA"/"RDMA") and wait ("wait"); an
    SDMA copy on chip is no transit."""
    for kind, start, ns, size, link, _ in _transits(items, runs):
        if kind != "SDMA" or link != "ON_CHIP":
            yield kind, start, ns, size, link


def _transits(items: list[tuple[Slice, dict[str, Any]]], runs: int):
    """(kind, start, ns, bytes, link type, the args of its first task) of each transit ("SDMA",
    copies on chip too; "RDMA") and wait ("wait")."""
    i = 0
    while i < len(items):
        t, args = items[i]
        kind = _task_kind(t, args)
        if _is_rdma_payload(kind, args, items, i):
            count = 1
            while i + count < len(items) and _is_rdma_payload(*_kind_args(items[i + count]), items,
                                                              i + count):
                count += 1
            last = i + count + runs - 2
            if last < len(items):
                size = sum(_size(a) for _, a in items[i:i + count])
                yield "RDMA", t.start_ns, items[last][0].end_ns - t.start_ns, size, "", args
                i = last + 1
            else:
                i += count
            continue
        link = args.get("link type", "")
        if kind in _SDMA_TRANSIT and args.get("transport type") == "SDMA":
            yield "SDMA", t.start_ns, t.dur_ns, _size(args), link, args
        elif kind == "Notify_Wait":
            yield "wait", t.start_ns, t.dur_ns, 0, "", args
        i += 1


def _kind_args(item: tuple[Slice, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    return _task_kind(item[0], item[1]), item[1]


def _is_rdma_payload(kind: str, args: dict[str, Any], items: list, i: int) -> bool:
    """An RDMA payload task: so marked (database form), else an RDMASend followed by an RDMASend
    and a Notify_Wait (CANN's rule for the text form). Unverified: no sample has RDMA."""
    if "rdma type" in args:
        return args["rdma type"] == "RDMA_SEND_PAYLOAD"
    if kind != "RDMASend" or i + 2 >= len(items):
        return False
    return _task_kind(*items[i + 1]) == "RDMASend" and _task_kind(*items[i + 2]) == "Notify_Wait"


def _link(link: str) -> str:
    if link == "HCCS_SW":
        return "HCCS"
    return link if link in ("HCCS", "PCIE", "SIO") else "SDMA"


# -- one op's links (communication_matrix.json) ----------------------------------------------------

NO_RANK = 0xFFFF_FFFF  # a task's dst rank when it copies within its own rank (a reduce on chip)


@dataclass(slots=True)
class Link:
    """Transit from one rank to another (or within one: LOCAL) during one op, or a sum of ops."""

    transport: str
    size_bytes: int = 0
    time_ns: int = 0

    @property
    def gb_per_s(self) -> float:
        """Bytes per ns is GB/s (CANN: MB / ms, rounded to 4 places); 0 without time, as CANN."""
        return round(self.size_bytes / self.time_ns, 4) if self.time_ns else 0.0


def op_links(op: Slice, tasks: list[Slice]) -> dict[tuple[int, int], Link]:
    """The transit of ``op`` per link (src rank, dst rank), from its plane tasks, as CANN's
    ``CommunicationMatrixParser`` adds them up: the SDMA copies (Memcpy, Reduce_Inline; on chip too,
    unlike communication.json) and the RDMA transfers of every plane, each on the link its first
    task names (a dst rank of 0xFFFFFFFF is the src rank); a task without both ranks is on no link.
    Transport: LOCAL within a rank, else RDMA, else the link type (HCCS, PCIE, SIO; else SDMA)."""
    links: dict[tuple[int, int], Link] = {}
    runs = _rdma_runs(comm_kind(op) in POINT_TO_POINT)
    for items in _planes(tasks).values():
        for kind, _, ns, size, link, args in _transits(items, runs):
            src, dst = args.get("src rank"), args.get("dst rank")
            if kind == "wait" or type(src) is not int or type(dst) is not int or src == NO_RANK:
                continue
            dst = src if dst == NO_RANK else dst
            transport = "LOCAL" if src == dst else "RDMA" if kind == "RDMA" else _link(link)
            entry = links.setdefault((src, dst), Link(transport))
            entry.transport = transport
            entry.size_bytes += size
            entry.time_ns += ns
    return links


_DTYPE_BYTES = {"float": 4, "float32": 4, "float16": 2, "half": 2, "bfloat16": 2, "c10::bfloat16": 2,
                "c10::half": 2, "double": 8, "float64": 8, "int": 4, "int32": 4, "long": 8, "int64": 8,
                "int8": 1, "uint8": 1, "char": 1, "unsigned char": 1, "bool": 1}


# an op's figures as the profiler's analysis gives them (communication.json, ms): OpComm's field
_ANALYSED = (("transit_ns", "Transit Time(ms)"), ("wait_ns", "Wait Time(ms)"),
             ("sync_ns", "Synchronization Time(ms)"))


def _from_args(result: OpComm, args: dict[str, Any]) -> OpComm:
    """What an op's args say without its tasks: the profiler's own figures where its analysis gave
    the op (``ascend_analysis``: its times, its transit per transport, where they come from), a GPU
    collective's size where Kineto's args give it (``In msg nelems`` and ``dtype``)."""
    if all(isinstance(args.get(key), int | float) for _, key in _ANALYSED):
        for name, key in _ANALYSED:
            setattr(result, name, round(args[key] * 1_000_000))
        result.figures_from = str(args.get("from") or "the profiler's analysis")
        result.transports = _analysed_transports(args.get(_BANDWIDTH))
    nelems, dtype = args.get("In msg nelems"), str(args.get("dtype", "")).lower()
    if isinstance(nelems, int) and dtype in _DTYPE_BYTES and result.elapse_ns > 0:
        transport = Transport()
        transport.add(nelems * _DTYPE_BYTES[dtype], result.elapse_ns)
        result.transports = {"NCCL": transport}
    return result


_BANDWIDTH = "Communication Bandwidth Info"  # communication.json's, in an op's args (ascend_analysis)


def _analysed_transports(found: Any) -> dict[str, Transport]:
    """communication.json's ``Communication Bandwidth Info`` of one op (MB, ms) as its transports;
    a transport whose figures are no numbers is left out."""
    transports = {}
    for name, figures in (found.items() if isinstance(found, dict) else ()):
        figures = figures if isinstance(figures, dict) else {}
        size, ms = figures.get("Transit Size(MB)"), figures.get("Transit Time(ms)")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (size, ms)):
            continue
        transport = Transport(round(size * 1_000_000), round(ms * 1_000_000))
        distribution = figures.get("Size Distribution")
        for packet, entry in (distribution.items() if isinstance(distribution, dict) else ()):
            try:
                count, total = entry
                transport.sizes[round(float(packet) * 1_000_000)] = [int(count), round(total * 1_000_000)]
            except (TypeError, ValueError, OverflowError):
                continue
        transports[str(name)] = transport
    return transports


UNTYPED = "N/A"  # a task type the input does not give


def step_ops(batch: StepRecords) -> list[OpComm]:
    """Every communication op of one rank's step, in time order, with the figures of its plane
    tasks (``op_tasks``)."""
    return [op_comm(op, mine, batch.graph, batch.step_id, batch.key) for op, mine in op_tasks(batch)]


def op_tasks(batch: StepRecords) -> list[tuple[Slice, list[Slice]]]:
    """Every communication op of one rank's step, in time order, with its plane tasks: a task
    belongs to the latest op that holds its start (as CANN's exports attribute them). A task whose
    type the input does not give (``N/A``: a database at profiler level 0 keeps each op's tasks so,
    on no plane, of no size and no peer) says nothing of wait or transfer: no plane task of its op,
    whose figures are then unknown, not 0."""
    ops = sorted((s for s in batch.slices if s.layer is Layer.COMM_OP), key=lambda s: s.start_ns)
    tasks: list[list[Slice]] = [[] for _ in ops]
    if ops:
        starts = [s.start_ns for s in ops]
        for t in batch.slices:
            if t.layer is not Layer.COMM_TASK or t.task_type == UNTYPED:
                continue
            i = bisect.bisect_right(starts, t.start_ns) - 1
            while i >= 0 and ops[i].end_ns <= t.start_ns:
                i -= 1
            if i >= 0:
                tasks[i].append(t)
    return list(zip(ops, tasks, strict=True))




def group_of(op: Slice) -> str:
    """The communicator an op ran on, as all its ranks name it: what its reader found in its name
    (HCCL's group tag: each rank numbers its group lanes itself), else the lane (a process group's
    name)."""
    return comm_group(op) or op.lane


def seq_of(op: Slice) -> int | None:
    """The op's sequence number on its communicator, where its args give one (``COMM_SEQ_ARG``);
    raw args are decoded only where their text holds the key (most hold none)."""
    args = op.args
    if args is None or (type(args) is not dict and b'"' + _SEQ_KEY + b'"' not in bytes(args)):
        return None
    try:
        seq = _args(op).get(COMM_SEQ_ARG)
    except (ValueError, AttributeError):
        return None
    return seq if type(seq) is int else None


_SEQ_KEY = COMM_SEQ_ARG.encode()


# -- one collective across ranks ------------------------------------------------------------------

class Key(NamedTuple):
    """One collective instance as every rank of it names it: the step as the job names it, not as
    the rank does (``StepKey``: ranks of one job may number their graphs differently, and each
    graph numbers its steps from 1)."""

    group: str
    step: StepKey | None
    name: str  # the op's name; by_seq: what it does
    occurrence: int  # ops of this name on this group earlier in the step; by_seq: its sequence number
    by_seq: bool = False  # known by its sequence number on its communicator


@dataclass(slots=True)
class Instance:
    """One collective across the ranks that recorded it; times on each rank's clock (or aligned)."""

    key: Key
    starts: dict[int, int]
    ends: dict[int, int]

    @property
    def last_rank(self) -> int:
        latest = max(self.starts.values())
        return min(rank for rank, start in self.starts.items() if start == latest)

    @property
    def skew_ns(self) -> int:
        return max(self.starts.values()) - min(self.starts.values())

    def wait_ns(self, rank: int) -> int:
        """How long ``rank`` waited in this collective for the last one to arrive."""
        return max(self.starts.values()) - self.starts[rank]


def keys(ops: Iterable[OpComm]) -> list[Key | None]:
    """Each op's instance key, for one rank's ops in time order; None for point-to-point ops
    (send, receive), which pair with one peer, not with every rank of their group. An op whose
    args give its sequence number is known by it (and what it does); any other by its name and
    how many ops of that name came before it on its group in the step."""
    seen: dict[tuple, int] = defaultdict(int)
    out: list[Key | None] = []
    for op in ops:
        if op.p2p:
            out.append(None)
            continue
        if op.seq is not None:
            out.append(Key(op.group, op.step_key, op.kind, op.seq, True))
            continue
        base = (op.group, op.step_key, op.name)
        out.append(Key(*base, seen[base]))
        seen[base] += 1
    return out


def match(ops_by_rank: dict[int, list[OpComm]], offsets: dict[int, int] | None = None) -> list[Instance]:
    """Collectives found on two ranks or more, in key order; each op gets its instance's figures.
    ``offsets``: ns to take off each rank's times (its host's clock offset), if aligning."""
    found: dict[Key, Instance] = {}
    members: dict[Key, list[OpComm]] = defaultdict(list)
    for rank, ops in ops_by_rank.items():
        shift = (offsets or {}).get(rank, 0)
        for key, op in zip(keys(ops), ops, strict=True):
            if key is None:
                continue
            inst = found.get(key)
            if inst is None:
                inst = found[key] = Instance(key, {}, {})
            inst.starts[rank] = op.start_ns - shift
            inst.ends[rank] = op.start_ns + op.elapse_ns - shift
            members[key].append(op)
    matched = []
    for key, inst in found.items():
        if len(inst.starts) < 2:
            continue
        matched.append(inst)
        last, skew = inst.last_rank, inst.skew_ns
        for op in members[key]:
            op.ranks, op.skew_ns, op.last_rank, op.key = len(inst.starts), skew, last, key
            op.wait_for_last_ns = inst.wait_ns(op.rank)
    return matched


# -- clocks ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class HostClock:
    """A host's clock against the reference host (that of the lowest rank): subtract
    ``offset_ns`` from its times to align them. ``spread_ns``: the median absolute deviation of
    the per-collective estimates (0 for the reference); ``instances``: how many were used."""

    host: str
    ranks: tuple[int, ...]
    offset_ns: int
    spread_ns: int
    instances: int


_CLOCK_SAMPLES = 1001  # per pair of hosts: a median of this many collectives is plenty


def clock_offsets(instances: Iterable[Instance], host_of: dict[int, str]) -> list[HostClock]:
    """Each host's clock offset, from the ends of the collectives it shares with other hosts.

    Per instance, each host's median end against that of the host of the instance's lowest rank
    (its anchor: linear in the hosts, where every pair would be quadratic); per pair of hosts, the
    median of the first ``_CLOCK_SAMPLES`` such differences (memory flat in the collectives); then
    out from the reference host (that of the lowest rank) along the pairs seen most often. Hosts
    that share no collective with the reference's, even through others, are left out.
    """
    from statistics import median  # here, not with the module: fractions, numbers: 1.5 ms of start-up

    samples: dict[tuple[str, str], list[int]] = defaultdict(list)
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for inst in instances:
        by_host: dict[str, list[int]] = defaultdict(list)
        for rank, end in inst.ends.items():
            by_host[host_of[rank]].append(end)
        anchor = host_of[min(inst.ends)]
        anchor_end = int(median(by_host[anchor]))
        for host, ends in by_host.items():
            if host != anchor:
                pair = (anchor, host)
                seen[pair] += 1
                if len(samples[pair]) < _CLOCK_SAMPLES:
                    samples[pair].append(int(median(ends)) - anchor_end)
    ranks_of: dict[str, list[int]] = defaultdict(list)
    for rank, host in sorted(host_of.items()):
        ranks_of[host].append(rank)
    reference = host_of[min(host_of)]
    clocks = {reference: HostClock(reference, tuple(ranks_of[reference]), 0, 0, 0)}
    edges = sorted(samples.items(), key=lambda item: -seen[item[0]])
    grown = True
    while grown:
        grown = False
        for (a, b), diffs in edges:
            if (a in clocks) == (b in clocks):
                continue
            known, new, sign = (a, b, 1) if a in clocks else (b, a, -1)
            middle = median(diffs)
            spread = median(abs(d - middle) for d in diffs)
            clocks[new] = HostClock(new, tuple(ranks_of[new]), clocks[known].offset_ns + round(sign * middle),
                                    round(spread), seen[a, b])
            grown = True
    return [clocks[h] for h in sorted(clocks, key=lambda h: ranks_of[h][0])]


def host_names(infos: Iterable[Any]) -> dict[int, str]:
    """Each rank's clock domain: its host, or the rank alone where the host is not known or the rank
    keeps a clock of its own (a device's ticks since it started: every device its own, on any host)."""
    return {info.rank: (info.host if getattr(info, "wall_clock", True) else None) or f"rank {info.rank}"
            for info in infos}


def rank_offsets(clocks: Iterable[HostClock]) -> dict[int, int]:
    return {rank: clock.offset_ns for clock in clocks for rank in clock.ranks}


class Timeline(NamedTuple):
    """How the ranks' times are laid side by side to compare them (``timeline``)."""

    offsets: dict[int, int]  # ns to take off each rank's times (``match``'s offsets); absent: 0
    apart: tuple[int, ...] = ()  # ranks whose waits with the others cannot be judged (none given)
    aligned: tuple[int, ...] = ()  # ranks on clocks of their own that the offsets put on the others'
    moved: bool = True  # False: ranks on clocks of their own left as recorded (``move_own``)


def timeline(infos: list[Any], clocks: list[HostClock], align: bool, move_own: bool = True) -> Timeline:
    """The one clock policy for comparing ranks (``comm``, ``critical``, ``report``, ``convert``): with
    ``align`` (``--align collectives``) every host's estimated offset is taken off. Without it, ranks
    on wall time are compared as they are, and ranks on clocks of their own (``wall_clock`` False:
    device ticks since the device started, whose differences mean nothing) are put on the others'
    by the offsets the collectives give, against the lowest rank on wall time where there is one;
    those no collective ties to the others are ``apart``: their waits cannot be judged, and none is
    given (raw, they made waits of 45 hours and a straggler verdict). ``move_own`` False (a trace
    drawn on the times as recorded: ``convert`` without ``--align``): none moved, every rank on a
    clock of its own apart."""
    offsets = rank_offsets(clocks)
    own = [info.rank for info in infos if not info.wall_clock]
    if len(infos) < 2:
        return Timeline({})
    reference = min(offsets, default=None)  # the lowest rank's host: the clock the others go on
    if align:
        return Timeline(offsets, tuple(r for r in own if r not in offsets),
                        tuple(r for r in own if r in offsets and r != reference))
    if not own:
        return Timeline({})
    if not move_own:
        return Timeline({}, tuple(own), moved=False)
    anchor = next((info.rank for info in infos if info.wall_clock and info.rank in offsets), None)
    if anchor is None and len(own) < len(infos):  # ranks on wall time that no collective ties to them
        return Timeline({}, tuple(own))
    anchor = reference if anchor is None else anchor
    chosen = {rank: offsets[rank] - offsets[anchor] for rank in own if rank in offsets}
    apart = tuple(r for r in own if r not in chosen)
    return Timeline(chosen, apart, tuple(r for r in chosen if r != anchor))


def say_timeline(diag: Any, found: Timeline) -> None:
    """What ``timeline`` did, in ``diag``: by how much it moved each rank, which it could not judge."""
    from .select import format_ids

    if found.aligned:
        moved = ", ".join(f"rank {rank} {-found.offsets[rank] / 1000:+.3f} µs" for rank in found.aligned)
        diag.note("own_clocks_aligned", f"rank {format_ids(found.aligned)}: on a clock of its own, put on "
                  f"the other ranks' by the ends of their collectives ({moved})")
    if found.apart and not found.moved:
        diag.note("own_clocks_apart", f"rank {format_ids(found.apart)}: on a clock of its own, drawn as "
                  "recorded: no wait between it and the other ranks is drawn (--align collectives puts it "
                  "on theirs by the collectives)")
    elif found.apart:
        diag.warn("own_clocks_apart", f"rank {format_ids(found.apart)}: a clock of its own that no "
                  "collective ties to the other ranks' (no offset to estimate): waits between it and them "
                  "cannot be judged, and none is given")


def matched(ops_by_rank: dict[int, list[OpComm]], found: Timeline) -> list[Instance]:
    """``match`` under the clock policy: the ranks ``apart`` matched with no other (their ops' figures
    across ranks unknown), the others' times less their offsets. Each op's figures are made afresh."""
    for ops in ops_by_rank.values():
        for op in ops:
            op.ranks, op.skew_ns, op.last_rank, op.wait_for_last_ns, op.key = 1, None, None, None, None
    kept = {rank: ops for rank, ops in ops_by_rank.items() if rank not in found.apart}
    return match(kept, found.offsets)


# -- in the timeline ------------------------------------------------------------------------------

WAIT_LANE = "Wait"  # in the summary's Overlap Analysis group: time spent waiting for slower ranks


def light_ops(rank: int, graph: int | None, step: int | None, step_key: StepKey | None,
              slices: Iterable[Slice]) -> list[OpComm]:
    """The ops of one rank's step as matching needs them: no plane tasks, no args decoded (but
    for a sequence number)."""
    return [light_op(s, graph, step, step_key) for s in sorted(slices, key=lambda s: s.start_ns)]


def for_matching(op: Slice) -> Slice:
    """An op as ``light_op`` reads it, with no more: its args only where they give its sequence
    number (what it does is its task type)."""
    return Slice(*op[:SLICE_ARGS], op.args if seq_of(op) is not None else None, op.task_type)


def light_op(op: Slice, graph: int | None, step: int | None, step_key: StepKey | None) -> OpComm:
    """One op as matching needs it: who, when, what it does, on which communicator."""
    return OpComm(op.rank, graph, step, group_of(op), op.name, op.start_ns, op.dur_ns, step_key,
                  kind=comm_kind(op), seq=seq_of(op))


def flow_id(key: Key, rank: int) -> int:
    """The arrow from ``rank``'s op of one collective to the last-arriving rank's."""
    step = None if key.step is None else key.step.text  # a rank's first graph: the step id, as ever
    text = f"collective|{key.group}|{step}|{key.name}|{key.occurrence}|{rank}"
    from hashlib import blake2b  # here, not with the module: a command that draws no arrows loads no OpenSSL

    return int.from_bytes(blake2b(text.encode(), digest_size=8).digest(), "little")


def annotated(slices: list[Slice], ops: list[OpComm], waiters: dict[Key, list[int]]) -> list[Slice]:
    """Op slices (in time order, as ``ops``) with their instance's figures in args, and arrows from
    every rank that waited to the op of the rank it waited for. Arrows point forward in time (the
    trace processor drops those whose end precedes their start), so from the waiters."""
    out = []
    for s, op in zip(sorted(slices, key=lambda s: s.start_ns), ops, strict=True):
        if op.key is None:
            out.append(s)
            continue
        args = {**_args(s), "ranks in collective": op.ranks, "arrival skew (us)": op.skew_ns / 1000,
                "last rank": op.last_rank, "wait for last rank (us)": op.wait_for_last_ns / 1000}
        flows_out = s.flows_out + ((flow_id(op.key, op.rank),) if op.wait_for_last_ns else ())
        flows_in = s.flows_in
        if op.rank == op.last_rank:
            flows_in += tuple(flow_id(op.key, rank) for rank in waiters.get(op.key, ()))
        out.append(Slice(*s[:SLICE_ARGS], args, s.task_type, flows_out, flows_in))
    return out


def wait_slices(ops: Iterable[OpComm]) -> list[Slice]:
    """The Wait lane: in each collective, from the rank's arrival until the last rank's."""
    return [
        Slice(op.rank, Layer.OVERLAP, WAIT_LANE, f"Wait for rank {op.last_rank}", op.start_ns,
              min(op.wait_for_last_ns, op.elapse_ns),
              {"collective": op.name, "arrival skew (us)": op.skew_ns / 1000})
        for op in ops if op.wait_for_last_ns
    ]


def waiting_ranks(instances: Iterable[Instance]) -> dict[Key, list[int]]:
    """Per instance, the ranks that arrived before its last rank (and so have an arrow to it)."""
    return {inst.key: [rank for rank in sorted(inst.starts) if inst.wait_ns(rank)] for inst in instances}
