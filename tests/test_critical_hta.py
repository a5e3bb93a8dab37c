"""``critical`` on one rank of the real Kineto 2-rank sample against HTA 0.5's critical path
(``hta/analyzers/critical_path_analysis.py``, run here) for the same ``ProfilerStep#N``, where both
define the same thing (docs/analysis.md, section 11, "Where it differs from HTA's critical path").

HTA's path is one rank's, over the start and end of every CPU op and kernel, weighted by durations;
the edge between two top-level ops on a thread weighs 0. This trace (2023) records no CUDA
synchronisation events, so HTA's graph has no edge from the GPU back to the CPU: its path runs
along the launching thread, leaves it once through a launch, and ends on the kernels after it.
What both define alike, asserted here:

- where ours says the host set the time, HTA's path is on that same thread (in an op, or between
  two top-level ops), up to where HTA's path leaves the CPU;
- the kernels on HTA's path are on ours, at the same start and duration, but where ours enters the
  next kernel from work that ended after it (ours: the predecessor that ended last; HTA: the
  stream order);
- both start on the launching thread at the step's beginning (HTA: its first op; ours: its first
  launch, under a millisecond later).

Where they differ, asserted too: in the longest gap HTA counts as CPU time, ours is on the device
(the host waited for it in a synchronisation the trace does not show).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import pytest
from conftest import real_data

from converters.analyses.critical import StepPath, critical_report

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

STEPS = (551, 552)
RANKS = (0, 1)
COMPARED = ("compute", "communication", "communication_or_wait")  # NCCL kernels: no task splits their wait


class Event(NamedTuple):
    name: str
    cat: str
    stream: int  # -1: a CPU event
    start_ns: int
    dur_ns: int

    @property
    def on_cpu(self) -> bool:
        return self.stream == -1


class Edge(NamedTuple):
    """One edge of HTA's path: from a point of ``begin`` (an event's start or end) to one of ``end``."""

    start_ns: int
    end_ns: int
    weight_ns: int
    type: str
    begin: Event
    end: Event


@contextlib.contextmanager
def _pandas_3_drop() -> Iterator[None]:
    """HTA 0.5 calls ``DataFrame.drop(axis=1, columns=...)``, which pandas 3 refuses and pandas 2
    took as ``columns=``: the same, here (its paths on this sample are then those of pandas 2.3)."""
    import pandas as pd

    drop = pd.DataFrame.drop

    def drop_columns(self, *args, **kwargs):
        if "columns" in kwargs:
            kwargs.pop("axis", None)
        return drop(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pd.DataFrame, "drop", drop_columns)
        yield


def _hta_path(sample, rank: int, step: int) -> list[Edge]:
    analysis = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is a test extra")
    # a fresh load per call: HTA's analysis changes the loaded trace; the last step is kept (HTA
    # leaves it out by default)
    hta = analysis.TraceAnalysis(trace_dir=str(sample), include_last_profiler_step=True)
    found = hta.critical_path_analysis(rank=rank, annotation=f"ProfilerStep#{step}", instance_id=0)
    assert found is not None and found[1], f"HTA found no critical path on rank {rank}, step {step}"
    graph = found[0]
    names, trace = graph.symbol_table.sym_table, graph.full_trace_df

    def event(index: int) -> Event:
        row = trace.loc[index]
        return Event(names[int(row["name"])], names[int(row["cat"])], int(row["stream"]),
                     (int(row["ts"]) + hta.t.min_ts) * 1000, int(row["dur"]) * 1000)

    edges = []
    for u, v in zip(graph.critical_path_nodes, graph.critical_path_nodes[1:], strict=False):
        e, a, b = graph.edges[u, v]["object"], graph.node_list[u], graph.node_list[v]
        edges.append(Edge((int(a.ts) + hta.t.min_ts) * 1000, (int(b.ts) + hta.t.min_ts) * 1000,
                          int(e.weight) * 1000, e.type.value, event(a.ev_idx), event(b.ev_idx)))
    return edges


@pytest.fixture(scope="module")
def paths() -> dict[tuple[int, int], tuple[StepPath, list[Edge]]]:
    """Per (rank, step): ours on that rank alone, and HTA's."""
    sample = real_data("kineto-2rank")
    with _pandas_3_drop():
        theirs = {(rank, step): _hta_path(sample, rank, step) for rank in RANKS for step in STEPS}
    ours = {(rank, p.step): p for rank in RANKS for p in critical_report(sample, ranks=[rank])}
    assert sorted(ours) == sorted(theirs)
    return {key: (ours[key], theirs[key]) for key in theirs}


def _overlap_ns(start: int, end: int, intervals: list[tuple[int, int]]) -> int:
    return sum(max(0, min(end, b) - max(start, a)) for a, b in intervals)


def _on_cpu(edges: list[Edge]) -> list[Edge]:
    """The edges of HTA's path on the CPU, up to where it leaves it through a launch."""
    return [e for e in edges if e.begin.on_cpu and e.end.on_cpu]


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("step", STEPS)
def test_where_ours_says_the_host_htas_path_is_on_the_same_thread(paths, rank, step):
    ours, theirs = paths[rank, step]
    cpu = [(e.start_ns, e.end_ns) for e in _on_cpu(theirs)]
    leaves_ns = cpu[-1][1]
    host = [(s.start_ns, min(s.start_ns + s.dur_ns, leaves_ns)) for s in ours.path
            if s.kind == "host" and s.start_ns < leaves_ns]
    host_ns = sum(b - a for a, b in host)
    assert host_ns > 10_000_000
    assert sum(_overlap_ns(a, b, cpu) for a, b in host) >= 0.999 * host_ns


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("step", STEPS)
def test_the_kernels_on_htas_path_are_on_ours_but_where_ours_follows_later_work(paths, rank, step):
    """Each kernel on HTA's path is on ours (same start and duration), or the next kernel on HTA's
    path is on ours, entered from work that ended after that kernel: ours binds a task to the
    predecessor that ended last (its launch, the latest device work on the rank), HTA follows the
    stream where the stream was busy when the kernel was launched, and has no edge across streams
    without the synchronisation events this trace lacks."""
    ours, theirs = paths[rank, step]
    device = [e.begin for e in theirs if e.type == "critical_path_operator" and not e.begin.on_cpu]
    kernels = [k for k in device if k.cat == "kernel"]
    on_ours = {(s.start_ns, s.dur_ns): i for i, s in enumerate(ours.path) if s.kind in COMPARED}
    missing = [k for k in kernels if (k.start_ns, k.dur_ns) not in on_ours]
    for k in missing:
        after = next(n for n in device if n.start_ns >= k.start_ns + k.dur_ns)
        entered = ours.path[:on_ours[after.start_ns, after.dur_ns]]
        before = next(s for s in reversed(entered) if s.kind != "idle")
        assert before.start_ns + before.dur_ns >= k.start_ns + k.dur_ns
    assert kernels and len(missing) <= 1


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("step", STEPS)
def test_both_start_on_the_launching_thread_at_the_step_s_beginning(paths, rank, step):
    """HTA starts at the first op of the thread in the annotation, ours at its first launch; HTA's
    path ends on a kernel no later than ours (the heaviest chain of counted time, not the one into
    the step's end)."""
    ours, theirs = paths[rank, step]
    assert 0 <= ours.start_ns - theirs[0].start_ns < 1_000_000
    kernels = [e.begin for e in theirs if e.begin.cat == "kernel"]
    assert max(k.start_ns + k.dur_ns for k in kernels) <= ours.start_ns + ours.step_ns
    assert sum(s.dur_ns for s in ours.path) == ours.step_ns  # ours tiles the span; HTA's weighs less
    assert sum(e.weight_ns for e in theirs) < ours.step_ns


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("step", STEPS)
def test_where_hta_counts_a_long_cpu_gap_ours_is_on_the_device(paths, rank, step):
    """HTA's heaviest CPU edge is the host stalled inside an op (``aten::_foreach_mul_`` of the
    optimizer); without synchronisation events HTA counts it as CPU time, ours sees the device work
    the host waited for."""
    ours, theirs = paths[rank, step]
    longest = max(_on_cpu(theirs), key=lambda e: e.weight_ns)
    device = [(s.start_ns, s.start_ns + s.dur_ns) for s in ours.path if s.kind in (*COMPARED, "idle")]
    assert longest.weight_ns > 40_000_000
    assert _overlap_ns(longest.start_ns, longest.end_ns, device) >= 0.85 * longest.weight_ns
