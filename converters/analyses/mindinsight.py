"""MindSpore's own cluster step trace figures (``overlap --mindinsight``; docs/analysis.md §2): the
five columns MindSpore 1.x writes to ``ascend_cluster_analyse_{mode}_{stages}_{ranks}_{rank}.csv``
and MindInsight's cluster page shows (``AscendTimelineGenerator._get_cluster_timeline``), computed
from the same records as ``overlap``'s, beside torch_npu's Stage and Bubble, which count otherwise.

Per step, with "the gaps" of a set of intervals the time between its first start and its last end
that none of them covers (``_get_merged_time_list(get_interval_time=True)``):

- communication_alone: the communication ops' union within the gaps of the compute tasks;
- computation: the step's time - communication_alone;
- receive_alone: the receive ops' union within the gaps of every other device record (compute
  tasks and the other communication ops);
- stage: the step's time - receive_alone;
- collective_communication_alone: the other communication ops' union within the compute gaps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from .. import intervals
from ..model import Layer, Slice, StepRecords

COLUMNS = ("computation_time", "communication_alone_time", "stage_time", "receive_alone_time",
           "collective_communication_alone_time")  # the header of MindSpore's file, in its order


class ClusterStep(NamedTuple):
    """One step of one rank as MindSpore's cluster step trace counts it, in ns."""

    computation_ns: int
    communication_alone_ns: int
    stage_ns: int
    receive_alone_ns: int
    collective_communication_alone_ns: int


def cluster_step(batch: StepRecords, step_ns: int, computing: list[intervals.Interval],
                 is_receive: Callable[[Slice], bool]) -> ClusterStep | None:
    """The step's figures (``step_ns`` its time, ``computing`` the union of its compute tasks,
    ``is_receive`` which ops are receives); None where its device tasks are not recorded (every
    figure rests on them)."""
    if not batch.has_device:
        return None
    ops = [s for s in batch.slices if s.layer is Layer.COMM_OP]
    receive = intervals.union((s.start_ns, s.end_ns) for s in ops if is_receive(s))
    collective = intervals.union((s.start_ns, s.end_ns) for s in ops if not is_receive(s))
    compute_gaps = _gaps(computing)
    comm_alone = intervals.total_ns(intervals.intersect(intervals.union(receive + collective), compute_gaps))
    receive_alone = intervals.total_ns(intervals.intersect(receive,
                                                           _gaps(intervals.union(computing + collective))))
    collective_alone = intervals.total_ns(intervals.intersect(collective, compute_gaps))
    return ClusterStep(step_ns - comm_alone, comm_alone, step_ns - receive_alone, receive_alone,
                       collective_alone)


def _gaps(merged: list[intervals.Interval]) -> list[intervals.Interval]:
    """The time between the first start and the last end of ``merged`` (a union) it does not cover."""
    return intervals.subtract([(merged[0][0], merged[-1][1])], merged) if merged else []
