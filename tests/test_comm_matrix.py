"""`comm --matrix`: torch_npu's communication_matrix.json reproduced from the HCCL plane tasks (text
and database forms), links known on a generated job, the aggregation's algebra, the command."""

from __future__ import annotations

import csv
import io
import json
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import jsonschema
import pytest
from conftest import real_data
from hypothesis import given, settings
from hypothesis import strategies as st

from converters import communication
from converters.analyses.comm_matrix import COLUMNS, LinkRow, comm_matrix_report, picked, slowest_links
from converters.analyses.report import render_html, report_data, report_json
from converters.cli import main
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.kineto_gen import write_kineto_traces

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "comm_matrix.schema.json").read_text())
NO_RANK = 4294967295


def _without_matrix(sample: Path, tmp_path: Path) -> Path:
    """The sample copied, the profiler's own matrix deleted from the copy."""
    root = tmp_path / sample.name
    shutil.copytree(sample, root)
    for found in root.rglob("communication_matrix.json"):
        found.chmod(0o644)
        found.unlink()
    return root


# -- the profiler's own communication_matrix.json ----------------------------------------------------

def test_every_op_and_link_equals_torch_npus_communication_matrix_json(tmp_path):
    sample = real_data("ascend-pt-2rank")
    report = comm_matrix_report(_without_matrix(sample, tmp_path))
    assert report.plane_tasks
    compared = 0
    for rank in (0, 1):
        path = sample / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"
        theirs = {}
        for step, kinds in json.loads(path.read_text()).items():
            for kind, ops in kinds.items():
                for key, links in ops.items():
                    op, group = key.split("@")
                    for link, figures in links.items():
                        theirs[step, kind, op, link] = (group, figures)
        mine = {(f"step{r.step}", r.kind, r.op, f"{r.src}-{r.dst}"): r for r in report.rows if r.rank == rank}
        assert mine.keys() == theirs.keys()
        for key, (group, figures) in theirs.items():
            row = mine[key]
            assert group.endswith(row.group.removeprefix("hccl group "))  # the op name's tag: the hash's end
            assert row.transport == figures["Transport Type"]
            assert row.source_op == figures.get("Op Name")  # None for total
            assert row.size_bytes / 1e6 == pytest.approx(figures["Transit Size(MB)"], rel=1e-3)
            assert row.time_ns / 1e6 == pytest.approx(figures["Transit Time(ms)"], rel=1e-2)
            assert row.gb_per_s == pytest.approx(figures["Bandwidth(GB/s)"], rel=1e-2)
            compared += 1
    assert compared == 96


def _sqlite_links(db: Path) -> dict[str, dict[tuple[int, int], list]]:
    """Per op name, its transit per (src, dst): [transport, bytes, ns], straight from the tables."""
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    strings = dict(con.execute("SELECT id, value FROM STRING_IDS"))
    links: dict[str, dict[tuple[int, int], list]] = defaultdict(dict)
    query = """SELECT o.opName, m.taskType, m.srcRank, m.dstRank, m.size, t.endNs - t.startNs, tt.name,
                      lt.name
               FROM COMMUNICATION_TASK_INFO m JOIN TASK t ON t.globalTaskId = m.globalTaskId
               JOIN COMMUNICATION_OP o ON o.opId = m.opId
               JOIN ENUM_HCCL_TRANSPORT_TYPE tt ON tt.id = m.transportType
               LEFT JOIN ENUM_HCCL_LINK_TYPE lt ON lt.id = m.linkType"""
    for op, kind, src, dst, size, ns, transport, link in con.execute(query):
        if strings[kind] not in ("Memcpy", "Reduce_Inline") or transport != "SDMA":
            continue
        dst = src if dst == NO_RANK else dst
        entry = links[strings[op]].setdefault((src, dst), ["LOCAL" if src == dst else link, 0, 0])
        entry[1] += size
        entry[2] += ns
    con.close()
    return links


def test_the_database_form_equals_an_sqlite_computation(tmp_path):
    sample = real_data("ascend-pt-db")
    report = comm_matrix_report(_without_matrix(sample, tmp_path))
    assert report.plane_tasks and report.rows
    for rank in (0, 1):
        output = sample / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        truth = _sqlite_links(output / f"ascend_pytorch_profiler_{rank}.db")
        rows = [r for r in report.rows if r.rank == rank]
        totals: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])
        for links in truth.values():
            for link, (_, size, ns) in links.items():
                totals[link][0] += size
                totals[link][1] += ns
        assert {(r.src, r.dst) for r in rows} == set(totals)
        for row in rows:
            if row.op.endswith("-total"):
                assert [row.size_bytes, row.time_ns] == totals[row.src, row.dst]
            else:
                transport, size, ns = truth[row.source_op][row.src, row.dst]
                assert (row.transport, row.size_bytes, row.time_ns) == (transport, size, ns)


# -- a generated job: the links are known ------------------------------------------------------------

def test_a_generated_jobs_links_are_every_peer_of_its_communicator(tmp_path):
    truth = write_ascend_pt_profile(tmp_path, ranks=4, steps=2, tasks_per_step=40, seed=3)
    report = comm_matrix_report(tmp_path)
    assert report.plane_tasks and truth.collectives
    for rank in range(4):
        mine = [r for r in report.rows if r.rank == rank]
        assert {r.src for r in mine} == {rank}
        assert {r.dst for r in mine} == set(range(8))  # a communicator of 8, as the sample's
        assert {r.transport for r in mine if r.dst == rank} == {"LOCAL"}
        assert {r.transport for r in mine if r.dst != rank} == {"HCCS"}
        assert {r.step for r in mine} == {50, 51}
    rank0 = next(tmp_path.glob("*/profiler_info_0.json")).parent
    trace = rank0 / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    sizes: dict[tuple[int, int], int] = defaultdict(int)
    for e in json.loads(trace.read_text()):
        args = e.get("args", {})
        copy = e.get("ph") == "X" and e["name"] in ("Memcpy", "Reduce_Inline")
        if copy and args.get("transport type") == "SDMA":
            dst = args["src rank"] if args["dst rank"] == NO_RANK else args["dst rank"]
            sizes[args["src rank"], dst] += args["size(Byte)"]
    totals: dict[tuple[int, int], int] = defaultdict(int)
    for r in report.rows:
        if r.rank == 0 and r.op.endswith("-total"):
            totals[r.src, r.dst] += r.size_bytes
    assert totals == sizes
    handed: list = []
    streamed = comm_matrix_report(tmp_path, each=handed.extend)  # rank by rank, none kept
    assert streamed.rows == [] and handed == report.rows and streamed.slowest == report.slowest


# -- the algebra -------------------------------------------------------------------------------------

_links = st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 10**7)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(_links, st.randoms())
def test_picked_ranks_by_bandwidth_and_totals_add_up(figures, random):
    found = [(f"op{i}", communication.Link("HCCS", size, ns)) for i, (size, ns) in enumerate(figures)]
    out = picked(found)
    n = len(found)
    labels = [label for label, _, _ in out]
    assert labels == ["top1", "middle"] + [f"bottom{i}" for i in range(1, min(3, n) + 1)] + ["total"]
    bandwidths = sorted((f.gb_per_s for _, f in found), reverse=True)
    by_label = {label: link for label, _, link in out}
    assert by_label["top1"].gb_per_s == bandwidths[0] and by_label["bottom1"].gb_per_s == bandwidths[-1]
    assert by_label["middle"].gb_per_s == bandwidths[n // 2]
    total = by_label["total"]
    assert (total.size_bytes, total.time_ns) == (sum(s for s, _ in figures), sum(t for _, t in figures))
    shuffled = found[:]
    random.shuffle(shuffled)
    again = {label: (link.size_bytes, link.time_ns) for label, _, link in picked(shuffled)}
    assert again["total"] == (total.size_bytes, total.time_ns)
    assert {label: round(link.gb_per_s, 4) for label, _, link in picked(shuffled)} == {
        label: round(link.gb_per_s, 4) for label, _, link in out}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7), st.sampled_from(["HCCS", "RDMA"]),
                          st.integers(1, 10**9), st.integers(1, 10**7)), min_size=1, max_size=30))
def test_slowest_links_are_ranked_against_their_transports_median(links):
    rows = [LinkRow(src, None, 1, "collective", "g", "allreduce-total", src, dst, transport, size, ns, None)
            for src, dst, transport, size, ns in links]
    ranked = slowest_links(rows)
    assert len({(s.src, s.dst, s.transport) for s in ranked}) == len(ranked)
    assert sum(s.size_bytes for s in ranked) == sum(size for *_, size, _ in links)
    ratios = [s.ratio for s in ranked if s.ratio is not None]
    assert ratios == sorted(ratios)
    for transport in {s.transport for s in ranked}:
        mine = sorted(s.gb_per_s for s in ranked if s.transport == transport)
        half = len(mine) // 2
        median = mine[half] if len(mine) % 2 else (mine[half - 1] + mine[half]) / 2
        assert all(s.median_gb_per_s == pytest.approx(median) for s in ranked if s.transport == transport)


# -- the command -------------------------------------------------------------------------------------

def test_comm_matrix_json_csv_and_table(tmp_path, capsys):
    root = str(_without_matrix(real_data("ascend-pt-2rank"), tmp_path))
    assert main(["comm", root, "--matrix", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    jsonschema.validate(document, SCHEMA)
    assert len(document["matrix"]) == 96 and document["plane_tasks"]
    assert len(document["slowest_links"]) == 16  # 2 ranks x 8 destinations
    assert document["slowest_links"][0]["Transport Type"] == "HCCS"
    assert main(["comm", root, "--matrix", "--format", "csv", "--ranks", "1"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert tuple(rows[0]) == COLUMNS and len(rows) == 48 and {r["Rank"] for r in rows} == {"1"}
    assert main(["comm", root, "--matrix"]) == 0
    table = capsys.readouterr().out
    assert "allreduce-bottom3" in table and "slowest links" in table


def test_a_profile_without_plane_tasks_has_no_rows_and_says_so(tmp_path, capsys):
    write_kineto_traces(tmp_path, ranks=2, steps=2)
    assert main(["comm", str(tmp_path), "--matrix", "--format", "json"]) == 0
    out = capsys.readouterr()
    document = json.loads(out.out)
    jsonschema.validate(document, SCHEMA)
    assert document == {"matrix": [], "slowest_links": [], "plane_tasks": False}
    assert "no HCCL plane tasks" in out.err


# -- the report --------------------------------------------------------------------------------------

REPORT_SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "report.schema.json").read_text())


def test_the_report_ranks_the_links_and_draws_them(tmp_path):
    report = report_data(_without_matrix(real_data("ascend-pt-2rank"), tmp_path))
    document = report_json(report)
    jsonschema.validate(document, REPORT_SCHEMA)
    ranked = document["links"]["ranked"]
    assert document["links"]["plane_tasks"] and len(ranked) == 16
    assert [(r["src_rank"], r["dst_rank"]) for r in ranked[:1]] == [(1, 7)]  # 15.14 GB/s, HCCS median 15.62
    page = render_html(report, "report")
    assert '<section id="links">' in page and 'aria-label="Bandwidth per link"' in page


def test_the_report_says_where_there_are_no_plane_tasks(tmp_path):
    write_kineto_traces(tmp_path, ranks=2, steps=2)
    report = report_data(tmp_path)
    document = report_json(report)
    jsonschema.validate(document, REPORT_SCHEMA)
    assert document["links"] == {"plane_tasks": False, "ranked": []}  # NCCL kernels: ops without planes
    assert "link matrix needs them" in render_html(report, "report")
