"""Which track each slice goes to, in what order tracks are drawn, and when slices end.

Perfetto draws the slices of one track as a stack: they must nest. Device streams almost always
do, HCCL planes and clock-jittered lanes sometimes do not. ``Lanes.place`` keeps, per lane, a
few sub-lanes each holding the stack of open slices; a slice goes on the first sub-lane where it
nests or follows, else on a new one (``Plane 0 #2``), so nothing is dropped or reordered. Ends
are handed to the writer only once no later slice can start inside them, which also puts an end
before a begin at the same timestamp.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import NamedTuple

from . import _layout
from .intervals import LANES as OVERLAP_LANES
from .model import HOST_MEMORY, MINDDATA, Layer, Sample, Slice, memory_counter_of, minddata_figure
from .readers.common.lanes import accelerator

_SUBLANES = 64  # order slots per lane: sub-lanes beyond this share the last slot
_COMM_TASK_BASE = 1 << 22  # planes are drawn after the communication op lanes
_NAMED_BASE = 1 << 21  # lanes without a number, after numbered ones, in first-seen order
_TRAILING_NUMBER = re.compile(r"(\d+)\D*$")

GROUPS = {
    Layer.STEP: "Step Trace",
    Layer.OVERLAP: "Overlap Analysis",
    Layer.STREAM: "Ascend Hardware",
    Layer.COMM_OP: "Communication",
    Layer.COMM_TASK: "Communication",
    Layer.HOST: "Host",
}

COUNTER_GROUP = "Counters"
GROUP_ORDER = {group: i for i, group in enumerate(dict.fromkeys([*GROUPS.values(), COUNTER_GROUP]))}
CUT_ORDER = len(GROUP_ORDER)  # the size cap's marker, after these
MEMORY_GROUP = "Memory"  # device memory: its counters and allocations; last, so the others keep their order
GROUP_ORDER[MEMORY_GROUP] = CUT_ORDER + 1
GROUPS[Layer.MEMORY] = MEMORY_GROUP
MINDDATA_ORDER = CUT_ORDER + 2  # after the size cap's note and memory: no other group moves


class JobProcess(NamedTuple):
    """A process of the job's own, beside the ranks' (``--critical-path``'s), drawn above them (its
    sort order -1, the ranks' their rank): its tracks carry ``rank``, a number no drawn rank has."""

    rank: int
    title: str
    description: str


class Track(NamedTuple):
    """One drawn lane: rank, group (``Ascend Hardware``) and lane (``Stream 2``)."""

    rank: int
    group: str
    group_order: int
    lane: str
    lane_order: int
    counter: str | None = None  # None: a slice track; else a counter track and its unit ("bytes" or "")


class Begin(NamedTuple):
    track: Track
    slice: Slice


class End(NamedTuple):
    track: Track
    ts_ns: int


class Value(NamedTuple):
    """One sample on a counter track."""

    track: Track
    ts_ns: int
    value: float


class Placement(NamedTuple):
    """A chunk's events as ``Lanes.placement`` makes them, compact: no Python object per event.
    ``codes`` holds three native int64 per event: (position * 2 + 1, -1, its time) for an end,
    (position * 2, the slice's index in ``slices``, its start) for a begin, the position being the
    track's in ``tracks`` (the slice tracks in the order of their first begin); the counter
    samples (``values``) come after them. The encoders read it as it is; ``events()`` is the same as the
    ``Begin``, ``End`` and ``Value`` events that ``Lanes.place`` gives."""

    tracks: list[Track]
    slices: list[Slice]
    codes: bytes
    values: list[Value]

    def events(self) -> list[Begin | End | Value]:
        codes = memoryview(self.codes).cast("q")
        out: list[Begin | End | Value] = []
        for at in range(0, len(codes), 3):
            kind, index, ts = codes[at:at + 3]
            track = self.tracks[kind >> 1]
            out.append(End(track, ts) if kind & 1 else Begin(track, self.slices[index]))
        return out + self.values


class Lanes:
    """Assigns slices to tracks, one chunk of slices at a time.

    Each lane has sub-lanes, each a track and, kept by C as C numbers, the ends of its open slices
    (outermost first), the start of its last slice, and where the slices ended by a chunk's close
    lie (nothing may nest into them any more). The loop over the slices, and the close, are C
    (``_layout.c``): they run once per slice written.
    """

    def __init__(self) -> None:
        self._lanes: dict[tuple[int, Layer, str], list[list]] = {}
        self._named: dict[str, int] = {}
        self._counters: dict[tuple[int, str], Track] = {}

    def place(self, slices: list[Slice], samples: list[Sample] = ()) -> list[Begin | End | Value]:
        """Put each slice on a track, then end every slice still open: a complete chunk.

        ``slices`` must come sorted by ``by_lane_and_start``. Returns, per track, each begin
        preceded by the ends it follows, then the counter samples. Later calls still place
        slices where they nest properly after the ended ones: a slice goes on the first
        sub-lane where it starts no earlier than the last one there and, inside the innermost
        slice still open at its start, ends within it; else on a new one (``Plane 0 #2``).
        """
        return self.placement(slices, samples).events()

    def placement(self, slices: list[Slice], samples: list[Sample] = (),
                  times: bytes | None = None) -> Placement:
        """``place``'s events in the compact form the encoders read (``Placement``). ``times``: the
        slices' (start, dur) as ``sorted_and_timed`` gives them, so that they are not read again."""
        tracks, codes = _layout.place(slices, self._lanes, self._track, times)
        # sorted by (lane, start); a lane's samples run together: its track looked up once
        return Placement(tracks, slices, codes, _layout.counter_values(samples, self._counter_track, Value))

    def _counter_track(self, sample: Sample) -> Track:
        track = self._counters.get((sample.rank, sample.lane))
        if track is None:
            host = sample.lane == HOST_MEMORY  # drawn with the host threads, below them
            figure = minddata_figure(sample.lane)  # the data pipeline's, in a group of their own
            memory = memory_counter_of(sample.lane) is not None  # above the allocations
            group = (GROUPS[Layer.HOST] if host else MINDDATA if figure else MEMORY_GROUP if memory else
                     COUNTER_GROUP)
            lane = ": ".join(figure) if figure else sample.lane
            track = self._counters[sample.rank, sample.lane] = Track(
                sample.rank, group, MINDDATA_ORDER if figure else GROUP_ORDER[group], lane,
                _COMM_TASK_BASE * 2 if host else len(self._counters), "bytes" if host or memory else "",
            )
        return track

    def _track(self, s: Slice, index: int) -> Track:
        lane = s.lane if index == 0 else f"{s.lane} #{index + 1}"
        found = _TRAILING_NUMBER.search(s.lane)
        if found and int(found.group(1)) < _NAMED_BASE // _SUBLANES:
            base = int(found.group(1)) * _SUBLANES
        else:
            base = _NAMED_BASE + self._named.setdefault(s.lane, len(self._named)) * _SUBLANES
        if s.layer is Layer.COMM_TASK:
            base += _COMM_TASK_BASE
        if s.layer is Layer.OVERLAP:
            base = OVERLAP_LANES.index(s.lane) * _SUBLANES if s.lane in OVERLAP_LANES else base
        order = base + min(index, _SUBLANES - 1)
        group = GROUPS[s.layer]
        order_of_group = GROUP_ORDER[group]
        if s.layer is Layer.STREAM and (device := accelerator(s.lane)):  # a GPU's, where NPUs' would be
            group = device
        return Track(s.rank, group, order_of_group, lane, order)


# The sort key that feeds ``Lanes.place`` correctly, parents before the children they hold:
# (layer order, lane, start, -dur). C, as it runs once per slice; it reads the orders from its
# module.
_layout.layer_orders = {layer: layer.order for layer in Layer}
by_lane_and_start: Callable[[Slice], tuple] = _layout.by_lane_and_start
# sorted(slices, key=by_lane_and_start) in one C call, with no key tuple made per slice
sorted_by_lane_and_start: Callable[[Iterable[Slice]], list[Slice]] = _layout.sorted_by_lane_and_start
# the same, and the slices' (start, dur) in that order as two native int64 each, for Lanes.placement
sorted_and_timed: Callable[[Iterable[Slice]], tuple[list[Slice], bytes]] = _layout.sorted_and_timed
TIMES_SIZE = 16  # bytes of sorted_and_timed's times per slice
# [s for s in slices if s.layer is layer] (a list), in one C call
of_layer: Callable[[list[Slice], Layer], list[Slice]] = _layout.of_layer
# list.clear(), the slices freed with their objects asked for ahead (the step's records, once written)
release: Callable[[list[Slice]], None] = _layout.release
