"""``trace2perfetto memory``: peaks per rank and component against the profilers' own records and
against independent computations; the text and database forms of one job family; the allocation
table; the sum PTA+GE made from the allocations.

What is "computed from raw records" here: ``memory_record.csv`` / ``MEMORY_RECORD`` are the
allocators' own totals after each of their events (one row each, no aggregate), so their maxima
are the peaks, and no profiler file states a peak. The checks that matter are therefore those where
the file the peak would be read from is gone: with ``memory_record.csv`` removed (``MEMORY_RECORD``
dropped), the peaks are made from ``operator_memory.csv`` (``OP_MEMORY``): each allocation's totals
at its allocation and release, PTA+GE summed in time order, and must equal the maxima of the removed
file; and where the reader reads the records file itself, the test computes the maxima on its own
(csv, sqlite3).
"""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.analyses.memory import allocations_report, memory_report, record
from converters.cli import main
from converters.model import Layer, RankInfo, Sample, memory_counter_of
from converters.readers import op_memory
from fixtures.ascend_pt_gen import write_ascend_pt_profile, write_memory
from tests.conftest import real_data

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "memory.schema.json").read_text())
_OUT = "ASCEND_PROFILER_OUTPUT"
_MB = float(1 << 20)
_KINDS = ("Allocated", "Reserved", "Active")


def _peaks(path: Path) -> dict[tuple[int, str], dict[str, float]]:
    """(rank, component) -> kind -> peak MB, as the analysis gives them."""
    return {(r.rank, r.component): {k: v / _MB for k, v in r.peaks.items()} for r in memory_report(path)}


def _record_maxima(path: Path) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """memory_record.csv's maxima per component and kind (MB), and the first time of the Allocated
    (else Reserved) maximum: read here with the csv module alone."""
    maxima: dict[str, dict[str, float]] = defaultdict(dict)
    first: dict[tuple[str, str], tuple[float, str]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            for kind in _KINDS:
                text = row[f"Total {kind}(MB)"]
                if text:
                    value = float(text)
                    mine = maxima[row["Component"]]
                    if value > mine.get(kind, -1.0):
                        mine[kind] = value
                        first[row["Component"], kind] = (value, row["Timestamp(us)"].strip())
    times = {c: first[c, "Allocated"][1] if (c, "Allocated") in first else first[c, "Reserved"][1]
             for c in maxima}
    return dict(maxima), times


def _assert_close(got: dict[str, float], expected: dict[str, float], what: str) -> None:
    assert set(got) == set(expected), what
    for kind, value in expected.items():
        assert got[kind] == pytest.approx(value, abs=0.01), f"{what} {kind}"


# -- the text form -----------------------------------------------------------------------------------

def test_text_peaks_and_times_equal_the_maxima_of_memory_record_csv(tmp_path):
    sample = shutil.copytree(real_data("ascend-pt-2rank"), tmp_path / "job")
    rows = {(r.rank, r.component): r for r in memory_report(sample)}
    for rank in (0, 1):
        maxima, times = _record_maxima(sample / f"rank{rank}_ascend_pt" / _OUT / "memory_record.csv")
        assert {c for (r, c) in rows if r == rank} == set(maxima) == {"APP", "GE", "PTA", "PTA+GE"}
        for component, expected in maxima.items():
            row = rows[rank, component]
            _assert_close({k: v / _MB for k, v in row.peaks.items()}, expected, f"rank {rank} {component}")
            assert record(row)["Peak Time(us)"] == times[component]
            assert row.device == rank


def test_without_memory_record_csv_the_peaks_come_from_operator_memory_csv_and_equal_its_maxima(tmp_path):
    sample = shutil.copytree(real_data("ascend-pt-2rank"), tmp_path / "job")
    expected = {}
    for rank in (0, 1):
        path = sample / f"rank{rank}_ascend_pt" / _OUT / "memory_record.csv"
        expected[rank] = _record_maxima(path)[0]
        path.unlink()  # made again from the allocations, never read from the records
    got = _peaks(sample)
    for rank, maxima in expected.items():
        for component in ("PTA", "GE", "PTA+GE"):  # APP is only in memory_record.csv (and the trace's
            _assert_close(got[rank, component], maxima[component], f"rank {rank} {component}")  # counter)
        assert (rank, "APP") not in got


def test_allocations_are_the_rows_of_operator_memory_csv(tmp_path, capsys):
    sample = real_data("ascend-pt-2rank")
    rows = list(allocations_report(sample, ranks=[0]))
    with open(sample / "rank0_ascend_pt" / _OUT / "operator_memory.csv", newline="") as f:
        expected = list(csv.DictReader(f))
    assert len(rows) == len(expected) == 184
    assert sorted(round(r.size / 1024, 3) for r in rows) == sorted(float(e["Size(KB)"]) for e in expected)
    unreleased = sum(1 for e in expected if not e["Release Time(us)"].strip())
    assert sum(1 for r in rows if r.released_ns is None) == unreleased
    by_component = defaultdict(int)
    for r in rows:
        by_component[r.component] += 1
    assert by_component == {"PTA": 127, "GE": 57}
    assert all(r.name.startswith("cann::") for r in rows if r.component == "GE")


# -- the database form ------------------------------------------------------------------------------

def _db(sample: Path, rank: int) -> Path:
    return sample / f"rank{rank}_ascend_pt" / _OUT / f"ascend_pytorch_profiler_{rank}.db"


def _sql_maxima(db: Path) -> dict[str, dict[str, float]]:
    """MEMORY_RECORD's maxima per component (MB), NPU_MEM's app HBM as APP Reserved: sqlite3 alone."""
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)  # never write the sample's -shm
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for name, allocated, reserved, active in con.execute(
            "SELECT s.value, max(totalAllocated), max(totalReserved), max(totalActive) FROM MEMORY_RECORD m "
            "JOIN STRING_IDS s ON s.id = m.component GROUP BY s.value"):
        out[name] = {"Allocated": allocated / _MB, "Reserved": reserved / _MB}
        if name != "GE":  # the table writes 0 where GE records no Active
            out[name]["Active"] = active / _MB
    (app,) = con.execute("SELECT max(hbm) FROM NPU_MEM n JOIN STRING_IDS s ON s.id = n.type "
                         "WHERE s.value = 'app'").fetchone()
    out["APP"] = {"Reserved": app / _MB}
    con.close()
    return dict(out)


def test_database_peaks_equal_memory_record_and_npu_mem_maxima(tmp_path):
    sample = real_data("ascend-pt-db")
    got = _peaks(sample)
    for rank in (0, 1):
        for component, expected in _sql_maxima(_db(sample, rank)).items():
            _assert_close(got[rank, component], expected, f"rank {rank} {component}")


def test_without_memory_record_the_database_peaks_come_from_op_memory(tmp_path):
    sample = shutil.copytree(real_data("ascend-pt-db"), tmp_path / "job")
    expected = {}
    for rank in (0, 1):
        expected[rank] = _sql_maxima(_db(sample, rank))
        con = sqlite3.connect(_db(sample, rank))
        con.execute("DROP TABLE MEMORY_RECORD")
        con.commit()
        con.close()
    got = _peaks(sample)
    for rank, maxima in expected.items():
        for component in ("PTA", "GE", "PTA+GE"):
            _assert_close(got[rank, component], maxima[component], f"rank {rank} {component}")


def test_database_and_text_forms_have_the_same_shape():
    """ascend-pt-db and ascend-pt-2rank are two runs of one job family, not one run: their values
    differ (PTA+GE's peak, times); what must agree is the shape: the components, which kinds each
    records, how many allocations each holds."""
    def shape(path: Path) -> dict:
        return {(r.rank, r.component): (sorted(r.peaks), r.allocations, r.device is not None)
                for r in memory_report(path)}
    assert shape(real_data("ascend-pt-db")) == shape(real_data("ascend-pt-2rank"))


def test_cann_database_peaks_come_from_npu_op_mem():
    db = real_data("msprof-db") / "msprof_0.db"
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)  # never write the sample's -shm
    expected = {name: {"Allocated": a / _MB, "Reserved": r / _MB} for name, a, r in con.execute(
        "SELECT s.value, max(totalAllocate), max(totalReserve) FROM NPU_OP_MEM n "
        "JOIN STRING_IDS s ON s.id = n.component GROUP BY s.value")}
    (pairs,) = con.execute("SELECT count(*) FROM NPU_OP_MEM n JOIN ENUM_MEMORY e ON e.id = n.type "
                           "WHERE e.name = 'allocate'").fetchone()
    con.close()
    rows = memory_report(db)
    assert {r.component for r in rows} == set(expected)
    for r in rows:
        _assert_close({k: v / _MB for k, v in r.peaks.items()}, expected[r.component], r.component)
    assert sum(r.allocations for r in rows) == pairs


# -- generated ----------------------------------------------------------------------------------------

def test_generated_memory_peaks_equal_the_generators_truth_with_and_without_memory_record(tmp_path):
    made = write_ascend_pt_profile(tmp_path / "job", ranks=1, steps=2, seed=1)
    output = made.ranks[0].path / _OUT
    truth = write_memory(output, start_ns=1_736_408_883_573_957_920, allocations=300, seed=2)
    for removed in (False, True):
        if removed:
            (output / "memory_record.csv").unlink()
        rows = {r.component: r for r in memory_report(tmp_path / "job")}
        assert set(rows) == set(truth.peaks)
        for component, expected in truth.peaks.items():
            _assert_close({k: v / _MB for k, v in rows[component].peaks.items()}, expected, component)
        assert {c: rows[c].allocations for c in truth.allocations} == truth.allocations


# -- the sum PTA+GE, as an algebra ------------------------------------------------------------------

_ALLOCATION = st.tuples(st.sampled_from(("PTA", "GE")), st.integers(1, 1000), st.integers(0, 10_000),
                        st.integers(1, 10_000) | st.none())


@settings(max_examples=60, deadline=None)
@given(st.lists(_ALLOCATION, min_size=1, max_size=30))
def test_pta_ge_is_the_latest_pta_plus_the_latest_ge_at_every_moment(rows):
    allocations = []
    for i, (component, size, start, life) in enumerate(rows):
        total = float(i * 1000 + size)  # any values: the sum is what is checked
        allocations.append(op_memory.Allocation(f"op{i}", float(size), component, start,
                                                None if life is None else start + life,
                                                (total, total * 2, None), (total / 2, total, None)))
    info = RankInfo(0, "ascend_pt", Path("."))
    samples = [r for r in op_memory.records(info, allocations, counters=True) if type(r) is Sample]
    assert [s.start_ns for s in samples] == sorted(s.start_ns for s in samples)
    latest: dict[tuple[str, str], float] = {}
    for s in samples:
        component, kind = memory_counter_of(s.lane)
        if component == "PTA+GE":
            assert s.value == latest.get(("PTA", kind), 0.0) + latest.get(("GE", kind), 0.0)
        else:
            latest[component, kind] = s.value
    slices = [r for r in op_memory.records(info, allocations, counters=False)]
    assert len(slices) == len(allocations) and all(s.layer is Layer.MEMORY for s in slices)


# -- the command --------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [[], ["--allocations"]])
def test_command_json_is_valid_against_its_schema_and_csv_starts_with_the_columns(extra, capsys):
    sample = str(real_data("ascend-pt-2rank"))
    assert main(["memory", sample, "--format", "json", "-q", *extra]) == 0
    rows = orjson.loads(capsys.readouterr().out)
    jsonschema.validate(rows, SCHEMA)
    assert rows
    assert main(["memory", sample, "--format", "csv", "-q", *extra]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    if not extra:
        assert header.startswith("Rank,Component,Device,Peak Allocated(MB),Peak Reserved(MB),"
                                 "Peak Active(MB),Peak Time(us)")
    assert main(["memory", sample, "-q", *extra]) == 0  # the table


def test_command_refuses_steps_and_says_why(capsys):
    assert main(["memory", str(real_data("ascend-pt-2rank")), "--steps", "1"]) == 2
    assert "not filed by step" in capsys.readouterr().err


def test_a_profile_without_memory_has_no_rows_and_a_warning(capsys):
    assert main(["memory", str(real_data("kineto-2rank")), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert orjson.loads(captured.out) == []
    assert "records no device memory" in captured.err


def test_a_broken_memory_file_is_a_warning_in_a_detail_conversion_and_an_error_in_memory(tmp_path, capsys):
    root = shutil.copytree(real_data("ascend-pt-2rank"), tmp_path / "job")
    (root / "rank0_ascend_pt" / _OUT / "memory_record.csv").write_text("Nothing,Here\n1,2\n")
    assert main([str(root), "--kind", "detail", "-o", str(tmp_path / "out.pftrace")]) == 0
    assert "memory is drawn only up to there" in capsys.readouterr().err
    assert main(["memory", str(root)]) == 1
    assert "memory_record.csv" in capsys.readouterr().err
