"""Interval algebra and the overlap breakdown against a brute-force reference on random input."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from converters._overlap import lanes, step_intervals
from converters._overlap import slices as overlap_slices
from converters.intervals import analyse, clip, intersect, is_compute, subtract, total_ns, union
from converters.model import Layer, Slice, Step, StepRecords

intervals = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 12)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=12,
)


def points(ivs) -> set[int]:
    """Brute force: the integer points [s, e) covers."""
    return {p for s, e in ivs for p in range(s, e)}


def well_formed(ivs) -> bool:
    return all(s < e for s, e in ivs) and all(a[1] < b[0] for a, b in zip(ivs, ivs[1:], strict=False))


@given(intervals)
def test_union_covers_the_same_points_as_disjoint_sorted_intervals(a):
    result = union(a)
    assert points(result) == points(a)
    assert well_formed(result)
    assert total_ns(a) == len(points(a))


@given(intervals, intervals)
def test_intersect_is_the_points_in_both(a, b):
    result = intersect(a, b)
    assert points(result) == points(a) & points(b)
    assert all(s < e for s, e in result)


@given(intervals, intervals)
def test_subtract_is_the_points_of_a_not_in_b(a, b):
    result = subtract(a, b)
    assert points(result) == points(a) - points(b)
    assert well_formed(result)


@given(intervals)
def test_union_leaves_its_argument_alone(a):
    before = list(a)
    union(a)
    assert a == before


@given(intervals, intervals)
def test_overlap_lanes_follow_their_definitions(compute, comm):
    o = analyse(compute, comm)
    busy = points(compute) | points(comm)
    assert points(o.computing) == points(compute)
    assert points(o.communication) == points(comm)
    assert points(o.not_overlapped) == points(comm) - points(compute)
    assert o.overlapped_ns == len(points(comm) & points(compute))
    span = set(range(min(busy), max(busy) + 1)) if busy else set()
    assert points(o.free) == span - busy
    # Computing + Communication (not overlapped) + Free = the step's device span
    assert o.computing_ns + o.not_overlapped_ns + o.free_ns == len(span)


def test_compute_task_types():
    for kind in ("AI_CORE", "AI_CPU", "AI_VECTOR_CORE", "AIV", "MIX_AIC", "MIX_AIV", "DSA_SQE"):
        assert is_compute(kind), kind
    for kind in ("NOTIFY_WAIT", "Notify Wait", "EVENT_RECORD", "EVENT_WAIT_SQE", "Write Value",
                 "PLACE_HOLDER_SQE", "MEMCPY_ASYNC", "SDMA", "SDMA_SQE", "PCIE_DMA_SQE",
                 "REDUCE_ASYNC_V2", "HCCL"):
        assert not is_compute(kind), kind


task_types = st.sampled_from(["AI_CORE", "MIX_AIC", "NOTIFY_WAIT", "MEMCPY_ASYNC", "", "hccl reduce"])
slices = st.lists(
    st.tuples(st.sampled_from(list(Layer)), st.integers(0, 60), st.integers(-3, 12), task_types), max_size=40)


@given(slices)
def test_one_pass_over_a_steps_slices_gives_the_unions_of_each_kind(made):
    """C's step_intervals against the three list comprehensions and unions it replaced."""
    batch = [Slice(0, layer, "lane", "n", start, dur, None, kind) for layer, start, dur, kind in made]
    compute, ops, tasks, ops_seen = step_intervals(batch, Layer.STREAM, Layer.COMM_OP, Layer.COMM_TASK,
                                                   is_compute)
    assert compute == union((s.start_ns, s.end_ns) for s in batch
                            if s.layer is Layer.STREAM and is_compute(s.task_type))
    assert ops == union((s.start_ns, s.end_ns) for s in batch if s.layer is Layer.COMM_OP)
    assert tasks == union((s.start_ns, s.end_ns) for s in batch if s.layer is Layer.COMM_TASK)
    assert ops_seen == any(s.layer is Layer.COMM_OP for s in batch)


@given(intervals, intervals, st.none() | st.tuples(st.integers(-5, 80), st.integers(-5, 80)))
def test_the_derived_lanes_follow_the_python_rules(compute, comm, span):
    """C's lanes against the few lines of Python they replaced."""
    computing, communication = union(compute), union(comm)
    busy = union(computing + communication)
    ends = [*busy[:1], *busy[-1:]] + ([span] if span is not None and span[0] < span[1] else [])
    bounds = [(min(e[0] for e in ends), max(e[1] for e in ends))] if ends else []
    want = (subtract(communication, computing), subtract(bounds, busy))
    assert lanes(computing, communication, span) == want


@given(intervals, intervals)
def test_overlap_lanes_become_slices_of_their_own_name(compute, comm):
    found = analyse(compute, comm).lanes()
    made = overlap_slices(found, 7, Layer.OVERLAP, Slice)
    assert made == [Slice(7, Layer.OVERLAP, lane, lane, start, end - start)
                    for lane, spans in found.items() for start, end in spans]
    assert all(type(s) is Slice for s in made)


bound = st.none() | st.integers(-5, 80)


@given(intervals, bound, bound)
def test_clip_keeps_the_points_within_the_bounds(a, low, high):
    whole = union(a)
    result = clip(whole, low, high)
    within = range(-10 if low is None else low, 100 if high is None else high)
    assert points(result) == points(a) & set(within)
    assert well_formed(result)
    if points(result) == points(whole):
        assert result is whole  # nothing to cut: no copy (it runs for every step)


# A rank's steps in time order (each from its start to the next one's, or shorter), and its
# communication ops and compute tasks filed under the last step started at or before them, as the
# readers file them: an op may run on past its step, into later steps or between them.
@st.composite
def rank_steps(draw):
    starts = sorted(set(draw(st.lists(st.integers(0, 200), min_size=1, max_size=6))))
    ends = [draw(st.integers(a + 1, b)) for a, b in zip(starts, [*starts[1:], 260], strict=True)]
    ops = draw(st.lists(st.tuples(st.integers(0, 250), st.integers(0, 120)), max_size=12))
    bounds = list(zip(starts, ends, strict=True))
    steps = [StepRecords(0, None, i, Step(None, i, a, b), []) for i, (a, b) in enumerate(bounds)]
    for start, dur in ops:
        at = max([i for i, a in enumerate(starts) if a <= start], default=0)
        steps[at].slices.append(Slice(0, Layer.COMM_OP, "g", "allreduce", start, dur))
    for i, (a, b) in enumerate(bounds):  # compute inside its step
        for start, dur in draw(st.lists(st.tuples(st.integers(a, b - 1), st.integers(1, 10)), max_size=3)):
            steps[i].slices.append(Slice(0, Layer.STREAM, "Stream 1", "k", start, min(dur, b - start), None,
                                         "AI_CORE"))
    return steps, [(s, s + d) for s, d in ops]


@settings(max_examples=300, deadline=None)
@given(rank_steps())
def test_each_step_counts_the_communication_within_its_time_whatever_step_it_began_in(made):
    from converters.analyses.overlap import step_overlap
    from converters.profile import carried_on

    steps, ops = made
    for batch in carried_on(steps):
        low, high = batch.step.start_ns, batch.step.end_ns
        o = step_overlap(batch)
        assert points(o.communication) == {p for p in points(ops) if low <= p < high}
        assert o.computing_ns + o.not_overlapped_ns + o.free_ns <= high - low  # never more than the step


# -- the bubble: time in receive ops, by what the reader says an op does -------------------------------

def _pipeline_step(ops: list[tuple[str, str, int, int]]) -> StepRecords:
    from converters.model import comm_type

    slices = [Slice(0, Layer.STREAM, "Stream 1", "mm", 0, 1000, None, "AI_CORE")]
    slices += [Slice(0, Layer.COMM_OP, "Group 1 Communication", name, start, dur, None, comm_type(kind))
               for name, kind, start, dur in ops]
    return StepRecords(0, None, 1, Step(None, 1, 0, 2000), slices)


def test_the_bubble_is_the_time_in_receive_ops_whatever_their_name():
    """A receive op (RECV) is a bubble however its vendor names it; a batched send-and-receive
    (SENDRECV) is none, as torch_npu counts; two records of one wait (c10d's op and gloo's range)
    count once."""
    from converters.analyses.overlap import overlap_row
    from converters.model import RECV, SEND, SENDRECV

    row = overlap_row(_pipeline_step([("xfer_in", RECV, 1000, 100), ("hcom_receive_dup", RECV, 1050, 100),
                                      ("hcom_receive_but_batched", SENDRECV, 1300, 100),
                                      ("Receive-op3", SEND, 1500, 100)]))
    assert row.bubble_ns == 150  # 1000-1150: the two receives' union
    assert row.stage_ns == 1600 - 150
    assert row.not_overlapped_excluding_receive_ns == row.not_overlapped_ns - 150
