"""The database form's arrows (``ascend_db``): from the links of a step's records, bound in C
(``_db_core.bind``) by the rules of ``Flows.bind_rules``, its reference.

See docs/formats.md §5.10 for what the tables link and what the text form draws of the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from ..errors import Diagnostics
from ..model import SLICE_FLOWS_OUT, Layer, Slice, StepRecords, decoded_args
from ._core import flow_id as _flow_id
from ._db_core import bind as _bind
from .common.flows import flow_id, warn_backwards_flows

_HOST_LINKS = ("async_task_queue", "fwdbwd")  # kinds of arrow between PyTorch ops, drawn in this order
_QUEUE = ("Enqueue", "Dequeue")  # the names a task queue's ops start with


class BindRules(NamedTuple):
    """What ``_db_core.bind`` is told of ``bind_rules`` (read by position: records.h): the layers
    it links, and the names a task queue's ops start with."""

    host: Layer
    stream: Layer
    comm_task: Layer
    comm_op: Layer
    queue: tuple[str, ...]


_BIND_RULES = BindRules(Layer.HOST, Layer.STREAM, Layer.COMM_TASK, Layer.COMM_OP, _QUEUE)


class Flows:
    """Arrows from the links of a step's records: a CANN_API launch to the tasks and ops sharing its
    connectionId (``HostToDevice``); a PYTORCH_API op to the stream tasks and communication ops of
    the connection ids ``CONNECTION_IDS`` lists for it (torch_npu's ``async_npu``, drawn as its text
    form draws them: to tasks and ops, not to HCCL's plane tasks); and a PYTORCH_API op to the later
    ones listing a connection id it lists too: a task queue's ``Enqueue`` to its ``Dequeue@...``
    (``async_task_queue``), else a forward op to its backward (``fwdbwd``). An arrow may end in the
    step after its start's (a launch at the end of a step whose task runs in the next; a forward op
    and its backward), as the text form's do (``flows.linked``): each step is bound with the next."""

    def __init__(self, rank: int, links: dict[int, str]) -> None:
        self.rank, self.links, self.backwards = rank, links, 0
        # kind -> the links whose arrows reached into the step bound next: drawn already, not again
        self.carried: dict[str, set[int]] = {}

    def linked(self, steps: Iterable[StepRecords]) -> Iterator[StepRecords]:
        """The steps with their arrows, each held until the next is read: the arrows start in a
        step and end in it or in the next one (slices of a step yielded can gain no arrow)."""
        held = None
        for records in steps:
            if held is not None:
                held.slices, records.slices = self.bind_pair(held.slices, records.slices)
                yield held
            held = records
        if held is not None:
            held.slices, _ = self.bind_pair(held.slices, [])
            yield held

    def bind_pair(self, slices: list[Slice], after: list[Slice]) -> tuple[list[Slice], list[Slice]]:
        """The arrows that start in a step (``slices``), ending in it or in the next (``after``):
        both lists with their slices rebuilt. Each list is emptied first, so that the joined list
        alone holds its slices and ``bind`` changes them in place."""
        both, split = slices + after, len(slices)
        slices.clear()
        after.clear()
        self.bind(both, split)
        return both[:split], both[split:]

    def bind(self, slices: list[Slice], split: int) -> list[Slice]:
        """The arrows starting in ``slices[:split]``, by the rules of ``bind_rules``, in C
        (``_db_core.bind``: BENCHMARKS.md, issue 28, round three)."""
        backwards, self.carried = _bind(slices, split, self.links, self.carried, self.rank, _flow_id,
                                        _BIND_RULES)
        self.backwards += backwards
        return slices

    def bind_rules(self, slices: list[Slice], split: int) -> list[Slice]:
        """The arrows starting in a step (``slices[:split]``), ending in it or in the next one
        (``slices[split:]``): from a launch (the last of its connectionId in the step) to each
        target of it in the order read, the k-th numbered k; from the first PyTorch op listing a
        connection id to each later one listing it. The links whose arrows reached into the next
        step are ``carried``: they start nothing there (drawn already). A slice's arrows in and out
        are added together: each slice is rebuilt once. The reference ``bind`` follows."""
        launches: dict[int, int] = {}
        ops: dict[int, int | list[int]] = {}  # a connection id -> the PyTorch ops listing it, in order
        targets: dict[int, int | list[int]] = {}  # most launches have one target: its index
        host, device = Layer.HOST, (Layer.STREAM, Layer.COMM_TASK, Layer.COMM_OP)
        for i, s in enumerate(slices):
            args = s.args if type(s.args) is not bytes else decoded_args(s.args)  # Rows' are JSON text
            link = args.get("connection_id") if type(args) is dict else None
            if link is None:
                continue
            layer = s.layer
            if layer is host:
                if s.lane.startswith("CANN"):
                    if i < split:
                        launches[link] = i
                elif s.lane.startswith("PyTorch"):
                    # the next step's ops are bound again as its own: their links are kept for it
                    found = self.links.pop(link, None) if i < split else self.links.get(link)
                    for connection in map(int, found.split(",")) if found is not None else ():
                        _add_end(ops, connection, i)
            elif layer in device:
                _add_end(targets, link, i)
        outs: dict[int, tuple[int, ...]] = {}
        ins: dict[int, tuple[int, ...]] = {}
        carried, self.carried = self.carried, {}
        arrows = _Arrows(self, slices, split, carried, outs, ins)
        arrows.draw(launches, targets, "HostToDevice", device)
        last_ops = {link: last for link, ends in ops.items()
                    if (last := _last_before(ends, split)) is not None}
        arrows.draw(last_ops, targets, "async_npu", (Layer.STREAM, Layer.COMM_OP))
        shared = {link: ends for link, ends in ops.items() if type(ends) is list and ends[0] < split}
        for kind in _HOST_LINKS:
            firsts = {link: ends[0] for link, ends in shared.items() if _host_link(slices, ends) == kind}
            later = {link: shared[link][1:] for link in firsts}
            arrows.draw(firsts, later, kind, (host,))
        new = tuple.__new__
        for i, flows in outs.items():
            s = slices[i]
            slices[i] = new(Slice, (*s[:SLICE_FLOWS_OUT], s.flows_out + flows, s.flows_in + ins.pop(i, ())))
        for i, flows in ins.items():
            s = slices[i]
            slices[i] = new(Slice, (*s[:SLICE_FLOWS_OUT], s.flows_out, s.flows_in + flows))
        return slices

    def report(self, path: Path, diag: Diagnostics) -> None:
        warn_backwards_flows(diag, self.rank, self.backwards, f": {path}")


class _Arrows:
    """One ``bind_rules``' arrows, kind by kind, into ``outs`` and ``ins`` (slice index -> flow ids)."""

    def __init__(self, flows: Flows, slices: list[Slice], split: int, carried: dict[str, set[int]],
                 outs: dict[int, tuple[int, ...]], ins: dict[int, tuple[int, ...]]) -> None:
        self.flows, self.slices, self.split, self.carried = flows, slices, split, carried
        self.outs, self.ins = outs, ins

    def draw(self, launches: dict[int, int], targets: dict[int, int | list[int]], kind: str,
             layers: tuple[Layer, ...]) -> None:
        """The arrows of one kind: from each launch to the targets of its connection id on
        ``layers``, none backwards in time, none from a link ``carried`` (drawn into this step
        from the one before); the links reaching past ``split`` are carried on."""
        slices, flows, done = self.slices, self.flows, self.carried.get(kind, ())
        for link, first in launches.items():
            ends = targets.get(link)
            if ends is None or link in done:
                continue
            start, key, made = slices[first].start_ns, f"{kind}:{link}", []
            for k, last in enumerate(ends if type(ends) is list else (ends,)):
                if slices[last].layer not in layers:
                    continue
                if last >= self.split:
                    flows.carried.setdefault(kind, set()).add(link)
                if slices[last].start_ns < start:  # clock skew: Perfetto drops it
                    flows.backwards += 1
                    continue
                flow = flow_id(flows.rank, key, k)
                made.append(flow)
                self.ins[last] = self.ins.get(last, ()) + (flow,)
            if made:
                self.outs[first] = self.outs.get(first, ()) + tuple(made)


def _last_before(ends: int | list[int], split: int) -> int | None:
    """The last of the indices ``ends`` (one or a list, ascending) before ``split``, if any."""
    if type(ends) is int:
        return ends if ends < split else None
    found = [i for i in ends if i < split]
    return found[-1] if found else None


def _host_link(slices: list[Slice], ops: list[int]) -> str:
    """The kind of a link between PyTorch ops: a task queue's (one of them its ``Enqueue`` or
    ``Dequeue@...``), else a forward op's to its backward."""
    return _HOST_LINKS[0] if any(slices[i].name.startswith(_QUEUE) for i in ops) else _HOST_LINKS[1]


def _add_end(ends_of: dict[int, int | list[int]], link: int, i: int) -> None:
    """ends_of[link]: i, or the indices so far and i (not twice: a PyTorch op listing an id twice)."""
    ends = ends_of.get(link)
    if ends is None:
        ends_of[link] = i
    elif type(ends) is int:
        if ends != i:
            ends_of[link] = [ends, i]
    elif ends[-1] != i:
        ends.append(i)
