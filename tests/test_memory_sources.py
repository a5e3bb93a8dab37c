"""``trace2perfetto memory`` from the sources beyond torch_npu's and CANN's allocators: Kineto's
``[memory]`` events, host_info's host memory, torch_npu's ``npu_module_mem.csv``.

Each is checked against a computation of its own here (orjson, csv, sqlite3), never the reader's.
"""

from __future__ import annotations

import csv
import gzip
import json
import shutil
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import jsonschema
import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters import readers
from converters.analyses import memory as memory_analysis
from converters.analyses.memory import HOLDERS, allocations_report, memory_report, record
from converters.cli import main
from converters.errors import Diagnostics
from converters.model import Layer, Sample, Slice
from converters.profile import Kind, Options, Profile, read_profile
from converters.readers import _core, ascend_db, chrome_trace, kineto, memory
from converters.readers.common import events as event_decoding
from fixtures.host_info_gen import write_host_info
from fixtures.kineto_gen import write_kineto_traces
from tests.conftest import real_data

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "memory.schema.json").read_text())
_MB = float(1 << 20)
_SINCE = kineto.SINCE_START


def _events(path: Path) -> list[dict]:
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    found = orjson.loads(data)
    return [e for e in found["traceEvents"] if e.get("name") == "[memory]"]


def _device(args: dict) -> str:
    return "CPU" if args["Device Type"] == 0 else f"GPU {args['Device Id']}"


# -- Kineto ------------------------------------------------------------------------------------------

def test_kineto_1_8_peaks_are_the_maxima_of_the_running_sums_of_the_events_bytes():
    """PyTorch 1.8 writes only deltas (Bytes): the peak per device is the largest running sum from
    the trace's first event, at the first time it is reached; named as relative."""
    folder = real_data("kineto-1.8-resnet50")
    trace = next(folder.glob("*.pt.trace.json.gz"))
    base = orjson.loads(gzip.decompress(trace.read_bytes())).get("baseTimeNanoseconds", 0)
    sums: dict[str, int] = defaultdict(int)
    peaks: dict[str, tuple[int, float]] = {}
    for event in sorted(_events(trace), key=lambda e: e["ts"]):
        device = _device(event["args"])
        sums[device] += event["args"]["Bytes"]
        if device not in peaks or sums[device] > peaks[device][0]:
            peaks[device] = (sums[device], event["ts"])
    assert len(_events(trace)) == 12_838
    rows = {row.component: row for row in memory_report(folder)}
    assert set(rows) == {f"{d}{_SINCE}" for d in peaks} == {f"CPU{_SINCE}", f"GPU 0{_SINCE}"}
    for device, (peak, ts_us) in peaks.items():
        row = rows[f"{device}{_SINCE}"]
        assert row.peaks == {"Allocated": pytest.approx(peak)}
        assert row.peak_ns == base + round(ts_us * 1000)
        assert row.allocations == 0  # no Addr in 1.8's events: nothing to pair
    assert record(rows[f"GPU 0{_SINCE}"])["Peak Allocated(MB)"] == pytest.approx(2791636480 / _MB, abs=1e-6)


@pytest.fixture(scope="module")
def kineto_job(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kineto_memory")
    write_kineto_traces(root, ranks=2, steps=2, memory_events=True, seed=3)
    return root


def test_kineto_totals_peaks_and_allocations_equal_the_events(kineto_job):
    """PyTorch >= 1.10 gives the allocator's totals: the peaks are their maxima (absolute, named
    ``GPU N``), and each allocation pairs with the release of its address."""
    rows = {(row.rank, row.component): row for row in memory_report(kineto_job)}
    allocations = list(allocations_report(kineto_job))
    for path in sorted(kineto_job.glob("*.pt.trace.json")):
        head = orjson.loads(path.read_bytes())
        rank, base = head["distributedInfo"]["rank"], head["baseTimeNanoseconds"]
        events = _events(path)
        device = _device(events[0]["args"])
        row = rows[rank, device]
        assert row.peaks["Allocated"] == max(e["args"]["Total Allocated"] for e in events)
        assert row.peaks["Reserved"] == max(e["args"]["Total Reserved"] for e in events)
        opened, pairs = {}, []
        for e in events:
            ts_ns = base + round(e["ts"] * 1000)
            if e["args"]["Bytes"] > 0:
                opened[e["args"]["Addr"]] = (ts_ns, e["args"]["Bytes"])
            else:
                start, size = opened.pop(e["args"]["Addr"])
                pairs.append((start, ts_ns, size))
        assert not opened
        mine = sorted((a.allocated_ns, a.released_ns, a.size) for a in allocations if a.rank == rank)
        assert mine == sorted(pairs)
        assert row.allocations == len(pairs)
        alive = sorted((size for start, end, size in pairs if start <= row.peak_ns < end), reverse=True)
        assert alive and [h.size for h in row.holders] == alive[:HOLDERS]


@pytest.mark.parametrize("sample", ["kineto_job", "ascend-pt-2rank", "ascend-pt-db", "msprof-db"])
def test_the_holders_kept_from_the_peaks_read_are_those_a_second_read_finds(sample, kineto_job, monkeypatch):
    """The peaks' read keeps the allocations it passes for the holders; past ``HELD`` of them it
    keeps none and the records are read again: both give every row alike, holders included."""
    folder = kineto_job if sample == "kineto_job" else real_data(sample)
    reads = []
    real = memory_analysis.device_memory
    monkeypatch.setattr(memory_analysis, "device_memory", lambda *a: reads.append(1) or real(*a))
    kept = [record(row) | {"holders": row.holders} for row in memory_report(folder)]
    once = len(reads)
    monkeypatch.setattr(memory_analysis, "HELD", 1)
    again = [record(row) | {"holders": row.holders} for row in memory_report(folder)]
    assert kept == again and any(row["holders"] for row in kept)
    assert len(reads) - once > once  # past HELD, a second read of the ranks with allocations


def test_kineto_detail_trace_carries_the_counter_and_loads_clean(kineto_job, tmp_path):
    from converters import convert
    from tests.test_trace_processor import imported

    out = tmp_path / "out.pftrace"
    convert(kineto_job, out, kind="detail", max_bytes=None)
    problems, (slices, counters, _) = imported(out, tmp_path)
    assert problems == []
    events = sum(len(_events(p)) for p in kineto_job.glob("*.pt.trace.json"))
    assert counters >= 2 * events  # Allocated and Reserved after each event


def test_kineto_without_memory_events_says_how_to_record_them(tmp_path, capsys):
    write_kineto_traces(tmp_path, ranks=1, steps=1, seed=1)
    assert main(["memory", str(tmp_path), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == []
    assert "profile_memory=True" in err


def test_kineto_memory_cli_json_validates(kineto_job, capsys):
    assert main(["memory", str(kineto_job), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    jsonschema.validate(rows, SCHEMA)
    assert [(r["Rank"], r["Component"]) for r in rows] == [(0, "GPU 0"), (1, "GPU 1")]


_ADDRESSES = st.integers(0, 5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_ADDRESSES, st.integers(-3, 3).filter(bool)), max_size=40))
def test_kineto_allocations_pair_each_release_with_the_last_allocation_of_its_address(tmp_path_factory, ops):
    """Whatever the order: a slice per allocation whose address is released later (its size, from
    its allocation to that release), one whose address is allocated again first up to then (its
    release not recorded), the others unreleased to the last event; a release of an address with
    nothing allocated pairs with none; the counter is the running sum."""
    folder = tmp_path_factory.mktemp("pairs")
    events = [{"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": i + 1,
               "args": {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": size * 1024}}
              for i, (addr, size) in enumerate(ops)]
    path = folder / "w.pt.trace.json"
    path.write_bytes(orjson.dumps({"schemaVersion": 1, "traceEvents": events}))
    records = list(kineto.memory(kineto.rank_info(path), Diagnostics()))
    expected, live, total, sums = [], {}, 0, []
    for i, (addr, size) in enumerate(ops):
        total += size * 1024
        sums.append(float(total))
        if size > 0:
            if addr in live:  # every allocation once: the one before ends here, its release unknown
                start, allocated = live.pop(addr)
                expected.append((start * 1000, (i + 1 - start) * 1000, float(allocated), "not recorded"))
            live[addr] = (i + 1, size * 1024)
        elif addr in live:
            start, allocated = live.pop(addr)
            expected.append((start * 1000, (i + 1 - start) * 1000, float(allocated), True))
    last = len(ops) * 1000
    expected += [(s * 1000, last - s * 1000, float(a), False) for s, a in live.values()]
    slices = [(r.start_ns, r.dur_ns, r.args["Size(B)"], r.args.get("Released", True))
              for r in records if type(r) is Slice]
    assert sorted(slices) == sorted(expected)
    assert all(r.layer is Layer.MEMORY for r in records if type(r) is Slice)
    assert [r.value for r in records if type(r) is Sample] == sums


def test_a_memory_event_whose_device_type_is_an_array_is_counted_under_that_name(tmp_path):
    """A Device Type that is no number (an array: no c10 device type) names its device as written,
    as an unknown number does, and its Bytes are counted: the memory pass does not stop there."""
    path = tmp_path / "w.pt.trace.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "i", "name": "[memory]", "pid": 1, '
                    '"tid": 1, "ts": 2, "args": {"Device Type": [1], "Device Id": 0, "Bytes": 4096}}]}')
    records = list(kineto.memory(kineto.rank_info(path), Diagnostics()))
    lane = "Memory Device type [1] 0 (since the trace began) [Allocated]"
    assert records == [Sample(0, lane, 2000, 4096.0)]


# [memory] events in every form a fast path could misread: names escaped or near, times as ints, floats
# (read as their text), strings, huge or no numbers; each of the six args plain, escaped, twice, of
# every JSON type, huge, absent; other args around them
_MEMORY_KEYS = ("Device Type", "Device Id", "Addr", "Bytes", "Total Allocated", "Total Reserved")
_NAMES = st.sampled_from(['"[memory]"', '"[memory]"', '"[memory]"', r'"\u005bmemory]"', '"[memory] "', '"x"',
                          "5", "null"])
_TIMES = st.sampled_from(["1", "-3", "1623142623460121", "12.345", "12.3456", "-0.0", "1e3", "1E-2",
                          "12345678901234567890123", '"12.5"', r'"1\u0032"', '"é"', "null", "true", "[1.5]"])
_KEYS = st.sampled_from([*(f'"{k}"' for k in _MEMORY_KEYS), *(f'"{k}"' for k in _MEMORY_KEYS),
                         r'"Device\u0020Id"', '"Other"', '"bytes"'])
_VALUES = st.sampled_from(["0", "-1", "1", "6", "4096", "-4096", "140234567890", "-0", "1.5", "-0.0", "2.0",
                           "1e3", "1E-2", "2.5e-200", "1e250", "123456789012345678901", '"4096"', "null",
                           "true", "[1]", '{"Bytes": 1}'])
_ARGS = st.one_of(st.none(), st.lists(st.tuples(_KEYS, _VALUES), max_size=8).map(
    lambda pairs: "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"))
_MEMORY_EVENTS = st.lists(st.tuples(_NAMES, st.one_of(st.none(), _TIMES), _ARGS).map(
    lambda e: "{" + ", ".join([f'"ph": "i", "name": {e[0]}, "pid": 1, "tid": 1',
                               *([f'"ts": {e[1]}'] if e[1] is not None else []),
                               *([f'"args": {e[2]}'] if e[2] is not None else [])]) + "}"), max_size=12)


def _fields_of(event) -> tuple | str:
    """An event's (ts, *args) as kineto._memory reads them, each with its type (1 is not 1.0)."""
    try:
        fields = event if type(event) is tuple else kineto._memory_fields(event)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        return type(e).__name__
    return tuple((type(v), repr(v)) for v in fields)


@settings(max_examples=800, deadline=None)
@given(_MEMORY_EVENTS)
def test_memory_events_picked_from_the_text_are_those_kinetos_decoding_gives(events):
    """The [memory] events picked from a scanned batch in C, their time and args, are those of the
    batch decoded as Kineto's reader decodes it (Kineto.events, a float as its text)."""
    data = ("[" + ", ".join(events) + "]").encode()
    decoded = [_fields_of(e) for e in kineto.Kineto.events.decode(data) if e.name == kineto.MEMORY_EVENT]
    scanned = _core.scan(data, event_decoding.EVENT.decode, event_decoding.ANY.decode)
    assert scanned is not None  # these batches are plain: C picks their events
    assert [_fields_of(e) for e in _core.memory_events(scanned, kineto.MEMORY_EVENT)] == decoded


@settings(max_examples=150, deadline=None)
@given(_MEMORY_EVENTS)
def test_memory_records_and_messages_are_those_of_the_decoded_trace(tmp_path_factory, events):
    """What memory() makes of a trace's [memory] events, and says of them, whether its batches are
    scanned in C or decoded by msgspec."""
    path = tmp_path_factory.mktemp("memory_forms") / "w.pt.trace.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [' + ", ".join(events) + "]}")

    def outcome() -> tuple[list, list[str]]:
        diag = Diagnostics()
        return list(kineto.memory(kineto.rank_info(path), diag)), diag.messages()

    scanned = outcome()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(event_decoding, "scan", lambda *_: None)  # every batch decoded by msgspec
        assert outcome() == scanned


def _plain_event(ts, device_type, device_id, addr, size, allocated, reserved) -> str:
    args = {"Device Type": device_type, "Device Id": device_id, "Addr": addr, "Bytes": size,
            "Total Allocated": allocated, "Total Reserved": reserved}
    text = ", ".join(f'"{k}": {json.dumps(v)}' for k, v in args.items() if v is not None)
    return f'{{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": {ts}, "args": {{{text}}}}}'


# a training step's [memory] events: a few devices (the CPU's id -1, an unknown type), addresses
# reused, deltas or totals, times in and out of order; among them the odd forms above
_PLAIN_MEMORY = st.tuples(st.sampled_from(["1", "2", "3", "3.5", "1623142623460121", "1623142623460121.125",
                                           '"7.25"']),
                          st.sampled_from([0, 1, 1, 6, 99]), st.sampled_from([-1, 0, 1, 3]),
                          st.sampled_from([None, 4096, 8192, 140234567890]),
                          st.sampled_from([4096, -4096, 0, 1.5e6, -2048, 1 << 20]),
                          st.sampled_from([None, None, 8192, 1.0]), st.sampled_from([None, None, 16384]))


def _memory_of(rank, path: Path, diag: Diagnostics, in_c: bool) -> list:
    """kineto._memory's records; ``in_c`` False: a scanned batch's events each by the rule
    (``_MemoryPass.event`` of what ``memory_events`` picks), none by ``memory_samples``."""
    with pytest.MonkeyPatch.context() as patch:
        if not in_c:
            patch.setattr(kineto._MemoryPass, "scanned", lambda self, batch: (
                r for item in _core.memory_events(batch, kineto.MEMORY_EVENT) for r in self.event(item)))
        return list(kineto._memory(rank, path, diag))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PLAIN_MEMORY.map(lambda e: _plain_event(*e)), _MEMORY_EVENTS.map(", ".join)),
                max_size=40).map(lambda texts: [t for t in texts if t]), st.integers(0, 2))
def test_memory_made_in_c_is_the_rules(tmp_path_factory, events, batches):
    """``_core.memory_samples`` makes a scanned batch's [memory] events into the Samples and
    allocations ``_MemoryPass.event`` makes of them one by one, with the same running sums, the same
    events counted out of order or bad, in one batch or several (the pass's state carried on)."""
    path = tmp_path_factory.mktemp("memory_in_c") / "w.pt.trace.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [' + ", ".join(events) + "]}")
    rank = kineto.rank_info(path)

    def outcome(in_c: bool) -> tuple[list, list, list[str]]:
        diag = Diagnostics()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(chrome_trace, "BATCH_BYTES", max(64, path.stat().st_size // (batches + 1)))
            records = _memory_of(rank, path, diag, in_c)
        return ([r for r in records if type(r) is Sample], [r for r in records if type(r) is Slice],
                diag.messages())

    assert outcome(True) == outcome(False)


@pytest.mark.parametrize("sample", ["kineto-1.8-resnet50", "kineto-h100-mi300-bert"])
def test_real_memory_made_in_c_is_the_rules(sample):
    """On the real traces with [memory] events (12,838; 472 in the H100 and MI300X ones), C and the
    rule make the same records."""
    for path in sorted(real_data(sample).glob("*.json.gz")):
        rank = kineto.rank_info(path)
        made = {in_c: _memory_of(rank, path, Diagnostics(), in_c) for in_c in (True, False)}
        assert made[True] == made[False] and any(type(r) is Sample for r in made[True])


def _filed_memory(root: Path, **options) -> tuple[Counter, Counter]:
    """What a detail read files beyond a read without memory, and what the memory reader gives
    (``readers.memory``, the allocations drawn as ``with_memory`` draws them), as counted reprs."""
    opened = Profile.open(root, Options(kind=Kind.DETAIL, **options), diag=Diagnostics())

    def read(with_memory: bool) -> Counter:
        return Counter(repr(r) for batch in read_profile(
            opened.ranks, Options(kind=Kind.DETAIL, memory=with_memory, **options), Diagnostics())
            for r in batch.slices + batch.samples)

    given = Counter(repr(r) for info in opened.ranks for r in memory(info, Diagnostics())
                    if type(r) is Sample or r.layer is not Layer.MEMORY or
                    r.args["Size(B)"] >= readers.DRAWN_ALLOCATION_BYTES)
    return read(True) - read(False), given


@pytest.mark.parametrize("shape", [{}, {"shuffle": True}, {"no_steps": True}])
def test_a_detail_read_files_the_memory_records_its_first_pass_hands_on(tmp_path, monkeypatch, shape):
    """Kineto's detail read takes its [memory] events in the pass over the file it makes anyway
    (``MemoryFeed``), not in a pass of their own: what it files is what the memory reader gives,
    each record once, in many batches, out of time order, and in a capture that marks no steps."""
    write_kineto_traces(tmp_path, ranks=2, steps=3, memory_events=True, seed=4, **shape)
    monkeypatch.setattr(chrome_trace, "BATCH_BYTES", 1 << 16)
    filed, given = _filed_memory(tmp_path)
    assert filed == given and sum(given.values()) > 100


def test_the_real_detail_read_files_the_memory_records_of_the_real_trace():
    """kineto-1.8-resnet50's 12,838 [memory] events, filed by the detail read's first pass as the
    memory reader makes them."""
    filed, given = _filed_memory(real_data("kineto-1.8-resnet50"))
    assert filed == given and sum(given.values()) > 10_000


# -- host memory -------------------------------------------------------------------------------------

def test_host_memory_is_a_host_row_with_its_peak_and_time(tmp_path):
    """host_info's memory_usage (kB of VmRSS) is the Host component: its largest value and the first
    time it is reached; no allocations. (No real host_info sample with memory exists: the path is
    checked on the generator's files only.)"""
    made = write_host_info(tmp_path / "prof", steps=4, seed=2)
    peak_ns, peak = max(made.memory, key=lambda m: (m[1], -m[0]))
    rows = memory_report(tmp_path / "prof")
    assert [(r.rank, r.component) for r in rows] == [(0, "Host")]
    assert rows[0].peaks == {"Allocated": float(peak)}
    assert rows[0].peak_ns == peak_ns
    assert rows[0].allocations == 0 and rows[0].holders == []
    jsonschema.validate([record(r) for r in rows], SCHEMA)


def test_a_host_file_without_memory_gives_no_host_row(tmp_path):
    write_host_info(tmp_path / "prof", steps=2, mode="time", seed=2)
    diag = Diagnostics()
    assert memory_report(tmp_path / "prof", diag=diag) == []
    assert "no_memory" in diag.counts


# -- npu_module_mem.csv ------------------------------------------------------------------------------

def _module_maxima_of_the_csv(path: Path) -> dict[str, float]:
    maxima: dict[str, float] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            value = float(row["Total Reserved(MB)"])
            maxima[row["Component"]] = max(maxima.get(row["Component"], value), value)
    return maxima


def _module_maxima(records) -> dict[str, float]:
    found: dict[str, float] = {}
    for r in records:
        if type(r) is Sample and r.lane.startswith("Module memory/"):
            module = r.lane.removeprefix("Module memory/").removesuffix(" [Reserved(B)]")
            found[module] = max(found.get(module, r.value / _MB), r.value / _MB)
    return found


def test_npu_module_mem_csv_is_drawn_with_the_maxima_of_the_file():
    sample = real_data("ascend-pt-2rank")
    profile = Profile.open(sample, Options())
    for info in profile.ranks:
        expected = _module_maxima_of_the_csv(info.path / "ASCEND_PROFILER_OUTPUT" / "npu_module_mem.csv")
        got = _module_maxima(memory(info, Diagnostics()))
        assert set(got) == set(expected)
        for module, value in expected.items():
            assert got[module] == pytest.approx(value, abs=0.01), module
        assert expected["APP"] == pytest.approx(1452.0)


def test_npu_module_mem_text_and_database_agree():
    """The database form (NPU_MODULE_MEM, its modules named by ENUM_MODULE) and the text form draw
    the same lanes, in bytes: each lane of the database's is the text's for the same module."""
    db_path = (real_data("ascend-pt-db") / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
               / "ascend_pytorch_profiler_1.db")
    with sqlite3.connect(f"file:{db_path}?immutable=1", uri=True) as db:
        modules = {name: value / _MB for name, value in db.execute(
            "SELECT e.name, max(m.totalReserved) FROM NPU_MODULE_MEM m "
            "JOIN ENUM_MODULE e ON e.id = m.moduleId GROUP BY e.name")}
    info = Profile.open(db_path.parent.parent, Options()).ranks[0]
    steps = read_profile([info], Options(kind=Kind.DETAIL), Diagnostics())
    found = _module_maxima(s for step in steps for s in step.samples)
    assert found == pytest.approx(modules, abs=0.01)
    text = _module_maxima_of_the_csv(real_data("ascend-pt-2rank") / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT"
                                     / "npu_module_mem.csv")
    # the same CANN modules (but one: AML in the text sample's CANN, AMP in the database's), the same
    # holding memory
    assert len(set(modules) ^ set(text)) == 2
    assert {m for m, v in modules.items() if v} == {m for m, v in text.items() if v} == {"APP", "GE", "HCCL",
                                                                                          "RUNTIME"}
    assert ascend_db.module_memory_lane("APP") == "Module memory/APP [Reserved(B)]"


def test_a_module_memory_file_without_its_columns_is_a_warning_and_the_peaks_stand(tmp_path):
    job = shutil.copytree(real_data("ascend-pt-2rank"), tmp_path / "job")
    for rank in (0, 1):
        broken = job / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "npu_module_mem.csv"
        broken.write_text("Component,x\nA,1\n")
    diag = Diagnostics()
    before = {(r.rank, r.component): r.peaks for r in memory_report(real_data("ascend-pt-2rank"))}
    assert {(r.rank, r.component): r.peaks for r in memory_report(job, diag=diag)} == before
    assert "bad_memory" in diag.counts


def test_module_memory_outside_the_steps_makes_no_step_of_its_own(capsys):
    """The driver samples module memory from the profiler's start to its end: the samples after the
    last step come as records outside every step, which ``comm --slow-ranks`` does not count as a
    step (one step a rank, as the sample has)."""
    assert main(["comm", "--slow-ranks", str(real_data("ascend-pt-2rank")), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["slow_ranks"]
    assert sorted((row["Rank"], row["Steps"]) for row in rows) == [(0, 1), (1, 1)]
