"""The Chrome-trace reader on small hand-written traces: names anywhere in the file, events in
any order, processes it does not know, string or number times, what is not read, and flow
arrows across steps. Every expected value is written here by hand, never taken from the reader."""

from __future__ import annotations

import bisect
import hashlib
import json
import random
from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_check import read_perfetto

from converters import Diagnostics, Layer, Options, discover, overlap_report, read_profile
from converters.cli import main
from converters.errors import InputError
from converters.model import FlowEnd, RankInfo, Sample, Slice, StepRecords
from converters.readers import _core, chrome_trace
from converters.readers.common import events as event_decoding
from converters.readers.common import flows, spill, times
from converters.readers.common.spilled_flows import Packed

T0 = 1_736_408_883_000_000  # µs since the epoch: step k runs from T0 + k ms to T0 + (k + 1) ms
PYTHON, CANN, DEVICE, HCCL = 101, 102, 103, 104


def _us(offset_us: float) -> str:
    """A torch_npu timestamp: epoch µs as a string with 3 decimals."""
    return f"{T0 + int(offset_us)}.{round(offset_us % 1 * 1000):03d}"


def meta(pid: int, process: str, threads: dict[int, str]) -> list[dict]:
    events = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process}}]
    events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
               for tid, name in threads.items()]
    return events


def x(pid: int, tid: int, name: str, at_us: float, dur_us: float, **args) -> dict:
    return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": _us(at_us), "dur": dur_us, "args": args}


def flow(ph: str, pid: int, tid: int, at_us: float, flow_id: str) -> dict:
    event = {"ph": ph, "name": "HostToDevice", "cat": "HostToDevice", "id": flow_id, "pid": pid, "tid": tid,
             "ts": _us(at_us)}
    return event | ({"bp": "e"} if ph == "f" else {})


def write_rank(root: Path, events: list[dict], rank: int = 0) -> Path:
    rank_dir = root / f"node_{rank}_ascend_pt"
    (rank_dir / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (rank_dir / f"profiler_info_{rank}.json").write_text(f'{{"rank_id": {rank}}}')
    (rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_bytes(orjson.dumps(events))
    return rank_dir


NAMES = (meta(PYTHON, "Python", {1: "Thread 1"}) + meta(CANN, "CANN", {7: "Thread 7"})
         + meta(DEVICE, "Ascend Hardware", {2: "Stream 2"})
         + meta(HCCL, "HCCL", {0: "Group 0 Communication", 1: "Plane 0"}))


def steps(count: int) -> list[dict]:
    return [x(PYTHON, 1, f"ProfilerStep#{k}", k * 1000, 1000) for k in range(1, count + 1)]


def device_step(k: int) -> list[dict]:
    """Step k's device work: a kernel at +100 µs (100 µs), an allreduce at +300 µs (200 µs) with a
    plane task, a Notify Wait mirror; and its host side, a launch on CANN at +50 µs."""
    at = k * 1000
    return [x(DEVICE, 2, f"MatMul_{k}", at + 100, 100, **{"Task Type": "AI_CORE"}),
            x(DEVICE, 2, "Notify Wait", at + 320, 10, **{"Task Type": "Notify Wait"}),
            x(HCCL, 0, f"hcom_allReduce__{k}", at + 300, 200), x(HCCL, 1, "Memcpy", at + 310, 50),
            x(CANN, 7, f"AscendCL@launch_{k}", at + 50, 20)]


def _read(root: Path, kind: str = "detail") -> tuple[list[StepRecords], Diagnostics]:
    """As convert reads: the arrows drawn, so those left out are warned of."""
    diag = Diagnostics()
    return list(read_profile(discover(root), Options(kind=kind, draws_arrows=True), diag)), diag


@pytest.fixture
def small_batches(monkeypatch):
    """Batches of 1 KiB: the names lie many batches after the events they name."""
    monkeypatch.setattr(chrome_trace, "BATCH_BYTES", 1 << 10)


# ---------------------------------------------------------------- names anywhere, any order


@pytest.mark.parametrize("order", ["names first", "names last", "shuffled"])
def test_names_anywhere_and_events_in_any_order_give_the_same_steps(tmp_path, small_batches, order):
    body = steps(3) + [e for k in (1, 2, 3) for e in device_step(k)]
    events = {"names first": NAMES + body, "names last": body + NAMES}.get(order)
    if events is None:
        events = NAMES + body
        random.Random(5).shuffle(events)
    write_rank(tmp_path, events)
    batches, diag = _read(tmp_path)
    assert [b.step_id for b in batches] == [1, 2, 3] and not diag
    for k, batch in zip((1, 2, 3), batches, strict=True):
        lanes = sorted((s.layer, s.lane, s.name) for s in batch.slices)
        assert lanes == sorted([
            (Layer.STEP, "Steps", f"Step {k}"), (Layer.STREAM, "Stream 2", f"MatMul_{k}"),
            (Layer.STREAM, "Stream 2", "Notify Wait"),
            (Layer.COMM_OP, "Group 0 Communication", f"hcom_allReduce__{k}"),
            (Layer.COMM_TASK, "Plane 0", "Memcpy"), (Layer.HOST, "CANN Thread 7", f"AscendCL@launch_{k}")])
        assert batch.has_device


def test_overlap_of_a_file_with_its_names_last_equals_the_hand_count(tmp_path, small_batches):
    write_rank(tmp_path, steps(2) + device_step(1) + device_step(2) + NAMES)
    rows = overlap_report(tmp_path)
    # per step: compute [100, 200) µs, communication [300, 500): nothing overlaps, Free 100 µs
    assert [(r.step, r.computing_ns, r.communication_ns, r.free_ns, r.preparing_ns) for r in rows] == [
        (1, 100_000, 200_000, 100_000, 100_000), (2, 100_000, 200_000, 100_000, 100_000)]


# ---------------------------------------------------------------- processes it does not know


def _mindspore_cpu() -> list[dict]:
    """What MindSpore 2.10 on a CPU writes: "CPU OP" and "Scope Layer" (tid = scope depth, no
    thread names), ``ts`` and ``dur`` both strings, ``cat`` empty."""
    events = meta(2, "CPU OP", {0: "Thread 0"}) + meta(3, "Scope Layer", {})
    for i in range(3):
        events.append({"ph": "X", "name": f"Default/MatMul-op{i}", "pid": 2, "tid": 0, "ts": _us(10 + 20 * i),
                       "dur": "5.312", "cat": "", "args": {"type": "HostCpuOps"}})
    events.append({"ph": "X", "name": "Default", "pid": 3, "tid": 0, "ts": _us(5), "dur": "80.000", "cat": "",
                   "args": {}})
    events.append({"ph": "X", "name": "network-WithLossCell", "pid": 3, "tid": 1, "ts": _us(6),
                   "dur": "70.5", "cat": "", "args": {}})
    return events


def test_unknown_processes_become_host_lanes_with_string_times_exact_to_the_ns(tmp_path):
    write_rank(tmp_path, _mindspore_cpu())
    (batch,), diag = _read(tmp_path)
    assert not diag and batch.step_id is None and not batch.has_device
    got = sorted((s.layer, s.lane, s.name, s.start_ns, s.dur_ns) for s in batch.slices)
    t0 = T0 * 1000
    assert got == sorted(
        [(Layer.HOST, "CPU OP / Thread 0", f"Default/MatMul-op{i}", t0 + (10 + 20 * i) * 1000, 5312)
         for i in range(3)]
        + [(Layer.HOST, "Scope Layer / 0", "Default", t0 + 5000, 80_000),
           (Layer.HOST, "Scope Layer / 1", "network-WithLossCell", t0 + 6000, 70_500)])


def test_a_process_named_as_a_device_is_drawn_with_the_device_but_not_counted_as_compute(tmp_path):
    events = meta(9, "GPU 0", {7: "stream 7"}) + meta(8, "NPU Queue", {}) + [
        {"ph": "X", "name": "gemm", "pid": 9, "tid": 7, "ts": T0 + 100, "dur": 50},   # numbers this time
        {"ph": "X", "name": "copy", "pid": 8, "tid": 3, "ts": T0 + 200.5, "dur": 25.25}]
    write_rank(tmp_path, events)
    (batch,), _ = _read(tmp_path)
    assert sorted((s.layer, s.lane, s.name, s.start_ns, s.dur_ns) for s in batch.slices) == [
        (Layer.STREAM, "GPU 0 / stream 7", "gemm", (T0 + 100) * 1000, 50_000),
        (Layer.STREAM, "NPU Queue / 3", "copy", (T0 + 200) * 1000 + 500, 25_250)]
    assert batch.has_device
    (row,) = overlap_report(tmp_path)  # what such a process does is not known: no compute made up
    assert row.computing_ns == 0 and row.communication_ns == 0


def test_a_host_only_trace_has_unknown_device_figures_and_says_what_summary_leaves_out(out_dir, tmp_path,
                                                                                      capsys):
    path = write_rank(tmp_path, _mindspore_cpu()) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    (row,) = overlap_report(tmp_path, diag=(diag := Diagnostics()))
    assert (row.computing_ns, row.free_ns, row.not_overlapped_ns, row.stage_ns) == (None, None, None, None)
    (message,) = diag.messages()
    assert message.startswith(f"{path}: 5 events of processes CPU OP, Scope Layer were not read: ")
    assert "host events, drawn with --kind detail only" in message
    assert main([str(tmp_path), "--kind", "detail", "-o", str(out_dir / "d.pftrace")]) == 0
    assert "were not read" not in capsys.readouterr().err
    lanes = {s.track for s in read_perfetto((out_dir / "d.pftrace").read_bytes()).slices}
    assert {lane[-1] for lane in lanes} == {"CPU OP / Thread 0", "Scope Layer / 0", "Scope Layer / 1"}


def test_a_file_of_only_skipped_events_is_named_with_its_processes_in_detail_too(tmp_path):
    events = meta(5, "Overlap Analysis", {0: "Computing"}) + [x(5, 0, "Computing", 10, 5) for _ in range(4)]
    path = write_rank(tmp_path, events + [{"ph": "b", "name": "mark", "pid": 5, "tid": 0, "ts": _us(3)}])
    _, diag = _read(tmp_path)
    (message,) = diag.messages()
    assert message.startswith(f"{path / 'ASCEND_PROFILER_OUTPUT/trace_view.json'}: 5 events of processes "
                              "Overlap Analysis were not read: ")
    assert "4 events of the profiler's own overlap lanes" in message and "1 events of phase 'b'" in message


def test_events_it_cannot_convert_among_others_are_noted(tmp_path):
    marks = [{"ph": "b", "name": "mark", "pid": PYTHON, "tid": 1, "ts": _us(1500), "id": 1},
             {"ph": "B", "name": "open", "pid": PYTHON, "tid": 1, "ts": _us(1600)}]
    write_rank(tmp_path, NAMES + steps(1) + device_step(1) + marks)
    batches, diag = _read(tmp_path)
    assert len(batches) == 1 and not diag  # a note, not damage: --strict still converts
    (note,) = diag.notes.values()
    assert "2 events not converted" in note and "phase 'b'" in note and "phase 'B'" in note


def test_an_instant_is_a_slice_of_no_length_on_its_thread(tmp_path):
    mark = {"ph": "i", "name": "mark", "pid": PYTHON, "tid": 1, "ts": _us(1500), "s": "t"}
    write_rank(tmp_path, NAMES + steps(1) + device_step(1) + [mark])
    batches, diag = _read(tmp_path)
    (found,) = [s for b in batches for s in b.slices if s.name == "mark"]
    assert (found.layer, found.start_ns, found.dur_ns) == (Layer.HOST, (T0 + 1500) * 1000, 0)
    assert not diag.notes


@pytest.mark.parametrize("ts,dur", [("x", 5), (_us(1), "-1"), (_us(1), "NaN"), (None, 5), (_us(1), [1])])
def test_bad_times_are_skipped_with_a_warning_naming_the_event(tmp_path, ts, dur):
    events = NAMES + steps(1) + device_step(1) + [
        {"ph": "X", "name": "bad", "pid": DEVICE, "tid": 2, "ts": ts, "dur": dur, "args": {}}]
    path = write_rank(tmp_path, events) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    batches, diag = _read(tmp_path)
    assert "bad" not in {s.name for b in batches for s in b.slices}
    assert any(m.startswith(f"{path}: event {len(events) - 1}: ") for m in diag.messages())


# ---------------------------------------------------------------- flow arrows across steps

LAUNCH, TASK = (CANN, 7), (DEVICE, 2)


def _arrow_trace() -> tuple[list[dict], set[tuple[str, str]]]:
    """Seven steps of launches (CANN) and tasks (Stream 2) joined by HostToDevice flows, and the
    arrows a viewer must show: (launch name, task name)."""
    events = NAMES + steps(7)
    cases = [  # id, launch µs (None: no start), task µs (None: no end), a task slice to bind to?
        ("same", 1800, 1900, True), ("next", 1950, 2050, True), ("two later", 2500, 4100, True),
        ("no end", 3100, None, True), ("no start", None, 5100, True), ("end in no slice", 5200, 5400, False),
        ("backwards", 3300, 3200, True), ("too far", 1100, 6900, True),
        ("copy", 4900, 4950, True), ("copy", None, 5050, True), ("id reused", 6100, 6200, True),
        ("id reused", None, 6250, True), ("id reused", 6300, 6400, True)]
    for key, launch, task, binds in cases:
        if launch is not None:
            events += [x(*LAUNCH, f"launch {key} {launch}", launch, 20), flow("s", *LAUNCH, launch + 5, key)]
        if task is not None:
            if binds:
                events.append(x(*TASK, f"task {key} {task}", task, 30, **{"Task Type": "AI_CORE"}))
            events.append(flow("f", *TASK, task, key))
    expected = {("launch same 1800", "task same 1900"), ("launch next 1950", "task next 2050"),
                ("launch two later 2500", "task two later 4100"), ("launch copy 4900", "task copy 4950"),
                ("launch copy 4900", "task copy 5050"), ("launch id reused 6100", "task id reused 6200"),
                ("launch id reused 6100", "task id reused 6250"),
                ("launch id reused 6300", "task id reused 6400")}
    return events, expected


def _arrows(batches: list[StepRecords]) -> tuple[set[tuple[str, str]], dict[int, str]]:
    outs = {f: s.name for b in batches for s in b.slices for f in s.flows_out}
    ins = {f: s.name for b in batches for s in b.slices for f in s.flows_in}
    assert outs.keys() == ins.keys(), "an arrow with one end only"
    assert sum(len(s.flows_out) for b in batches for s in b.slices) == len(outs), "an id used twice"
    return {(outs[f], ins[f]) for f in outs}, outs


@pytest.mark.parametrize("order", ["as written", "shuffled"])
def test_arrows_join_steps_up_to_the_limit_and_never_dangle(tmp_path, small_batches, order):
    events, expected = _arrow_trace()
    if order == "shuffled":
        random.Random(8).shuffle(events)
    write_rank(tmp_path, events)
    batches, diag = _read(tmp_path)
    assert [b.step_id for b in batches] == list(range(1, 8))
    got, _ = _arrows(batches)
    assert got == expected
    assert "rank 0: 1 arrows whose end begins before their start" in " ".join(diag.messages())
    assert chrome_trace.MAX_FLOW_STEPS == 4  # "too far" ends 5 steps after its start
    # the flow events no arrow drew, each counted once: starts of "no end", "end in no slice" and
    # "too far"; ends of "no start" and "too far"; the end of "end in no slice"
    assert diag.counts["unjoined_flows 0"] == 1  # a warning: --strict fails on it
    said = " ".join(diag.messages())
    assert "rank 0: 6 flow events made no arrow: 2 ends that joined no start (" in said
    assert "; 3 starts no end joined (" in said
    assert "; 0 starts and 1 ends in no slice of their lane (" in said
    assert "holding no event" not in said  # every lane holds slices in its step


def test_arrow_ids_are_deterministic_and_unique_across_ranks(out_dir, tmp_path):
    events, _ = _arrow_trace()
    write_rank(tmp_path, events, rank=0)
    write_rank(tmp_path, events, rank=1)
    first, second = _read(tmp_path)[0], _read(tmp_path)[0]
    ids = [_arrows([b for b in first if b.rank == r])[1] for r in (0, 1)]
    assert not ids[0].keys() & ids[1].keys()
    assert _arrows(first)[1] == _arrows(second)[1]
    out = out_dir / "f.pftrace"
    assert main([str(tmp_path), "--kind", "detail", "-o", str(out)]) == 0
    assert read_perfetto(out.read_bytes()).flows == 2 * 8  # every arrow bound at both ends


@settings(max_examples=200, deadline=None)
@given(rank=st.integers(0, 2**31), key=st.text(min_size=1, max_size=300), k=st.integers(0, 2**40),
       begin=st.integers(-(2**62), 2**62))
def test_an_arrows_id_is_flow_id_of_its_rank_key_start_and_number(rank, key, k, begin):
    """``_core.arrow`` writes ``{rank}|{key}@{start}|{k}`` itself (no snprintf): the id ``flow_id`` makes."""
    key = key.encode("utf-8", "replace").decode()  # no lone surrogates: the readers' keys are UTF-8
    source = [Slice(rank, Layer.HOST, "h", "launch", begin, 10)]
    target = [Slice(rank, Layer.STREAM, "s", "task", begin + 5, 10)]
    assert _core.arrow(source, 0, target, 0, key, k, rank) == k + 1
    assert source[0].flows_out == target[0].flows_in == (flows.flow_id(rank, f"{key}@{begin}", k),)


def _step(index: int, ends: list[FlowEnd]) -> tuple[StepRecords, list[FlowEnd]]:
    start = index * 1_000_000
    slices = [Slice(0, Layer.HOST, "h", f"launch {index}", start, 10),
              Slice(0, Layer.STREAM, "s", f"task {index}", start + 500, 10)]
    return StepRecords(0, None, index, None, slices), ends


def test_a_step_is_held_only_while_an_arrow_it_starts_may_still_end(tmp_path):
    """Memory is bounded by what is pending: steps whose starts never end are not held back, and
    one whose arrow ends two steps later is held until then."""
    pulled: list[int] = []

    def upcoming():
        for index in range(50):
            pulled.append(index)
            ends = [FlowEnd(0, Layer.HOST, "h", index * 1_000_000, f"dangling {index}", True)]
            if index == 10:
                ends.append(FlowEnd(0, Layer.HOST, "h", index * 1_000_000 + 5, "long", True))
            if index == 12:
                ends.append(FlowEnd(0, Layer.STREAM, "s", index * 1_000_000 + 505, "long", False))
            yield _step(index, ends)

    seen, steps = [], {}
    for records in flows.linked(upcoming(), Diagnostics(), window=2):
        seen.append((records.step_id, pulled[-1]))
        steps[records.step_id] = records
    assert [step for step, _ in seen] == list(range(50))
    ahead = {step: last - step for step, last in seen}
    # step 10 is yielded once step 12 (where its arrow ends) is bound, 12 read ahead 2 more
    assert ahead[10] == 4 and ahead[11] == 3
    assert all(n <= 2 for step, n in ahead.items() if step not in (10, 11))
    (arrow,) = steps[10].slices[0].flows_out
    assert steps[12].slices[1].flows_in == (arrow,)
    assert not any(s.flows_out or s.flows_in for k, r in steps.items() if k not in (10, 12) for s in r.slices)


def test_a_trace_with_names_last_keeps_every_arrow_of_the_original_order(tmp_path, small_batches):
    events, expected = _arrow_trace()
    write_rank(tmp_path, [e for e in events if e["ph"] != "M"] + [e for e in events if e["ph"] == "M"])
    got, _ = _arrows(_read(tmp_path)[0])
    assert got == expected


def test_records_of_a_rank_info_read_directly_with_its_names_last(tmp_path, small_batches):
    """``Records.read`` (msprof's per-iteration files) takes a large file's names first too."""
    path = write_rank(tmp_path, steps(2) + device_step(1) + device_step(2) + NAMES)
    trace = path / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    records = chrome_trace.Records(RankInfo(0, "ascend_pt", path), None)
    records.read(trace, Diagnostics())
    lanes = {(s.layer, s.lane) for s in records.take_slices() if type(s) is Slice}
    assert (Layer.STREAM, "Stream 2") in lanes and (Layer.COMM_TASK, "Plane 0") in lanes
    assert sorted(records.steps) == [(None, 1), (None, 2)]


def test_perfettos_importer_takes_every_arrow_across_steps_without_a_repair(tmp_path):
    from test_trace_processor import imported  # skips without the trace processor

    from converters import convert

    events, expected = _arrow_trace()
    write_rank(tmp_path / "job", events)
    for name in ("arrows.pftrace", "arrows.json"):
        convert(tmp_path / "job", tmp_path / name, kind="detail", max_bytes=None)
        problems, (_, _, flows) = imported(tmp_path / name, tmp_path)
        assert problems == [] and flows == len(expected), name


def _reference_us_to_ns(us):
    """µs to ns by decimal arithmetic, the definition the converter's fast paths must meet."""
    if isinstance(us, str) and Decimal(us).is_finite() and Decimal(us).adjusted() > 25:
        raise ValueError("no time")
    ns = int((Decimal(us) * 1000).to_integral_value())  # a float's exact value
    if abs(ns) >= 2**62:  # past the year 2116 it is no time: an error (start + duration fit 64 bits)
        raise ValueError("no time")
    return ns


epoch_us = st.integers(0, 10**16).map(str)
decimal_us = st.builds(lambda w, f: f"{w}.{f}", st.integers(0, 10**17), st.text("0123456789", max_size=5))


@settings(max_examples=2000, deadline=None)
@given(st.one_of(epoch_us, decimal_us, st.integers(-(10**20), 10**20),
                 st.floats(-1e18, 1e18, allow_nan=False), st.text("0123456789.e+- ", max_size=30)))
def test_us_to_ns_is_exact_for_every_form(us):
    try:
        want = _reference_us_to_ns(us)
    except (ArithmeticError, ValueError):
        with pytest.raises((ArithmeticError, ValueError)):
            times.us_to_ns(us)
        return
    got = times.us_to_ns(us)
    if isinstance(us, float) and abs(us) < 9e12:
        # µs as a float has no exact ns: the nearest ns to the float product, as round() gives
        assert got == round(us * 1000)
    else:
        assert got == want


def test_us_to_ns_of_what_profilers_write():
    assert times.us_to_ns("1736408883688177.930") == 1736408883688177930
    assert times.us_to_ns("1736408883688177.9") == 1736408883688177900
    assert times.us_to_ns("12.") == 12000
    assert times.us_to_ns(0.60003125) == 600
    assert times.us_to_ns(7) == 7000
    assert times.us_to_ns("1.0005") == 1000  # half to even, as decimal arithmetic rounds
    with pytest.raises(TypeError):
        times.us_to_ns(None)


# ---------------------------------------------------------------- the C fast path


def _records_and_messages(root: Path, kind: str) -> tuple[list, list[str]]:
    steps, diag = _read(root, kind)
    records = [(s.step_id, tuple(r if not isinstance(r, Slice) or r.args is None or isinstance(r.args, dict)
                                 else r._replace(args=bytes(r.args)) for r in s.slices + s.samples))
               for s in steps]
    return records, diag.messages()


def _odd_forms() -> list[dict]:
    """Events in every form a fast path could get wrong: times with 0-4 decimals, as numbers and
    past 9e12 µs, bad times; Task Types nested, escaped, twice, empty or not text; flow ids of
    several types; steps that are no steps."""
    def at(ts, dur=1.5, name="k", pid=DEVICE, tid=2, **args):
        return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    base = T0 + 1500
    events = NAMES + steps(3)
    for lane in ({"pid": DEVICE, "tid": 2, "Task Type": "AI_CORE"}, {"pid": HCCL, "tid": 0}):
        events += [at(f"{base}", **lane), at(f"{base}.", **lane), at(f"{base}.5", **lane),
                   at(f"{base}.25", **lane), at(f"{base}.125", **lane), at(f"{base}.1255", **lane),
                   at(f"{base}e0", **lane), at(f"+{base}", **lane), at(" 1", **lane), at("", **lane),
                   at(None, **lane), at(float(base) + 0.3, **lane), at(base + 1, **lane), at(1e13, **lane),
                   at(f"{base}", dur="2.5", **lane), at(f"{base}", dur=-1, **lane),
                   at(f"{base}", dur=True, **lane), at(f"{base}", dur="1e3", **lane),
                   at("１２", dur=1, **lane)]
    task = f"{base}.300"
    events += [at(task, **{"Task Type": "AI_CORE"}), at(task, x={"Task Type": "AI_CORE"}),
               at(task, **{"Task Type": 'AI\"CORE'}), at(task, **{"Task Type": ""}),
               at(task, **{"Task Type": 7}), at(task), at(task, y="{", **{"Task Type": "AI_CPU"}),
               {"ph": "X", "name": "raw", "pid": DEVICE, "tid": 2, "ts": task, "dur": 1,
                "args": {"Task Type": "A", "a": 1} | {"b": {"Task Type": "B"}}},
               at(task, name="ProfilerStep#x", pid=PYTHON, tid=1), at(task, name=5, pid=CANN, tid=7),
               at(task, pid=999, tid=1), at(task, pid=HCCL, tid=1)]
    for name, pid, args in (("HBM", DEVICE, {"v": 1.5, "w": 2, "s": "x"}),
                            ("Ascend Hardware HBM", DEVICE, {"v": 1}),
                            (7, DEVICE, {"v": 1}), ("HBM", 999, {"v": -0.0, "n": {"v": 1}}),
                            ("HBM", CANN, {})):
        events.append({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": task, "args": args})
    for flow_id in ("9", 9, 9.5, True, None):
        events += [{"ph": "s", "cat": "c", "id": flow_id, "pid": CANN, "tid": 7, "ts": task},
                   {"ph": "f", "cat": None, "id": flow_id, "pid": DEVICE, "tid": 2, "ts": task, "bp": "e"}]
    return events


@pytest.mark.parametrize("kind", ["detail", "summary"])
@pytest.mark.parametrize("sample", ["odd forms", "generated", "ascend-pt-2rank", "msprof-2rank",
                                    "mindspore-cpu/pynative-profile", "mindspore-cpu/graph-legacy-Profiler",
                                    "kineto-2rank", "kineto-gloo-2rank", "generated kineto",
                                    "paddle-cpu-chrome"])
def test_the_c_fast_path_makes_exactly_the_records_of_the_python_rules(tmp_path, monkeypatch, kind, sample):
    if sample == "odd forms":
        root = tmp_path / "odd"
        write_rank(root, _odd_forms())
    elif sample == "generated":  # names last, pipeline parallel: sends, receives, bubbles
        from fixtures.ascend_pt_gen import write_ascend_pt_profile

        root = tmp_path / "gen"
        write_ascend_pt_profile(root, ranks=2, pp=2, steps=3, tasks_per_step=120, metadata_last=True, seed=5)
    elif sample == "generated kineto":  # PyTorch's: the dialect's categories read in Python
        from fixtures.kineto_gen import write_kineto_traces

        root = tmp_path / "kineto"
        write_kineto_traces(root, ranks=2, steps=2, seed=5, metadata_last=True)
    else:
        from conftest import real_data

        root = real_data(sample)
    fast = _records_and_messages(root, kind)
    monkeypatch.setattr(chrome_trace, "read_events", chrome_trace.in_python)  # the Python rules alone
    slow = _records_and_messages(root, kind)
    assert fast == slow
    assert kind == "summary" or sum(len(records) for _, records in fast[0]) > 0


def test_device_tasks_in_torch_npus_own_layout_are_read_in_c(tmp_path, monkeypatch):
    """torch_npu writes ``"Task Type": "AI_CORE"``, a space after each colon: its device tasks are
    read in C as the compact ones are, none left to Python's rules (which made a real profile's
    half of its tasks several times dearer), and read as those rules read them."""
    tasks = [x(DEVICE, 2, f"MatMul_{k}", k * 1000 + 100, 100, **{"Task Type": "AI_CORE"}) for k in (1, 2)]
    tasks.append(x(DEVICE, 2, "Notify Wait", 2320, 10, **{"Task Type": "Notify Wait"}))
    root = tmp_path / "spaced"
    write_rank(root, [])
    (root / "node_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(
        json.dumps(NAMES + steps(2) + tasks))  # json.dumps' separators: ", " and ": ", the profiler's
    left_to_python = []
    event_of = chrome_trace.Records._event
    monkeypatch.setattr(chrome_trace.Records, "_event", lambda self, event, *rest: (
        left_to_python.append(event.name), event_of(self, event, *rest))[1])
    for kind in ("detail", "summary"):
        fast = _records_and_messages(root, kind)
        # the lane's first event (and the steps) are Python's: it finds the lane's route for C
        assert {"MatMul_2", "Notify Wait"}.isdisjoint(left_to_python)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(chrome_trace, "read_events", chrome_trace.in_python)  # the Python rules alone
            assert _records_and_messages(root, kind) == fast
        left_to_python.clear()
    tasks_read = [(r.name, r.task_type) for _, records in fast[0] for r in records if r.layer is Layer.STREAM]
    assert tasks_read == [("MatMul_1", "AI_CORE"), ("MatMul_2", "AI_CORE")]  # summary: compute only


lanes = st.sampled_from([(Layer.STREAM, "Stream 2"), (Layer.HOST, "CANN 7"), (Layer.HOST, "Python 1")])
# the same lanes as texts of their own (equal, not the same object), as a file's lanes may come
copied_lanes = lanes | lanes.map(lambda lane: (lane[0], "".join(list(lane[1]))))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(copied_lanes, st.integers(0, 100), st.integers(0, 30)), max_size=50),
       st.lists(st.tuples(copied_lanes, st.integers(-5, 140)), max_size=20))
def test_a_flow_end_binds_to_the_innermost_slice_of_its_lane_that_holds_it(made, at):
    slices = [Slice(0, layer, lane, f"s{i}", start, dur)
              for i, ((layer, lane), start, dur) in enumerate(made)]
    ends = [FlowEnd(0, layer, lane, ts, "k", False) for (layer, lane), ts in at]
    assert _core.enclosing(slices, ends) == flows.enclosing_rules(slices, ends)
    for end, found in zip(ends, _core.enclosing(slices, ends), strict=True):
        holders = [i for i, s in enumerate(slices) if (s.layer, s.lane) == (end.layer, end.lane)
                   and s.start_ns <= end.start_ns <= s.end_ns]
        # innermost: the one that starts last, the shorter at equal starts, the later of equals
        want = max(holders, key=lambda i: (slices[i].start_ns, -slices[i].dur_ns, i), default=None)
        assert found == want


def test_an_end_is_bound_only_among_the_slices_that_start_last_before_it():
    """Past 65 slices started since, a slice holding the end is no longer looked at, in C as in
    its rules: a lane's long slice under 70 short ones binds no end after them."""
    slices = [Slice(0, Layer.STREAM, "Stream 2", "long", 0, 1000)]
    slices += [Slice(0, Layer.STREAM, "Stream 2", f"s{i}", 1 + i, 0) for i in range(70)]
    ends = [FlowEnd(0, Layer.STREAM, "Stream 2", ts, "k", False) for ts in (500, 3, 60)]
    assert _core.enclosing(slices, ends) == flows.enclosing_rules(slices, ends) == [None, 3, 60]
    assert _core.enclosing(slices[:60], ends) == flows.enclosing_rules(slices[:60], ends) == [0, 3, 0]


# -- the C of flow arrows against the Python it replaced (flows.enclosing_rules, bind_ends_rules) --


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_flow_ids_are_blake2b_of_their_text(text):
    assert _core.flow_id(text) == int.from_bytes(
        hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(copied_lanes, st.integers(0, 100), st.integers(0, 30)), min_size=1, max_size=40),
       st.lists(st.tuples(copied_lanes, st.integers(-5, 140), st.sampled_from("abc"), st.booleans()),
                max_size=30),
       st.sets(st.sampled_from("abc")))
def test_flow_ends_join_the_same_starts_as_the_python_rules(made, at, pending):
    slices = [Slice(0, layer, lane, f"s{i}", start, dur)
              for i, ((layer, lane), start, dur) in enumerate(made)]
    ends = [FlowEnd(0, layer, lane, ts, key, starts) for (layer, lane), ts, key, starts in at]
    got = _core.bind_ends(slices, ends, dict.fromkeys(pending))
    want = flows.bind_ends_rules(slices, ends, pending)
    assert got == want
    last_starts = got[2]
    assert list(last_starts) == list(want[2])  # keys in the order of their first start


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 4096), st.text(max_size=200), st.integers(-10, 10), st.integers(0, 3),
       st.integers(0, 2**62), st.integers(0, 2))
def test_an_arrow_joins_its_slices_as_the_python_rules_did(rank, key, later_ns, k, start, same):
    source = [Slice(rank, Layer.HOST, "CANN 1", "launch", start, 5, flows_out=(7,))]
    target = source if same == 2 else [Slice(rank, Layer.STREAM, "Stream 2", "kernel", start + later_ns, 9)]
    last = 0
    before = list(source), list(target)
    made = _core.arrow(source, 0, target, last, key, k, rank)
    if later_ns < 0 and same != 2:
        assert made == k and (source, target) == before  # backwards: not made, nothing changed
        return
    digest = hashlib.blake2b(f"{rank}|{key}@{start}|{k}".encode(), digest_size=8).digest()
    flow = int.from_bytes(digest, "little")
    assert made == k + 1
    assert source[0].flows_out == (7, flow) and type(source[0]) is Slice
    assert target[last].flows_in == (flow,)
    assert source[0][:8] == before[0][0][:8] and target[last][:8] == before[1][0][:8]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3)), min_size=1, max_size=12), st.data())
def test_a_steps_arrows_in_one_call_are_those_of_one_arrow_call_each(made, data):
    """``arrows`` (one C call a step) against ``arrow`` per arrow, as Linker.add called it; slices
    only the list holds are changed in place, those held elsewhere too are copied."""
    def fresh() -> list[Slice]:
        return [Slice(3, Layer.HOST, "CANN 1", f"s{i}", start, 5, flows_out=(7,) * flows)
                for i, (start, flows) in enumerate(made)]
    indices = st.integers(0, len(made) - 1)
    keys = st.sampled_from(["c:1", "c:2", "é"])
    bound = data.draw(st.lists(st.tuples(keys, indices, indices), max_size=20))
    held = data.draw(st.lists(indices, max_size=3))
    one_each, at_once = fresh(), fresh()
    kept = [at_once[i] for i in held]  # referenced elsewhere: never changed in place
    before = [tuple(s) for s in kept]  # copies of their fields
    backwards, counts = 0, {}
    for key, first, last in bound:
        k = counts.get(first, 0)
        counts[first] = _core.arrow(one_each, first, one_each, last, key, k, 3)
        backwards += counts[first] == k
    made_at_once = {}
    assert _core.arrows(at_once, bound, made_at_once, 3) == backwards
    assert at_once == one_each and made_at_once == counts
    assert all(type(s) is Slice for s in at_once)
    assert [tuple(s) for s in kept] == before


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=8, unique=True),
       st.lists(st.tuples(st.integers(-50, 1100), st.integers(0, 2), st.sampled_from("xyz")), max_size=60))
def test_records_are_filed_under_the_last_step_started_at_or_before_them(starts, made):
    starts.sort()
    records = [Slice(0, Layer.STREAM, "Stream 2", "k", ts, 1) if kind == 0 else
               FlowEnd(0, Layer.STREAM, "Stream 2", ts, key, kind == 1) for ts, kind, key in made]
    buckets, finishes = _core.by_step(records, starts, Slice, Sample, FlowEnd)
    want, ending = defaultdict(list), defaultdict(list)
    for r in records:
        step = max(bisect.bisect_right(starts, r.start_ns) - 1, 0)
        want[step].append(r)
        if type(r) is FlowEnd and not r.starts:
            ending[step].append(hash(r.key))
    assert buckets == want and finishes == ending


# ---------------------------------------------------------------- events scanned, not decoded

_KEYS = ["ph", "name", "pid", "tid", "ts", "dur", "cat", "id", "args", "bp", "s", "Ph", r"\u0070h", r"n\"ame"]
_WHITE = st.sampled_from(["", "", "", " ", "\n", "\t ", "\r\n  "])


def _text(value: str) -> st.SearchStrategy[str]:
    """A JSON string as a profiler may write it: plain, or with escapes (ensure_ascii's, a slash)."""
    plain = orjson.dumps(value).decode()
    return st.sampled_from([plain, json.dumps(value, ensure_ascii=True), plain.replace("/", "\\/")])


_NUMBERS = st.one_of(
    st.integers(-10**25, 10**25).map(str),
    st.floats(-1e200, 1e200).filter(lambda f: f == 0 or abs(f) > 1e-200).map(repr),
    st.builds(lambda whole, frac, exp: f"{whole}.{frac}{exp}", st.integers(0, 10**16),
              st.integers(0, 10**6), st.sampled_from(["", "", "e3", "E-2", "e-240", "e+250", "e+270"])),
    st.sampled_from(["-0", "0.0", "-0.0", "1e2", "952220414449.25", "1e-240"]),
)
_NOT_JSON = st.sampled_from(["01", "1.", ".5", "-", "1e", "1e999", "179769314.0e+300", '"\\ude00"',
                             '"\\ud83d"', '"\\ud83d\\u0041"', '"\\ud800"', '"a\\x"', '"\x01"', "tru", "{",
                             "]"])
_LEAVES = st.one_of(st.text(max_size=12).flatmap(_text), _NUMBERS,
                    st.sampled_from(["true", "false", "null", '"X"', '"M"', '"ProfilerStep#3"',
                                     '"Iteration Time"', '"\\ud83d\\ude00"']))


def _json(leaves: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: "[" + ",".join(items) + "]"),
        st.lists(st.tuples(st.text(max_size=4).flatmap(_text), _WHITE, inner), max_size=3).map(
            lambda pairs: "{" + ",".join(f"{k}:{w}{v}" for k, w, v in pairs) + "}")), max_leaves=8)


_PAIRS = st.tuples(st.sampled_from(_KEYS), _WHITE, _json(_LEAVES))
_UNIQUE = st.lists(_PAIRS, max_size=8, unique_by=lambda pair: pair[0])
_TWICE = st.lists(_PAIRS, max_size=8)  # a key twice: the last one counts
_EVENT_TEXT = st.one_of(_UNIQUE, _UNIQUE, _UNIQUE, _TWICE).map(
    lambda pairs: "{" + ",".join(f'"{k}"{w}:{w}{v}' for k, w, v in pairs) + "}")


def _fields(event) -> tuple:
    return tuple(bytes(v) if isinstance(v, msgspec.Raw) else v for v in msgspec.structs.astuple(event))


def _scanned(data: bytes) -> list | None:
    found = _core.scan(data, event_decoding.EVENT.decode, event_decoding.ANY.decode)
    return None if found is None else [_fields(event) for event in found]


def _decoded(data: bytes) -> list | None:
    try:
        return [_fields(event) for event in event_decoding.EVENTS.decode(data)]
    except msgspec.DecodeError:
        return None


@settings(max_examples=1500, deadline=None)
@given(st.lists(_EVENT_TEXT, max_size=6), _WHITE, st.data())
def test_a_scanned_batch_holds_what_msgspec_decodes_and_never_takes_what_it_rejects(events, white, data):
    if data.draw(st.integers(0, 3)) == 0:  # no event: a value, or no JSON
        events.insert(data.draw(st.integers(0, len(events))), data.draw(st.one_of(_LEAVES, _NOT_JSON)))
    text = (white + "[" + white + f"{white},{white}".join(events) + "]" + white).encode()
    if data.draw(st.integers(0, 3)) == 0:  # a byte cut out or put in: most such batches are no JSON
        at = data.draw(st.integers(0, len(text)))
        text = text[:at] + data.draw(st.sampled_from([b"", b",", b"}", b'"', b"\\", b"1"])) + text[at + 1:]
        text = text.decode(errors="replace").encode()  # as jsonfile gives batches: UTF-8
    scanned, decoded = _scanned(text), _decoded(text)
    if scanned is not None:  # else msgspec decodes it, or says what is wrong
        assert scanned == decoded


@pytest.mark.parametrize("special", ['\\"', "\\\\", "\\n", "\\u00e9", "\x01", "\x1f", "\x7f", "é", '"'])
def test_a_string_is_scanned_to_its_end_wherever_its_escapes_and_controls_lie(special):
    """Strings are scanned 16 bytes a test (SSE2): an escape, a control byte (no JSON), a stray quote
    or a byte past ASCII at any place of a long name, near or past a block's end, scan as msgspec
    decodes them, and the plain ones are scanned, not left to msgspec."""
    for length in range(40):
        for at in range(length + 1):
            name = "a" * at + special + "b" * (length - at)
            for tail in ("", ', "ph": "X"', " " * 20):
                text = f'[{{"name": "{name}"{tail}}}]'.encode()
                scanned, decoded = _scanned(text), _decoded(text)
                assert scanned == decoded, (length, at, tail)
                assert (scanned is None) == (special in ("\x01", "\x1f", '"')), (length, at, tail)


# flow keys are made from the text where it is what str() gives: -0, non-ASCII, huge ints are not
_FLOW_CATS = ['"c"', '"c"', '"é"', 'null']
_FLOW_IDS = ["0", "1", "-0", '"9"', '"é"', "12345678901234567890", "2.5", "-7", '"a\\"b"']


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([DEVICE, CANN, PYTHON, HCCL, 999]), st.sampled_from([0, 1, 2, 7]),
                          st.sampled_from(["X", "X", "X", "s", "f", "C", "i", "M", 5]), _NUMBERS,
                          st.one_of(_NUMBERS, st.just("\"2.5\"")), st.sampled_from(
                              ['{"Task Type":"AI_CORE"}', '{"Task Type":"EVENT_RECORD","x":[1]}',
                               '{"Task Type":"MIX_AIC"}', '{"a":{"Task Type":"B"}}', '{}', 'null', '"s"',
                               '{"Task Type": "AI_CORE"}', '{"Task Type" :\t"MIX_AIC"}', '{"Task Type":\n7}',
                               '{"Task Type": "AI_CORE", "Task Type": "AI_CPU"}',
                               '{"x": 1, "Task Type" : ""}'])),
                max_size=40),
       st.sampled_from(["detail", "summary"]))
def test_scanned_events_make_the_records_and_messages_of_decoded_ones(tmp_path_factory, made, kind):
    events = [f'{{"ph":{orjson.dumps(ph).decode()},"name":"k{i}","pid":{pid},"tid":{tid},"ts":{ts},'
              f'"dur":{dur},"cat":{_FLOW_CATS[i % 4]},"id":{_FLOW_IDS[i % 9]},"args":{args}}}'
              for i, (pid, tid, ph, ts, dur, args) in enumerate(made)]
    head = ",".join(orjson.dumps(e).decode() for e in NAMES + steps(2))
    root = tmp_path_factory.mktemp("scan")
    write_rank(root, [])
    (root / "node_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(
        "[" + ",".join([head, *events]) + "]")
    scanned = _outcome(root, kind)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(event_decoding, "scan", lambda *_: None)  # every batch decoded by msgspec
        assert _outcome(root, kind) == scanned


def _outcome(root: Path, kind: str) -> tuple:
    try:
        return _records_and_messages(root, kind)
    except InputError as e:  # a number that is no JSON makes the file none
        return str(e), ()


_COUNTER_KEYS = st.sampled_from(['"value"', '"HBM"', '"a b"', '"\\u0061"', '"Total Reserved(MB)"', '""',
                                 '"é"'])
_COUNTER_VALUES = st.one_of(_NUMBERS, _NUMBERS, _json(_LEAVES))
_COUNTER_ARGS = st.one_of(
    st.lists(st.tuples(_COUNTER_KEYS, _WHITE, _COUNTER_VALUES), max_size=18).map(
        lambda pairs: "{" + ",".join(f"{k}{w}:{w}{v}" for k, w, v in pairs) + "}"),
    st.sampled_from(['{}', '{"v":1e400}', '{"v":-0}', '{"v":-0.0}', '{"v":123456789012345678901}',
                     '{"v":0.1000000000000000055511151231257827}', '{"v":1,"v":2}']))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([DEVICE, CANN, 999, '"HBM"']),
                          st.sampled_from(['"HBM"', '"Ascend Hardware HBM"', '"Ascend"', "7", '"\\u0041"']),
                          st.one_of(_NUMBERS, st.just('"1736408883000001.5"'), st.just("null")),
                          _COUNTER_ARGS), max_size=12))
def test_counters_in_c_make_the_samples_and_messages_of_the_python_rules(tmp_path_factory, made):
    events = [f'{{"ph":"C","name":{name},"pid":{pid},"tid":0,"ts":{ts},"args":{args}}}'
              for pid, name, ts, args in [(DEVICE, '"HBM"', f'"{T0 + 1500}.5"', '{"value":1.5}'), *made]]
    head = ",".join(orjson.dumps(e).decode() for e in NAMES + steps(2))
    root = tmp_path_factory.mktemp("counters")
    write_rank(root, [])
    (root / "node_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(
        "[" + ",".join([head, *events]) + "]")
    fast = _outcome(root, "detail")
    assert Sample(0, "Ascend Hardware HBM [value]", (T0 + 1500) * 1000 + 500, 1.5) in fast[0][0][1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chrome_trace, "read_events", chrome_trace.in_python)  # the Python rules alone
        assert repr(_outcome(root, "detail")) == repr(fast)  # repr: -0.0 is not 0.0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(event_decoding, "scan", lambda *_: None)  # decoded by msgspec: C reads Events
        assert repr(_outcome(root, "detail")) == repr(fast)


def test_a_counters_samples_share_one_lane_text(tmp_path):
    """A counter's samples of a step (torch_npu: 44% of its events, on a few dozen lanes) share one
    lane str, made once, not one each: those are sorted and run by lane, and spilled, by it."""
    counters = [{"ph": "C", "name": "read_bandwidth", "pid": DEVICE, "tid": 0, "ts": _us(1000 + k),
                 "args": {"value": k, "acc_id": 3}} for k in range(50)]
    root = tmp_path
    write_rank(root, NAMES + steps(1) + counters)
    samples = [r for step in _read(root)[0] for r in step.samples]
    lanes = {s.lane: set() for s in samples}
    for s in samples:
        lanes[s.lane].add(id(s.lane))
    assert sorted(lanes) == ["Ascend Hardware read_bandwidth [acc_id]",
                             "Ascend Hardware read_bandwidth [value]"]
    assert [len(ids) for ids in lanes.values()] == [1, 1]
    assert [s.value for s in samples if s.lane.endswith("[value]")] == list(range(50))


_SPILL_NAMES = st.one_of(st.sampled_from(['"MatMul"', '"MatMul"', '"Add"', '"\\u0041dd"', '"é"', '""']),
                         st.integers(0, 40).map(lambda i: f'"op_{i}"'))
_SPILL_LANES = st.sampled_from([(DEVICE, 2), (DEVICE, 2), (CANN, 7), (PYTHON, 1), (HCCL, 0), (HCCL, 1),
                                (999, 1)]).map(lambda lane: f'"pid":{lane[0]},"tid":{lane[1]}')
_SPILL_TIMES = st.integers(0, 4999).map(lambda us: f'"{_us(us)}"')
_SPILL_ARGS = st.sampled_from(['{}', '{"Task Type":"AI_CORE"}', '{"Task Type":"AI_CORE"}',
                               '{"Task Type":"HCCL"}', '{"Task Type":"AI_CPU","x":1}',
                               '{"Task Type":"\\u0041"}', '{"a":[1,{"b":2}]}'])
_SPILL_EVENTS = st.one_of(
    st.builds(lambda name, lane, ts, dur, args: f'{{"ph":"X","name":{name},{lane},"ts":{ts},"dur":{dur},'
              f'"args":{args}}}', _SPILL_NAMES, _SPILL_LANES, _SPILL_TIMES,
              st.sampled_from(["1", "2.5", '"3"', "-1", '"x"']), _SPILL_ARGS),
    st.builds(lambda name, lane, ts, args: f'{{"ph":"i","s":"t","name":{name},{lane},"ts":{ts},'
              f'"args":{args}}}', _SPILL_NAMES, _SPILL_LANES, _SPILL_TIMES, _SPILL_ARGS),
    st.builds(lambda name, ts, args: f'{{"ph":"C","name":{name},"pid":{DEVICE},"tid":0,"ts":{ts},'
              f'"args":{args}}}', _SPILL_NAMES, _SPILL_TIMES,
              st.sampled_from(['{"v":1.5}', '{"v":2,"w":"s"}', '{"a b":3,"v":-0.0}'])),
    st.builds(lambda ph, flow_id, lane, ts: f'{{"ph":"{ph}","cat":"c","id":{flow_id},{lane},"ts":{ts},'
              '"bp":"e"}', st.sampled_from("sft"), st.sampled_from(["1", '"2"', "3.5"]), _SPILL_LANES,
              _SPILL_TIMES))


def _odd_instants(read: Callable) -> Callable:
    """``Records._event`` whose instants have dict args: records ``pack_by_step`` cannot pack."""
    def event(self, event, *rest) -> None:
        made = len(self.slices)
        read(self, event, *rest)
        if event.ph == "i" and len(self.slices) > made:
            self.slices[-1] = self.slices[-1]._replace(args={"odd": [1]})
    return event


@settings(max_examples=150, deadline=None)
@given(st.lists(_SPILL_EVENTS, max_size=40), st.booleans(), st.sampled_from([1 << 9, 1 << 10, 1 << 20]),
       st.booleans())
def test_records_packed_as_they_are_read_are_the_bytes_of_packing_them_made(tmp_path_factory, events, detail,
                                                                              batch_bytes, odd):
    """The spill pass packs the records C reads as it reads them, and Python's in their order among
    them (``read_events``' ``by_step``): the runs are those ``pack_by_step`` makes of the records
    made as tuples, a batch it cannot pack (``odd``) comes as those records, and the reading says
    the same."""
    root = tmp_path_factory.mktemp("packed")
    write_rank(root, [])
    path = root / "node_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    head = [orjson.dumps(e).decode() for e in NAMES + steps(3)]
    path.write_text("[" + ",".join(head + events) + "]")
    orders = spill.StepSpill().by_step([]).orders

    def spill_pass(packing: bool) -> tuple[list, list[str]]:
        chrome_trace.is_compute.cache_clear()  # it keeps the task types it met: a str held is packed once
        records, diag = chrome_trace.Records(RankInfo(0, "ascend_pt", path), None, detail), Diagnostics()
        records.read_steps(path, diag)
        starts = [step.start_ns for step, _ in chrome_trace._steps(records)]
        filed = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(chrome_trace, "BATCH_BYTES", batch_bytes)
            if odd:
                patch.setattr(chrome_trace.Records, "_event", _odd_instants(chrome_trace.Records._event))
            by_step = spill.ByStep(starts, orders) if packing else None
            for batch in records.read_batches(path, diag, by_step=by_step):
                if isinstance(batch, Packed):
                    filed.append((batch.runs, batch.count))
                    continue
                runs = _core.pack_by_step(batch, starts, orders, Slice, Sample, FlowEnd)
                filed.append((runs, len(batch)) if runs is not None else (None, batch))
        return filed, diag.messages()

    assert spill_pass(True) == spill_pass(False)


def test_a_real_trace_is_scanned_whole():
    from conftest import real_data

    for path in sorted(real_data("msprof-2rank").rglob("msprof_*.json"))[:4]:
        data = path.read_bytes()
        assert _scanned(data) == _decoded(data) and len(_scanned(data)) > 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2), max_size=30))
def test_records_are_sorted_by_kind_in_their_order(kinds):
    made = (lambda i: Slice(0, Layer.STREAM, "Stream 2", "k", i, 2), lambda i: Sample(0, "HBM", i, 1.5),
            lambda i: FlowEnd(0, Layer.HOST, "CANN 7", i, "c:1", True))
    records = [made[kind](i) for i, kind in enumerate(kinds)]
    assert _core.by_kind(records, Slice, Sample, FlowEnd) == tuple(
        [r for r in records if type(r) is kind] for kind in (Slice, Sample, FlowEnd))


# ---------------------------------------------------------------- the first pass made from the text


def _escaped(events: list[dict], old: bytes, new: bytes) -> bytes:
    """The events' JSON with ``old`` written as ``new`` (an escape the needles cannot see)."""
    return orjson.dumps(events).replace(old, new, 1)


def _sought_cases() -> dict[str, list[dict] | bytes]:
    body = steps(4) + [e for k in (1, 2, 3, 4) for e in device_step(k)]
    shuffled = NAMES + body
    random.Random(7).shuffle(shuffled)
    named = {"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "Python"}}
    lookalike = x(PYTHON, 1, "op", 1500, 1, inner=[named])
    return {
        "names last": body + NAMES, "names first": NAMES + body, "shuffled": shuffled,
        "metadata escaped": _escaped(body + NAMES, b'"ph":"M"', b'"ph":"\\u004d"'),
        "a step escaped": _escaped(body + NAMES, b"ProfilerStep#2", b"Profiler\\u0053tep#2"),
        "metadata inside args": body[:3] + [lookalike] + body[3:] + NAMES,
        "odd forms": _odd_forms(), "cut off": orjson.dumps(body + NAMES)[:-40],
        "no steps": [e for e in body if not e["name"].startswith("Profiler")] + NAMES,
    }


@pytest.mark.parametrize("kind", ["detail", "summary"])
@pytest.mark.parametrize("case", [*_sought_cases(), "generated"])
def test_the_first_pass_made_from_the_text_reads_what_scanning_every_event_reads(tmp_path, monkeypatch,
                                                                                small_batches, kind, case):
    root = tmp_path / "rank"
    if case == "generated":
        from fixtures.ascend_pt_gen import write_ascend_pt_profile

        write_ascend_pt_profile(root, ranks=1, pp=1, steps=3, tasks_per_step=60, metadata_last=True, seed=3)
    else:
        events = _sought_cases()[case]
        rank_dir = write_rank(root, [])
        (rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_bytes(
            events if isinstance(events, bytes) else orjson.dumps(events))
    monkeypatch.setattr(chrome_trace.seek, "_CHUNK", 97)  # words across chunks
    taken = []
    sought = chrome_trace._sought
    monkeypatch.setattr(chrome_trace, "_sought", lambda *a: taken.append(found := sought(*a)) or found)
    read = _records_and_messages(root, kind)
    assert len(taken) == 1
    assert (taken[0] is not None) == (case in ("names last", "names first", "shuffled", "generated"))
    monkeypatch.setattr(chrome_trace.seek, "names_and_steps", lambda *a: None)  # the scanning first pass
    assert read == _records_and_messages(root, kind)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b'"M"', b"M", b'"', b"ProfilerStep#", b"Step#", b"Iteration Time", b" T",
                                 b'"Reduce"', b"x", b"\\u", b"\n" * 7]), max_size=40),
       st.integers(0, 1 << 40))
def test_found_at_finds_every_needle_as_bytes_find_does(parts, base):
    from converters.readers.common import seek

    data = b"".join(parts)
    expected = sorted({base + at for needle, _ in seek._NEEDLES for at in range(len(data))
                       if data.startswith(needle, at)})
    assert sorted(_core.found_at(data, seek._NEEDLES, base, 1 << 20)) == expected
    if expected:  # one more than allowed
        assert _core.found_at(data, seek._NEEDLES, base, len(expected) - 1) is None


# ---------------------------------------------------------------- Kineto's device work and launches in C

_KINETO_META = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
                {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
                {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
                {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
                {"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "MTIA 9"}}]
# where an event lies: a stream (today's tid, or PyTorch 1.8's "stream 7"), the host thread, an MTIA queue
_KINETO_LANES = {"stream": (0, "7"), "stream 1.8": (0, '"stream 7"'), "host": (1, "1"), "mtia": (9, "1")}
_KINETO_LANE_NAMES = ["stream", "stream", "stream", "stream 1.8", "host", "host", "mtia"]
_KINETO_CATS = ["kernel"] * 4 + ["gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_runtime",
                                 "cuda_runtime", "cuda_driver", "Kernel", "Memcpy", "Memset", "Runtime",
                                 "mtia_runtime", "mtia_ccp_events", "cpu_op", "cpu_instant_event"]
_KINETO_NAMES = ['"k"', '"k"', *['"ncclDevKernel_AllReduce_Sum_f32(x)"'] * 2, '"cudaLaunchKernel"',
                 '"cudaGraphLaunch"', '"multimem_all_reduce_kernel"', '"ProfilerStep#9"',
                 '"gloo:all_reduce"', '"caf\\u00e9"', '"é"', "5", '"[memory]"']
# a correlation id in every form a scan of the args' text could read otherwise than decoding them
_CORRELATION_ARGS = st.sampled_from(['{{"correlation":{c}}}'] * 4 + [
    '{{"External id":3,"correlation": {c} ,"stream":7}}', '{{"a":[1,{{"b":2}}],"correlation":{c}}}',
    '{{"correlation":{c},"correlation":{c}}}', '{{"x":{{"correlation":{c}}}}}',
    '{{"corr\\u0065lation":{c}}}', '{{"correlation":"{c}"}}', '{{"correlation":{c}.0}}',
    '{{"correlation":-0}}',
    '{{"correlation":123456789012345678901}}', '{{"correlation":{c}e0}}', '{{"correlation":null}}',
    '{{"s":"correlation","correlation":{c}}}', '{{"s":"a\\"correlation\\":1","correlation":{c}}}',
    '{{"s":"é","correlation":{c}}}', '{{"Task Type":"X","correlation":{c}}}', '{{}}', '{{ }}', 'null', '[]',
    '{{"correlation":{c},"Process Group Name":"0","Process Group Description":"default_pg"}}'])
_KINETO_TIMES = st.sampled_from(["{t}", "{t}", "{t}.5", "{t}.5", "{t}.125", "{t}.1255", '"{t}"', "null",
                                 "{t}e0"])
_KINETO_DURS = st.sampled_from(["2", "2", "2.5", "2.5", "0", "-1", '"3"', "null"])


def _kineto_event(lane: str, cat: str, name: str, args: str, ts: str, dur: str, at: int,
                  correlation: int) -> str:
    pid, tid = _KINETO_LANES[lane]
    ph = "i" if at % 7 == 0 else "I" if at % 11 == 0 else "X"  # an instant too: PyTorch's [memory] events
    return (f'{{"ph":"{ph}","cat":"{cat}","name":{name},"pid":{pid},"tid":{tid},"ts":{ts.format(t=at)},'
            f'"dur":{dur},"args":{args.format(c=correlation)}}}')


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_KINETO_LANE_NAMES), st.sampled_from(_KINETO_CATS),
                          st.sampled_from(_KINETO_NAMES), _CORRELATION_ARGS, _KINETO_TIMES, _KINETO_DURS,
                          st.integers(-50, 250), st.integers(1, 6)), max_size=30),
       st.booleans(), st.sampled_from(["detail", "summary"]))
def test_kineto_device_work_and_launches_read_in_c_make_the_records_of_the_python_rules(
        tmp_path_factory, made, stepped, kind):
    """Kernels, memcpys, memsets and launches, of today's categories and PyTorch 1.8's, in every form
    of args and times: C files each by its launch's step, marks the graph replays that ran, and
    leaves to Python what communicates (by its name or its launch's op), an MTIA's, and odd args;
    the records and messages are the Python rules' (Kineto.convert)."""
    head = [*_KINETO_META, {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
                            "ts": 40, "dur": 30, "args": {"Collective name": "allreduce", "Group size": 2}}]
    if stepped:
        head += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1,
                  "ts": 100 * (k - 1), "dur": 100, "args": {}} for k in (1, 2)]
    launches = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel" if c % 3 else "cudaGraphLaunch",
                 "pid": 1, "tid": 1, "ts": 20 * c, "dur": 2, "args": {"correlation": c}} for c in range(1, 6)]
    kernels = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20 * c + 5, "dur": 3,
                "args": {"correlation": c}} for c in (1, 2, 4)]  # graph replay 3 runs no kernel
    events = [orjson.dumps(e).decode() for e in head + launches + kernels]
    events += [_kineto_event(*event) for event in made]
    root = tmp_path_factory.mktemp("kineto")
    header = '{"schemaVersion":1,"distributedInfo":{"backend":"nccl","rank":0},"traceEvents":['
    (root / "worker0.1.pt.trace.json").write_text(header + ",".join(events) + "]}")
    fast = _outcome(root, kind)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chrome_trace, "read_events", chrome_trace.in_python)  # the Python rules alone
        assert _outcome(root, kind) == fast


@pytest.mark.parametrize("generation", ["today", "1.8"])
def test_kinetos_common_device_work_and_launches_take_no_python_rule(tmp_path, monkeypatch, generation):
    """A real trace's kernels, memcpys and launches (107 MB: 100,000 of them, 2.9 s of Python rules
    each read one by one) are read in C: Kineto.convert sees none of them but the first of a lane (by
    which Python routes the lane), and they are drawn, filed under the step that launched them."""
    cats = {"today": ("kernel", "gpu_memcpy", "cuda_runtime"),
            "1.8": ("Kernel", "Memcpy", "Runtime")}[generation]
    tid = 7 if generation == "today" else "stream 7"
    events = [*_KINETO_META, {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
                              "tid": 1, "ts": 0, "dur": 100, "args": {}}]
    for c in range(1, 5):
        events += [{"ph": "X", "cat": cats[2], "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20 * c,
                    "dur": 2, "args": {"correlation": c, "External id": c}},
                   {"ph": "X", "cat": cats[c % 2], "name": f"k{c}", "pid": 0, "tid": tid, "ts": 20 * c + 90,
                    "dur": 3, "args": {"correlation": c, "stream": 7}}]
    (tmp_path / "worker0.1.pt.trace.json").write_text(json.dumps(
        {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0}, "traceEvents": events}))
    from converters.readers import kineto

    converted: list[str] = []
    convert = kineto.Kineto.convert
    monkeypatch.setattr(kineto.Kineto, "convert", lambda self, event, *rest: (
        converted.append(event.name), convert(self, event, *rest))[1])
    steps, _ = _read(tmp_path)
    assert converted == ["k1"]  # the stream's first event; the host thread's is its step
    drawn = sorted((s.step_id, r.name, r.task_type) for s in steps for r in s.slices
                   if r.layer is Layer.STREAM)
    assert drawn == [(1, "k1", "MEMCPY"), (1, "k2", "GPU kernel"), (1, "k3", "MEMCPY"),
                     (1, "k4", "GPU kernel")]
