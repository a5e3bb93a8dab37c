"""A CPU-only rank-step's compute for ``critical`` (``analyses.host_work``): the outermost host
operators of each thread, each cut where a communication op begins inside it, so a collective
called from inside an operator (DDP's all-reduce, from autograd's hook) arrives after the work
before the call only (docs/analysis.md, section 11)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from converters.analyses.host_work import host_compute
from converters.model import HOST_OPERATOR, Layer, Slice


def _op(lane: str, start: int, dur: int, name: str = "op") -> Slice:
    return Slice(0, Layer.HOST, lane, name, start, dur, task_type=HOST_OPERATOR)


def _comm(start: int) -> Slice:
    return Slice(0, Layer.COMM_OP, "Collectives", "allreduce", start, 5)


def test_an_operator_that_calls_a_collective_is_cut_at_the_call():
    outer, inner = _op("main", 100, 200, "evaluate_function"), _op("main", 150, 20, "inner")
    annotation = Slice(0, Layer.HOST, "main", "a user range", 0, 1000)  # no operator: not compute
    pieces = host_compute([outer, inner, annotation, _comm(180), _comm(500)])
    assert [(p.name, p.start_ns, p.dur_ns) for p in pieces] == [("evaluate_function", 100, 80),
                                                              ("evaluate_function", 180, 120)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["main", "worker"]), st.integers(0, 1000), st.integers(1, 300)),
                max_size=12),
       st.lists(st.integers(0, 1300), max_size=6))
@example([("main", 0, 1), ("main", 1, 1)], [0])  # begins where the one before ends (found by CI)
def test_the_pieces_tile_each_thread_s_outermost_operators(ops, calls):
    slices = [_op(lane, start, dur) for lane, start, dur in ops] + [_comm(t) for t in calls]
    pieces = host_compute(slices)
    for lane in ("main", "worker"):
        mine = sorted((p for p in pieces if p.lane == lane), key=lambda p: p.start_ns)
        covered = _union([(s, s + d) for ln, s, d in ops if ln == lane])
        assert _union([(p.start_ns, p.end_ns) for p in mine]) == covered  # the same time, no more
        assert all(a.end_ns <= b.start_ns + 1 for a, b in zip(mine, mine[1:], strict=False))  # none overlap
        # cut at every call inside one
        assert all(p.dur_ns > 0 and not p.start_ns < t < p.end_ns for p in mine for t in calls)


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans merged where they overlap or touch within 1 ns (``outermost`` holds ends)."""
    out: list[list[int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [tuple(s) for s in out]
