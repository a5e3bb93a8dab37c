"""The database form's C helpers (readers/_db_core.c) against the Python rules they follow."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from converters.model import Layer, Slice
from converters.readers.ascend_db import _Flows

# (layer, lane), launches and their targets the most
_LANES = ((Layer.HOST, "CANN (thread 1)"), (Layer.HOST, "PyTorch (thread 2)"), (Layer.STREAM, "Stream 1"),
          (Layer.STREAM, "Stream 2"), (Layer.COMM_TASK, "Plane 0"), (Layer.COMM_OP, "group"),
          (Layer.HOST, "MSTX (thread 3)"), (Layer.STEP, "Steps"))
_LINKS = st.sampled_from((0, 1, 2, 3, None))  # few ids: launches share them, as steps do


@st.composite
def _slice(draw) -> Slice:
    layer, lane = draw(st.sampled_from(_LANES))
    linked = st.fixed_dictionaries({"connection_id": _LINKS}, optional={"x": st.integers()})
    args = draw(st.one_of(linked, linked, linked, st.sampled_from(({}, None, b'{"connection_id": 1}'))))
    start = draw(st.integers(0, 9) if layer is Layer.HOST else st.integers(8, 12))  # now and then backwards
    return Slice(0, layer, lane, "s", start, 1, args, "", draw(st.sampled_from(((), (9,)))), ())


_STEP = st.lists(_slice(), min_size=4, max_size=30)
# PYTORCH_API's connectionId -> its device connection ids, as SQLite's group_concat writes them
_OPS = st.dictionaries(st.integers(0, 3), st.one_of(
    st.none(), st.lists(st.integers(0, 3), min_size=1, max_size=3).map(lambda ids: ",".join(map(str, ids)))))


@settings(max_examples=400, deadline=None)
@given(st.lists(_STEP, min_size=1, max_size=3), _OPS, st.integers(0, 5))
def test_bind_in_c_follows_the_rules(steps, links, rank):
    """Arrows out of CANN launches and PyTorch ops, into stream tasks, plane tasks and ops: the same
    slices rebuilt, the same links taken, the same backwards arrows counted, step after step."""
    c, rules = _Flows(rank, dict(links)), _Flows(rank, dict(links))
    for step in steps:
        assert c.bind(list(step)) == rules.bind_rules(list(step))
        assert c.links == rules.links
    assert c.backwards == rules.backwards
