"""The report's critical path (issue 27): the verdict names, for the job's slowest steps, the
what-ifs ``trace2perfetto critical`` computes, with the same savings; the ``critical`` key follows
the schema; where no device work is recorded the path is unknown (null), never zero."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from conftest import real_data

from converters.analyses.comm import comm_report
from converters.analyses.report.diagnosis import ms_text
from converters.cli import main
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.mindspore1x_gen import write_mindspore1x_profile
from fixtures.paddle_gen import generate_profile

SCHEMA = json.loads((Path(__file__).parents[1] / "schemas" / "report.schema.json").read_text())
SLOW_RANK = 2


def _report(tmp_path: Path, profile: Path, fmt: str = "json") -> dict | str:
    out = tmp_path / f"report.{fmt}"
    assert main(["report", str(profile), "-o", str(out), "-q"]) == 0
    if fmt == "html":
        return out.read_text()
    document = json.loads(out.read_text())
    jsonschema.validate(document, SCHEMA)
    return document


def _critical(profile: Path, capsys) -> dict[int, dict]:
    """``trace2perfetto critical --format json``'s steps, by step id."""
    capsys.readouterr()
    assert main(["critical", str(profile), "--format", "json"]) == 0
    return {row["step"]: row for row in json.loads(capsys.readouterr().out)}


@pytest.fixture(scope="module")
def slow_job(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("slow") / "job"
    write_ascend_pt_profile(root, ranks=4, steps=4, tasks_per_step=40, slow_rank=SLOW_RANK, slow_ns=3_000_000,
                            seed=3)
    return root


def test_the_verdict_names_the_slow_ranks_late_arrival_with_criticals_saving(slow_job, tmp_path, capsys):
    document = _report(tmp_path, slow_job)
    theirs = _critical(slow_job, capsys)
    slowest: dict[int, float] = {}
    for s in document["steps"]:
        slowest[s["step"]] = max(slowest.get(s["step"], 0), s["step_ms"])
    expected = sorted(slowest, key=lambda step: -slowest[step])[:3]
    found = document["critical"]
    assert [c["step"] for c in found] == expected
    assert len(document["verdict"]["what_if"]) == 3
    for mine, sentence in zip(found, document["verdict"]["what_if"], strict=True):
        top, their_top = mine["what_if"][0], theirs[mine["step"]]["what_if"][0]
        assert (top["kind"], top["rank"]) == ("late_arrival", SLOW_RANK)
        assert top["target"] == their_top["target"]
        assert top["saved_ms"] * 1000 == pytest.approx(their_top["saved_us"])
        assert mine["path_ms"] * 1000 == pytest.approx(theirs[mine["step"]]["step_us"])
        assert mine["summary"] == sentence
        assert sentence.startswith(f"step {mine['step']} ({ms_text(mine['step_ms'] * 1e6)}): "
                                   f"rank {SLOW_RANK} arriving at {top['target']} with the others would "
                                   f"save {ms_text(top['saved_ms'] * 1e6)}; ")
        assert sentence.count(" would save ") == min(3, len(mine["what_if"]))
        # the path's time per rank and kind adds up to its span
        assert sum(p["ms"] for p in mine["path_by_rank"]) == pytest.approx(mine["path_ms"], rel=1e-6)


def test_the_html_has_the_critical_section_and_names_the_what_ifs(slow_job, tmp_path):
    page = _report(tmp_path, slow_job, "html")
    section = page[page.index('<section id="critical">'):]
    section = section[:section.index("</section>")]
    assert 'href="#critical"' in page and section.count('<svg role="img"') == 1
    assert section.count("<h3>Step ") == 3 and f"rank {SLOW_RANK} arriving at hcom_allReduce" in section
    verdict = page[page.index('<section id="verdict">'):]
    assert verdict[:verdict.index("</section>")].count("<li>step ") == 3


def test_the_real_samples_critical_key(tmp_path, capsys):
    root = real_data("ascend-pt-2rank")
    document = _report(tmp_path, root)
    (mine,) = document["critical"]
    slowest = max(document["steps"], key=lambda s: s["step_ms"])
    assert (mine["step"], mine["slowest_rank"], mine["step_ms"]) == (50, slowest["rank"], slowest["step_ms"])
    top = mine["what_if"][0]
    assert (top["kind"], top["rank"], top["target"]) == ("late_arrival", 1, "hcom_allReduce__586_0_1")
    assert top["saved_ms"] * 1000 == pytest.approx(_critical(root, capsys)[50]["what_if"][0]["saved_us"])
    lateness = max(op.wait_for_last_ns or 0 for op in comm_report(root).ops if op.name == top["target"])
    assert 0 < top["saved_ms"] * 1e6 <= lateness  # no more than rank 1's lateness, as issue 27 asks
    assert document["verdict"]["what_if"] == [mine["summary"]]
    assert mine["summary"].startswith("step 50 (156 ms): rank 1 arriving at hcom_allReduce__586_0_1 with the "
                                      "others would save 5.61 ms; ")


def test_a_cpu_only_job_s_path_is_its_host_work_and_says_so(tmp_path):
    """No device work but host operators (a Kineto CPU run): the path runs through them (before,
    unknown), with a note that a GPU or NPU trace would split launch from execution."""
    root = tmp_path / "cpu"
    generate_profile(root, form="chrome", steps=4, gpu=False, seed=1)
    document = _report(tmp_path, root)
    assert document["critical"]
    for mine in document["critical"]:
        assert mine["path_ms"] > 0 and "unknown" not in mine["summary"]
        assert {p["kind"] for p in mine["path_by_rank"]} >= {"compute"}
    assert any("host operators" in w and "GPU or NPU trace" in w for w in document["warnings"])


def test_no_device_work_and_no_host_work_leaves_the_path_unknown_not_zero(tmp_path):
    root = real_data("mindspore-1x/hccl-rank6")  # its step trace and HCCL traces only
    document = _report(tmp_path, root)
    assert document["critical"]
    for mine in document["critical"]:
        assert mine["path_ms"] is None and mine["path_by_rank"] is None and mine["what_if"] is None
        assert mine["summary"].endswith("is not recorded on rank 6, so its critical path is unknown")
    page = _report(tmp_path, root, "html")
    assert "its critical path is unknown" in page[page.index('<section id="critical">'):]


def test_ranks_on_clocks_of_their_own_are_put_on_one_by_their_collectives(tmp_path):
    """MindSpore 1.x ranks without host_start.log, each in device ticks since its device started: a
    path over such clocks as they are made a step span 462,000 s, nearly all idle. The clock policy
    puts them on one by their collectives, so the slowest steps have their paths; mindspore-1x's
    two profiles share none (and its rank 6 records no device task: its steps are not ranked)."""
    root = tmp_path / "ms1x"
    write_mindspore1x_profile(root, ranks=2, steps=3, comm_ops=2, host_start=False, seed=4)
    document = _report(tmp_path, root)
    assert document["critical"]
    for mine in document["critical"]:
        assert mine["path_ms"] is not None and mine["path_ms"] < 10
        assert {p["rank"] for p in mine["path_by_rank"]} <= {0, 1}
    assert _report(tmp_path, real_data("mindspore-1x"))["critical"] == []


def test_aligned_the_report_gives_what_critical_aligned_gives(tmp_path, capsys):
    """The report's clocks aligned by the collectives (its own estimate, no second read for it) give
    each rank the shift ``critical --align collectives`` gives."""
    root = real_data("ascend-pt-2rank")
    out = tmp_path / "aligned.json"
    assert main(["report", str(root), "--align", "collectives", "-o", str(out), "-q"]) == 0
    (mine,) = json.loads(out.read_text())["critical"]
    capsys.readouterr()
    assert main(["critical", str(root), "--align", "collectives", "--format", "json"]) == 0
    (theirs,) = json.loads(capsys.readouterr().out)
    assert mine["path_ms"] * 1000 == pytest.approx(theirs["step_us"])
    assert [(w["target"], w["saved_ms"] * 1000) for w in mine["what_if"]] == [
        (w["target"], pytest.approx(w["saved_us"])) for w in theirs["what_if"][:10]]
