"""``report``'s pipeline section and its verdict sentence, on real pipeline-parallel jobs made for
it (``fixtures/made``, tests/test_pipeline_made.py): the schedule, each stage's bubble beside the
ideal (p-1)/(m+p-1), and the slow stage, checked against the user ranges read from the raw
traces (``test_pipeline_made.truth``), in HTML and in JSON (``schemas/report.schema.json``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from statistics import fmean

import jsonschema
import pytest
from test_pipeline_made import MADE, truth

from converters.analyses.report import report_data, report_json, write_report
from converters.cli import main
from fixtures.kineto_gen import write_kineto_traces

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "report.schema.json").read_text())


@pytest.fixture(scope="module")
def gpipe4():
    """2 stages (the second ~10x the first's compute), GPipe, 4 micro-batches: the ideal bubble
    1/5; its report, JSON and the truth."""
    folder = MADE / "pp-gpipe-2stage-mb4"
    report = report_data(folder)
    return folder, report, report_json(report), truth(folder)


def test_the_section_against_the_user_ranges(gpipe4):
    """The schedule, the stages, the micro-batches and the ideal as the job ran them; each stage's
    mean bubble within 5% of the user ranges' (step time minus their union); the slow stage the
    one whose user ranges hold the most compute a step."""
    _, _, found, expected = gpipe4
    jsonschema.validate(found, SCHEMA)
    section = found["pipeline"]
    assert (section["schedule"], section["stages"], section["microbatches"]) == ("GPipe", 2, 4)
    assert section["ideal_share"] == 0.2
    assert section["found_by"] == {"ranges": 6}
    assert set(section["orders"].values()) == {"F0 F1 F2 F3 B0 B1 B2 B3"}
    bubbles = {}
    compute = {}
    for stage in range(2):
        mine = [want for (rank, _), want in expected.items() if rank == stage]
        bubbles[stage] = fmean(w["bubble"] / w["span"] for w in mine)
        compute[stage] = fmean(w["span"] - w["bubble"] for w in mine)
    for row in section["by_stage"]:
        assert row["ranks"] == [row["stage"]] and row["rank_steps"] == 3
        assert abs(row["bubble_share"] - bubbles[row["stage"]]) <= 0.05 * bubbles[row["stage"]], row
    assert abs(section["bubble_share"] - fmean(bubbles.values())) <= 0.05 * fmean(bubbles.values())
    slowest = max(compute, key=compute.get)
    assert compute[slowest] > 2 * min(compute.values())  # a clear slow stage: it must be named
    assert section["slow_stage"] == slowest


def test_the_verdict_says_it_in_those_words(gpipe4):
    """"pipeline bubble: 80% of the step, 60 points above GPipe's ideal with 4 micro-batches (20%
    on 2 stages); stage 1 is the slow stage (rank 1: ...)", the issue's words, the figures the
    section's, in the verdict's own field and after its summary."""
    _, _, found, _ = gpipe4
    section, verdict = found["pipeline"], found["verdict"]
    share, ideal = section["bubble_share"], section["ideal_share"]
    said = re.match(r"pipeline bubble: (\d+)% of the step, (\d+) points (above|below) GPipe's ideal "
                    r"with 4 micro-batches \((\d+)% on 2 stages\); stage (\d) is the slow stage \(rank (\d): "
                    r"[\d.]+ ms of compute a step, [\d.]+x the others' mean\)\.$", verdict["pipeline"])
    assert said, verdict["pipeline"]
    assert int(said.group(1)) == round(share * 100)
    assert int(said.group(2)) == round(abs(share - ideal) * 100) and said.group(3) == "above"
    assert int(said.group(4)) == 20
    assert int(said.group(5)) == int(said.group(6)) == section["slow_stage"]
    assert verdict["summary"].endswith("P" + verdict["pipeline"][1:])


def test_the_html_has_the_section(gpipe4, tmp_path, capsys):
    """The HTML report holds the Pipeline section (a row per stage, the host-only note) and the
    verdict's sentence; the command line writes it as the API does."""
    folder, report, found, _ = gpipe4
    page = tmp_path / "report.html"
    write_report(report, page, "report")
    text = page.read_text()
    assert '<section id="pipeline">' in text and 'href="#pipeline"' in text
    assert text.count("F0 F1 F2 F3 B0 B1 B2 B3") >= 2
    assert "a device trace would let it be split into the launches and the device" in text
    assert found["verdict"]["pipeline"].replace("'", "&#x27;") in text
    out = tmp_path / "cli.json"
    assert main(["report", str(folder), "--format", "json", "-o", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text())["pipeline"] == found["pipeline"]


def test_a_1f1b_job_without_ranges(tmp_path):
    """A 1F1B job whose schedule writes no micro-batch range, and no user range: found from the
    sends and receives, named 1F1B."""
    found = report_json(report_data(MADE / "pp-1f1b-4stage-mb4-plain"))
    jsonschema.validate(found, SCHEMA)
    section = found["pipeline"]
    assert (section["schedule"], section["stages"], section["microbatches"], section["found_by"]) == \
        ("1F1B", 4, 4, {"p2p": 12})
    assert "1F1B's ideal with 4 micro-batches (43% on 4 stages)" in found["verdict"]["pipeline"]


def test_no_pipeline_no_section(tmp_path):
    """A job that does not send and receive has no pipeline section nor sentence."""
    write_kineto_traces(tmp_path / "job", ranks=2, steps=2)
    found = report_json(report_data(tmp_path / "job"))
    jsonschema.validate(found, SCHEMA)
    assert "pipeline" not in found and "pipeline" not in found["verdict"]


def test_an_unknown_schedule_is_said_with_the_order_seen():
    """A schedule neither GPipe nor 1F1B (an interleaved one, several stages per rank): "the ideal",
    and the order each stage ran; a bubble not known is said so, never 0."""
    from converters.analyses.report.pipelined import PipelineSection, StageRow, pipeline_finding

    rows = [StageRow(0, (0,), 1, 10e6, 4e6, 0.6, 0.2), StageRow(1, (1,), 1, 10e6, 8e6, 0.2, 0.2)]
    orders = {0: "F0 F1 F2 F3 B1 B0", 1: "F0 F1 B1 B0"}
    section = PipelineSection("unknown", {"unknown": 2}, orders, 2, 4, {"p2p": 2}, rows, rows[1], 0.4, 0.2)
    said = pipeline_finding(section)
    assert said.startswith("pipeline bubble: 40% of the step, 20 points above the ideal with 4 micro-batches")
    assert "stage 1 is the slow stage (rank 1: 8.0 ms of compute a step, 2.0x the others' mean)" in said
    assert said.endswith("the order seen: stage 0: F0 F1 F2 F3 B1 B0; stage 1: F0 F1 B1 B0.")
    unknown = PipelineSection("GPipe", {"GPipe": 2}, orders, 2, 4, {"p2p": 2},
                              [StageRow(0, (0,), 1, 10e6, None, None, 0.2)], None, None, 0.2)
    assert pipeline_finding(unknown) == ("pipeline of 2 stages (GPipe): its bubble is unknown "
                                         "(a micro-batch's bounds the records do not give).")
