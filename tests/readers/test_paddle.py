"""The Paddle reader on generated GPU jobs (``fixtures.paddle_gen``, written from Paddle's exporter
source and checked against the real CPU samples), both forms, against the generator's truth."""

from __future__ import annotations

import bisect
from collections import Counter

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters import Diagnostics, Layer, Options, convert, discover, overlap_report, read_profile
from converters.intervals import union
from converters.model import HOST_OPERATOR
from converters.readers import _core, chrome_trace, paddle
from converters.readers.common import events as event_decoding
from converters.readers.common.events import Event as chrome_trace_event
from fixtures.paddle_gen import generate_profile

HOST_CATS = ("Operator", "OperatorInner", "UserDefined", "DygraphKernelLaunch", "Communication", "PythonOp",
             "PythonUserDefined")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    made = {}
    for form in ("chrome", "protobuf"):
        root = tmp_path_factory.mktemp(form)
        made[form] = (root, generate_profile(root, form=form, steps=4, seed=7, gpu=True, ranks=2, memory=True,
                                             worker_name="rank{rank}"))
    return made


def _batches(root, kind="detail", **options):
    return list(read_profile(discover(root), Options(kind=kind, **options), Diagnostics()))


@pytest.mark.parametrize("form", ["chrome", "protobuf"])
def test_every_event_lands_once_on_the_lane_of_its_kind(jobs, form):
    root, truth = jobs[form]
    batches = _batches(root)
    for file in truth.files:
        mine = [s for b in batches if b.rank == file.rank for s in b.slices if s.layer is not Layer.OVERLAP]
        counts = file.counts
        device = sum(counts.get(kind, 0) for kind in ("Kernel", "Memcpy", "Memset"))
        host = sum(counts.get(cat, 0) for cat in HOST_CATS) + counts["CudaRuntime"] + counts.get("memory", 0)
        phases = sum(counts.get(cat, 0) for cat in ("Dataloader", "Forward", "Backward", "Optimization"))
        by_layer = Counter(s.layer for s in mine)
        assert by_layer[Layer.STREAM] + by_layer[Layer.COMM_OP] == device + counts.get("Communication", 0)
        assert by_layer[Layer.COMM_OP] == counts["comm_kernels"] + counts.get("Communication", 0) > 0
        assert by_layer[Layer.HOST] == host - counts.get("Communication", 0)
        assert by_layer[Layer.STEP] == phases + counts["ProfileStep"]


@pytest.mark.parametrize("form", ["chrome", "protobuf"])
def test_every_device_event_is_linked_to_the_runtime_call_that_launched_it(jobs, form):
    root, truth = jobs[form]
    slices = [s for b in _batches(root) for s in b.slices]
    ends = [s for s in slices if s.flows_in]
    launched = sum(len(step.device) for file in truth.files for step in file.steps)
    assert sum(len(s.flows_in) for s in ends) == sum(len(s.flows_out) for s in slices) == launched
    assert {s.layer for s in ends} == {Layer.STREAM, Layer.COMM_OP}


@pytest.mark.parametrize("form", ["chrome", "protobuf"])
def test_steps_phases_and_device_time_equal_the_truth(jobs, form):
    root, truth = jobs[form]
    for batch in _batches(root, "summary"):
        file = truth.files[batch.rank]
        (step,) = [s for s in file.steps if s.number == batch.step_id]
        slack = 0 if form == "protobuf" else 1000  # the JSON form's ts is whole µs
        assert abs(batch.step.start_ns - step.start_ns) <= slack
        for phase, ns in step.phases.items():
            mine = sum(e - s for s, e in union((x.start_ns, x.end_ns) for x in batch.slices
                                                if x.lane == phase))
            assert abs(mine - ns) <= slack * 4, (phase, batch.rank, batch.step_id)
    rows = {(r.rank, r.step): r for r in overlap_report(root)}
    for file in truth.files:  # a kernel goes with the step it starts in, not the one that launched it
        starts = [step.start_ns for step in file.steps]
        filed: dict[int, list] = {step.number: [] for step in file.steps}
        for d in (d for step in file.steps for d in step.device if d["type"] == "Kernel" and not d["comm"]):
            index = max(bisect.bisect_right(starts, d["start_ns"]) - 1, 0)
            filed[file.steps[index].number].append((d["start_ns"], d["end_ns"]))
        for number, kernels in filed.items():
            computing = sum(e - s for s, e in union(kernels))
            assert abs(rows[file.rank, number].computing_ns - computing) <= slack * len(kernels)


def test_both_forms_give_the_same_overlap_table(jobs):
    tables = [[(r.rank, r.step, r.computing_ns, r.communication_ns, r.free_ns)
               for r in overlap_report(jobs[form][0])] for form in ("chrome", "protobuf")]
    assert len(tables[0]) == 8
    for a, b in zip(*tables, strict=True):
        assert a[:2] == b[:2] and all(abs(x - y) <= 50_000 for x, y in zip(a[2:], b[2:], strict=True))


@pytest.mark.parametrize("form", ["chrome", "protobuf"])
def test_shuffled_and_cut_off_files_convert_with_what_they_hold(tmp_path, form):
    results = {}
    for name, options in (("ordered", {}), ("shuffled", {"shuffle": True}), ("cut", {"truncate": True})):
        generate_profile(tmp_path / name, form=form, steps=4, seed=3, gpu=True, **options)
        results[name] = convert(tmp_path / name, tmp_path / f"{name}.pftrace", kind="detail", max_bytes=None)
    assert results["shuffled"].slices == results["ordered"].slices > 0
    assert not results["shuffled"].warnings
    assert 0 < results["cut"].slices < results["ordered"].slices
    assert any("cut off" in w for w in results["cut"].warnings)


def test_a_protobuf_name_that_is_not_utf8_is_read_with_replacement_characters(tmp_path):
    """Protobuf hands a proto2 string that is not UTF-8 back as bytes: a damaged name (a host
    event's, a runtime call's) is read as the text files are, not an internal error, and its event kept."""
    generate_profile(tmp_path / "whole", form="protobuf", steps=2, seed=3, gpu=True)
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    [path] = (tmp_path / "whole").glob("*.pb")
    data = path.read_bytes()
    for name in (b"_DataLoaderIterSingleProcess", b"cudaSetDevice_v3020"):  # same length: framing holds
        assert name in data
        data = data.replace(name, name[:5] + b"\xff" + name[6:])
    (damaged / path.name).write_bytes(data)

    def names(root):
        return Counter(s.name for b in _batches(root) for s in b.slices)

    whole, read = names(tmp_path / "whole"), names(damaged)
    assert read["_Data\ufffdoaderIterSingleProcess"] == whole["_DataLoaderIterSingleProcess"] > 0
    assert read["cudaS\ufffdtDevice_v3020"] == whole["cudaSetDevice_v3020"] > 0
    assert sum(read.values()) == sum(whole.values())


# -- the names and times read in C (readers/c/paddle.c) as Paddle._normalise reads them ------------

_NAMES = st.one_of(st.none(), st.integers(), st.text(max_size=6), st.tuples(
    st.sampled_from(["matmul dygraph", "ProfileStep#3", "", "a[1 us]", "x]"]),
    st.sampled_from(["[1.901 ms]", "[12 us]", "[3 s]", "[0.5 ns]", "[1.2.3 us]", "[.5 us]", "[1. us]",
                     "[5 ss]", "[\u0663 us]", "[5m s]", "]", "[]", "", "[1 us]x", "[1 us]\n", "[1 us]é",
                     "[7\u00a0us]"]),
).map("".join))
_STARTS = st.sampled_from(["{relative} us", "{relative} ms", " us", "{relative}0 us", "1e3 us",
                           "-{relative} us", "{relative}\u0663 us"])
_ARGS = st.sampled_from([
    "", "{{}}", '{{"start_time": "{start}", "end_time": "9 us"}}', '{{"start_time":"{start}"}}',
    '{{ "start_time" :\n "{start}" }}', '{{"x": 1, "start_time": "{start}"}}',
    '{{"start_time": "{start}", "start_time": "7.000 us"}}',
    '{{"start_time": "{start}", "y": {{"start_time": 1}}}}',
    '{{"start\\u005ftime": "{start}"}}', '{{"start_time": "{start}", "n": "a\\"b"}}', '{{"start_time": 5}}',
    '[1, "start_time"]', '{{"s": "start_time"}}', "null",
])


@st.composite
def _paddle_events(draw):
    base = draw(st.sampled_from([0, 1795348141366462000, -5_000, 2**63 - 1, 2**64, -(2**63)]))
    relative = draw(st.integers(0, 20_000_000_000))
    start = draw(_STARTS).format(relative=f"{relative // 1000}.{relative % 1000:03d}")
    ts_ns = base + relative - draw(st.integers(-30, 1050))
    ts = draw(st.one_of(st.just(f"{ts_ns // 1000}.{ts_ns % 1000:03d}" if ts_ns >= 0 else str(ts_ns // 1000)),
                        st.just(ts_ns // 1000), st.none(), st.floats(allow_nan=False), st.booleans(),
                        st.sampled_from(["abc", "1.2345", "1e3", "-7.5", "", "\u0663"]), st.just([1])))
    events = [chrome_trace_event(ph=draw(st.sampled_from(["X", "M", "i", 1, None])), name=draw(_NAMES), ts=ts,
                                 args=msgspec.Raw(draw(_ARGS).format(start=start).encode()))
              for _ in range(draw(st.integers(1, 4)))]
    return base, events


@settings(max_examples=600, deadline=None)
@given(_paddle_events())
def test_paddles_names_and_times_are_normalised_in_c_as_the_rule_normalises_them(made):
    """``_core.normalise`` leaves every event as ``Paddle._normalise`` does: the duration cut from the
    name (only an ASCII one C judges), ``start_time`` taken where it agrees with ``ts``, else ``ts``
    less the profiler's zero; whatever C cannot judge is the rule's."""
    base, events = made
    dialect = paddle.Paddle(base)
    by_rule = [msgspec.structs.replace(e) for e in events]
    for event in by_rule:
        dialect._normalise(event)
    in_c = [msgspec.structs.replace(e) for e in events]
    _core.normalise(in_c, base, dialect._normalise)
    assert [(e.name, e.ts) for e in in_c] == [(e.name, e.ts) for e in by_rule]
    assert [type(e.ts) for e in in_c] == [type(e.ts) for e in by_rule]


def test_paddles_own_names_and_times_take_no_rule():
    """The events Paddle writes are read in C alone: a step (its start_time), an operator whose
    start_time float32 has drifted from its ts, past the first ~8 ms (its ts then), a metadata event."""
    step = b'{\n  "start_time": "0.000 us",\n  "end_time": "1900.844 us"\n}'
    drifted = b'{"start_time": "20003.229 us", "end_time": "20015.5 us"}'
    events = [chrome_trace_event(ph="X", name="ProfileStep#3[1.901 ms]", ts="1795348141366462",
                                 args=msgspec.Raw(step)),
              chrome_trace_event(ph="X", name="matmul dygraph[12.3 us]", ts="1795348141386462",
                                 args=msgspec.Raw(drifted)),
              chrome_trace_event(ph="M", name="thread_name", ts=None, args=msgspec.Raw(b'{"name": "x"}'))]

    def rule(event):
        raise AssertionError(f"left to the rule: {event}")

    _core.normalise(events, 1795348141366462000, rule)
    assert [(e.name, e.ts) for e in events] == [("ProfileStep#3", "0.000"), ("matmul dygraph", "20000.000"),
                                                ("thread_name", None)]


@pytest.mark.parametrize("sample", ["generated", "paddle-cpu-chrome"])
def test_a_paddle_trace_read_with_a_scanned_first_pass_reads_as_decoded(jobs, sample):
    """The first pass scans the file in C and makes, and normalises, an Event only of its metadata and
    steps: every record and message is that of the file decoded whole, each event normalised by the rule."""
    from conftest import real_data

    root = jobs["chrome"][0] if sample == "generated" else real_data(sample)

    def read():
        diag = Diagnostics()
        steps = list(read_profile(discover(root), Options(kind="detail", draws_arrows=True), diag))
        return repr([(s.rank, s.step_id, s.slices, s.samples) for s in steps]), diag.messages()

    scanned = read()
    assert "ProfileStep" not in scanned[0] and "Slice(" in scanned[0]  # steps found, names cut

    def by_rule(events, zero, rule):
        for event in events:
            rule(event)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(event_decoding, "scan", lambda *_: None)  # every batch decoded by msgspec
        patch.setattr(paddle, "normalise", by_rule)
        assert read() == scanned
    with pytest.MonkeyPatch.context() as patch:  # and the records made by the Python rules alone
        patch.setattr(chrome_trace, "read_events", chrome_trace.in_python)
        assert read() == scanned


def test_operators_are_read_in_c_with_their_task_type():
    """An operator is a host range whose task type marks it for the operator statistics: C reads
    it by its category (``Dialect.host_tasks``), never the dialect's Python ``convert``."""
    from conftest import real_data

    root = real_data("paddle-cpu-chrome")
    with pytest.MonkeyPatch.context() as patch:
        def convert(self, event, kind, lane):
            assert event.cat != "Operator", event
            return converted(self, event, kind, lane)

        converted = paddle.Paddle.convert
        patch.setattr(paddle.Paddle, "convert", convert)
        slices = [s for b in _batches(root) for s in b.slices]
    assert sum(s.task_type == HOST_OPERATOR for s in slices) == 130  # the file's Operator events
