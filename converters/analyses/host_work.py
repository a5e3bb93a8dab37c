"""The compute of a rank-step that records no device work (a CPU-only job: gloo on CPU, a framework's
CPU build), for ``critical`` (docs/analysis.md, section 11): there the host operators *are* the
compute, so the critical path runs through them and the job's host communication ops."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from ..errors import Diagnostics
from ..model import HOST_OPERATOR, Layer, Slice

NOTE = ("no device work is recorded (a CPU-only job): the critical path's compute is the host operators "
        "(the outermost of each thread) and its communication the host's collectives; a GPU or NPU trace "
        "would let it split the host's launches from the device's execution")


def note_host_work(diag: Diagnostics, host_work: bool) -> None:
    """Say, once, where a step's path runs through host work (``StepPath.host_work``)."""
    if host_work:
        diag.note("critical_host_work", f"critical path: {NOTE}")


def host_compute(slices: list[Slice]) -> list[Slice]:
    """The outermost host operators of each thread (``_outermost``), each cut where a
    communication op begins inside it (``_cut``)."""
    operators = [s for s in slices if s.layer is Layer.HOST and s.task_type == HOST_OPERATOR]
    starts = sorted({s.start_ns for s in slices if s.layer is Layer.COMM_OP})
    return [piece for s in _outermost(operators) for piece in _cut(s, starts)]


def _outermost(operators: list[Slice]) -> list[Slice]:
    """Per thread, the operators no other holds, as half-open spans that tile the time they cover:
    one that begins inside the one before and ends after it is kept from that one's end. (Not
    ``launches.outermost``, whose ends are held, for launches: there an operator that begins where
    the one before ends would keep nothing, and its time would be lost.)"""
    tops: list[Slice] = []
    for s in sorted(operators, key=lambda s: (s.lane, s.start_ns, -s.dur_ns)):
        last = tops[-1] if tops and tops[-1].lane == s.lane else None
        if last is None or s.start_ns >= last.end_ns:
            tops.append(s)
        elif s.end_ns > last.end_ns:
            tops.append(s._replace(start_ns=last.end_ns, dur_ns=s.end_ns - last.end_ns))
    return tops


def _cut(s: Slice, starts: list[int]) -> list[Slice]:
    """``s`` in pieces at each of ``starts`` strictly inside it: a collective called from inside an
    operator (DDP's gradient all-reduce, from autograd's hook) waits for the operator's work before
    the call, not for all of it, so its arrival follows the piece that ends at its start."""
    first, last = bisect_right(starts, s.start_ns), bisect_left(starts, s.end_ns)
    if first >= last:
        return [s]
    edges = [s.start_ns, *starts[first:last], s.end_ns]
    return [s._replace(start_ns=a, dur_ns=b - a) for a, b in zip(edges, edges[1:], strict=False)]
