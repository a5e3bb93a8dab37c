"""Files of the profiler's own analysis read where they are the only answer (issue 40): a torch_npu
rank that kept only kernel_details.csv, or only the analysis, has the links of its
communication_matrix.json and the figures of its communication.json (each compared here with the
file, read with json), their source said; with those files gone too, the figures are unknown."""

from __future__ import annotations

import csv
import json
import shutil
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest
from conftest import level0_copy, real_data

from converters import comm_report
from converters.analyses.comm_matrix import comm_matrix_report
from converters.analyses.report import render_html, report_data, report_json
from converters.cli import main

OUTPUT = "ASCEND_PROFILER_OUTPUT"
SCHEMAS = Path(__file__).parent.parent / "schemas"


def _copy(tmp_path: Path, *removed: str) -> Path:
    """ascend-pt-2rank copied, ``removed`` deleted from every rank of the copy."""
    root = tmp_path / "job"
    shutil.copytree(real_data("ascend-pt-2rank"), root)
    for name in removed:
        if name is NO_PLANES[0]:
            _without_planes(root)
            continue
        for found in root.rglob(name):
            found.chmod(0o644)
            found.unlink()
    return root


def _ns(value, per: int = 1_000_000) -> int:
    """ms (or MB: ``per`` the same) as written, in ns (bytes), rounded to the unit."""
    return round(Decimal(repr(value)) * per)


KERNELS_ONLY = ("trace_view.json",)
ANALYSIS_ONLY = ("trace_view.json", "kernel_details.csv")
NO_PLANES = ("Plane tasks",)  # trace_view.json kept without its HCCL plane tasks (``_copy``)
KEPT_IDS = ["kernel_details", "trace_view_without_planes"]


def _without_planes(root: Path) -> None:
    """Every trace_view.json under ``root`` without the events on HCCL's Plane threads, as profiler
    level 0 writes it (its op-level events stay)."""
    for trace in root.glob(f"*/{OUTPUT}/trace_view.json"):
        events = json.loads(trace.read_text())
        names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "thread_name"}
        kept = [e for e in events if not names.get((e.get("pid"), e.get("tid")), "").startswith("Plane ")]
        assert len(kept) < len(events)
        trace.chmod(0o644)
        trace.write_text(json.dumps(kept))


@pytest.mark.parametrize("removed", [KERNELS_ONLY, ANALYSIS_ONLY, NO_PLANES],
                         ids=["kernel_details", "analysis", "trace_view_without_planes"])
def test_every_link_is_communication_matrix_jsons(tmp_path, removed):
    root = _copy(tmp_path, *removed)
    report = comm_matrix_report(root)
    assert not report.plane_tasks and report.from_profiler == {0: "communication_matrix.json",
                                                                1: "communication_matrix.json"}
    compared = 0
    for rank in (0, 1):
        path = root / f"rank{rank}_ascend_pt" / OUTPUT / "communication_matrix.json"
        theirs = {(step, kind, key.split("@")[0], link): figures
                  for step, kinds in json.loads(path.read_text()).items()
                  for kind, ops in kinds.items() for key, links in ops.items()
                  for link, figures in links.items()}
        mine = {(f"step{r.step}", r.kind, r.op, f"{r.src}-{r.dst}"): r for r in report.rows if r.rank == rank}
        assert mine.keys() == theirs.keys()
        for key, figures in theirs.items():
            row = mine[key]
            assert row.transport == figures["Transport Type"]
            assert row.source_op == figures.get("Op Name")
            assert row.size_bytes == _ns(figures["Transit Size(MB)"])
            assert row.time_ns == _ns(figures["Transit Time(ms)"])
            assert row.gb_per_s == figures["Bandwidth(GB/s)"]
            assert row.group == "hccl group 586"  # as the plane tasks' rows name it
            compared += 1
    assert compared == 96


def test_the_matrix_says_its_source_in_the_note_and_the_json(tmp_path, capsys):
    root = str(_copy(tmp_path, *KERNELS_ONLY))
    assert main(["comm", root, "--matrix", "--format", "json"]) == 0
    out = capsys.readouterr()
    document = json.loads(out.out)
    jsonschema.validate(document, json.loads((SCHEMAS / "comm_matrix.schema.json").read_text()))
    assert len(document["matrix"]) == 96 and document["plane_tasks"] is False
    assert document["from_profiler"] == {"0": "communication_matrix.json", "1": "communication_matrix.json"}
    assert "no HCCL plane tasks" not in out.err
    assert main(["comm", root, "--matrix"]) == 0
    assert "rank 0-1: no plane tasks; the rows of the profiler's own communication_matrix.json" in \
        capsys.readouterr().out


def test_the_report_ranks_the_profilers_links(tmp_path):
    report = report_data(_copy(tmp_path, *KERNELS_ONLY))
    document = report_json(report)
    jsonschema.validate(document, json.loads((SCHEMAS / "report.schema.json").read_text()))
    assert len(document["links"]["ranked"]) == 16 and document["links"]["from_profiler"]["1"]
    page = render_html(report, "report")
    assert "No HCCL plane tasks" not in page and "the profiler's own communication_matrix.json" in page


@pytest.mark.parametrize("removed", [KERNELS_ONLY, ANALYSIS_ONLY, NO_PLANES],
                         ids=["kernel_details", "analysis", "trace_view_without_planes"])
def test_every_figure_of_every_op_is_communication_jsons(tmp_path, removed):
    root = _copy(tmp_path, *removed)
    ops = comm_report(root).ops
    compared = 0
    for rank in (0, 1):
        path = root / f"rank{rank}_ascend_pt" / OUTPUT / "communication.json"
        found = json.loads(path.read_text())["step50"]["collective"]
        theirs = {key.split("@")[0]: op for key, op in found.items() if key != "Total Op Info"}
        mine = {op.name: op for op in ops if op.rank == rank}
        assert mine.keys() == theirs.keys()
        for name, op in theirs.items():
            times, found = op["Communication Time Info"], mine[name]
            assert found.figures_from == "the profiler's analysis (communication.json)"
            assert found.transit_ns == _ns(times["Transit Time(ms)"])
            assert found.wait_ns == _ns(times["Wait Time(ms)"])
            assert found.sync_ns == _ns(times["Synchronization Time(ms)"])
            # Idle: Elapse less Transit and Wait, each rounded to the ns: within 2 ns of the file's
            assert abs(found.idle_ns - _ns(times["Idle Time(ms)"])) <= 2
            assert abs(found.elapse_ns - _ns(times["Elapse Time(ms)"])) <= 1
            assert found.wait_ratio == times["Wait Time Ratio"]
            assert found.sync_ratio == times["Synchronization Time Ratio"]
            for transport, figures in op["Communication Bandwidth Info"].items():
                t = found.transports[transport]
                assert t.size_bytes == _ns(figures["Transit Size(MB)"])
                assert t.time_ns == _ns(figures["Transit Time(ms)"])
                assert t.gb_per_s == figures["Bandwidth(GB/s)"]
                assert t.large_packet_ratio(transport) == figures["Large Packet Ratio"]
                distribution = figures["Size Distribution"].items()
                assert {size: [count, ns] for size, (count, ns) in t.sizes.items()} == {
                    _ns(float(size)): [count, _ns(ms)] for size, (count, ms) in distribution}
            compared += 1
    assert compared == 8


@pytest.mark.parametrize("kept", [KERNELS_ONLY, NO_PLANES], ids=KEPT_IDS)
def test_the_comm_table_and_json_say_where_the_figures_come_from(tmp_path, capsys, kept):
    root = str(_copy(tmp_path, *kept))
    assert main(["comm", root]) == 0
    table = capsys.readouterr().out
    assert "rank 0-1: the profiler's analysis (communication.json), no plane tasks" in table
    assert "HCCS 15.7676" in table  # rank 0's first all-reduce, as communication.json has it
    assert main(["comm", root, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    jsonschema.validate(document, json.loads((SCHEMAS / "comm.schema.json").read_text()))
    assert {op["Figures From"] for op in document["ops"]} == {"the profiler's analysis (communication.json)"}


@pytest.mark.parametrize("kept", [KERNELS_ONLY, NO_PLANES], ids=KEPT_IDS)
def test_without_the_analysis_files_the_figures_are_unknown(tmp_path, capsys, kept):
    root = _copy(tmp_path, *kept, "communication.json", "communication_matrix.json")
    ops = comm_report(root).ops
    assert len(ops) == 8
    assert all(op.transit_ns is None and op.wait_ns is None and op.sync_ns is None and op.idle_ns is None
               and op.figures_from is None and not op.transports for op in ops)
    report = comm_matrix_report(root)
    assert report.rows == [] and not report.has_links
    assert main(["comm", str(root), "--matrix"]) == 0
    assert "no HCCL plane tasks" in capsys.readouterr().err


def test_an_analysis_db_rank_has_its_comm_analyzer_matrix_and_bandwidth(tmp_path):
    import sqlite3

    root = tmp_path / "db"
    shutil.copytree(real_data("ascend-pt-db"), root)
    for found in root.rglob("ascend_pytorch_profiler_*"):
        found.chmod(0o644)
        found.unlink()
    rows = comm_matrix_report(root).rows
    ops = comm_report(root).ops
    for rank in (0, 1):
        path = root / f"rank{rank}_ascend_pt" / OUTPUT / "analysis.db"
        with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
            links = db.execute("SELECT step, type, hccl_op_name, src_rank, dst_rank, transport_type, "
                               "transit_size, transit_time, bandwidth, op_name "
                               "FROM CommAnalyzerMatrix").fetchall()
            bandwidth = db.execute("SELECT hccl_op_name, transport_type, transit_size, transit_time, "
                                   "bandwidth FROM CommAnalyzerBandwidth").fetchall()
        mine = sorted((f"step{r.step}", r.kind, r.op, str(r.src), str(r.dst), r.transport, r.size_bytes,
                       r.time_ns, r.gb_per_s, r.source_op or None) for r in rows if r.rank == rank)
        assert mine == sorted((s, k, o, a, b, t, _ns(size), _ns(ms), gb, name or None)
                              for s, k, o, a, b, t, size, ms, gb, name in links)
        figures = {(op.name, name): t for op in ops if op.rank == rank for name, t in op.transports.items()}
        assert {(o, t): (_ns(size), _ns(ms), gb) for o, t, size, ms, gb in bandwidth} == \
            {key: (t.size_bytes, t.time_ns, t.gb_per_s) for key, t in figures.items()}


def _db_level0(tmp_path: Path) -> Path:
    """ascend-pt-db with its HCCL tasks as the database keeps them at profiler level 0 (as
    msinsight's db/level0 sample of this job family shows): every task of type N/A, on plane
    4294967295, of size -1, naming no peer; the analysis of them (CommAnalyzer*) gone."""
    import sqlite3

    root = tmp_path / "db0"
    shutil.copytree(real_data("ascend-pt-db"), root)
    for found in root.rglob("*.db*"):
        found.chmod(0o644)
    for path in root.glob(f"*/{OUTPUT}/ascend_pytorch_profiler_*.db"):
        with sqlite3.connect(path) as db:
            found = db.execute("SELECT id FROM STRING_IDS WHERE value = 'N/A'").fetchone()
            na = found[0] if found else db.execute("SELECT MAX(id) + 1 FROM STRING_IDS").fetchone()[0]
            db.execute("INSERT OR IGNORE INTO STRING_IDS (id, value) VALUES (?, 'N/A')", (na,))
            db.execute("UPDATE COMMUNICATION_TASK_INFO SET taskType = ?, planeId = 4294967295, "
                       "srcRank = 4294967295, dstRank = 4294967295, size = -1", (na,))
    for path in root.glob(f"*/{OUTPUT}/analysis.db"):
        with sqlite3.connect(path) as db:
            for table in ("CommAnalyzerTime", "CommAnalyzerBandwidth", "CommAnalyzerMatrix"):
                db.execute(f"DROP TABLE IF EXISTS {table}")
    return root


def test_a_database_at_level_0_gives_no_figure_of_zero(tmp_path, capsys):
    """Its tasks of no type split no op into wait and transfer: Transit to Idle unknown, and the
    critical path's Wait and Communication too (they were 0.000 and ~90 ms of Communication)."""
    root = _db_level0(tmp_path)
    ops = comm_report(root).ops
    assert len(ops) == 8 and all(op.transit_ns is None and op.wait_ns is None and op.sync_ns is None
                                 and op.idle_ns is None and not op.transports for op in ops)
    assert main(["critical", str(root), "--format", "csv"]) == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert rows and all(r["Wait(us)"] == "" and r["Communication(us)"] == "" for r in rows)
    assert all(float(r["Compute(us)"]) > 0 for r in rows)


def test_level_0_as_torch_npu_writes_it_gives_no_zero_for_the_unknown(tmp_path, capsys):
    """The whole level-0 copy (no planes, no CANN layer, no op types, no analysis): every command's
    figure the input cannot give is unknown, the critical path's Wait and Communication too, and
    diff against it judges no op type it lacks."""
    root = level0_copy(tmp_path)
    ops = comm_report(root).ops
    assert len(ops) == 8 and all(op.transit_ns is None and op.wait_ns is None and op.idle_ns is None
                                 and op.figures_from is None and op.elapse_ns > 0 for op in ops)
    assert main(["critical", str(root), "--format", "json"]) == 0
    [step] = [d for d in json.loads(capsys.readouterr().out) if d["step"] == 50]
    kinds = {s["kind"] for s in step["path"]}
    assert "communication_or_wait" in kinds and not kinds & {"wait", "communication"}
    assert main(["critical", str(root), "--format", "csv", "-q"]) == 0
    [row] = [r for r in csv.DictReader(capsys.readouterr().out.splitlines()) if r["Step"] == "50"]
    assert row["Wait(us)"] == "" and row["Communication(us)"] == "" and float(row["Compute(us)"]) > 0
    level1 = str(real_data("ascend-pt-2rank"))
    assert main(["diff", str(root), level1, "--by", "type", "--format", "json"]) == 0
    out = capsys.readouterr()
    device = [r for r in json.loads(out.out) if r["Kind"] == "device"]
    assert device and not any(r["Significant"] for r in device if not (r["Base Count"] and r["New Count"]))
    assert "BASE: the input records no op types" in out.err


# -- a loose trace_view.json and kernel_details.csv ---------------------------------------------------

def _loose(tmp_path: Path, kernels_of: int) -> Path:
    """rank 0's trace_view.json beside rank ``kernels_of``'s kernel_details.csv, in a plain folder."""
    folder = tmp_path / f"loose{kernels_of}"
    folder.mkdir()
    sample = real_data("ascend-pt-2rank")
    shutil.copy(sample / "rank0_ascend_pt" / OUTPUT / "trace_view.json", folder)
    shutil.copy(sample / f"rank{kernels_of}_ascend_pt" / OUTPUT / "kernel_details.csv", folder)
    return folder


def test_a_loose_pair_of_one_run_is_one_rank(tmp_path):
    from converters import discover
    from converters.analyses.ops import ops_report

    folder = _loose(tmp_path, 0)
    [info] = discover(folder)
    assert info.source_paths == (folder / "trace_view.json",)
    rank_folder = real_data("ascend-pt-2rank") / "rank0_ascend_pt"
    assert ops_report(folder) == ops_report(rank_folder)  # the op types of kernel_details.csv beside
    assert [s.step for s in comm_report(folder).steps] == [50]


def test_a_loose_pair_of_two_runs_is_refused_in_a_sentence(capsys, tmp_path):
    folder = _loose(tmp_path, 1)
    assert main(["info", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "do not belong together" in err and "pass one file" in err and len(err) < 300


# -- silences that became warnings --------------------------------------------------------------------

def test_a_cut_memory_record_takes_the_exact_peaks_of_operator_memory_and_says_so(tmp_path):
    import csv

    from converters.analyses.memory import memory_report
    from converters.errors import Diagnostics

    root = _copy(tmp_path)
    record = root / "rank0_ascend_pt" / OUTPUT / "memory_record.csv"
    whole = record.read_bytes()
    record.chmod(0o644)
    record.write_bytes(whole[:len(whole) * 6 // 10])  # cut inside a line, as a job dying writes it
    truth: dict[str, float] = {}
    for row in csv.DictReader(whole.decode().splitlines()):
        value = row["Total Allocated(MB)"].strip()
        if value:
            truth[row["Component"]] = max(truth.get(row["Component"], 0.0), float(value))
    diag = Diagnostics()
    rows = {r.component: r for r in memory_report(root, ranks=[0], diag=diag)}
    for component in ("PTA", "GE", "PTA+GE"):  # the complete file's peaks, not the cut one's
        assert rows[component].peaks["Allocated"] / (1 << 20) == pytest.approx(truth[component], abs=1e-6)
    said = [m for m in diag.messages() if "cut off (its last line has no line end)" in m]
    assert said and "operator_memory.csv" in said[0] and str(record) in said[0]
    document = report_json(report_data(root))
    assert any("operator_memory.csv" in w and "cut off" in w for w in document["warnings"])


def test_a_rank_read_from_its_analysis_only_is_said(tmp_path):
    from converters.analyses.overlap import overlap_report
    from converters.errors import Diagnostics

    root = _copy(tmp_path, *ANALYSIS_ONLY)
    diag = Diagnostics()
    overlap_report(root, diag=diag)
    [said] = [m for m in diag.messages() if "analysis only" in m]
    assert str(root / "rank0_ascend_pt" / OUTPUT) in said and "step_trace_time.csv" in said
    assert "1 more like it: rank 1" in said
    assert any("analysis only" in w for w in report_json(report_data(root))["warnings"])


def test_a_damaged_database_says_skip_unreadable_reads_the_others(tmp_path, capsys):
    root = tmp_path / "db"
    shutil.copytree(real_data("ascend-pt-db"), root)
    output = root / "rank0_ascend_pt" / OUTPUT
    for found in output.glob("ascend_pytorch_profiler_0.db*"):
        found.chmod(0o644)
    for side in output.glob("ascend_pytorch_profiler_0.db-*"):
        side.unlink()
    db = output / "ascend_pytorch_profiler_0.db"
    data = bytearray(db.read_bytes())
    for i in range(3 * 4096, len(data), 997):  # pages past the first two: the schema's, the tables'
        data[i] ^= 0x5A
    db.write_bytes(bytes(data))
    assert main(["overlap", str(root)]) == 1
    err = capsys.readouterr().err
    assert str(db) in err and "--skip-unreadable leaves rank 0 out" in err
    assert main(["overlap", str(root), "--skip-unreadable", "--format", "csv"]) == 0
    assert {line.split(",")[0] for line in capsys.readouterr().out.splitlines()[1:]} == {"1"}


# every command but convert (and diff -o's trace) draws no arrows: what a drawing would lose is
# no loss there, so no arrow warning
NO_ARROWS = (["info"], ["overlap"], ["ops"], ["ops", "--by", "name"], ["comm"], ["comm", "--slow-ranks"],
             ["comm", "--matrix"], ["critical"], ["memory"], ["pipeline"])



def _arrows_said(err: str) -> bool:
    return "made no arrow" in err or "arrows whose end begins before their start" in err


@pytest.mark.parametrize("level", [1, 0])
def test_arrow_warnings_only_from_commands_that_draw_arrows(tmp_path, capsys, level):
    sample = str(real_data("ascend-pt-2rank") if level else level0_copy(tmp_path))
    for command in NO_ARROWS:
        main([*command, sample])
        assert not _arrows_said(capsys.readouterr().err), command
    for command in (["diff", sample, sample], ["report", sample, "-o", str(tmp_path / "report.html")]):
        assert main(command) == 0
        assert not _arrows_said(capsys.readouterr().err), command
    assert main(["convert", sample, "-o", str(tmp_path / "out.pftrace"), "--kind", "detail"]) == 0
    assert _arrows_said(capsys.readouterr().err)  # drawn: said
    assert main(["diff", sample, sample, "-o", str(tmp_path / "diff.pftrace")]) == 0
    assert _arrows_said(capsys.readouterr().err)


def test_level_0s_arrows_left_out_are_said_for_what_they_are(tmp_path, capsys):
    """At profiler level 0 torch_npu writes its launches' flow starts on the threads of a CANN layer
    it does not record: each start and the ends joining it make no arrow, and the warning says so
    (it said 'normal at a profile's edges')."""
    root = level0_copy(tmp_path)
    events = json.loads((root / "rank0_ascend_pt" / OUTPUT / "trace_view.json").read_text())
    named = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    bare = {f"{e['cat']}:{e['id']}" for e in events if e.get("ph") == "s" and e["pid"] not in named}
    ends = [e for e in events if e.get("ph") == "f" and f"{e['cat']}:{e['id']}" in bare]
    starts = sum(1 for e in events if e.get("ph") == "s" and e["pid"] not in named)
    assert starts == 210 and len(ends) == 215
    assert main(["convert", str(root), "-o", str(tmp_path / "out.pftrace"), "--kind", "detail"]) == 0
    err = capsys.readouterr().err
    [said] = [line for line in err.splitlines() if "rank 0:" in line and _arrows_said(line)]
    assert f"rank 0: {starts + len(ends)} flow events made no arrow: {starts} starts and 0 ends on a " \
        "thread or stream holding no event in their step" in said
    assert f"{len(ends)} ends that joined no start" in said and "normal at a profile's edges" not in said


def test_a_group_larger_than_the_ranks_profiled_is_said(capsys):
    sample = real_data("ascend-pt-2rank")
    peers = set()
    for rank in (0, 1):
        path = sample / f"rank{rank}_ascend_pt" / OUTPUT / "communication_matrix.json"
        for kinds in json.loads(path.read_text()).values():
            for ops in kinds.values():
                for links in ops.values():
                    peers |= {int(end) for link in links for end in link.split("-")}
    assert len(peers) == 8
    assert main(["comm", str(sample), "--matrix", "--format", "csv"]) == 0
    err = capsys.readouterr().err
    assert "the links reach 8 ranks (it holds 2: rank 0-1): the groups are larger" in err
    assert any("the links reach 8 ranks" in w for w in report_json(report_data(sample))["warnings"])


def test_ops_of_tasks_without_op_types_are_by_name_with_a_note(tmp_path, capsys):
    """At profiler level 0 kernel_details.csv names no op type (Type N/A): ops lists the tasks by
    Name, in the table's key column and the JSON's, with a note; every name's count and total time
    as the file's rows give them (it put the task names under OP Type)."""
    import csv
    from collections import defaultdict

    root = level0_copy(tmp_path)
    schema = json.loads((SCHEMAS / "ops.schema.json").read_text())
    truth: dict[tuple[int, str], list] = defaultdict(lambda: [0, Decimal(0)])
    for rank in (0, 1):
        with open(root / f"rank{rank}_ascend_pt" / OUTPUT / "kernel_details.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row["Accelerator Core"] != "HCCL":  # communication left out, as op_statistic.csv does
                    truth[rank, row["Name"]][0] += 1
                    truth[rank, row["Name"]][1] += Decimal(row["Duration(us)"].strip())
    assert main(["ops", str(root), "--format", "json"]) == 0
    out = capsys.readouterr()
    rows = json.loads(out.out)
    jsonschema.validate(rows, schema)
    assert all("OP Type" not in row for row in rows)
    assert {(r["Rank"], r["Name"]): [r["Count"], Decimal(repr(r["Total Time(us)"]))] for r in rows} == truth
    assert "rank 0: its device tasks name no op type" in out.err and "by task name" in out.err
    assert main(["ops", str(root)]) == 0
    table = capsys.readouterr().out
    assert table.split()[1] == "Name" and "by Name: the input names no op type" in table
    for by in (["--by", "shape"], ["--by", "step"], ["--across"], ["--by", "step", "--across"]):
        assert main(["ops", str(root), "--format", "json", *by]) == 0
        found = json.loads(capsys.readouterr().out)
        jsonschema.validate(found, schema)
        assert found and all("Name" in row and "OP Type" not in row for row in found), by
    assert main(["ops", str(real_data("ascend-pt-2rank")), "--format", "json"]) == 0  # level 1: types
    assert all("OP Type" in row for row in json.loads(capsys.readouterr().out))
    # the report's operator types are the same names: said
    assert any("names no op type" in w for w in report_json(report_data(root))["warnings"])
    level1 = report_json(report_data(real_data("ascend-pt-2rank")))
    assert not any("names no op type" in w for w in level1["warnings"])


def test_a_broken_communication_json_costs_the_ops_their_figures_not_the_rank(tmp_path):
    from converters.errors import Diagnostics

    root = _copy(tmp_path, *KERNELS_ONLY)
    path = root / "rank0_ascend_pt" / OUTPUT / "communication.json"
    path.chmod(0o644)
    path.write_text("[1, 2")  # no JSON object
    diag = Diagnostics()
    ops = [op for op in comm_report(root, diag=diag).ops if op.rank == 0]
    assert len(ops) == 4 and all(op.transit_ns is None and op.figures_from is None for op in ops)
    assert any(str(path) in m and "unknown" in m for m in diag.messages())


def test_a_broken_communication_matrix_json_costs_the_rank_its_links_only(tmp_path):
    from converters.errors import Diagnostics

    root = _copy(tmp_path, *KERNELS_ONLY)
    path = root / "rank0_ascend_pt" / OUTPUT / "communication_matrix.json"
    path.chmod(0o644)
    path.write_text('{"step50": ')
    diag = Diagnostics()
    report = comm_matrix_report(root, diag=diag)
    assert {r.rank for r in report.rows} == {1} and report.from_profiler == {1: "communication_matrix.json"}
    assert any(str(path) in m and "rank 0 has no links" in m for m in diag.messages())
