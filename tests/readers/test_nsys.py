"""The Nsight Systems reader on the real export (``nsys-cloverleaf``: Nsight Systems 2024.5, schema
3.13.2, one A100), every expected figure counted from the file itself with SQL here."""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from conftest import real_data
from test_trace_processor import imported

from converters import (
    Diagnostics,
    InputError,
    Layer,
    Options,
    convert,
    discover,
    overlap_report,
    read_profile,
)
from converters.analyses.ops import ops_report
from converters.cli import main
from converters.model import GPU_KERNEL

EXPORT = "perlmutter-cloverleaf-cuda.sqlite"


@pytest.fixture(scope="module")
def sample() -> Path:
    return real_data("nsys-cloverleaf")


def _sql(folder: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{folder / EXPORT}?mode=ro", uri=True) as db:
        return db.execute(query).fetchall()


def _names(folder: Path, table: str, column: str) -> Counter:
    """(name, duration sum) per name of a table's rows, its names resolved through StringIds."""
    rows = _sql(folder, f"SELECT s.value, count(*), sum(t.end - t.start) FROM {table} t "
                f"JOIN StringIds s ON s.id = t.{column} GROUP BY s.value")
    return {name: (n, total) for name, n, total in rows}


def _slices(folder: Path, kind: str = "detail") -> list:
    return [s for b in read_profile(discover(folder), Options(kind=kind), Diagnostics()) for s in b.slices]


def test_every_kernel_copy_and_runtime_call_lands_once_in_the_detail_trace(sample):
    slices = _slices(sample)
    kernels = Counter((s.name, s.dur_ns) for s in slices if s.task_type == GPU_KERNEL)
    expected = Counter(_sql(sample, "SELECT s.value, t.end - t.start FROM CUPTI_ACTIVITY_KIND_KERNEL t "
                            "JOIN StringIds s ON s.id = t.demangledName"))
    assert kernels == expected and sum(expected.values()) == 1312
    copies = Counter(s.task_type for s in slices if s.layer is Layer.STREAM)
    (memcpy,), = _sql(sample, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    assert copies["MEMCPY"] == memcpy == 279
    runtime = Counter(s.name for s in slices if s.lane.startswith("CUDA API"))
    calls = _names(sample, "CUPTI_ACTIVITY_KIND_RUNTIME", "nameId")
    assert runtime == {name: n for name, (n, _) in calls.items()}
    assert sum(runtime.values()) == 3048
    # a launch's arrow to each kernel and copy of its correlationId
    (linked,), = _sql(sample, "SELECT count(*) FROM (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                      "UNION ALL SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY) d "
                      "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)")
    assert sum(len(s.flows_in) for s in slices) == linked == 1312 + 279


def test_times_are_epoch_ns_from_the_session_start(sample):
    (start,), = _sql(sample, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    (first, last), = _sql(sample, "SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    host = [s for s in _slices(sample) if s.lane.startswith("CUDA API")]
    assert min(s.start_ns for s in host) == start + first
    assert max(s.end_ns for s in host) == start + last


def test_ops_by_name_equals_the_kernel_table(sample):
    rows = ops_report(sample, by="name")
    assert {r.name: (r.count, r.total_ns) for r in rows} == _names(sample, "CUPTI_ACTIVITY_KIND_KERNEL",
                                                                    "demangledName")


def test_overlap_computing_is_the_kernels_union(sample):
    # one stream: the kernels never overlap, so their union is their sum
    (busy,), = _sql(sample, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    (row,) = overlap_report(sample)
    assert row.computing_ns == busy


def test_step_marker_without_nvtx_is_said_and_the_capture_is_one_step(sample):
    diag = Diagnostics()
    records = list(read_profile(discover(sample), Options(kind="summary", step_marker="step"), diag))
    assert len(records) == 1 and records[0].step is None
    assert any("no NVTX range" in m for m in diag.examples.values())


@pytest.mark.parametrize("kind", ["summary", "detail"])
def test_the_trace_loads_clean_in_the_trace_processor(sample, kind, tmp_path):
    out = tmp_path / "out.pftrace"
    convert(sample, out, kind=kind)
    problems, (slices, _, flows) = imported(out, tmp_path)
    assert problems == []
    if kind == "detail":
        assert flows == 1312 + 279 and slices > 7782


def test_info(sample, capsys):
    assert main(["info", str(sample)]) == 0
    shown = capsys.readouterr().out
    assert "nsys" in shown and "A100" in shown and "nid008553" in shown


@pytest.mark.parametrize("keep", [0.5, 0.05])
def test_a_truncated_export_is_an_error_naming_the_file(sample, tmp_path, keep, capsys):
    data = (sample / EXPORT).read_bytes()
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / EXPORT).write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(InputError, match=EXPORT):
        list(read_profile(discover(cut), Options(kind="detail"), Diagnostics()))
    assert main([str(cut), "-o", str(tmp_path / "out.pftrace"), "-q"]) != 0
    err = capsys.readouterr().err
    assert EXPORT in err and "Traceback" not in err


def test_the_export_read_alone(sample, tmp_path):
    alone = Path(shutil.copy(sample / EXPORT, tmp_path))
    assert sum(s.task_type == GPU_KERNEL for s in _slices(alone, "summary")) == 1312


# -- generated exports (fixtures.nsys_gen): what the real sample lacks (NVTX, memset, NCCL, ranks) --


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("nsys")
    from fixtures.nsys_gen import write_nsys_export
    return root, [write_nsys_export(root / f"rank{r}.sqlite", rank=r, seed=r) for r in (1, 0)]


def test_ranks_come_from_the_launchers_environment(job):
    root, manifests = job
    assert sorted((i.rank, i.path.name) for i in discover(root)) == [(0, "rank0.sqlite"), (1, "rank1.sqlite")]


def test_nvtx_step_marker_files_every_record_to_its_step(job):
    from converters.model import ALLREDUCE, comm_kind
    from fixtures.nsys_gen import NCCL, STEP_MARKER

    root, manifests = job
    diag = Diagnostics()
    steps = list(read_profile(discover(root), Options(kind="detail", step_marker=STEP_MARKER), diag))
    for m in manifests:
        mine = [s for s in steps if s.rank == m["rank"]]
        assert [(s.step.start_ns, s.step.end_ns) for s in mine] == [tuple(b) for b in m["steps"]]
        slices = [x for s in mine for x in s.slices if x.layer not in (Layer.STEP, Layer.OVERLAP)]
        counts = m["counts"]
        drawn = sum(counts[k] for k in ("KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "SYNCHRONIZATION", "OSRT",
                                        "NVTX ranges"))
        assert len(slices) == drawn - m["before_first_step"]["detail"]
        assert Counter(x.task_type for x in slices)["MEMSET"] == counts["MEMSET"]
        comm = [x for x in slices if x.layer is Layer.COMM_OP]
        assert [x.name for x in comm] == [NCCL] * len(m["steps"])
        assert {comm_kind(x) for x in comm} == {ALLREDUCE}
        assert {x.name for x in slices if x.lane.startswith("NVTX")} == {STEP_MARKER, "forward"}
        # every device record but the warm-up kernel's has its launch's arrow
        launched = counts["KERNEL"] - 1 + counts["MEMCPY"] + counts["MEMSET"]
        assert sum(len(x.flows_in) for x in slices) == launched
    assert "before_first_step" in diag.counts


def test_generated_job_loads_clean_in_the_trace_processor(job, tmp_path):
    from fixtures.nsys_gen import STEP_MARKER

    root, manifests = job
    out = tmp_path / "job.pftrace"
    convert(root, out, kind="detail", step_marker=STEP_MARKER)
    problems, (_, _, flows) = imported(out, tmp_path)
    assert problems == [] and flows == sum(m["counts"]["KERNEL"] - 1 + 2 * len(m["steps"]) for m in manifests)


def test_host_lanes_are_named_by_the_threads_names(sample):
    (name, tid), = _sql(sample, "SELECT DISTINCT s.value, r.globalTid & 16777215 "
                        "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN ThreadNames t USING (globalTid) "
                        "JOIN StringIds s ON s.id = t.nameId")
    lanes = {s.lane for s in _slices(sample) if s.lane.startswith("CUDA API")}
    assert lanes == {f"CUDA API ({name}, thread {tid})"}


def test_rows_without_times_are_counted_and_skipped(job, tmp_path):
    root, manifests = job
    broken = tmp_path / "broken.sqlite"
    shutil.copy(root / "rank0.sqlite", broken)
    with sqlite3.connect(broken) as db:  # an end before its start, a start past 2**62 ns
        columns = "(start, end, deviceId, streamId)"
        db.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL {columns} VALUES (9, 5, 0, 7)")
        far = 1 << 62
        db.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY {columns} VALUES (?, ?, 0, 7)", (far, far + 5))
    diag = Diagnostics()
    slices = [s for b in read_profile(discover(broken), Options(kind="summary"), diag) for s in b.slices]
    assert diag.counts["bad_row"] == 1 and "2 rows" in diag.examples["bad_row"]
    assert sum(s.layer in (Layer.STREAM, Layer.COMM_OP) for s in slices) == sum(
        manifests[1]["counts"][k] for k in ("KERNEL", "MEMCPY", "MEMSET"))


def test_copies_are_named_by_their_kind_with_or_without_the_enum_table(job, tmp_path):
    root, _ = job
    bare = tmp_path / "bare.sqlite"
    shutil.copy(root / "rank0.sqlite", bare)
    with sqlite3.connect(bare) as db:  # an older export: no ENUM_CUDA_MEMCPY_OPER
        db.execute("DROP TABLE ENUM_CUDA_MEMCPY_OPER")
    for folder in (root / "rank0.sqlite", bare):
        names = {s.name for s in _slices(folder, "summary") if s.task_type == "MEMCPY"}
        assert names == {"Memcpy Host-to-Device"}, folder


def test_memcpys_by_kind_and_bytes_equal_the_table(sample):
    expected = {f"Memcpy {label}": (n, size) for label, n, size in _sql(
        sample, "SELECT e.label, count(*), sum(t.bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY t "
        "JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = t.copyKind GROUP BY e.label")}
    found: dict[str, list[int]] = {}
    for s in _slices(sample, "summary"):
        if s.task_type == "MEMCPY":
            mine = found.setdefault(s.name, [0, 0])
            mine[0], mine[1] = mine[0] + 1, mine[1] + s.args["bytes"]
    assert {k: tuple(v) for k, v in found.items()} == expected
    assert expected["Memcpy Host-to-Device"] == (254, 225_065_752)  # SOURCE.md's figures
