"""Tests of the independent trace reader/checker in ``tests/trace_check.py``.

Traces are built by hand with the official Perfetto schema and as plain JSON lists, so the
checker is tested against the spec, not against the project's writers.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from trace_check import (
    DecodedTrace,
    ReadSlice,
    TraceCheckError,
    comparable,
    read_chrome_json,
    read_perfetto,
)

BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
END = pb.TrackEvent.TYPE_SLICE_END
INSTANT = pb.TrackEvent.TYPE_INSTANT
COUNTER = pb.TrackEvent.TYPE_COUNTER
CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
RANK0 = "Rank 0 (device 0, host X)"
RANK1 = "Rank 1 (device 1, host X)"


# ----------------------------------------------------------------------------- proto builder


class ProtoBuilder:
    """Hand-writes a Perfetto trace in the writers' layout, one packet per call.

    Each sequence's first packet clears incremental state; names, annotation names and
    string annotation values are interned lazily in the packet that first uses them.
    """

    def __init__(self) -> None:
        self.trace = pb.Trace()
        self.interned: dict[int, dict[tuple[str, str], int]] = {}

    def packet(self, seq: int = 1) -> pb.TracePacket:
        packet = self.trace.packet.add()
        packet.trusted_packet_sequence_id = seq
        if seq not in self.interned:
            packet.sequence_flags = CLEARED
            self.interned[seq] = {}
        return packet

    def root(self, ordering: int = pb.TrackDescriptor.PROCESS_ORDERING_EXPLICIT) -> None:
        desc = self.packet().track_descriptor
        desc.uuid = 0
        desc.process_ordering = ordering

    def process(self, uuid: int, name: str, order: int, pid: int | None = None) -> None:
        desc = self.packet().track_descriptor
        desc.uuid = uuid
        desc.process.pid = uuid if pid is None else pid
        desc.process.process_name = name
        desc.sibling_order_rank = order
        desc.child_ordering = pb.TrackDescriptor.EXPLICIT

    def track(self, uuid: int, parent: int, name: str, counter: bool = False) -> None:
        desc = self.packet().track_descriptor
        desc.uuid = uuid
        desc.parent_uuid = parent
        desc.name = name
        if counter:
            desc.counter.SetInParent()

    def _iid(self, packet: pb.TracePacket, table: str, value: str) -> int:
        """The iid of *value* on the packet's sequence, defining it here if new."""
        known = self.interned[packet.trusted_packet_sequence_id]
        if (table, value) not in known:
            known[(table, value)] = iid = len(known) + 1
            entry = getattr(packet.interned_data, table).add()
            entry.iid = iid
            if table == "debug_annotation_string_values":
                entry.str = value.encode()
            else:
                entry.name = value
        packet.sequence_flags |= NEEDS
        return known[(table, value)]

    def event(
        self,
        ts: int,
        uuid: int,
        kind: int,
        name: str | None = None,
        args: dict[str, Any] | None = None,
        flows: tuple[int, ...] = (),
        terminating: tuple[int, ...] = (),
        seq: int = 1,
    ) -> pb.TracePacket:
        packet = self.packet(seq)
        packet.timestamp = ts
        event = packet.track_event
        event.type = kind
        event.track_uuid = uuid
        if name is not None:
            event.name_iid = self._iid(packet, "event_names", name)
        for key, value in (args or {}).items():
            ann = event.debug_annotations.add()
            ann.name_iid = self._iid(packet, "debug_annotation_names", key)
            if isinstance(value, str):
                ann.string_value_iid = self._iid(packet, "debug_annotation_string_values", value)
            elif isinstance(value, float):
                ann.double_value = value
            else:
                ann.int_value = value
        event.flow_ids.extend(flows)
        event.terminating_flow_ids.extend(terminating)
        return packet

    def begin(self, ts: int, uuid: int, name: str, **kw: Any) -> pb.TracePacket:
        return self.event(ts, uuid, BEGIN, name, **kw)

    def end(self, ts: int, uuid: int, **kw: Any) -> pb.TracePacket:
        return self.event(ts, uuid, END, **kw)

    def counter(self, ts: int, uuid: int, value: float) -> pb.TracePacket:
        packet = self.event(ts, uuid, COUNTER)
        packet.track_event.double_counter_value = value
        return packet

    def data(self) -> bytes:
        return self.trace.SerializeToString()


def base() -> ProtoBuilder:
    """Root, one rank, group "Ascend Hardware" (uuid 11) with lane "Stream 2" (uuid 12).

    Packets #0-#3; the next packet is #4.
    """
    b = ProtoBuilder()
    b.root()
    b.process(10, RANK0, 0)
    b.track(11, 10, "Ascend Hardware")
    b.track(12, 11, "Stream 2")
    return b


LANE = re.escape(f"{RANK0} / Ascend Hardware / Stream 2")


def rejects(data: bytes, pattern: str, reader: Callable[[bytes], DecodedTrace] = read_perfetto):
    """Assert *reader* rejects *data* with a message matching *pattern*."""
    with pytest.raises(TraceCheckError, match=pattern):
        reader(data)


# ----------------------------------------------------------------------------- valid proto


def valid_proto() -> bytes:
    b = base()
    b.track(13, 10, "HBM", counter=True)  # 4
    b.process(20, RANK1, 1)  # 5
    b.track(21, 20, "HCCL")  # 6
    b.track(22, 21, "Plane 0")  # 7
    b.track(23, 22, "Sub")  # 8: a path three deep
    b.begin(1000, 12, "MatMul", args={"op": "MatMul", "size": 4}, flows=(7,))  # 9
    b.begin(1100, 12, "inner")
    b.end(1200, 12)
    b.event(1300, 12, INSTANT, "mark")
    b.end(1500, 12)
    b.counter(1000, 13, 3.5)
    b.begin(1400, 22, "AllReduce", terminating=(7,))
    b.end(1900, 22)
    b.begin(2000, 23, "A")
    b.end(2100, 23)  # ends where B begins: ties follow file order
    b.begin(2100, 23, "B", args={"op": "MatMul"})  # reuses the interned string value
    b.end(2200, 23)
    return b.data()


def test_valid_proto_is_read_back() -> None:
    trace = read_perfetto(valid_proto())
    assert trace.processes == [RANK0, RANK1]
    stream = (RANK0, ("Ascend Hardware", "Stream 2"))
    assert trace.tracks == {
        (RANK0, ("Ascend Hardware",)),
        stream,
        (RANK0, ("HBM",)),
        (RANK1, ("HCCL",)),
        (RANK1, ("HCCL", "Plane 0")),
        (RANK1, ("HCCL", "Plane 0", "Sub")),
    }
    by_name = {s.name: s for s in trace.slices}
    assert by_name["MatMul"] == ReadSlice(RANK0, stream[1], "MatMul", 1000, 500, {})
    assert by_name["MatMul"].args == {"op": "MatMul", "size": 4}
    assert by_name["B"].args == {"op": "MatMul"}
    assert by_name["inner"].dur_ns == 100
    assert by_name["B"].track == ("HCCL", "Plane 0", "Sub")
    assert trace.instants == [ReadSlice(RANK0, stream[1], "mark", 1300, 0, {})]
    assert trace.counters == [(RANK0, ("HBM",), 1000, 3.5)]
    assert comparable(trace) == {
        (RANK0, stream[1], "MatMul", 0, 500),
        (RANK0, stream[1], "inner", 100, 100),
        (RANK1, ("HCCL", "Plane 0"), "AllReduce", 400, 500),
        (RANK1, ("HCCL", "Plane 0", "Sub"), "A", 1000, 100),
        (RANK1, ("HCCL", "Plane 0", "Sub"), "B", 1100, 100),
    }


def test_gzip_input_is_accepted() -> None:
    assert read_perfetto(gzip.compress(valid_proto())) == read_perfetto(valid_proto())


def test_redeclaring_identical_descriptor_is_fine() -> None:
    b = base()
    b.track(12, 11, "Stream 2")
    b.begin(5, 12, "x")
    b.end(6, 12)
    assert len(read_perfetto(b.data()).slices) == 1


def test_interned_state_per_sequence_and_clear() -> None:
    b = base()
    b.begin(5, 12, "x", seq=2)  # seq 2 interns "x" itself
    b.end(6, 12, seq=2)
    cleared = b.packet(seq=2)  # a clear on seq 2 drops its table ...
    cleared.sequence_flags = CLEARED
    b.interned[2].clear()
    b.begin(7, 12, "x", seq=2)  # ... so the builder defines "x" again
    b.end(8, 12, seq=2)
    assert [s.name for s in read_perfetto(b.data()).slices] == ["x", "x"]


# ----------------------------------------------------------------------------- proto rejections


def test_event_on_undeclared_track() -> None:
    b = base()
    b.begin(5, 99, "x")
    rejects(b.data(), r"packet #4: event on undeclared track uuid 99")


def test_track_declared_after_first_use() -> None:
    b = base()
    b.begin(5, 13, "x")
    b.end(6, 13)
    b.track(13, 11, "Stream 3")
    rejects(b.data(), r"packet #4: event on track uuid 13 before its descriptor .*packet #6")


def test_parent_declared_after_child() -> None:
    b = base()
    b.track(14, 13, "Stream 3")
    b.track(13, 10, "Group")
    rejects(b.data(), r"packet #4: parent uuid 13 of track 'Stream 3' is declared later")


def test_uuid_redeclared_with_other_content() -> None:
    b = base()
    b.track(12, 11, "Stream 3")
    rejects(b.data(), rf"packet #4, {LANE}: track uuid 12 redeclared with different content")


def test_two_tracks_with_one_path() -> None:
    b = base()
    b.track(13, 11, "Stream 2")
    rejects(b.data(), rf"packet #4, {LANE}: two tracks with one path \(uuids 12 and 13\)")


def test_track_not_under_a_process() -> None:
    b = base()
    b.track(13, 0, "Loose")
    rejects(b.data(), r"packet #4: track 'Loose' \(uuid 13\) is not under a process")


def test_end_without_begin() -> None:
    b = base()
    b.end(50, 12)
    rejects(b.data(), rf"packet #4, {LANE}: SLICE_END at ts 50 with no open slice")


def test_unclosed_begin() -> None:
    b = base()
    b.begin(5, 12, "open")
    rejects(b.data(), rf"packet #4, {LANE}: SLICE_BEGIN 'open' at ts 5 is never closed")


def test_end_before_its_begin() -> None:
    b = base()
    b.begin(10, 12, "x")
    b.end(8, 12)
    rejects(b.data(), rf"packet #5, {LANE}: SLICE_END at ts 8 is before its SLICE_BEGIN 'x'")


def test_overlapping_slices_that_do_not_nest() -> None:
    b = base()
    b.begin(0, 12, "A")
    b.end(10, 12)  # A = [0, 10]
    b.begin(5, 12, "B")
    b.end(15, 12)  # B = [5, 15]: would be re-paired as A = [0, 15], B = [5, 10]
    rejects(b.data(), rf"packet #5, {LANE}: slice 'A' \[0, 10\] .* overlaps 'B'")


def test_touching_slices_written_out_of_order() -> None:
    b = base()
    b.begin(10, 12, "B")
    b.end(20, 12)
    b.begin(0, 12, "A")
    b.end(10, 12)  # in timestamp order this end would close B
    rejects(b.data(), r"slice 'A' \[0, 10\] .* overlaps 'B'")


def test_undefined_name_iid() -> None:
    b = base()
    packet = b.begin(5, 12, "x")
    packet.track_event.name_iid = 5
    rejects(b.data(), rf"packet #4, {LANE}: undefined event name iid 5")


def test_undefined_string_value_iid() -> None:
    b = base()
    packet = b.begin(5, 12, "x", args={"k": "v"})
    packet.track_event.debug_annotations[0].string_value_iid = 42
    rejects(b.data(), r"undefined debug annotation string value iid 42")


def test_iid_from_another_sequence_is_undefined() -> None:
    b = base()
    b.begin(5, 12, "x", args={"k": "v"}, seq=1)  # iids 1-3 on seq 1
    b.end(6, 12, seq=1)
    packet = b.event(7, 12, BEGIN, seq=2)
    packet.track_event.name_iid = 3
    packet.sequence_flags |= NEEDS
    rejects(b.data(), r"packet #6, .*undefined event name iid 3")


def test_iid_redefined_without_clear() -> None:
    b = base()
    b.begin(5, 12, "x")
    b.end(6, 12)
    packet = b.packet()
    packet.interned_data.event_names.add(iid=1, name="y")
    rejects(b.data(), r"packet #6: event name iid 1 redefined from 'x' to 'y'")


def test_missing_needs_incremental_state() -> None:
    b = base()
    packet = b.begin(5, 12, "x")
    packet.sequence_flags &= ~NEEDS
    rejects(b.data(), r"packet #4, .*interned ids without SEQ_NEEDS_INCREMENTAL_STATE")


def test_missing_clear_on_first_packet() -> None:
    b = base()
    b.trace.packet[0].sequence_flags = 0
    rejects(b.data(), r"packet #0: first packet of sequence 1 lacks SEQ_INCREMENTAL_STATE_CLEARED")


def test_first_packet_of_second_sequence_needs_clear_too() -> None:
    b = base()
    b.interned[2] = {}  # pretend seq 2 started: its first packet gets no clear
    b.begin(5, 12, "x", seq=2)
    rejects(b.data(), r"packet #4: first packet of sequence 2 lacks")


def test_event_without_sequence_id() -> None:
    b = base()
    packet = b.begin(5, 12, "x")
    packet.ClearField("trusted_packet_sequence_id")
    rejects(b.data(), r"packet #4: track event or interned data without trusted_packet_sequence")


def test_ranks_out_of_order() -> None:
    b = ProtoBuilder()
    b.root()
    b.process(10, RANK0, 5)
    b.process(20, RANK1, 2)
    rejects(b.data(), r"packet #2, Rank 1 .*: ranks out of order: .*sibling_order_rank 2")


def test_rank_twice() -> None:
    b = ProtoBuilder()
    b.root()
    b.process(10, "Rank 0 (device 0)", 0)
    b.process(20, "Rank 0 (device 1)", 1)
    rejects(b.data(), r"packet #2, Rank 0 \(device 1\): rank 0 appears twice")


def test_process_name_without_rank() -> None:
    b = ProtoBuilder()
    b.root()
    b.process(10, "Device 0", 0)
    rejects(b.data(), r"packet #1, Device 0: process name 'Device 0' does not start with 'Rank N'")


def test_duplicate_pid() -> None:
    b = ProtoBuilder()
    b.root()
    b.process(10, RANK0, 0, pid=7)
    b.process(20, RANK1, 1, pid=7)
    rejects(b.data(), r"packet #2, Rank 1 .*: pid 7 already used")


def test_missing_root_ordering_descriptor() -> None:
    b = ProtoBuilder()
    b.process(10, RANK0, 0)
    rejects(b.data(), r"packet #0, Rank 0 .*: process track declared before the root ordering")


def test_root_without_explicit_ordering() -> None:
    b = ProtoBuilder()
    b.root(ordering=pb.TrackDescriptor.PROCESS_ORDERING_UNSPECIFIED)
    rejects(
        b.data(), r"packet #0: root track descriptor \(uuid 0\) lacks PROCESS_ORDERING_EXPLICIT"
    )


def test_empty_trace_has_no_root() -> None:
    rejects(b"", r"trace: no root track descriptor")


def test_dangling_flow() -> None:
    b = base()
    b.begin(5, 12, "x", flows=(7,))
    b.end(6, 12)
    rejects(b.data(), r"packet #4: flow id 7 starts on 1 event\(s\) and terminates on 0")


def test_flow_started_twice() -> None:
    b = base()
    b.begin(5, 12, "x", flows=(7,))
    b.end(6, 12)
    b.begin(7, 12, "y", flows=(7,), terminating=(7,))
    b.end(8, 12)
    rejects(b.data(), r"flow id 7 starts on 2 event\(s\) and terminates on 1")


def test_flow_on_end_event() -> None:
    b = base()
    b.begin(5, 12, "x", flows=(7,))
    b.end(6, 12, terminating=(7,))
    rejects(b.data(), rf"packet #5, {LANE}: flow on a SLICE_END event")


def test_counter_on_slice_track() -> None:
    b = base()
    b.counter(5, 12, 1.0)
    rejects(b.data(), rf"packet #4, {LANE}: COUNTER event on a track without a counter")


def test_slice_on_counter_track() -> None:
    b = base()
    b.track(13, 10, "HBM", counter=True)
    b.begin(5, 13, "x")
    rejects(b.data(), r"packet #5, Rank 0 .* / HBM: SLICE_BEGIN event on a counter track")


def test_garbage_is_not_a_trace() -> None:
    rejects(b"\xff\xff\xff", r"trace: not a Perfetto Trace protobuf")


# ----------------------------------------------------------------------------- Chrome JSON


def meta(pid: int, rank: int, threads: dict[int, str]) -> list[dict]:
    """Metadata events naming one rank's process and its threads."""
    events = [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"Rank {rank} (dev)"}},
        {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": rank}},
    ]
    for order, (tid, name) in enumerate(threads.items()):
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                       "args": {"name": name}})  # fmt: skip
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                       "args": {"sort_index": order}})  # fmt: skip
    return events


def x(pid: int, tid: int, name: str, ts: float, dur: float, **extra: Any) -> dict:
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur, **extra}


def valid_json() -> list[dict]:
    return [
        *meta(1, 0, {1: "Ascend Hardware / Stream 2", 2: "Communication / Group 0 / Plane 1"}),
        *meta(2, 1, {1: "Host"}),
        x(1, 1, "MatMul", 0.5, 2.25, args={"op": "MatMul"}),
        x(1, 1, "inner", 1.0, 0.001),
        x(1, 1, "next", 2.75, 1),
        x(1, 2, "AllReduce", 3, 4),
        x(2, 1, "launch", 0, 1.5),
        {"ph": "i", "pid": 1, "tid": 1, "name": "mark", "ts": 1.5, "s": "t"},
        {"ph": "i", "pid": 2, "name": "proc", "ts": 2, "s": "p"},
        {"ph": "C", "pid": 1, "name": "HBM", "ts": 0.5, "args": {"[bytes]": 3.5}},
        {"ph": "s", "pid": 2, "tid": 1, "name": "f", "cat": "launch", "id": 3, "ts": 0.5},
        {
            "ph": "f",
            "pid": 1,
            "tid": 1,
            "name": "f",
            "cat": "launch",
            "id": 3,
            "ts": 1.0,
            "bp": "e",
        },  # fmt: skip
    ]


def j(events: list[dict]) -> bytes:
    return orjson.dumps(events)


def test_valid_json_is_read_back() -> None:
    trace = read_chrome_json(j(valid_json()))
    r0, r1 = "Rank 0 (dev)", "Rank 1 (dev)"
    stream = ("Ascend Hardware", "Stream 2")
    assert trace.processes == [r0, r1]
    assert trace.tracks == {
        (r0, stream),
        (r0, ("Communication", "Group 0", "Plane 1")),
        (r1, ("Host",)),
    }
    assert ReadSlice(r0, stream, "inner", 1000, 1) in trace.slices
    assert trace.slices[0].args == {"op": "MatMul"}
    assert trace.instants == [
        ReadSlice(r0, stream, "mark", 1500, 0),
        ReadSlice(r1, (), "proc", 2000, 0),
    ]
    assert trace.counters == [(r0, ("HBM [bytes]",), 500, 3.5)]  # the series as the trace processor names it
    assert comparable(trace) == {
        (r0, stream, "MatMul", 500, 2250),
        (r0, stream, "inner", 1000, 1),
        (r0, stream, "next", 2750, 1000),
        (r0, ("Communication", "Group 0", "Plane 1"), "AllReduce", 3000, 4000),
        (r1, ("Host",), "launch", 0, 1500),
    }


def test_json_gzip_is_accepted() -> None:
    assert read_chrome_json(gzip.compress(j(valid_json()))).slices


def test_json_partial_overlap_on_one_thread() -> None:
    events = [*meta(1, 0, {1: "Host"}), x(1, 1, "A", 0, 10), x(1, 1, "B", 5, 10)]
    rejects(
        j(events),
        r"event #5, Rank 0 \(dev\) / Host: slice 'B' \[5000, 15000\] ns partially overlaps "
        r"'A' \[0, 10000\] ns \(event #4\)",
        read_chrome_json,
    )


def test_json_tid_without_thread_name() -> None:
    events = [*meta(1, 0, {1: "Host"}), x(1, 7, "A", 0, 1)]
    rejects(j(events), r"event #4: Rank 0 \(dev\): tid 7 has no thread_name", read_chrome_json)


def test_json_pid_without_process_name() -> None:
    events = [*meta(1, 0, {1: "Host"}), x(2, 1, "A", 0, 1)]
    rejects(j(events), r"event #4: pid 2 has no process_name metadata", read_chrome_json)


def test_json_negative_dur() -> None:
    events = [*meta(1, 0, {1: "Host"}), x(1, 1, "A", 5, -1)]
    rejects(j(events), r"event #4, .* / Host: X event 'A' has negative dur -1000", read_chrome_json)


def test_json_sort_index_out_of_rank_order() -> None:
    events = [*meta(1, 0, {}), *meta(2, 1, {})]
    events[1]["args"]["sort_index"] = 9
    rejects(j(events), r"pid 2, Rank 1 \(dev\): ranks out of order", read_chrome_json)


def test_json_process_without_sort_index() -> None:
    events = meta(1, 0, {})[:1]
    rejects(
        j(events), r"pid 1, Rank 0 \(dev\): process without process_sort_index", read_chrome_json
    )


def test_json_dangling_flow() -> None:
    events = [e for e in valid_json() if e["ph"] != "f"]
    rejects(j(events), r"flow cat 'launch' id 3 has 1 's' and 0 'f' events", read_chrome_json)


def test_json_flow_with_other_cat_does_not_pair() -> None:
    events = valid_json()
    events[-1]["cat"] = "other"
    rejects(j(events), r"flow cat '(launch|other)' id 3 has", read_chrome_json)


def test_json_flow_outside_any_slice() -> None:
    events = valid_json()
    events[-1]["ts"] = 50
    rejects(j(events), r"event #\d+, .*: flow cat 'launch' id 3 at ts 50000 ns is inside no slice",
            read_chrome_json)  # fmt: skip


def test_json_flow_end_needs_enclosing_binding() -> None:
    events = valid_json()
    del events[-1]["bp"]
    rejects(j(events), r"flow end without bp 'e'", read_chrome_json)


def test_json_sub_nanosecond_time() -> None:
    events = [*meta(1, 0, {1: "Host"}), x(1, 1, "A", 0.0001, 1)]
    rejects(j(events), r"event #4: 'ts' = 0.0001 µs is not a whole number of ns", read_chrome_json)


def test_json_unknown_phase() -> None:
    events = [*meta(1, 0, {1: "Host"}), {"ph": "B", "pid": 1, "tid": 1, "ts": 0, "name": "A"}]
    rejects(j(events), r"event #4: unexpected phase 'B'", read_chrome_json)


def test_json_two_threads_with_one_name() -> None:
    events = meta(1, 0, {1: "Host", 2: "Host"})
    rejects(
        j(events), r"Rank 0 \(dev\) / Host: tids 1 and 2 share one thread name", read_chrome_json
    )


def test_json_object_form_is_rejected() -> None:
    rejects(orjson.dumps({"traceEvents": []}), r"expected a JSON array", read_chrome_json)


# ----------------------------------------------------------------------------- property tests

PROCESSES = [RANK0, RANK1]
PATHS = [("Ascend Hardware", "Stream 2"), ("HCCL", "Plane 0"), ("HCCL", "Plane 0 #2"),
         ("Communication", "Group 0", "Plane 1")]  # fmt: skip
NAMES = ["MatMul", "AllReduce", "Notify", "x"]
ORIGIN_NS = 1_700_000_000_123_456_789  # Perfetto times are absolute, JSON relative to it
Layout = dict[tuple[str, tuple[str, ...]], list[tuple[int, int, str]]]


@st.composite
def nested(draw: st.DrawFn, lo: int, hi: int, depth: int = 0) -> list[tuple[int, int, str]]:
    """Well-nested (start, dur, name) slices within [lo, hi]; siblings may touch."""
    slices: list[tuple[int, int, str]] = []
    cursor = lo
    for _ in range(draw(st.integers(0, 3))):
        if cursor > hi:
            break
        start = draw(st.integers(cursor, hi))
        end = draw(st.integers(start, hi))
        slices.append((start, end - start, draw(st.sampled_from(NAMES))))
        if depth < 3:
            slices += draw(nested(start, end, depth + 1))
        cursor = end
    return slices


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    """Random slice sets on a random subset of the lanes of two ranks."""
    lanes = draw(st.sets(st.sampled_from([(p, t) for p in PROCESSES for t in PATHS]), min_size=1))
    return {lane: draw(nested(0, 10_000)) for lane in sorted(lanes)}


def lane_events(slices: list[tuple[int, int, str]]) -> list[tuple[int, int, str, int]]:
    """A track's (ts, kind, name, slice index) stream, in the order a stack emits it."""
    order = sorted(range(len(slices)), key=lambda i: (slices[i][0], -slices[i][1]))
    events: list[tuple[int, int, str, int]] = []
    stack: list[int] = []

    def close(i: int) -> None:
        events.append((slices[i][0] + slices[i][1], END, "", i))

    for i in order:
        while stack and slices[stack[-1]][0] + slices[stack[-1]][1] <= slices[i][0]:
            close(stack.pop())
        events.append((slices[i][0], BEGIN, slices[i][2], i))
        stack.append(i)
    while stack:
        close(stack.pop())
    return events


def encode_proto(layout: Layout) -> tuple[bytes, list[tuple[int, int]]]:
    """Write *layout* as Perfetto; return the bytes and (begin, end) packet index pairs."""
    b = ProtoBuilder()
    b.root()
    uuids: dict[tuple[str, tuple[str, ...]], int] = {}
    for rank, process in enumerate(PROCESSES):
        uuids[(process, ())] = uuid = 100 * (rank + 1)
        b.process(uuid, process, rank)
    for process, path in layout:
        for depth in range(1, len(path) + 1):
            key = (process, path[:depth])
            if key not in uuids:
                uuids[key] = uuid = len(uuids) + 1000
                b.track(uuid, uuids[(process, path[: depth - 1])], path[depth - 1])
    stream = [  # all lanes merged by time; each lane's own order is kept (stable sort)
        (ts, kind, name, (lane, i))
        for lane, slices in layout.items()
        for ts, kind, name, i in lane_events(slices)
    ]
    stream.sort(key=lambda e: e[0])
    begins: dict[tuple, int] = {}
    pairs: list[tuple[int, int]] = []
    for ts, kind, name, key in stream:
        packet_index = len(b.trace.packet)
        b.event(ORIGIN_NS + ts, uuids[key[0]], kind, name or None)
        if kind == BEGIN:
            begins[key] = packet_index
        else:
            pairs.append((begins[key], packet_index))
    return b.data(), pairs


def encode_json(layout: Layout) -> bytes:
    """Write *layout* as a Chrome JSON array, times in µs relative to the origin."""
    events: list[dict] = []
    for rank, process in enumerate(PROCESSES):
        pid = rank + 1
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process}})
        events.append({"ph": "M", "pid": pid, "name": "process_sort_index",
                       "args": {"sort_index": rank}})  # fmt: skip
        for tid, path in enumerate(PATHS, start=1):
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                           "args": {"name": " / ".join(path)}})  # fmt: skip
    for (process, path), slices in layout.items():
        pid, tid = PROCESSES.index(process) + 1, PATHS.index(path) + 1
        events += [x(pid, tid, name, start / 1000, dur / 1000) for start, dur, name in slices]
    return orjson.dumps(events)


def expected(layout: Layout) -> set[tuple]:
    flat = [(lane, s) for lane, slices in layout.items() for s in slices]
    if not flat:
        return set()
    origin = min(start for _, (start, _, _) in flat)
    return {(p, t, name, start - origin, dur) for (p, t), (start, dur, name) in flat}


@settings(max_examples=150, deadline=None)
@given(layouts())
def test_proto_and_json_of_one_layout_agree(layout: Layout) -> None:
    proto, _ = encode_proto(layout)
    from_proto, from_json = read_perfetto(proto), read_chrome_json(encode_json(layout))
    assert comparable(from_proto) == comparable(from_json) == expected(layout)
    assert from_proto.processes == from_json.processes == PROCESSES
    assert {t for t in from_json.tracks if t in layout} == set(layout)
    assert set(layout) <= from_proto.tracks
    assert sorted(s.start_ns - ORIGIN_NS for s in from_proto.slices) == sorted(
        s.start_ns for s in from_json.slices
    )


@settings(max_examples=150, deadline=None)
@given(layouts(), st.data())
def test_end_moved_before_its_begin_is_rejected(layout: Layout, data: st.DataObject) -> None:
    proto, pairs = encode_proto(layout)
    if not pairs:
        return
    begin, end = data.draw(st.sampled_from(pairs))
    trace = pb.Trace.FromString(proto)
    trace.packet[end].timestamp = trace.packet[begin].timestamp - data.draw(st.integers(1, 50))
    rejects(
        trace.SerializeToString(),
        rf"packet #{end}, .*: SLICE_END at ts \d+ is before its SLICE_BEGIN .*\(packet #{begin}\)",
    )
