"""The database form's C helpers (readers/c/: _db_core) against the Python rules they follow."""

from __future__ import annotations

from operator import attrgetter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from converters.model import Layer, RankInfo, Sample, Slice, Step, StepRecords
from converters.readers.ascend_db import _by_step, by_step_rules
from converters.readers.ascend_db_flows import Flows
from converters.readers.common.flows import flow_id

# (layer, lane), launches and their targets the most
_LANES = ((Layer.HOST, "CANN (thread 1)"), (Layer.HOST, "PyTorch (thread 2)"), (Layer.STREAM, "Stream 1"),
          (Layer.STREAM, "Stream 2"), (Layer.COMM_TASK, "Plane 0"), (Layer.COMM_OP, "group"),
          (Layer.HOST, "MSTX (thread 3)"), (Layer.STEP, "Steps"))
# a step of PyTorch ops the most: an enqueue and its dequeue on threads of their own, forward and backward
_OP_LANES = ((Layer.HOST, "PyTorch (thread 2)"), (Layer.HOST, "PyTorch (thread 4)"),
             (Layer.STREAM, "Stream 1"))
# few ids: launches share them, as steps do; one past int64 and a str: their arrows' texts are made by
# PyUnicode_FromFormat, not in a buffer
_LINKS = st.sampled_from((0, 1, 2, 3, None, 2**70, "3"))
_NAMES = st.sampled_from(("s", "Enqueue", "Dequeue@Conv2D", "aten::conv2d", "ConvolutionBackward0"))


@st.composite
def _slice(draw, lanes: tuple[tuple[Layer, str], ...] = _LANES, links: st.SearchStrategy = _LINKS) -> Slice:
    layer, lane = draw(st.sampled_from(lanes))
    linked = st.fixed_dictionaries({"connection_id": links}, optional={"x": st.integers()})
    # Rows' JSON text, a key's text inside a string too
    raw = (b'{"connection_id": 1}', b'{"Task Id":3,"connection_id":-2}', b'{"x":"{\\"connection_id\\":7,"}',
           b'{"x":",\\"connection_id\\":7","connection_id":2}', b'{"connection_id":3,"y":"a"}')
    args = draw(st.one_of(linked, linked, linked, st.sampled_from(({}, None, *raw))))
    start = draw(st.integers(0, 9) if layer is Layer.HOST else st.integers(8, 12))  # now and then backwards
    return Slice(0, layer, lane, draw(_NAMES), start, 1, args, "", draw(st.sampled_from(((), (9,)))), ())


_STEP = st.one_of(st.lists(_slice(), min_size=4, max_size=30),
                  st.lists(_slice(_OP_LANES, st.integers(0, 3)), min_size=2, max_size=12))
# PYTORCH_API's connectionId -> its connection ids, as SQLite's group_concat writes them (an id two
# ops list is a link between them: a task queue's, a forward op's to its backward), now and then
# one for each connectionId, so that ops share them
_IDS = st.lists(st.integers(0, 3), min_size=1, max_size=3).map(lambda ids: ",".join(map(str, ids)))
_OPS = st.one_of(st.dictionaries(st.integers(0, 3), st.one_of(st.none(), _IDS)),
                 st.fixed_dictionaries(dict.fromkeys(range(4), _IDS)))


@settings(max_examples=400, deadline=None)
@given(st.lists(_STEP, min_size=1, max_size=3), _OPS, st.integers(0, 5), st.booleans())
def test_bind_in_c_follows_the_rules(steps, links, rank, own):
    """Arrows out of CANN launches and PyTorch ops, into stream tasks, plane tasks and ops, and
    between PyTorch ops sharing a connection id (a task queue's, a forward op's to its backward),
    each step bound with the next as ``Flows.linked`` binds them: the same slices rebuilt, the same
    links taken and carried, the same backwards arrows counted, step after step; the slices the
    joined list alone holds (``own``, as in a conversion) changed in place, others left as they were."""
    c, rules = Flows(rank, dict(links)), Flows(rank, dict(links))
    c_step, r_step = [Slice(*s) for s in steps[0]], list(steps[0])
    for after in [*steps[1:], []]:
        expected = rules.bind_rules(r_step + list(after), len(r_step))
        if own:
            c_step, c_after = c.bind_pair(c_step, [Slice(*s) for s in after])
            assert c_step + c_after == expected
        else:
            given, before = c_step + list(after), [tuple(s) for s in after]
            assert c.bind(given, len(c_step)) == expected
            assert [tuple(s) for s in after] == before  # shared slices are left as they were
            c_after = given[len(c_step):]
        assert c.links == rules.links and c.carried == rules.carried
        c_step, r_step = c_after, expected[len(r_step):]
    assert c.backwards == rules.backwards


def _op(name: str, start: int, link: int, lane: str = "PyTorch (thread 2)") -> Slice:
    return Slice(0, Layer.HOST, lane, name, start, 1, {"connection_id": link})


def test_pytorch_ops_sharing_a_connection_id_are_linked_from_the_earlier():
    """The first op listing a connection id to each later one listing it, within the step: an
    ``Enqueue`` to its ``Dequeue@...`` (``async_task_queue``), a forward op to its backward
    (``fwdbwd``), a device connection id's arrows from the last op listing it (``async_npu``); an
    op listing an id twice is no pair with itself; one whose later op starts before it is counted
    as backwards, not drawn."""
    step = [_op("aten::conv2d", 0, 10), _op("Enqueue", 1, 11),
            _op("Dequeue@Conv2D", 3, 12, "PyTorch (thread 5)"),
            Slice(0, Layer.STREAM, "Stream 1", "Conv2D", 4, 1, {"connection_id": 7}),
            _op("ConvolutionBackward0", 6, 13), _op("aten::relu_", 8, 14), _op("ReluBackward0", 7, 15)]
    links = {10: "100", 11: "101,101", 12: "101,7", 13: "100", 14: "102", 15: "102", 99: "5"}
    for bind in ("bind", "bind_rules"):
        flows = Flows(3, dict(links))
        slices = getattr(flows, bind)(list(step), len(step))
        ends = {f: s.name for s in slices for f in s.flows_in}
        arrows = sorted((s.name, ends[f], f) for s in slices for f in s.flows_out)
        assert arrows == sorted([
            ("aten::conv2d", "ConvolutionBackward0", flow_id(3, "fwdbwd:100", 0)),
            ("Enqueue", "Dequeue@Conv2D", flow_id(3, "async_task_queue:101", 0)),
            ("Dequeue@Conv2D", "Conv2D", flow_id(3, "async_npu:7", 0))]), bind
        assert flows.backwards == 1 and flows.links == {99: "5"}, bind


def test_arrows_reach_into_the_next_step_once():
    """A launch at the end of a step whose task runs in the next, and a forward op whose backwards
    run in the next step, are drawn, as the text form draws them; the step they reach into starts
    no second arrow of their ids (it would repeat a flow id, or end before it starts); the last
    step is bound alone."""
    launch = Slice(0, Layer.HOST, "CANN (thread 1)", "launch", 9, 1, {"connection_id": 5})
    steps = [[_op("aten::linear", 1, 10), launch],
             [Slice(0, Layer.STREAM, "Stream 1", "MatMul", 12, 1, {"connection_id": 5}),
              _op("LinearBackward0", 14, 11), _op("AddBackward0", 15, 12), launch._replace(start_ns=16)],
             [_op("aten::relu", 20, 13)]]
    links = {10: "100", 11: "100", 12: "100", 13: "101"}
    for bind in ("bind", "bind_rules"):
        flows = Flows(3, dict(links))
        if bind == "bind_rules":
            flows.bind_pair = lambda a, b, f=flows: _split(f.bind_rules(a + b, len(a)), len(a))
        records = [StepRecords(0, None, i, None, list(step)) for i, step in enumerate(steps)]
        got = [s for r in flows.linked(iter(records)) for s in r.slices]
        ends = {f: s.name for s in got for f in s.flows_in}
        arrows = sorted((s.name, s.start_ns, ends[f], f) for s in got for f in s.flows_out)
        assert arrows == sorted([("launch", 9, "MatMul", flow_id(3, "HostToDevice:5", 0)),
                                 ("aten::linear", 1, "LinearBackward0", flow_id(3, "fwdbwd:100", 0)),
                                 ("aten::linear", 1, "AddBackward0", flow_id(3, "fwdbwd:100", 1))]), bind
        assert flows.backwards == 0 and flows.links == {} and flows.carried == {}, bind


def _split(slices: list[Slice], at: int) -> tuple[list[Slice], list[Slice]]:
    return slices[:at], slices[at:]


# -- rows to slices: tests/readers/test_ascend_db_rows.py (C's rows read from the databases themselves)

# -- the scans merged and filed by step: as heapq.merge and the loop that filed its stream ----------

_RECORD = st.one_of(
    st.builds(lambda t, n: Slice(0, Layer.STREAM, "Stream 1", n, t, 1), st.integers(-5, 40),
              st.text("ab", max_size=2)),
    st.builds(lambda t, v: Sample(0, "HBM", t, v), st.integers(-5, 40), st.integers(0, 3).map(float)))
_SCAN = st.lists(st.lists(_RECORD, max_size=5), max_size=4)  # batches, some empty


@settings(max_examples=400, deadline=None)
@given(st.lists(_SCAN.map(lambda scan: [sorted(b, key=attrgetter("start_ns")) for b in scan]), max_size=4),
       st.lists(st.integers(0, 40), max_size=5, unique=True).map(sorted), st.booleans())
def test_steps_filed_in_c_as_heapq_merge_merged_them(scans, starts, sort_scans):
    """Each scan in time order (or not: the merge takes whatever head is least); steps from the
    first or none."""
    if sort_scans:  # a scan's records in time order across its batches, as the queries give them
        scans = [[sorted((r for b in scan for r in b), key=attrgetter("start_ns"))] for scan in scans]
    rank = RankInfo(rank=0, format="ascend_pt", path=Path("."))
    steps = [Step(None, i, start, start + 3) for i, start in enumerate(starts)]
    assert list(_by_step(rank, steps, [iter(scan) for scan in scans])) == by_step_rules(rank, steps, scans)
