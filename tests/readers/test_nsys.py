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
_KERNELS_GEN = ("void gemm_kernel<float, 128>(const float *, float *, int)", "void relu_kernel(float *, int)")


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
        numbered = [s for s in mine if s.step is not None]
        assert [(s.step.start_ns, s.step.end_ns) for s in numbered] == [tuple(b) for b in m["steps"]]
        # the warm-up kernel, launched before the first step, apart (a step without a number)
        apart = [x for s in mine if s.step is None for x in s.slices]
        assert [x.name for x in apart] == [_KERNELS_GEN[1]] * m["outside"]
        slices = [x for s in mine for x in s.slices if x.layer not in (Layer.STEP, Layer.OVERLAP)]
        counts = m["counts"]
        drawn = sum(counts[k] for k in ("KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "SYNCHRONIZATION", "OSRT",
                                        "NVTX"))  # every NVTX event: its ranges and its marks
        assert len(slices) == drawn - m["before_first_step"]["detail"]
        assert Counter(x.task_type for x in slices)["MEMSET"] == counts["MEMSET"]
        comm = [x for x in slices if x.layer is Layer.COMM_OP]
        assert [x.name for x in comm] == [NCCL] * len(m["steps"])
        assert {comm_kind(x) for x in comm} == {ALLREDUCE}
        assert {x.name for x in slices if x.lane.startswith("NVTX")} == {STEP_MARKER, "forward", "mark"}
        assert {x.dur_ns for x in slices if x.name == "mark"} == {0}  # a mark: an instant
        # every device record but the warm-up kernel's has its launch's arrow
        launched = counts["KERNEL"] - 1 + counts["MEMCPY"] + counts["MEMSET"]
        assert sum(len(x.flows_in) for x in slices) == launched
    assert "before_first_step" in diag.counts
    assert {f"launched_outside {m['rank']}" for m in manifests} <= set(diag.notes)


def test_device_work_is_in_the_step_that_launched_it(tmp_path):
    """A GPU runs behind its host: the kernel step 1 launches near its end runs in step 2's window,
    and is step 1's (as Kineto's; docs/analysis.md §1), its time in step 1's overlap figures."""
    from fixtures.nsys_gen import LATE, SESSION_START_NS, STEP_MARKER, write_nsys_export

    m = write_nsys_export(tmp_path / "rank0.sqlite", steps=3, kernels=4, seed=2, behind=True)
    (launched, runs), (first, second) = m["late"], m["steps"][:2]
    assert first[0] <= launched < first[1] and second[0] < runs < second[1]  # the export's own case
    options = Options(kind="detail", step_marker=STEP_MARKER)
    steps = [s for s in read_profile(discover(tmp_path), options, Diagnostics()) if s.step is not None]
    assert [s.step_id for s in steps for x in s.slices if x.name == LATE] == [1]
    # the step's time holds the work it launched; the next starts where the device is done with it
    (late_end,), = _sql_at(tmp_path / "rank0.sqlite", "SELECT k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN "
                           f"StringIds s ON s.id = k.demangledName WHERE s.value = '{LATE}'")
    late_end += SESSION_START_NS
    assert (steps[0].step.end_ns, steps[1].step.start_ns) == (late_end, late_end)
    # Computing: the union of the compute kernels each step's range launched, from the export
    kernels = _sql_at(tmp_path / "rank0.sqlite", f"""
        SELECT n.start, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)
        JOIN NVTX_EVENTS n ON n.text = '{STEP_MARKER}' AND r.start >= n.start AND r.start < n.end
        JOIN StringIds s ON s.id = k.shortName WHERE s.value NOT LIKE 'nccl%'""")
    starts = sorted({n for n, _, _ in kernels})
    expected = {starts.index(n) + 1: [] for n in starts}
    for n, a, b in kernels:
        expected[starts.index(n) + 1].append((a, b))
    # the warm-up kernel, launched before the first step, is in none
    rows = {r.step: r.computing_ns for r in overlap_report(tmp_path, step_marker=STEP_MARKER) if r.step}
    assert rows == {step: _union_ns(spans) for step, spans in expected.items()}


def _union_ns(spans: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for a, b in sorted(spans):
        if reach is None or a > reach:
            total, reach = total + b - a, b
        elif b > reach:
            total, reach = total + b - reach, b
    return total


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


# -- one export of several processes: the real 2026.2 two-H100 export (GindaChen/nsys-ai's
# tests/fixtures/h100_2gpu_1s.sqlite, MIT; kept in fixtures/public) --

MULTI = "h100_2gpu_1s.sqlite"
_DEVICE_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


PUBLIC = Path(__file__).resolve().parents[2] / "fixtures" / "public"  # SOURCE.md there


def _public(name: str, file: str) -> Path:
    """The folder of a public export the shared samples lack, kept in the repository
    (fixtures/public: GindaChen/nsys-ai's tests/fixtures, MIT)."""
    folder = PUBLIC / name
    assert (folder / file).is_file(), f"{folder / file}: the public sample is missing from the checkout"
    return folder


@pytest.fixture(scope="module")
def two_processes() -> Path:
    return _public("nsys-h100-2proc", MULTI)


def _sql_at(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(query).fetchall()


def _by_rank(folder: Path, kind: str = "detail", diag: Diagnostics | None = None) -> dict[int, list]:
    found: dict[int, list] = {}
    for batch in read_profile(discover(folder), Options(kind=kind), Diagnostics() if diag is None else diag):
        found.setdefault(batch.rank, []).extend(batch.slices)
    return found


def test_a_multi_process_export_is_one_rank_per_process(two_processes):
    db = two_processes / MULTI
    pids = [p for p, in _sql_at(db, "SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1")]
    infos = discover(two_processes)
    assert [(i.rank, i.process) for i in infos] == list(enumerate(pids)) and len(pids) == 2
    ranks = _by_rank(two_processes)
    for info in infos:
        mine = ranks[info.rank]
        pid = info.process
        devices = {d for d, in _sql_at(db, f"SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                                           f"WHERE globalPid = {pid}")}
        assert {s.lane.split(" Stream")[0].split(" Synchronization")[0] for s in mine
                if s.layer is Layer.STREAM} == {f"GPU {d}" for d in devices}, info.rank
        threads = {t for t, in _sql_at(db, "SELECT DISTINCT globalTid & 16777215 FROM "
                                           "CUPTI_ACTIVITY_KIND_RUNTIME "
                                           f"WHERE globalTid >> 24 = {pid >> 24}")}
        host = {int(s.lane.rsplit("thread ", 1)[1].rstrip(")")) for s in mine if s.layer is Layer.HOST}
        assert host == threads
        for table, task in zip(_DEVICE_TABLES, (GPU_KERNEL, "MEMCPY", "MEMSET"), strict=True):
            (n,), = _sql_at(db, f"SELECT count(*) FROM {table} WHERE globalPid = {pid}")
            assert sum(s.task_type == task for s in mine) == n > 0, (info.rank, table)
        # the arrows: a launch of this process to device work of this process, by correlationId
        (linked,), = _sql_at(db, " + ".join(
            f"(SELECT count(*) FROM {t} d JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) "
            f"WHERE d.globalPid = {pid} AND r.globalTid >> 24 = {pid >> 24})" for t in _DEVICE_TABLES).join(
            ("SELECT ", "")))
        assert sum(len(s.flows_in) for s in mine) == sum(len(s.flows_out) for s in mine) == linked
    # the two processes number their correlation ids alike: some ids meet across them
    (across,), = _sql_at(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                         "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) "
                         "WHERE k.globalPid >> 24 != r.globalTid >> 24")
    assert across == 11


def test_every_record_of_the_multi_process_export_lands_once(two_processes):
    db = two_processes / MULTI
    slices = [s for mine in _by_rank(two_processes).values() for s in mine]
    for table, task in zip(_DEVICE_TABLES, (GPU_KERNEL, "MEMCPY", "MEMSET"), strict=True):
        (n,), = _sql_at(db, f"SELECT count(*) FROM {table}")
        assert sum(s.task_type == task for s in slices) == n, table
    (calls,), = _sql_at(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    (syncs,), = _sql_at(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    # NVTX ranges by the event types ENUM_NSYS_EVENT_TYPE names so
    (ranges,), = _sql_at(db, "SELECT count(*) FROM NVTX_EVENTS WHERE end IS NOT NULL AND eventType IN "
                         "(SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name IN ('NvtxPushPopRange', "
                         "'NvtxStartEndRange'))")
    lanes = Counter(s.lane.split(" (")[0] for s in slices if s.layer is Layer.HOST)
    assert lanes == {"CUDA API": calls, "NVTX": ranges} and ranges == 16782
    assert sum(s.name == "Synchronization" for s in slices) == syncs
    nvtx = Counter(s.name for s in slices if s.lane.startswith("NVTX"))
    assert nvtx == dict(_sql_at(db, "SELECT text, count(*) FROM NVTX_EVENTS GROUP BY text"))


def test_synchronizations_are_on_their_contexts_device(two_processes):
    # 2026.2 writes device 0 on every synchronization; process 112's context 2 runs on device 1
    db = two_processes / MULTI
    contexts = dict(_sql_at(db, "SELECT DISTINCT contextId, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    assert sorted(contexts.items()) == [(1, 0), (2, 1)]
    assert _sql_at(db, "SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION") == [(0,)]
    for mine in _by_rank(two_processes).values():
        syncs = {(s.lane, s.args["contextId"]) for s in mine if s.name == "Synchronization"}
        assert syncs and all(lane == f"GPU {contexts[c]} Synchronization" for lane, c in syncs)


def test_the_multi_process_export_loads_clean_in_the_trace_processor(two_processes, tmp_path):
    out = tmp_path / "out.pftrace"
    convert(two_processes, out, kind="detail")
    problems, (_, _, flows) = imported(out, tmp_path)
    assert problems == [] and flows == 2 * 1046  # SQL: 1,632 kernels, 438 memcpys, 22 memsets linked


def test_an_export_without_a_gpu_table_says_so(two_processes):
    diag = Diagnostics()
    assert {i.device_name for i in discover(two_processes)} == {None}
    list(read_profile(discover(two_processes), Options(kind="summary"), diag))
    assert "TARGET_INFO_GPU" in diag.notes["nsys_absent"] and not diag.counts


# the marker's ranges of a process, numbered in time order (none nests in another: checked), and
# each kernel's step: its launch's (the runtime call of its process with its correlationId), the
# step whose range holds it, none where no range does; a kernel without a launch, the last step
# begun at or before its start (before the first: in none, not drawn)
_STEPS_OF_KERNELS = """
WITH ranges AS (
  SELECT n.globalTid >> 24 AS p, n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
  WHERE n.end IS NOT NULL AND COALESCE(n.text, s.value) LIKE :marker || '%' AND n.eventType IN
    (SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name IN ('NvtxPushPopRange', 'NvtxStartEndRange'))),
steps AS MATERIALIZED (SELECT p, start, end, row_number() OVER (PARTITION BY p ORDER BY start) AS step
  FROM ranges),
launches AS MATERIALIZED (SELECT globalTid >> 24 AS p, correlationId, min(start) AS start
  FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1, 2),
kernels AS MATERIALIZED (
  SELECT k.globalPid >> 24 AS p, k.start, l.start AS launch FROM CUPTI_ACTIVITY_KIND_KERNEL k
  LEFT JOIN launches l ON l.p = k.globalPid >> 24 AND l.correlationId = k.correlationId)
SELECT k.p, CASE WHEN k.launch IS NOT NULL THEN
    (SELECT s.step FROM steps s WHERE s.p = k.p AND s.start <= k.launch AND k.launch < s.end)
  ELSE (SELECT max(s.step) FROM steps s WHERE s.p = k.p AND s.start <= k.start) END AS step,
  k.launch IS NULL AS unlaunched, count(*)
FROM kernels k GROUP BY 1, 2, 3"""
_NESTED = ("SELECT count(*) FROM steps a JOIN steps b ON a.p = b.p AND a.step + 1 = b.step "
           "WHERE b.start < a.end")


@pytest.mark.parametrize(("folder", "file", "marker"), [
    ("nsys-h100-2proc", MULTI, "aten::linear"),
    ("nsys-h100-2proc-nccl", "mfu_2gpu_before.sqlite", "aten::copy_")])
def test_real_kernels_are_in_the_step_that_launched_them(folder, file, marker):
    """Per step of every process, the kernels whose launch the step's range holds (and those the
    export has no launch of, by their start), counted with SQL; those launched in no range apart."""
    path = _public(folder, file) / file
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        (nested,), = db.execute(_STEPS_OF_KERNELS.split("\nSELECT k.p")[0] + _NESTED, {"marker": marker})
        pids = [p for p, in db.execute("SELECT DISTINCT globalPid >> 24 FROM CUPTI_ACTIVITY_KIND_KERNEL "
                                       "ORDER BY 1")]
        counted = db.execute(_STEPS_OF_KERNELS, {"marker": marker}).fetchall()
    assert nested == 0  # each range a step (markers.numbered)
    expected: Counter = Counter()
    for p, step, unlaunched, n in counted:
        if step is not None or not unlaunched:  # a kernel without launch before the first step: in none
            expected[pids.index(p), step] += n
    found: Counter = Counter()
    for batch in read_profile(discover(path.parent), Options(kind="summary", step_marker=marker + "*"),
                              Diagnostics()):
        found[batch.rank, batch.step_id] += sum(x.task_type == GPU_KERNEL or x.layer is Layer.COMM_OP
                                                for x in batch.slices)
    assert +found == +expected and expected[0, None] > 0


def test_real_nccl_kernels_are_communication_comm_reads(tmp_path):
    # GindaChen/nsys-ai's tests/fixtures/mfu_2gpu_before.sqlite (2026.2.1, two processes on two
    # H100s, a 0.3 s window): NCCL's SendRecv kernels, 33 a process
    from converters.analyses.comm import comm_report
    from converters.model import SENDRECV, comm_kind

    folder = _public("nsys-h100-2proc-nccl", "mfu_2gpu_before.sqlite")
    (db,) = folder.glob("*.sqlite")
    expected = dict(_sql_at(db, "SELECT t.globalPid, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL t "
                            "JOIN StringIds s ON s.id = t.shortName WHERE s.value LIKE 'nccl%' GROUP BY 1"))
    (kernels,), = _sql_at(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    infos = discover(folder)
    ranks = _by_rank(folder)
    for info in infos:
        comm = [s for s in ranks[info.rank] if s.layer is Layer.COMM_OP]
        assert len(comm) == expected[info.process] == 33
        assert {comm_kind(s) for s in comm} == {SENDRECV} and {s.lane for s in comm} == {"NCCL"}
    drawn = [s for m in ranks.values() for s in m]
    assert sum(s.task_type == GPU_KERNEL or s.layer is Layer.COMM_OP for s in drawn) == kernels
    report = comm_report(folder)
    assert Counter(op.rank for op in report.ops) == {i.rank: expected[i.process] for i in infos}
    out = tmp_path / "out.pftrace"
    convert(folder, out, kind="detail")
    problems, _ = imported(out, tmp_path)
    assert problems == []


# -- generated exports of several processes, in the 2026.2 shape (fixtures.nsys_gen) --


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> tuple[Path, dict]:
    from fixtures.nsys_gen import write_nsys_export
    root = tmp_path_factory.mktemp("nsys_multi")
    return root, write_nsys_export(root / "job.sqlite", processes=2, steps=2, kernels=6, seed=3)


def test_a_generated_multi_process_export_is_one_rank_per_process(multi):
    root, manifest = multi
    diag = Diagnostics()
    infos = discover(root, diag)
    made = manifest["processes"]
    assert [(i.rank, i.process, i.device) for i in infos] == [(n, p["globalPid"], p["device"])
                                                              for n, p in enumerate(made)]
    assert "3 host rows" in diag.examples["other_process"]  # the launcher's
    ranks = _by_rank(root)
    for info, process in zip(infos, made, strict=True):
        mine, counts = ranks[info.rank], process["counts"]
        drawn = sum(counts[k] for k in ("KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "SYNCHRONIZATION", "OSRT",
                                        "NVTX"))  # every NVTX event: its ranges and its marks
        assert len(mine) == drawn
        assert {s.lane.split(" Stream")[0].split(" Synchronization")[0] for s in mine
                if s.layer is Layer.STREAM} == {f"GPU {process['device']}"}
        assert {s.lane for s in mine if s.layer is Layer.HOST} == {
            f"{p} (python, thread {process['pid']})" for p in ("CUDA API", "NVTX", "OS runtime")}
        launched = counts["KERNEL"] + counts["MEMCPY"] + counts["MEMSET"]  # each by its own launch
        assert sum(len(s.flows_in) for s in mine) == launched


def test_each_process_has_its_own_nvtx_steps(multi):
    from fixtures.nsys_gen import STEP_MARKER

    root, manifest = multi
    options = Options(kind="summary", step_marker=STEP_MARKER)
    steps = list(read_profile(discover(root), options, Diagnostics()))
    for rank, process in enumerate(manifest["processes"]):
        mine = [(s.step.start_ns, s.step.end_ns) for s in steps if s.rank == rank and s.step]
        assert mine == [tuple(b) for b in process["steps"]]
    assert manifest["processes"][0]["steps"] != manifest["processes"][1]["steps"]


def test_several_multi_process_exports_and_one_alone(multi, tmp_path):
    from fixtures.nsys_gen import write_nsys_export

    root, _ = multi
    for node in ("node0", "node1"):  # a job of two nodes, an export of two processes each
        write_nsys_export(tmp_path / f"{node}.sqlite", processes=2, steps=1, kernels=2, seed=7)
    found = [(i.rank, i.path.name, i.device) for i in discover(tmp_path)]
    assert found == [(0, "node0.sqlite", 0), (1, "node0.sqlite", 1), (2, "node1.sqlite", 0),
                     (3, "node1.sqlite", 1)]
    alone = discover(root / "job.sqlite")
    assert [(i.rank, i.device) for i in alone] == [(0, 0), (1, 1)]


def test_a_generated_multi_process_export_loads_clean(multi, tmp_path):
    root, manifest = multi
    out = tmp_path / "multi.pftrace"
    convert(root, out, kind="detail")
    problems, (_, _, flows) = imported(out, tmp_path)
    counts = [p["counts"] for p in manifest["processes"]]
    launched = sum(c["KERNEL"] + c["MEMCPY"] + c["MEMSET"] for c in counts)
    matched = len(manifest["steps"])  # and one arrow a step joining the two ranks' all-reduce
    assert problems == [] and flows == launched + matched


def test_nccl_kernels_are_what_comm_reads(multi):
    from converters.analyses.comm import comm_report
    from fixtures.nsys_gen import NCCL

    root, manifest = multi
    report = comm_report(root)
    assert Counter((op.rank, op.name) for op in report.ops) == {
        (rank, NCCL): p["kernels"][NCCL] for rank, p in enumerate(manifest["processes"])}


# -- other schemas: the GPU's model from other tables, tables and columns absent ------------------


def _variant(job: tuple[Path, list[dict]], tmp_path: Path, sql: str) -> Path:
    root, _ = job
    made = tmp_path / "variant"
    made.mkdir()
    shutil.copy(root / "rank0.sqlite", made / "rank0.sqlite")
    with sqlite3.connect(made / "rank0.sqlite") as db:
        db.executescript(sql)
    return made


@pytest.mark.parametrize(("sql", "model"), [
    # 2021 exports: TARGET_INFO_CUDA_GPU, by deviceId
    ("DROP TABLE TARGET_INFO_GPU; CREATE TABLE TARGET_INFO_CUDA_GPU (deviceId INTEGER, name TEXT, "
     "numMultiprocessors INTEGER); INSERT INTO TARGET_INFO_CUDA_GPU VALUES (0, 'NVIDIA A10', 72);",
     "NVIDIA A10"),
    # 2024-2026: TARGET_INFO_CUDA_DEVICE maps the CUDA device to the GPU's id (CUDA_VISIBLE_DEVICES=2)
    ("INSERT INTO TARGET_INFO_GPU VALUES (4096, 2, 'NVIDIA L40S', '0000:41:00.0'); "
     "CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER, uuid TEXT, "
     "numMultiprocessors INTEGER); INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (2, 0, 4242, '', 142);",
     "NVIDIA L40S"),
])
def test_the_gpus_model_comes_from_whichever_table_the_export_has(job, tmp_path, sql, model):
    (info,) = discover(_variant(job, tmp_path, sql))
    assert info.device_name == model


_TABLES = ["CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME",
           "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS", "OSRT_API", "StringIds", "ThreadNames",
           "ENUM_NSYS_EVENT_TYPE", "TARGET_INFO_GPU", "TARGET_INFO_SYSTEM_ENV",
           "TARGET_INFO_SESSION_START_TIME"]


@pytest.mark.parametrize("table", _TABLES)
def test_an_absent_table_leaves_the_rest_read(job, tmp_path, table, capsys):
    root, manifests = job
    variant = _variant(job, tmp_path, f"DROP TABLE {table}")
    counts = manifests[1]["counts"]  # rank 0's
    expected = {"CUPTI_ACTIVITY_KIND_MEMCPY": "MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET": "MEMSET",
                "CUPTI_ACTIVITY_KIND_RUNTIME": "RUNTIME",
                "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "SYNCHRONIZATION",
                "NVTX_EVENTS": "NVTX", "OSRT_API": "OSRT"}
    kept = sum(n for k, n in counts.items() if k not in ("NVTX ranges", expected.get(table)))
    diag = Diagnostics()
    slices = [s for b in read_profile(discover(variant), Options(kind="detail"), diag) for s in b.slices]
    assert len(slices) == kept
    said = " ".join([*diag.notes.values(), *diag.examples.values()])
    if table in expected or table in ("StringIds", "TARGET_INFO_GPU"):
        assert table in said
    assert main([str(variant), "-o", str(tmp_path / "out.pftrace"), "-q"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_absent_columns_read_as_none(job, tmp_path):
    # an older or newer schema: columns the reader reads, gone
    sql = "; ".join(f"ALTER TABLE {t} DROP COLUMN {c}" for t, c in (
        ("CUPTI_ACTIVITY_KIND_KERNEL", "shortName"), ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", "correlationId"), ("CUPTI_ACTIVITY_KIND_MEMSET", "value"),
        ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "syncType"), ("NVTX_EVENTS", "textId")))
    variant = _variant(job, tmp_path, sql)
    slices = _slices(variant)
    _, manifests = job
    counts = manifests[1]["counts"]
    nccl = len(manifests[1]["steps"])  # an NCCL kernel a step: communication
    assert sum(s.task_type == GPU_KERNEL for s in slices) == counts["KERNEL"] - nccl
    assert {s.args["Short name"] for s in slices if s.task_type == GPU_KERNEL} == {None}
    assert sum(s.task_type == "MEMCPY" and not s.flows_in for s in slices) == counts["MEMCPY"]
    # the registered string's range ("forward", by textId) has no text left: named NVTX
    assert Counter(s.name for s in slices if s.lane.startswith("NVTX"))["NVTX"] == 3


def test_nvtx_range_types_come_from_the_enum_table(job, tmp_path):
    from fixtures.nsys_gen import STEP_MARKER

    # a version numbering its event types otherwise: the ranges are still the ranges
    variant = _variant(job, tmp_path,
                       "UPDATE ENUM_NSYS_EVENT_TYPE SET id = 1059 WHERE name = 'NvtxPushPopRange'; "
                       "UPDATE NVTX_EVENTS SET eventType = 1059 WHERE eventType = 59; "
                       "UPDATE ENUM_NSYS_EVENT_TYPE SET id = 59 WHERE name = 'NvtxMark'; "
                       "UPDATE NVTX_EVENTS SET eventType = 59 WHERE eventType = 34;")
    _, manifests = job
    options = Options(kind="summary", step_marker=STEP_MARKER)
    steps = list(read_profile(discover(variant), options, Diagnostics()))
    numbered = [(s.step.start_ns, s.step.end_ns) for s in steps if s.step is not None]
    assert numbered == [tuple(b) for b in manifests[1]["steps"]]


def test_nvtx_marks_are_instants_and_the_events_not_drawn_are_counted(job, tmp_path):
    """A mark (``nvtxMark``) is drawn as a slice of no length, as Kineto's instants; a range still
    open when the capture ended is counted in a warning; what names a thread, a domain or a
    category is counted in a note."""
    _, manifests = job
    insert = "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) SELECT start, NULL, {}, " \
             "globalTid FROM NVTX_EVENTS LIMIT 1;"
    variant = _variant(job, tmp_path, insert.format("59, 'open'") + insert.format("39, 'main thread'")
                       + insert.format("75, 'my domain'"))
    (marks,), = _sql_at(variant / "rank0.sqlite", "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34")
    diag = Diagnostics()
    slices = [s for b in read_profile(discover(variant), Options(kind="detail"), diag) for s in b.slices]
    drawn = [s for s in slices if s.name == "mark"]
    assert len(drawn) == marks > 0 and {s.dur_ns for s in drawn} == {0}
    assert not any(s.name in ("open", "main thread", "my domain") for s in slices)
    assert diag.counts["nvtx_open"] == 1 and "1 NVTX ranges without an end" in diag.examples["nvtx_open"]
    assert "2 NVTX events that are no range or mark" in diag.notes["nvtx_names"]


# -- Nsight Systems 2022.2 (export schema 2.9.1): an older version, kept in the repository -----------

SAXPY = "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


@pytest.fixture(scope="module")
def saxpy() -> Path:
    return _public("nsys-a100-saxpy-2022", SAXPY)


def test_a_2022_export_lands_every_record_once(saxpy):
    """2022.2 names its metadata table ``EXPORT_META_DATA`` and has no ``ENUM_NSYS_EVENT_TYPE``; its
    runtime table holds each call twice, the API and its versioned entry (``cudaMalloc``,
    ``cudaMalloc_v3020``) with one correlation id; its NVTX ranges name MPI's calls by registered
    strings (``textId``)."""
    db = saxpy / SAXPY
    diag = Diagnostics()
    (info,) = discover(saxpy)
    assert info.device_name == "NVIDIA A100-SXM4-40GB" and info.host == "nid001608"
    slices = [s for mine in _by_rank(saxpy, diag=diag).values() for s in mine]
    for table, task in zip(_DEVICE_TABLES, (GPU_KERNEL, "MEMCPY", "MEMSET"), strict=True):
        (n,), = _sql_at(db, f"SELECT count(*) FROM {table}")
        assert sum(s.task_type == task for s in slices) == n, table
    (calls,), = _sql_at(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    (ranges,), = _sql_at(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL")
    lanes = Counter(s.lane.split(" (")[0] for s in slices if s.layer is Layer.HOST)
    assert lanes == {"CUDA API": calls, "NVTX": ranges} and (calls, ranges) == (95, 22)
    nvtx = Counter(s.name for s in slices if s.lane.startswith("NVTX"))
    assert nvtx == dict(_sql_at(db, "SELECT COALESCE(n.text, s.value), count(*) FROM NVTX_EVENTS n LEFT "
                                    "JOIN StringIds s ON s.id = n.textId WHERE eventType = 59 GROUP BY 1"))
    # its thread's name (type 39: "MPI Rank 0", which ThreadNames holds too) and MPI's domain (75)
    assert "2 NVTX events that are no range or mark" in diag.notes["nvtx_names"]
    assert {s.lane for s in slices if s.layer is Layer.HOST} == {"CUDA API (MPI Rank 0, thread 1230493)",
                                                                 "NVTX (MPI Rank 0, thread 1230493)"}


def test_a_2022_export_loads_clean_with_an_arrow_per_launched_record(saxpy, tmp_path):
    db = saxpy / SAXPY
    out = tmp_path / "out.pftrace"
    convert(saxpy, out, kind="detail")
    problems, (_, _, flows) = imported(out, tmp_path)
    (launched,), = _sql_at(db, "SELECT count(*) FROM (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                           "UNION ALL SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY) d WHERE "
                           "correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME)")
    assert problems == [] and flows == launched == 20


def test_a_2022_exports_ops_are_its_kernel_table(saxpy):
    db = saxpy / SAXPY
    rows = {r.name: r for r in ops_report(saxpy, by="name")}
    expected = _sql_at(db, "SELECT s.value, count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                           "JOIN StringIds s ON s.id = k.demangledName GROUP BY 1")
    assert [(name, rows[name].count, rows[name].total_ns) for name, _, _ in expected] == expected
