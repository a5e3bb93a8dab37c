"""Which framework op launched each device kernel (``diff --by op``; docs/analysis.md, "diff").

Across vendors kernel names differ (``aclnnMatmul_MatMulCommon_MatMulV2`` against
``ampere_sgemm_128x64_nn``), while the op the model's code called is the same on both
(``aten::linear``). Where a trace links a kernel to its host launch (the model's ``flows_out`` of a
host slice and ``flows_in`` of the device task: Kineto's launch and kernel of one ``correlation``,
torch_npu's ``async_npu`` arrow from the Python thread's op), the kernel's **framework op** is the
outermost host range of the launch's thread holding the launch's start whose name is a dispatcher
op, ``namespace::name`` (``aten::linear``, ``npu::npu_dtype_cast``, and in the backward pass the
autograd node ``autograd::engine::evaluate_function: AddmmBackward0``): the op the model called, not
the backend's dispatch below it (``aten::cudnn_convolution`` on a GPU, ``npu::npu_dtype_cast`` on an
NPU), which differs by vendor.

An arrow crosses at most one step boundary (``readers.common.flows.linked``'s window: a kernel runs in the
step after its launch), or ``PARTS_AHEAD`` parts of a pseudo step, so ``Launchers`` keeps the launches of
the step (or those parts) before the current one.
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from collections.abc import Iterable

from ..intervals import is_compute
from ..model import Layer, Slice, StepRecords
from ..readers.common.parts import PARTS_AHEAD

FRAMEWORK_OP = re.compile(r"^[A-Za-z_]\w*::")  # aten::mm, c10d::allreduce_, autograd::engine::...


def is_framework_op(name: str) -> bool:
    """A host range named as a dispatcher op (``aten::addmm``), not a Python frame or an annotation."""
    return FRAMEWORK_OP.match(name) is not None


def outermost(ranges: Iterable[Slice]) -> dict[str, tuple[list[int], list[Slice]]]:
    """Per lane, the ranges held by no other of them (their starts, and the ranges, in time order).
    A range that begins inside the one before it and ends after it (rounded times nest badly) holds
    what lies past that one's end: it is kept from there on, so every instant has one outermost op."""
    by_lane: dict[str, list[Slice]] = {}
    for s in ranges:
        by_lane.setdefault(s.lane, []).append(s)
    out = {}
    for lane, found in by_lane.items():
        found.sort(key=lambda s: (s.start_ns, -s.dur_ns))
        tops: list[Slice] = []
        for s in found:
            if not tops or s.start_ns > tops[-1].end_ns:
                tops.append(s)
            elif s.end_ns > tops[-1].end_ns:  # the part past the end of the one before (ends are held)
                after = tops[-1].end_ns + 1
                tops.append(s._replace(start_ns=after, dur_ns=s.end_ns - after))
        out[lane] = ([s.start_ns for s in tops], tops)
    return out


def holding(tops: dict[str, tuple[list[int], list[Slice]]], launch: Slice) -> str | None:
    """The name of the outermost framework op of the launch's lane whose time holds its start."""
    found = tops.get(launch.lane)
    if found is None:
        return None
    starts, ranges = found
    i = bisect.bisect_right(starts, launch.start_ns) - 1
    return ranges[i].name if i >= 0 and launch.start_ns <= ranges[i].end_ns else None


class Launchers:
    """One rank's launches, step after step in time order: each arrow id started in this step or
    the one before (a pseudo step's part: the ``PARTS_AHEAD`` before), with the framework op that
    made it; the framework ops still running where a part ends hold launches of the next."""

    def __init__(self) -> None:
        self._before: deque[dict[int, str]] = deque()  # the latest step's first
        self._running: list[Slice] = []

    def kernels(self, batch: StepRecords) -> list[tuple[Slice, str | None]]:
        """The step's compute kernels (``intervals.is_compute``, as ``ops`` counts them), each with
        the framework op that launched it, None where no link leads to one. Steps in time order."""
        host = [s for s in batch.slices if s.layer is Layer.HOST]
        tops = outermost([*self._running, *(s for s in host if is_framework_op(s.name))])
        now: dict[int, str] = {}
        for s in host:
            if s.flows_out and (op := holding(tops, s)) is not None:
                now.update(dict.fromkeys(s.flows_out, op))
        found = [(s, next((op for f in s.flows_in if (op := now.get(f) or self._launched(f))), None))
                 for s in batch.slices if s.layer is Layer.STREAM and is_compute(s.task_type)]
        self._before.appendleft(now)
        while len(self._before) > (1 if batch.part is None else PARTS_AHEAD):
            self._before.pop()
        end = batch.part[1] if batch.part is not None else None
        self._running = ([] if end is None else
                         [s for _, lane_tops in tops.values() for s in lane_tops if s.end_ns > end])
        return found

    def _launched(self, flow: int) -> str | None:
        return next((op for before in self._before if (op := before.get(flow))), None)
