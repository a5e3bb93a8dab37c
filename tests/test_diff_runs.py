"""``diff`` between two real runs (issue 40): communication matched by op type and the group's place
in the job (its ranks, its ops), not by the hash HCCL names a group with, which differs per run (the
same all-reduce was "hccl group 868: -100%" and "hccl group 271: new"); a side that records no op
types (profiler level 0) gets a warning and no "significant" row made of its absence, in ``diff``
and ``report --baseline``. The second run is ``ascend-pt-2rank`` with its groups' hash renamed in
every file, as the next run of the job names them; the level-0 side the same sample with every op
type taken out of kernel_details.csv, as level 0 writes none."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

from conftest import real_data

from converters.analyses.report import report_data, report_json
from converters.cli import main

HASH = re.compile(r"(hcom_[A-Za-z]+__)586(_\d+_\d+)")


def _rerun(tmp_path: Path) -> Path:
    """ascend-pt-2rank as another run of the job names its HCCL group: 271 for 586, in every file."""
    root = tmp_path / "rerun"
    shutil.copytree(real_data("ascend-pt-2rank"), root)
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".csv"):
            text = path.read_text(errors="surrogateescape")
            if "586" in text:
                path.write_text(HASH.sub(r"\g<1>271\g<2>", text), errors="surrogateescape")
    return root


def _rows(capsys, *args: str) -> tuple[list[dict], str]:
    assert main(["diff", *args, "--format", "json"]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), out.err


def test_the_same_all_reduce_of_two_runs_is_one_row(tmp_path, capsys):
    real = real_data("ascend-pt-2rank")
    ops = [line for line in (real / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json").read_text()
           .split('"name"') if HASH.search(line)]
    assert ops  # the sample's all-reduces carry the hash
    rows, _ = _rows(capsys, str(real), str(_rerun(tmp_path)), "--by", "comm")
    assert [(r["Name"], r["Group"]) for r in rows] == [("allreduce", "ranks 0-1")]
    [row] = rows
    assert row["Base Count"] == row["New Count"] > 0 and row["Delta Time(us)"] == 0 and not row["Significant"]


def _level0(tmp_path: Path) -> Path:
    """ascend-pt-2rank with no op type: kernel_details.csv's Type column emptied (level 0 records
    none), trace_view.json's kernels without theirs."""
    root = tmp_path / "level0"
    shutil.copytree(real_data("ascend-pt-2rank"), root)
    for path in root.glob("*/ASCEND_PROFILER_OUTPUT/kernel_details.csv"):
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        column = [c.strip() for c in rows[0]].index("Type")
        for row in rows[1:]:
            row[column] = ""
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows(rows)
    for path in root.glob("*/ASCEND_PROFILER_OUTPUT/trace_view.json"):
        events = json.loads(path.read_text())
        for e in events:
            if isinstance(e.get("args"), dict):
                e["args"].pop("Type", None)
                e["args"].pop("type", None)
        path.write_text(json.dumps(events))
    return root


def test_a_side_without_op_types_makes_no_significant_row_of_their_absence(tmp_path, capsys):
    level0, real = _level0(tmp_path), real_data("ascend-pt-2rank")
    rows, err = _rows(capsys, str(level0), str(real), "--by", "type")
    device = [r for r in rows if r["Kind"] == "device"]
    assert any(r["Base Count"] == 0 for r in device)  # the types only NEW names
    assert not any(r["Significant"] for r in device if not (r["Base Count"] and r["New Count"]))
    assert "BASE: the input records no op types" in err
    document = report_json(report_data(real, baseline=level0))
    types = document["baseline"]["types"]
    assert not any(r["Significant"] for r in types if r["Kind"] == "device" and not r["Base Count"])
    assert any("records no op types" in w for w in document["warnings"])
