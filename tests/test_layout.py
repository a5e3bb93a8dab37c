"""Lane assignment: every slice placed once, each track a proper stack, overlaps split off."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.layout import Begin, End, Lanes, by_lane_and_start, release, sorted_by_lane_and_start
from converters.model import Layer, Slice


def _slices(draw_list):
    return [Slice(0, Layer.COMM_TASK, "Plane 0", f"t{i}", s, d) for i, (s, d) in enumerate(draw_list)]


raw = st.lists(st.tuples(st.integers(0, 100), st.integers(0, 30)), max_size=25)


def _replay(slices):
    """Run the layout and replay its events as a writer would, per track."""
    events = Lanes().place(sorted(slices, key=by_lane_and_start))
    stacks: dict = {}
    placed = []
    clock: dict = {}
    for ev in events:
        stack = stacks.setdefault(ev.track, [])
        if isinstance(ev, Begin):
            assert ev.slice.start_ns >= clock.get(ev.track, 0), "events go back in time on a track"
            clock[ev.track] = ev.slice.start_ns
            if stack:  # nests inside the open parent
                assert stack[-1].end_ns >= ev.slice.end_ns and stack[-1].start_ns <= ev.slice.start_ns
            stack.append(ev.slice)
            placed.append((ev.track, ev.slice))
        else:
            assert isinstance(ev, End)
            top = stack.pop()
            assert top.end_ns == ev.ts_ns
            assert ev.ts_ns >= clock.get(ev.track, 0)
            clock[ev.track] = ev.ts_ns
    assert all(not s for s in stacks.values())
    return placed


@given(raw)
def test_every_slice_is_placed_once_on_a_properly_nested_track(pairs):
    slices = _slices(pairs)
    placed = _replay(slices)
    assert sorted(s.name for _, s in placed) == sorted(s.name for s in slices)


def test_crossing_slices_go_to_an_extra_lane_named_after_the_first():
    placed = _replay(_slices([(0, 10), (5, 10), (20, 5)]))
    lanes = {s.name: t.lane for t, s in placed}
    assert lanes == {"t0": "Plane 0", "t1": "Plane 0 #2", "t2": "Plane 0"}
    orders = {t.lane: t.lane_order for t, _ in placed}
    assert orders["Plane 0"] < orders["Plane 0 #2"]


def test_nested_slices_share_a_lane():
    placed = _replay(_slices([(0, 10), (2, 3), (5, 5)]))
    assert {t.lane for t, _ in placed} == {"Plane 0"}


def test_lanes_are_ordered_by_their_number_not_their_text():
    events = Lanes().place([Slice(0, Layer.STREAM, f"Stream {n}", "x", 0, 1) for n in (10, 2, 3)])
    tracks = [e.track for e in events if isinstance(e, Begin)]
    assert sorted(tracks, key=lambda t: t.lane_order)[0].lane == "Stream 2"


def test_a_closed_chunk_is_complete_and_later_chunks_never_nest_into_it():
    lanes = Lanes()
    first = lanes.place(_slices([(0, 10)]))
    assert [type(e).__name__ for e in first] == ["Begin", "End"]
    later = lanes.place([Slice(0, Layer.COMM_TASK, "Plane 0", "late", 5, 2),
                         Slice(0, Layer.COMM_TASK, "Plane 0", "after", 12, 2)])
    lanes_of = {e.slice.name: e.track.lane for e in later if isinstance(e, Begin)}
    assert lanes_of == {"late": "Plane 0 #2", "after": "Plane 0"}


_LANES = st.sampled_from(["Plane 0", "Plane 1", "plane 0", "é", "", "Stream 10", "Stream 2"])


@settings(max_examples=500)
@given(st.lists(st.tuples(st.sampled_from(list(Layer)), _LANES, st.integers(-(2**62), 2**62),
                          st.integers(0, 2**62), st.integers(0, 3)), max_size=40))
def test_the_c_sort_orders_slices_as_sorted_by_their_key_ties_in_their_order(made):
    slices = [Slice(0, layer, lane, f"s{i}", start % 50 if small else start, dur % 5 if small else dur)
              for i, (layer, lane, start, dur, small) in enumerate(made)]
    want = sorted(slices, key=by_lane_and_start)
    got = sorted_by_lane_and_start(iter(slices))
    assert [id(s) for s in got] == [id(s) for s in want]  # the same objects, ties in their order


def test_release_empties_the_list_and_leaves_what_others_hold():
    """``release`` is ``list.clear``: the list empty and usable, a slice held elsewhere intact."""
    slices = [Slice(0, Layer.STREAM, "Stream 1", f"k{i}", 10**18 + i, 10 + i, b'{"a":1}') for i in range(40)]
    kept, copy = slices[25], list(slices)
    release(slices)
    assert slices == []
    slices.append(kept)
    assert slices == [kept] and kept.start_ns == 10**18 + 25 and copy[25] is kept
    release(copy)
    assert copy == [] and kept.name == "k25"
    release([])
    with pytest.raises(TypeError):
        release((kept,))

