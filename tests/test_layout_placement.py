"""The compact placement (``Lanes.placement``, C) against the rules it follows: the layout's, as
Python (``_rule_place``), and each writer's for layout events (a ``Placement`` encodes and reserves
as its ``events()`` do)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from converters.layout import (
    Begin,
    End,
    Lanes,
    Placement,
    Value,
    of_layer,
    sorted_and_timed,
    sorted_by_lane_and_start,
)
from converters.model import Layer, Sample, Slice
from converters.writers.chrome_json import ChromeJsonEncoder
from converters.writers.perfetto import PerfettoEncoder

_NEVER = -(1 << 63)


def _fits(sub: list, s: Slice) -> bool:
    """The rule: no earlier than the sub-lane's last start and floor, and inside the innermost
    slice still open at its start."""
    _, ends, last_start, floor = sub
    if s.start_ns < last_start or s.start_ns < floor:
        return False
    for open_end in reversed(ends):
        if open_end > s.start_ns:
            return s.end_ns <= open_end
    return True


def _rule_place(lanes: dict, slices: list[Slice], track_of) -> list[Begin | End]:
    """``Lanes.place``'s slice events by its rule, each sub-lane ``[track, ends, last_start, floor]``."""
    out: list[Begin | End] = []
    for s in slices:
        subs = lanes.setdefault((s.rank, s.layer, s.lane), [])
        sub = next((sub for sub in subs if _fits(sub, s)), None)
        if sub is None:
            sub = [track_of(s, len(subs)), [], _NEVER, _NEVER]
            subs.append(sub)
        track, ends = sub[0], sub[1]
        while ends and ends[-1] <= s.start_ns:
            out.append(End(track, ends.pop()))
        ends.append(s.end_ns)
        sub[2] = s.start_ns
        out.append(Begin(track, s))
    for subs in lanes.values():  # the close: every slice still open ends
        for sub in subs:
            if sub[1]:
                sub[3] = max(sub[3], sub[1][0])
                while sub[1]:
                    out.append(End(sub[0], sub[1].pop()))
    return out


_LANES = st.sampled_from([(Layer.COMM_TASK, "Plane 0"), (Layer.COMM_TASK, "Plane 1"),
                          (Layer.STREAM, "Stream 2"), (Layer.HOST, "thread 7"), (Layer.STREAM, "Stream 10")])
_SLICE = st.tuples(_LANES, st.integers(0, 120), st.integers(0, 40), st.booleans())
_CHUNKS = st.lists(st.lists(_SLICE, max_size=30), min_size=1, max_size=4)


def _chunks(made: list[list[tuple]]) -> list[tuple[list[Slice], bytes]]:
    """Each chunk's slices sorted as ``place`` needs them, and their times (``sorted_and_timed``);
    some with arrows, to be encoded."""
    chunks = []
    for c, chunk in enumerate(made):
        slices = [Slice(0, layer, lane, f"c{c}s{i}", start, dur, None, "", (c * 100 + i + 1,) * arrow, ())
                  for i, ((layer, lane), start, dur, arrow) in enumerate(chunk)]
        ordered, times = sorted_and_timed(slices)
        assert ordered == sorted_by_lane_and_start(slices)
        assert times == b"".join(struct.pack("=qq", s.start_ns, s.dur_ns) for s in ordered)
        chunks.append((ordered, times))
    return chunks


@settings(max_examples=400, deadline=None)
@given(_CHUNKS, st.booleans())
def test_the_c_placement_gives_the_rules_events_chunk_after_chunk(made, timed):
    lanes, rule_lanes, namer = Lanes(), {}, Lanes()
    for chunk, times in _chunks(made):
        got = lanes.placement(chunk, times=times if timed else None).events()
        want = _rule_place(rule_lanes, chunk, namer._track)
        assert [type(e) for e in got] == [type(e) for e in want]
        assert [e.track for e in got] == [e.track for e in want]
        assert [e.slice if type(e) is Begin else e.ts_ns for e in got] == \
               [e.slice if type(e) is Begin else e.ts_ns for e in want]


def test_a_placement_names_each_track_at_its_first_begin_and_holds_every_slice():
    s = [Slice(0, Layer.COMM_TASK, "Plane 0", n, start, dur) for n, start, dur in
         (("a", 0, 10), ("b", 5, 10), ("c", 20, 1))]
    placed = Lanes().placement(s)
    assert [t.lane for t in placed.tracks] == ["Plane 0", "Plane 0 #2"]
    assert placed.slices is s and len(placed.codes) == 3 * 8 * 2 * len(s)  # a begin and an end each
    assert [type(e).__name__ for e in placed.events()] == ["Begin", "Begin", "End", "Begin", "End", "End"]


_SAMPLES = st.lists(st.tuples(st.sampled_from(["hbm", "host memory"]), st.integers(0, 120),
                              st.floats(-1e6, 1e6)), max_size=5)


@settings(max_examples=200, deadline=None)
@given(_CHUNKS, _SAMPLES, st.sampled_from(["perfetto", "json"]), st.integers(0, 3))
def test_a_placement_encodes_and_reserves_as_its_events(made, samples, writer, reserved):
    """The writers read a ``Placement`` as they read its ``events()``: the same bytes, and the same
    tracks numbered by ``reserve`` (the size cap's), so the chunks after it come out the same."""
    def encoder():
        return PerfettoEncoder(0) if writer == "perfetto" else ChromeJsonEncoder(None)

    compact, spelled = encoder(), encoder()
    lanes = Lanes()
    values = [Sample(0, lane, ts, value) for lane, ts, value in samples]
    for number, (chunk, times) in enumerate(_chunks(made)):
        placed = lanes.placement(chunk, values if number == 0 else [], times)
        assert isinstance(placed, Placement)
        if number == reserved:
            compact.reserve(number % 2, placed)
            spelled.reserve(number % 2, placed.events())
        else:
            assert compact.chunk(number % 2, placed) == spelled.chunk(number % 2, placed.events())
    assert getattr(compact, "span", None) == getattr(spelled, "span", None)


@given(st.lists(st.sampled_from(list(Layer)), max_size=30), st.sampled_from(list(Layer)))
def test_of_layer_keeps_the_slices_of_one_layer_in_their_order(layers, layer):
    slices = [Slice(0, each, "lane", f"s{i}", i, 1) for i, each in enumerate(layers)]
    assert of_layer(slices, layer) == [s for s in slices if s.layer is layer]


def _rule_values(samples: list[Sample], track_of) -> list[Value]:
    """The rule: the samples by (lane, start), ties in their order; a lane's run (of one rank) on the
    track ``track_of`` gives its first sample."""
    values, track, lane = [], None, None
    for sample in sorted(samples, key=lambda s: (s.lane, s.start_ns)):
        if track is None or sample.lane != lane or sample.rank != track.rank:
            track, lane = track_of(sample), sample.lane
        values.append(Value(track, sample.start_ns, sample.value))
    return values


# lanes that sort apart by code point (not by locale), equal lanes as distinct str objects
_COUNTER_LANES = st.sampled_from(["hbm", "HBM", "host memory", "Memory PTA [Allocated]", "é", "a" * 3])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), _COUNTER_LANES,
                          st.integers(-(2**62) + 1, 2**62 - 1) | st.integers(0, 5),
                          st.floats(allow_nan=False) | st.integers(-3, 3)), max_size=60))
def test_the_c_counter_values_are_the_rules(drawn):
    """``Lanes.placement``'s samples (C: ``counter_values``): sorted stably by lane and start, each run
    of a lane and rank on the track its first sample names, each Value holding the sample's own
    time and value objects."""
    samples = [Sample(rank, "".join(lane), ts, value) for rank, lane, ts, value in drawn]
    lanes, rule_lanes, asked, rule_asked = Lanes(), Lanes(), [], []
    lanes._counter_track = lambda s: asked.append(s) or Lanes._counter_track(lanes, s)
    got = lanes.placement([], samples).values
    want = _rule_values(samples, lambda s: rule_asked.append(s) or rule_lanes._counter_track(s))
    assert got == want and [type(v) for v in got] == [Value] * len(want)
    assert all(g.ts_ns is w.ts_ns and g.value is w.value for g, w in zip(got, want, strict=True))
    assert [id(s) for s in asked] == [id(s) for s in rule_asked]
