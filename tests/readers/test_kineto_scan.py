"""Kineto's batches scanned in C (``_core.scan`` with Kineto's decoders), not decoded by msgspec: every
event Python reads is the Event ``Kineto.events`` gives, a float time is read from its text (epoch µs
are not exact as doubles), and the first pass's launch survey (``launches.Survey.add``, in C over a
scanned batch: ``c/survey.c``) keeps what it keeps over the decoded batch."""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from converters import Diagnostics, Options, discover, read_profile
from converters.errors import InputError
from converters.readers import _core, chrome_trace, kineto, launches
from converters.readers.common import events as event_decoding

_HEADER = '{"schemaVersion":1,"distributedInfo":{"backend":"%s","rank":0},"traceEvents":['
_META = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
         {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
         {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
         {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}}]


def _write(root: Path, events: list[str], backend: str = "nccl", meta: list[dict] = _META) -> Path:
    path = root / "worker0.1.pt.trace.json"
    path.write_text(_HEADER % backend + ",".join([*(json.dumps(e) for e in meta), *events]) + "]}")
    return path


_UNNAMED = _META[:2]  # no stream named: vLLM's traces hold no metadata at all


def _records_and_messages(root: Path, kind: str) -> tuple:
    diag = Diagnostics()
    try:
        steps = list(read_profile(discover(root), Options(kind=kind, draws_arrows=True), diag))
    except InputError as e:
        return str(e), ()
    records = [(s.step_id, tuple(r if getattr(r, "args", None) is None or isinstance(r.args, dict)
                                 else r._replace(args=bytes(r.args)) for r in s.slices + s.samples))
               for s in steps]
    return repr(records), diag.messages()  # repr: -0.0 is not 0.0


def test_a_kineto_float_time_is_read_from_its_text_in_a_scanned_batch(tmp_path):
    """Kineto writes epoch µs as JSON floats with 3 decimals (1700000000123456.789: 0.25 µs apart as
    doubles): scanned, not decoded, they are read as their text says, to the ns."""
    at = "1700000000123456.789"
    events = [f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":{at},'
              f'"dur":100.001,"args":{{}}}}',
              f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{at},'
              f'"dur":2.003,"args":{{"correlation":1}}}}',
              '{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1700000000123457.125,"dur":3.5,'
              '"args":{"correlation":1}}',
              '{"ph":"C","name":"c","pid":1,"tid":1,"ts":1700000000123456.001,"args":{"v":1}}']
    path = _write(tmp_path, events)
    batches = list(kineto.Kineto("nccl").batches(path, Diagnostics()))
    assert [type(b) for b in batches] == [_core.RawEvents]
    steps = list(read_profile(discover(tmp_path), Options(kind="detail"), Diagnostics()))
    found = {(r.name, r.start_ns, r.dur_ns) for s in steps for r in s.slices}
    assert {("cudaLaunchKernel", 1700000000123456789, 2003), ("k", 1700000000123457125, 3500),
            ("Step 1", 1700000000123456789, 100001)} <= found
    assert any(r.start_ns == 1700000000123456001 for s in steps for r in s.samples)


# every form of a field a scan could read otherwise than Kineto's decoding
_PHASES = ['"X"'] * 6 + ['"i"', '"C"', '"M"', '"\\u0058"', "5"]
_CATS = ['"cuda_runtime"'] * 6 + ['"cuda_driver"', '"Runtime"', '"kernel"', '"cpu_op"', '"cpu_op"',
         '"user_annotation"', '"Operator"', '"cuda\\u005fruntime"', '"cpu\\u005fop"', "null", "7", "2.5"]
_NAMES = ['"cudaLaunchKernel"', '"cudaGraphLaunch"', '"hipGraphLaunch"', '"\\u0063udaGraphLaunch"',
          '"record_param_comms"', '"nccl:all_reduce"', '"c10d::allreduce_"', '"c10d::send"',
          '"gloo:all_reduce"', '"\\u0067loo:broadcast"', '"ProfilerStep#1"', '"k"', '"é"', "5", "null"]
_TIDS = ["1", "1", "2", '"1"', "1.0", "1.5", '"stream 7"', "null", "-0"]
_TIMES = ["{t}", "{t}", "{t}", "{t}.5", "{t}.5", "{t}.125", "{t}.1255", '"{t}"', '"{t}.5"', "null", "{t}e0",
          "-{t}.5", "17000000001{t}.789", "4611686018427387.904", "123456789012345678901", "{t}.000"]
_DURS = ["2", "2.5", "0", "-1", '"3"', "null", "1.0625", "30"]
_ARGS = st.sampled_from(['{{"correlation":{c}}}'] * 12 + [
    '{{"External id":3,"correlation": {c} ,"stream":7}}', '{{"correlation":{c},"correlation":{c}}}',
    '{{"x":{{"correlation":{c}}}}}', '{{"corr\\u0065lation":{c}}}', '{{"correlation":"{c}"}}',
    '{{"correlation":{c}.0}}', '{{"correlation":-0}}', '{{"correlation":123456789012345678901}}',
    '{{"correlation":9223372036854775808}}', '{{"correlation":null}}', '{{"correlation":true}}', '{{}}',
    '{{"s":"é","correlation":{c}}}', '{{"Collective name":"allreduce","Group size":2,"Seq":{c}}}',
    '{{"Collective name":"broadcast","Process Group Name":"0","correlation":{c}}}', None])
_EVENT = st.tuples(st.sampled_from(_PHASES), st.sampled_from(_CATS), st.sampled_from(_NAMES),
                   st.sampled_from(_TIDS), st.sampled_from(_TIMES), st.sampled_from(_DURS), _ARGS,
                   st.integers(0, 300), st.integers(-3, 40))


def _event(ph, cat, name, tid, ts, dur, args, at, correlation) -> str:
    fields = [f'"ph":{ph}', f'"cat":{cat}', f'"name":{name}', '"pid":1', f'"tid":{tid}',
              f'"ts":{ts.format(t=at)}', f'"dur":{dur}']
    if args is not None:
        fields.append(f'"args":{args.format(c=correlation)}')
    return "{" + ",".join(fields) + "}"


def _fields(event) -> tuple:
    return tuple(bytes(v) if isinstance(v, msgspec.Raw) else v for v in msgspec.structs.astuple(event))


def _state(survey: launches.Survey) -> tuple:
    return (survey._ids.tolist(), survey._times.tolist(), survey._threads.tolist(),
            [(repr(tid), index) for tid, index in survey._thread_index.items()],
            {thread: [(op, op.args) for op in ops] for thread, ops in survey._ops.items()},
            sorted(survey.graphs))


@settings(max_examples=400, deadline=None)
@given(st.lists(_EVENT, max_size=30), st.sampled_from([0, 1700000000000000000, (1 << 62) - 5000]),
       st.integers(0, 2))
def test_the_launch_survey_of_a_scanned_batch_is_that_of_the_decoded_batch(made, offset, batches):
    """launches.Survey.add in C over a RawEvents keeps the launches (ids, times, threads, graph
    replays) and communication ops the Python rule keeps of the Events Kineto.events decodes, over
    one batch or several; and any_named finds gloo's ranges where kineto._is_execution does."""
    texts = [_event(*event) for event in made]
    cuts = sorted({0, len(texts), *(len(texts) * k // (batches + 1) for k in range(1, batches + 1))})
    parts = [("[" + ",".join(texts[a:b]) + "]").encode() for a, b in zip(cuts, cuts[1:], strict=False)]
    scanned = [_core.scan(part, *event_decoding.FLOATS_AS_TEXT) for part in parts]
    assume(all(batch is not None for batch in scanned))
    cats = (kineto._LAUNCH_CATS_ANY, kineto._OP_CATS_ANY)
    in_c, by_rule = launches.Survey(offset, *cats), launches.Survey(offset, *cats)
    for raw, part in zip(scanned, parts, strict=True):
        decoded = kineto.Kineto.events.decode(part)
        assert list(map(_fields, raw)) == list(map(_fields, decoded))  # an event Python reads: Kineto's
        in_c.add(raw)
        by_rule.add(decoded)
        assert _core.any_named(raw, kineto._EXECUTION_CATS, kineto._EXECUTION_NAMES) == any(
            kineto._is_execution(e) for e in decoded)
    assert _state(in_c) == _state(by_rule)


_TIME = st.integers(-(1 << 62), (1 << 62) - 1)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 60), st.one_of(_TIME, st.integers(0, 100))), max_size=60),
       st.lists(st.tuples(st.integers(0, 100), st.integers(0, 40)), max_size=8), st.booleans())
def test_the_launches_runs_in_c_are_the_rules(launched, windows, in_order):
    """``_core.launch_runs`` files the launches to the step whose window holds them, as runs of
    ids, as ``_Windows.index`` and ``runs_by_rule`` do: windows that overlap or nest (real traces'),
    ids given twice, launches outside every window; None where the ids are not in order."""
    launched = sorted(launched) if in_order else launched
    ids, times = array("q", (i for i, _ in launched)), array("q", (t for _, t in launched))
    steps = [SimpleNamespace(start_ns=a, end_ns=a + d) for a, d in sorted(windows)]
    found = _core.launch_runs(ids, times, array("q", (s.start_ns for s in steps)),
                              array("q", (s.end_ns for s in steps)), launches.OUTSIDE)
    if list(ids) != sorted(ids):
        assert found is None
        return
    expected = launches.runs_by_rule(ids, map(launches._Windows(steps).index, times))
    assert [_array(code, data) for code, data in zip("qqi", found, strict=True)] == list(expected)


def _array(code: str, data: bytes) -> array:
    found = array(code)
    found.frombytes(data)
    return found


_KERNELS = [
    '{{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":{t},"dur":{d},"args":{{"correlation":{c}}}}}',
    '{{"ph":"X","cat":"gpu_memcpy","name":"m","pid":0,"tid":7,"ts":{t},"dur":{d},"args":{{"correlation":{c}}}}}',
    '{{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce","pid":0,"tid":7,"ts":{t},"dur":{d},'
    '"args":{{"correlation":{c}}}}}',
    '{{"ph":"C","name":"mem","pid":0,"tid":7,"ts":{t},"args":{{"v":{d}}}}}',
    '{{"ph":"s","cat":"ac2g","id":{c},"pid":1,"tid":1,"ts":{t}}}',
    '{{"ph":"i","cat":"cpu_instant_event","name":"[memory]","pid":1,"tid":1,"ts":{t},'
    '"args":{{"Bytes":{c},"Addr":{c},"Device Type":1,"Device Id":0}}}}',
]

_DEVICE_EVENT = st.tuples(st.sampled_from(_KERNELS), st.sampled_from(_TIMES), st.sampled_from(_DURS),
                          st.integers(0, 300), st.integers(-3, 40)).map(
    lambda k: k[0].format(t=k[1].format(t=k[3]), d=k[2], c=k[4]))


@settings(max_examples=120, deadline=None)
@given(st.lists(st.one_of(_EVENT.map(lambda e: _event(*e)), _DEVICE_EVENT), max_size=40),
       st.sampled_from(["nccl", "gloo", "mpi"]), st.sampled_from(["detail", "summary"]), st.booleans())
def test_a_scanned_kineto_trace_converts_as_its_decoded_batches_do(tmp_path_factory, events, backend, kind,
                                                                    named):
    """Every record and message of a Kineto trace whose batches are scanned (C reads its times from
    their text) is that of the same trace decoded by Kineto.events, and that of the Python rules,
    its GPU stream named by metadata or not."""
    root = tmp_path_factory.mktemp("kineto")
    steps = [json.dumps({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1,
                         "ts": 100 * (k - 1), "dur": 100, "args": {}}) for k in (1, 2)]
    _write(root, steps + events, backend, _META if named else _UNNAMED)
    scanned = _records_and_messages(root, kind)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(event_decoding, "scan", lambda *_: None)  # every batch decoded by msgspec
        assert _records_and_messages(root, kind) == scanned
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chrome_trace, "read_events", chrome_trace.in_python)  # the Python rules alone
        assert _records_and_messages(root, kind) == scanned


@pytest.mark.parametrize("sample", ["kineto-2rank", "kineto-gloo-2rank", "kineto-1.8-resnet50",
                                    "kineto-rocm-mi300", "pp-gpipe-2stage-dev"])
def test_real_kineto_traces_scanned_convert_as_decoded(sample):
    from conftest import real_data

    root = real_data(sample)
    for kind in ("detail", "summary"):
        scanned = _records_and_messages(root, kind)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(event_decoding, "scan", lambda *_: None)
            assert _records_and_messages(root, kind) == scanned
        assert "Slice(" in scanned[0]  # records were read


def test_device_work_on_a_stream_no_metadata_names_is_read_in_c(tmp_path, monkeypatch):
    """A trace without metadata (vLLM's) routes its streams as host threads: their kernels and
    copies are still read in C (none reaches Kineto.convert but the first of a stream, whose route
    Python makes), drawn on their streams as Python's rules draw them."""
    events = [json.dumps({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                          "ts": 10 * k, "dur": 2, "args": {"correlation": k}}) for k in range(1, 40)]
    events += [json.dumps({"ph": "X", "cat": "kernel" if k % 3 else "gpu_memcpy", "name": f"k{k % 4}",
                           "pid": 0, "tid": 7 + k % 2, "ts": 10 * k + 5, "dur": 3,
                           "args": {"correlation": k}})
               for k in range(1, 40)]
    _write(tmp_path, events, meta=_UNNAMED)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chrome_trace, "read_events", chrome_trace.in_python)
        by_rules = _records_and_messages(tmp_path, "detail")
    converted = []
    convert = kineto.Kineto.convert

    def counted(self, event, kind, lane):
        converted.append(event.cat)
        return convert(self, event, kind, lane)

    monkeypatch.setattr(kineto.Kineto, "convert", counted)
    found = _records_and_messages(tmp_path, "detail")
    assert found == by_rules
    assert "GPU 0 Stream 7" in found[0] and "GPU 0 Stream 8" in found[0]
    device = [cat for cat in converted if cat in ("kernel", "gpu_memcpy")]
    assert len(device) <= 2, converted  # the first on each stream, whose route Python makes
