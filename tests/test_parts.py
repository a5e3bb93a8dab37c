"""A capture no step bounds, read in parts (issue 42; ``readers.common.parts``): each command's
figures are the whole pseudo step's, however the parts fall. The whole is read with parts larger
than the capture, as before parts existed; the parts are made small so that a capture has many."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import real_data
from fixture_cache import cached
from hypothesis import given
from hypothesis import strategies as st

from converters import Diagnostics, Options, discover, intervals, overlap_report, profile, read_profile
from converters.analyses.critical import critical_report
from converters.analyses.diff import side_samples
from converters.analyses.ops import ops_report
from converters.analyses.overlap import joined_rows, overlap_row
from converters.model import GPU_KERNEL, FlowEnd, Layer, Sample, Slice, StepRecords, comm_type
from converters.profile import carried_on, folded, overlap_slices
from converters.readers.common import parts

SMALL_PARTS = 500  # records a part: each capture below has several; its arrows reach 4,000


def _write_captures(folder: Path) -> dict[str, Path]:
    from fixtures.kineto_gen import write_kineto_traces
    from fixtures.nsys_gen import write_nsys_export
    from fixtures.rocprof_gen import write_rocprof

    write_nsys_export(folder / "nsys" / "rank0.sqlite", steps=40, kernels=30, seed=3)
    write_rocprof(folder / "rocprof", steps=300, shuffle=True, seed=3)
    write_kineto_traces(folder / "kineto", ranks=1, steps=6, no_steps=True, shuffle=True, seed=3)
    return {name: folder / name for name in ("nsys", "rocprof", "kineto")}


@pytest.fixture(scope="module")
def captures() -> dict[str, Path]:
    return cached(_write_captures)[1]


# generated, and the real samples that mark no steps (the vLLM serving trace, and the Nsight and
# rocprofv3 files read without a marker)
_CAPTURES = ["nsys", "rocprof", "kineto", "nsys-cloverleaf", "rocprof-908", "kineto-b200-vllm"]


@pytest.fixture(params=_CAPTURES)
def capture(request) -> Path:
    if "-" in request.param:
        return real_data(request.param)
    return request.getfixturevalue("captures")[request.param]


def _read(root: Path, records: int, what):
    """``what(root)`` with parts of ``records`` records (one rank: read in this process)."""
    held = parts.PART_RECORDS
    parts.PART_RECORDS = records
    try:
        return what(root)
    finally:
        parts.PART_RECORDS = held


def _batches(root: Path, kind: str = "detail") -> list[StepRecords]:
    return list(read_profile(discover(root), Options(kind=kind), Diagnostics()))


def _both(root: Path, what):
    return _read(root, 10**9, what), _read(root, SMALL_PARTS, what)


def test_the_capture_comes_in_parts_and_every_record_lands_once(capture):
    whole, cut = _both(capture, _batches)
    assert len(whole) == 1 and whole[0].part == (0, None)
    assert len(cut) >= 3 and [b.part[0] for b in cut] == list(range(len(cut)))
    for batch, after in zip(cut, cut[1:], strict=False):  # each part starts before the next begins
        assert max(s.start_ns for s in batch.slices) <= batch.part[1] <= min(s.start_ns for s in after.slices)
    assert cut[-1].part[1] is None

    def records(batches):
        return Counter(repr(r) for b in batches for r in (*b.slices, *b.samples))

    assert records(cut) == records(whole)  # the arrows too: one part to the next binds them


def test_overlap_ops_critical_and_diff_give_the_whole_capture_s_figures(capture):
    def figures(root):
        paths = [dataclasses.asdict(found) for found in critical_report(root)]
        samples = [side_samples(info, Options(), Diagnostics(), by) for info in discover(root)
                   for by in ("step", "name", "op")]
        return overlap_report(root), ops_report(root, by="name"), json.dumps(paths, default=str), samples

    whole, cut = _both(capture, figures)
    assert len(whole[0]) == 1 and whole[0][0].computing_ns  # one row: the pseudo step's
    assert cut == whole


def test_the_summary_lanes_are_the_whole_capture_s(capture):
    """The overlap lanes of the parts cover what the whole's do. A part ends where the device is
    idle, unless it is busy across the whole part: there a slice is cut in two, once a part."""
    def lanes(root):
        found, slices, count = defaultdict(list), 0, 0
        for batch in _batches(root, "summary"):
            count += 1
            for s in overlap_slices(batch):
                found[s.lane].append((s.start_ns, s.end_ns))
                slices += 1
        return {lane: intervals.union(spans) for lane, spans in found.items()}, slices, count

    (whole, slices, _), (cut, more, count) = _both(capture, lanes)
    assert whole and cut == whole
    assert slices <= more <= slices + count * len(whole)


# -- the algebra: any cut of any records ----------------------------------------------------------

_COMPUTE, _COMM = GPU_KERNEL, comm_type("allreduce")


@st.composite
def _records(draw) -> tuple[list[Slice], list[int]]:
    """Kernels and collectives on two lanes, in start order, and where to cut them into parts."""
    n = draw(st.integers(1, 40))
    made = []
    for _ in range(n):
        comm = draw(st.booleans())
        start, dur = draw(st.integers(0, 1000)), draw(st.integers(0, 200))
        made.append(Slice(0, Layer.COMM_OP if comm else Layer.STREAM, "comm" if comm else "stream", "k",
                          start, dur, None, _COMM if comm else _COMPUTE))
    made.sort(key=lambda s: s.start_ns)
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    return made, cuts


@given(_records())
def test_the_parts_overlap_rows_add_up_to_the_whole_s(drawn):
    made, cuts = drawn
    bounds = [0, *cuts, len(made)]
    cut = [StepRecords(0, None, None, None, made[a:b],
                       part=(i, made[b].start_ns if b < len(made) else None))
           for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False))]
    rows = list(folded(((b.part, overlap_row(b)) for b in carried_on(cut)), joined_rows))
    whole = next(carried_on([StepRecords(0, None, None, None, list(made))]))
    assert rows == [overlap_row(whole)]


def test_a_capture_too_large_to_hold_has_no_critical_path_and_says_so(captures, monkeypatch):
    """``critical`` needs the whole step: past ``MOST_HELD`` records its path is unknown, and why
    (the row of ``-`` it shows), rather than memory filled."""
    root = captures["nsys"]
    [held] = critical_report(root)
    assert held.path and held.unknown is None
    monkeypatch.setattr(profile, "MOST_HELD", 1_000)
    [found] = critical_report(root)
    assert found.path == [] and "no step bounds" in found.unknown and "--step-marker" in found.unknown
    assert held.start_ns <= found.start_ns < found.start_ns + found.step_ns <= held.start_ns + held.step_ns


@pytest.mark.parametrize("name", ["t.pftrace", "t.json"])
def test_a_capped_capture_keeps_its_leading_parts_not_nothing(captures, tmp_path, name):
    """The size cap keeps a capture no step bounds part by part in time order, as it keeps steps:
    a capture a little over the cap shows its summary whole and the detail of its first parts
    (before, the one pseudo step was kept or dropped whole: an empty detail)."""
    from trace_check import read_chrome_json, read_perfetto

    from converters import convert
    from converters.pipeline import records_to_write
    from converters.writers.chrome_json import Origins

    root, out = captures["nsys"], tmp_path / name
    options = Options(kind="detail")
    detail_of_parts = [{(s.name, s.start_ns, s.dur_ns) for s in records_to_write(b, options)
                        if not s.layer.is_summary} for b in _read(root, SMALL_PARTS, _batches)]
    assert len(detail_of_parts) >= 4

    def converted(kind: str, cap: int | None):
        return _read(root, SMALL_PARTS, lambda r: convert(r, out, kind=kind, max_bytes=cap))

    cap = (converted("detail", None).bytes_written + converted("summary", None).bytes_written) // 2
    result = converted("detail", cap)
    assert out.stat().st_size <= cap and result.cut is not None
    kept = re.search(r"detail for parts 1-(\d+) of (\d+) parts of the time no step bounds, its one rank; "
                     r"summary for all of it; to see the rest use --step-marker NAME \(to mark steps\)",
                     result.cut)
    assert kept and int(kept[2]) == len(detail_of_parts) and 0 < int(kept[1]) < len(detail_of_parts)
    data = out.read_bytes()
    if name.endswith(".json"):
        decoded, shift = read_chrome_json(data), Origins.from_starts(discover(root)).origin
    else:
        decoded, shift = read_perfetto(data), 0
    written = Counter((s.name, s.start_ns + shift, s.dur_ns) for s in decoded.slices
                      if s.track[0] not in ("Step Trace", "Overlap Analysis", "Trace cut"))
    leading, rest = set().union(*detail_of_parts[:int(kept[1])]), set().union(*detail_of_parts[int(kept[1]):])
    assert leading <= set(written) <= leading | rest  # the leading parts whole, nothing invented
    assert not set(written) & (rest - leading)  # and nothing of a later part


def _parts_one_by_one(windows, typed):
    """in_parts' rule: a window's records sorted by start (an arrow's end after the records that
    start with it), then each record one by one, a part cut when full and a record comes next."""
    whole = parts.Parts(0)
    for window in windows:
        for r in sorted(window, key=lambda r: (r.start_ns, type(r) is FlowEnd)):
            if type(r) is FlowEnd:
                whole.ends.append(r)
                continue
            yield from whole.before(r.start_ns)
            if type(r) is Sample:
                whole.samples.append(r)
            else:
                whole.slices.append(typed(r) if typed is not None and r.layer is Layer.COMM_OP else r)
    yield whole.last()


_RECORD = st.tuples(st.sampled_from(["slice", "op", "sample", "end"]), st.integers(0, 30)).map(
    lambda k: Slice(0, Layer.COMM_OP if k[0] == "op" else Layer.STREAM, "s", f"{k[0]}{k[1]}", k[1], 1)
    if k[0] in ("slice", "op") else Sample(0, "c", k[1], 1.0) if k[0] == "sample"
    else FlowEnd(0, Layer.STREAM, "s", k[1], f"f:{k[1]}", False))


@given(st.lists(st.lists(_RECORD, max_size=30), max_size=6), st.integers(1, 7), st.booleans())
def test_a_capture_s_parts_are_those_of_its_records_taken_one_by_one(windows, records, typing):
    """Records taken a window at a time (``in_parts``, no Python step per record) are cut into the
    parts, with the arrow ends and typed ops in them, that taking them one at a time gives."""
    typed = (lambda s: s._replace(task_type="typed")) if typing else None
    held = parts.PART_RECORDS
    parts.PART_RECORDS = records
    try:
        expected = list(_parts_one_by_one([list(w) for w in windows], typed))
        found = list(parts.in_parts(parts.Parts(0), [list(w) for w in windows], typed))
    finally:
        parts.PART_RECORDS = held
    assert found == expected
