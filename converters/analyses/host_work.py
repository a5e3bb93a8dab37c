"""The compute of a rank-step that records no device work (a CPU-only job: gloo on CPU, a framework's
CPU build), for ``critical`` (docs/analysis.md, section 11): there the host operators *are* the
compute, so the critical path runs through them and the job's host communication ops."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from ..errors import Diagnostics
from ..model import HOST_OPERATOR, Layer, Slice
from .launches import outermost

NOTE = ("no device work is recorded (a CPU-only job): the critical path's compute is the host operators "
        "(the outermost of each thread) and its communication the host's collectives; a GPU or NPU trace "
        "would let it split the host's launches from the device's execution")


def note_host_work(diag: Diagnostics, host_work: bool) -> None:
    """Say, once, where a step's path runs through host work (``StepPath.host_work``)."""
    if host_work:
        diag.note("critical_host_work", f"critical path: {NOTE}")


def host_compute(slices: list[Slice]) -> list[Slice]:
    """The outermost host operators of each thread (``launches.outermost``), each cut where a
    communication op begins inside it (``_cut``)."""
    operators = [s for s in slices if s.layer is Layer.HOST and s.task_type == HOST_OPERATOR]
    starts = sorted({s.start_ns for s in slices if s.layer is Layer.COMM_OP})
    return [piece for _, tops in outermost(operators).values() for s in tops for piece in _cut(s, starts)]


def _cut(s: Slice, starts: list[int]) -> list[Slice]:
    """``s`` in pieces at each of ``starts`` strictly inside it: a collective called from inside an
    operator (DDP's gradient all-reduce, from autograd's hook) waits for the operator's work before
    the call, not for all of it, so its arrival follows the piece that ends at its start."""
    first, last = bisect_right(starts, s.start_ns), bisect_left(starts, s.end_ns)
    if first >= last:
        return [s]
    edges = [s.start_ns, *starts[first:last], s.end_ns]
    return [s._replace(start_ns=a, dur_ns=b - a) for a, b in zip(edges, edges[1:], strict=False)]
