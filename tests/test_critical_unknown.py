"""What the input cannot give, ``critical`` and the report do not show as 0 or idle (issue 40): a
step whose device tasks a rank does not record has no path, figures or what-ifs (and the report
does not rank it among the slowest); an op with no plane tasks (profiler level 0) has no split of
its time after the last arrival into wait and transfer. Truth from the raw files, read here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from converters.analyses.report import report_data, report_json
from converters.cli import main
from fixtures.mindspore1x_gen import write_mindspore1x_profile
from tests.conftest import real_data

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "critical.schema.json").read_text())
STEPS, CUT_IN = 8, 3


def _critical(capsys, root: Path, *extra: str) -> tuple[list[dict], list[dict], str]:
    """(JSON steps, table rows as CSV dicts, stderr)."""
    assert main(["critical", str(root), "--format", "json", *extra]) == 0
    out = capsys.readouterr()
    document = json.loads(out.out)
    jsonschema.validate(document, SCHEMA)
    assert main(["critical", str(root), "--format", "csv", "-q", *extra]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(",")[:len(header)], strict=False)) for line in lines[1:]]
    return document, rows, out.err


@pytest.fixture(scope="module")
def cut(tmp_path_factory):
    return write_mindspore1x_profile(tmp_path_factory.mktemp("cut"), ranks=2, steps=STEPS,
                                     timeline_ends_in_step=CUT_IN, seed=3)


def test_steps_past_the_op_timeline_have_no_path_no_idle_and_no_what_if(cut, capsys):
    document, rows, err = _critical(capsys, cut.root)
    by_step = {d["step"]: d for d in document}
    for step in range(1, STEPS + 1):
        d = by_step[step]
        if step < CUT_IN:
            assert "unknown" not in d and d["path"]
            assert any(s["kind"] == "compute" for s in d["path"])
        else:  # the step the timeline stops in and every later one: unknown, not idle
            assert (d["step_us"], d["path"], d["what_if"]) == (None, None, None)
            assert "rank 0-1" in d["unknown"]
    table = {r["Step"]: r for r in rows}
    for step in range(CUT_IN, STEPS + 1):
        assert table[str(step)]["Compute(us)"] == "" and table[str(step)]["Idle(us)"] == ""
    assert f"step {CUT_IN}:" in err and "critical path is unknown" in err


def test_the_report_ranks_only_the_steps_whose_device_side_is_known(cut):
    document = report_json(report_data(cut.root))
    slow = [c["step"] for c in document["critical"]]
    assert slow and all(step < CUT_IN for step in slow)
    assert all(c["path_by_rank"] for c in document["critical"])


def test_a_step_trace_only_rank_shows_no_compute_of_zero(capsys):
    """The real rank-6 sample records its step trace and HCCL traces, no device op: its path was
    Compute 0.0 and 'AllReduce fully hidden saves the whole step'."""
    root = real_data("mindspore-1x")
    document, rows, _ = _critical(capsys, root, "--ranks", "6")
    steps = [d for d in document if d["step"] is not None]
    assert len(steps) == 2 and all(d["path"] is None and d["what_if"] is None for d in steps)
    assert all(r["Compute(us)"] == "" and r["What-if 1"] == "" for r in rows if r["Step"] != "")


def _level0(tmp_path: Path) -> Path:
    """ascend-pt-2rank with its HCCL plane tasks taken out of trace_view.json, as profiler level 0
    writes it (the op-level events stay); the analysis files that hold plane figures go too."""
    real = real_data("ascend-pt-2rank")
    root = tmp_path / "level0"
    shutil.copytree(real, root)
    for trace in root.glob("*/ASCEND_PROFILER_OUTPUT/trace_view.json"):
        events = json.loads(trace.read_text())
        names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "thread_name"}
        kept = [e for e in events if not names.get((e.get("pid"), e.get("tid")), "").startswith("Plane ")]
        assert len(kept) < len(events)
        trace.write_text(json.dumps(kept))
        for name in ("communication.json", "communication_matrix.json"):
            (trace.parent / name).unlink()
    return root


def test_level_0_gives_no_wait_of_zero_and_books_no_wait_as_communication(tmp_path, capsys):
    root = _level0(tmp_path)
    document, rows, err = _critical(capsys, root)
    [step] = [d for d in document if d["step"] == 50]
    kinds = {s["kind"] for s in step["path"]}
    assert "communication_or_wait" in kinds and not kinds & {"wait", "communication"}
    [row] = [r for r in rows if r["Step"] == "50"]
    assert row["Wait(us)"] == "" and row["Communication(us)"] == ""
    assert float(row["Compute(us)"]) > 0
    assert "communication_or_wait" in err
    # at level 1 the same step's wait is known and large (the 6 ranks the sample lacks)
    document, rows, _ = _critical(capsys, real_data("ascend-pt-2rank"))
    [row] = [r for r in rows if r["Step"] == "50"]
    assert float(row["Wait(us)"]) > 50_000
