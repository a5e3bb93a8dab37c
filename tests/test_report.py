"""``trace2perfetto report``: its numbers against what the profilers wrote themselves (torch_npu's
step_trace_time.csv, Paddle's summary.txt and raw events), against the communication analysis,
and against generated jobs whose truth is known (a slow rank); its JSON against the schema; its
size on a 64-rank, 100-step job; and the command line (files appear only when complete)."""

from __future__ import annotations

import csv
import json
import re
import shlex
from collections import defaultdict
from pathlib import Path

import jsonschema
import pytest
from conftest import real_data
from trace_check import read_perfetto

from converters.analyses.comm import comm_report
from converters.analyses.overlap import overlap_report as overlap_rows
from converters.analyses.report import Thresholds, report_data, report_json, write_html
from converters.cli import main
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.kineto_gen import write_kineto_traces
from fixtures.mindspore1x_gen import write_mindspore1x_profile
from fixtures.msprof_gen import write_msprof_profile
from fixtures.paddle_gen import generate_profile

SCHEMA = json.loads((Path(__file__).parents[1] / "schemas" / "report.schema.json").read_text())


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def _json_report(tmp_path: Path, profile: Path, *extra: str) -> dict:
    out = tmp_path / "report.json"
    assert main(["report", str(profile), "-o", str(out), "-q", *extra]) == 0
    document = json.loads(out.read_text())
    jsonschema.validate(document, SCHEMA)
    return document


# -- against the profilers' own figures -----------------------------------------------------------

def _step_trace_time(root: Path) -> dict[tuple[int, int], dict[str, float]]:
    """(rank, step) -> torch_npu's step_trace_time.csv row (µs); the rank from profiler_info."""
    rows = {}
    for info in root.glob("*_ascend_pt/profiler_info_*.json"):
        rank = json.loads(info.read_text())["rank_id"]
        with open(info.parent / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
            for row in csv.DictReader(f):
                rows[rank, int(row["Step"])] = {k.strip(): float(v) for k, v in row.items() if v.strip()}
    return rows


def test_breakdown_per_step_equals_torch_npus_step_trace_time(tmp_path):
    root = real_data("ascend-pt-2rank")
    expected = _step_trace_time(root)
    document = _json_report(tmp_path, root)
    got = {(s["rank"], s["step"]): s for s in document["steps"]}
    assert set(got) == set(expected) == {(0, 50), (1, 50)}
    for key, theirs in expected.items():
        mine = got[key]
        for column, field in (("Computing", "computing_ms"), ("Free", "free_ms"),
                              ("Communication(Not Overlapped)", "not_overlapped_ms"),
                              ("Communication", "communication_ms"), ("Overlapped", "overlapped_ms"),
                              ("Preparing", "preparing_ms")):
            assert mine[field] * 1000 == pytest.approx(theirs[column], rel=0.01), (key, column)


def test_waits_and_slow_ranks_agree_with_the_communication_analysis(tmp_path):
    root = real_data("ascend-pt-2rank")
    theirs = comm_report(root)
    document = _json_report(tmp_path, root)
    assert document["collectives"]["matched"] == theirs.instances == 4
    assert [r["rank"] for r in document["slow_ranks"]] == [r.rank for r in theirs.slow_ranks]
    suffered: dict[int, float] = defaultdict(float)
    caused: dict[int, float] = defaultdict(float)
    for row in document["wait_matrix"]:
        for cell in row["waited_for"]:
            suffered[row["rank"]] += cell["wait_ms"]
            caused[cell["rank"]] += cell["wait_ms"]
    for r in theirs.slow_ranks:
        assert caused[r.rank] == pytest.approx(r.wait_caused_ns / 1e6, abs=1e-6)
        assert suffered[r.rank] == pytest.approx(r.wait_suffered_ns / 1e6, abs=1e-6)
    # the first allreduce: rank 1 came last and rank 0 waited for it (HCCL's own Synchronization)
    assert document["collectives"]["slowest"][0]["last_rank"] == 1
    assert caused[1] > 5.0 > caused[0]


def _paddle_raw_steps(path: Path) -> dict[int, tuple[float, float]]:
    """step -> (ProfileStep µs, Dataloader µs within it), from Paddle's raw events."""
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e]
    steps = {int(re.match(r"ProfileStep#(\d+)", e["name"])[1]): (e["ts"], e["ts"] + e["dur"])
             for e in events if e.get("cat") == "ProfileStep"}
    out = {}
    for number, (start, end) in steps.items():
        loading = sum(e["dur"] for e in events if e.get("cat") == "Dataloader" and start <= e["ts"] < end)
        out[number] = (end - start, loading)
    return out


def test_data_loading_bound_steps_of_the_real_paddle_run(tmp_path):
    """Paddle's CPU sample spends 59% of its steps in the Dataloader (its own summary.txt): the
    steps where that passes the threshold, and only they, are data-loading bound."""
    root = real_data("paddle-cpu-chrome")
    raw = _paddle_raw_steps(next(root.glob("*.paddle_trace.json")))
    summary = (root / "summary.txt").read_text()
    paddle_total_ms = float(re.search(r"^\s+Dataloader\s+\d+\s+([\d.]+) /", summary, re.M)[1])
    document = _json_report(tmp_path, root)
    share = Thresholds().data_loading_share
    expected = {n for n, (step, loading) in raw.items() if loading / step >= share}
    assert expected == {4, 5, 6}  # the sample as recorded; 3 and 7 load quickly
    found = {d["step"] for d in document["diagnoses"] if d["kind"] == "data_loading"}
    assert found == expected
    assert {d["kind"] for d in document["diagnoses"]} == {"data_loading"}  # no device: nothing else judged
    total = sum(s["phases_ms"]["Dataloader"] for s in document["steps"])
    assert total == pytest.approx(paddle_total_ms, abs=0.006)  # summary.txt rounds to 0.01 ms
    for d in document["diagnoses"]:
        step_us, loading_us = raw[d["step"]]
        assert d["evidence"]["source"] == "Dataloader"
        assert d["share"] == pytest.approx(loading_us / step_us, abs=1e-3)
    assert document["verdict"]["dominant"] == "data_loading"


def _write_paddle_like(root: Path, steps: list[tuple[int, int, int]]) -> None:
    """A Paddle chrome export as the real one is written (``name[dur]``, ``tid`` "N(Python)",
    ``start_time`` args, a closing ``{}``): (step, step µs, Dataloader µs) each."""
    base, t, events = 1_795_000_000_000_000, 0, []

    def event(name: str, cat: str, start: int, dur: int) -> dict:
        return {"name": f"{name}[{dur / 1000:.3f} ms]", "pid": 123, "tid": "123(Python)", "ts": base + start,
                "dur": dur, "ph": "X", "cat": cat,
                "args": {"start_time": f"{start:.3f} us", "end_time": f"{start + dur:.3f} us"}}

    for number, dur, loading in steps:
        events += [event(f"ProfileStep#{number}", "ProfileStep", t, dur),
                   event("_DataLoaderIterSingleProcess", "Dataloader", t + 10, loading),
                   event("Sequential", "Forward", t + 20 + loading, dur - loading - 100)]
        t += dur + 50
    document = {"displayTimeUnit": "ms", "schemaVersion": "1.0.2", "span_index": "0",
                "traceEvents": [*events, {}], "ExtraInfo": {}}
    root.mkdir()
    name = "host_vmpid_123_time_2026_11_22_11_49_01_386776.paddle_trace.json"  # as Paddle names it
    (root / name).write_text(json.dumps(document))


def test_a_dataloader_that_dominates_is_the_diagnosis(tmp_path):
    root = tmp_path / "paddle"
    _write_paddle_like(root, [(3, 10_000, 8_000), (4, 10_000, 1_000), (5, 10_000, 5_000)])
    report = report_data(root)
    found = [(d.kind, d.step, d.share) for d in report.diagnoses]
    assert found == [("data_loading", 3, 0.8), ("data_loading", 5, 0.5)]
    assert report_json(report)["verdict"]["dominant"] == "data_loading"
    strict = report_data(root, thresholds=Thresholds(data_loading_share=0.6))
    assert [d.step for d in strict.diagnoses] == [3]


def test_paddles_phases_on_gpu_are_in_the_breakdown(tmp_path):
    root = tmp_path / "paddle-gpu"
    truth = generate_profile(root, form="chrome", steps=4, gpu=True, ranks=2, seed=2)
    document = _json_report(tmp_path, root)
    got = {(s["rank"], s["step"]): s for s in document["steps"]}
    for file in truth.files:
        for step in file.steps:
            mine = got[file.rank, step.number]
            for phase, ns in step.phases.items():
                assert mine["phases_ms"][phase] * 1e6 == pytest.approx(ns, abs=2), (file.rank, step, phase)
            assert mine["computing_ms"] is not None and mine["preparing_ms"] is not None
    html_path = tmp_path / "paddle.html"
    assert main(["report", str(root), "-o", str(html_path), "-q"]) == 0
    page = html_path.read_text()
    chart = page[page.index('aria-label="Profiler phases per step"'):]
    chart = chart[:chart.index("</svg>")]
    for phase in ("Dataloader", "Forward", "Backward", "Optimization"):
        assert f">{phase}</text>" in chart  # in the chart's legend


# -- a generated job whose slow rank is known -----------------------------------------------------

@pytest.fixture(scope="module")
def slow_job(tmp_path_factory):
    root = tmp_path_factory.mktemp("slow-report")
    truth = write_ascend_pt_profile(root, ranks=6, steps=3, tasks_per_step=30, ranks_per_host=6,
                                    slow_rank=3, slow_ns=2_000_000, seed=7)
    assert {c.last_rank for c in truth.collectives} == {3}
    return root, truth


def test_the_straggler_is_the_slow_rank_in_every_step(slow_job, tmp_path):
    root, truth = slow_job
    document = _json_report(tmp_path, root)
    steps = {c.step for c in truth.collectives}
    stragglers = [d for d in document["diagnoses"] if d["kind"] == "straggler"]
    assert {(d["rank"], d["step"]) for d in stragglers} == {(3, step) for step in steps}
    for d in stragglers:
        caused_ns = sum(sum(c.wait_ns.values()) for c in truth.collectives if c.step == d["step"])
        assert d["evidence"]["wait_caused_ms"] * 1e6 == pytest.approx(caused_ns, abs=1000)
        assert d["evidence"]["last_arrivals"] == sum(c.step == d["step"] for c in truth.collectives)
    # the others wait for rank 3: communication bound, most of it for rank 3; every wait is for it
    waiting = [d for d in document["diagnoses"] if d["kind"] == "communication"]
    assert waiting and {d["evidence"]["waited_most_for_rank"] for d in waiting} == {3}
    assert {cell["rank"] for row in document["wait_matrix"] for cell in row["waited_for"]} == {3}
    assert document["slow_ranks"][0]["rank"] == 3
    assert {s["dominant"] for s in document["steps"] if s["rank"] == 3} == {"straggler"}
    # the verdict: not the links, rank 3 (the others' exposed communication is mostly waiting for it)
    verdict = document["verdict"]
    assert verdict["dominant"] == "straggler" and verdict["look_at"]["rank"] == 3
    # said as the critical path says it: the time rank 3 held every rank back, the generator's delay
    held = verdict["held_back"]
    assert held["rank"] == 3 and held["saved_ms"] == pytest.approx(2.0, rel=0.3)
    assert held["sentence"].startswith("rank 3 held every rank back by ")
    assert held["sentence"].endswith(" ms a step")
    assert verdict["summary"].startswith(f"Straggler: {held['sentence']}. ")


def test_the_suggested_command_writes_exactly_that_rank_and_step(slow_job, tmp_path):
    root, _ = slow_job
    report = report_data(root)
    finding = next(d for d in report.diagnoses if d.kind == "straggler")
    words = shlex.split(finding.command)
    assert words[0] == "trace2perfetto" and words[words.index("--kind") + 1] == "detail"
    words[words.index("-o") + 1] = str(tmp_path / "that.pftrace")
    assert main(words[1:]) == 0
    trace = read_perfetto((tmp_path / "that.pftrace").read_bytes())
    assert [re.match(r"Rank (\d+)", p)[1] for p in trace.processes] == [str(finding.rank)]
    steps = {s.name for s in trace.slices if s.track[0] == "Step Trace"}
    assert steps == {f"Step {finding.step}"}
    assert any(s.track[0] == "Ascend Hardware" for s in trace.slices)  # detail: the device streams


def test_html_holds_every_section_and_the_commands(slow_job, tmp_path):
    root, _ = slow_job
    report = report_data(root)
    out = tmp_path / "r.html"
    size = write_html(report, out, "trace2perfetto report X")
    page = out.read_text()
    assert size == len(page.encode())
    for section in ("job", "verdict", "step-time", "breakdown", "diagnosis", "critical", "ranks", "links",
                    "ops", "op-types", "method"):
        assert f'<section id="{section}">' in page
    # heatmap, 2 breakdowns, diagnosis grid, critical path, waits, links, top ops, op types
    assert page.count('<svg role="img"') == 9
    straggler = next(d for d in report.diagnoses if d.kind == "straggler")
    assert straggler.command.replace("'", "&#x27;") in re.sub(r"</?span>", "", page)  # its words as written
    for name, value, _ in Thresholds().items():
        assert f"<code>{name}</code></td><td class=\"n\">{value:g}</td>" in page  # printed in the report
    # self-contained: no link, script or reference that needs the network
    namespaces = r"www\.w3\.org/(1999|2000)/|purl\.org/|creativecommons\.org/ns"  # SVG's, never fetched
    assert not re.search(rf"<script|<link|<iframe|https?://(?!{namespaces})", page)
    assert len(set(re.findall(r'\bid="([^"]+)"', page))) == len(re.findall(r'\bid="([^"]+)"', page))


REAL_SAMPLES = ["msprof-2rank", "ascend-pt-2rank", "ascend-pt-db", "msprof-db", "kineto-2rank",
                "kineto-gloo-2rank", "kineto-1.8-resnet50", "paddle-cpu-chrome", "paddle-cpu-protobuf",
                "mindspore-1x/single-device", "mindspore-1x/hccl-rank6"]


@pytest.mark.parametrize("sample", REAL_SAMPLES)
def test_every_real_sample_makes_a_report(sample, tmp_path):
    """Each reader's output: the JSON follows the schema (``_json_report``), every step of every
    rank is in it, and the page is written."""
    root = real_data(sample)
    document = _json_report(tmp_path, root)
    rows = {(r.rank, r.graph, r.step) for r in overlap_rows(root)}
    assert {(s["rank"], s["graph"], s["step"]) for s in document["steps"] + document["outside_steps"]} == rows
    assert main(["report", str(root), "-o", str(tmp_path / "r.html"), "-q"]) == 0
    assert (tmp_path / "r.html").read_text().endswith("</html>\n")


@pytest.mark.parametrize("sample", ["ascend-pt-2rank", "ascend-pt-db", "msprof-2rank", "kineto-2rank",
                                    "mindspore-1x/single-device", "paddle-cpu-chrome"])
def test_operator_types_are_the_figures_of_ops(sample, tmp_path, capsys):
    """Per rank, the section's figures are ``trace2perfetto ops``' rows: read from the summary read
    where ops reads the rank so (msprof, the database, Kineto), else as ops reads it (torch_npu's
    kernel_details.csv, MindSpore 1.x in detail, Paddle's host operators)."""
    root = real_data(sample)
    assert main(["ops", str(root), "--format", "json", "-q"]) == 0
    rows = json.loads(capsys.readouterr().out)
    document = _json_report(tmp_path, root)["op_types"]
    overall: dict[tuple[str, str], float] = defaultdict(float)
    for r in rows:
        overall[r["OP Type"], r["Core Type"]] += r["Total Time(us)"]
    shown = [(t["type"], t["core_type"]) for t in document["shown"]]
    assert shown == sorted(overall, key=lambda key: (-overall[key], key))[:8]
    assert [r["rank"] for r in document["by_rank"]] == sorted({r["Rank"] for r in rows})
    for mine in document["by_rank"]:
        theirs = {(r["OP Type"], r["Core Type"]): r for r in rows if r["Rank"] == mine["rank"]}
        assert mine["total_ms"] * 1000 == pytest.approx(sum(r["Total Time(us)"] for r in theirs.values()),
                                                        abs=0.001 * len(theirs))
        assert [(t["type"], t["core_type"]) for t in mine["types"]] == [key for key in shown if key in theirs]
        for t in mine["types"]:
            row = theirs[t["type"], t["core_type"]]
            assert t["count"] == row["Count"]
            assert t["total_ms"] * 1000 == pytest.approx(row["Total Time(us)"], abs=0.001)
            assert t["share"] == pytest.approx(row["Ratio(%)"] / 100, abs=1e-4)
        rest = [r for key, r in theirs.items() if key not in shown]
        assert (mine["other"]["types"], mine["other"]["count"]) == (len(rest), sum(r["Count"] for r in rest))
        assert mine["other"]["total_ms"] * 1000 == pytest.approx(sum(r["Total Time(us)"] for r in rest),
                                                                 abs=0.001 * max(1, len(rest)))


def test_operator_types_of_an_input_without_device_ops_say_so(tmp_path):
    root = real_data("kineto-gloo-2rank")
    assert _json_report(tmp_path, root)["op_types"] == {"shown": [], "by_rank": []}
    assert main(["report", str(root), "-o", str(tmp_path / "r.html"), "-q"]) == 0
    section = (tmp_path / "r.html").read_text().split('<section id="op-types">')[1].split("</section>")[0]
    assert "No device compute ops" in section and "<svg" not in section


# -- size and the command line --------------------------------------------------------------------

def test_64_ranks_by_100_steps_stay_under_2_mb(tmp_path):
    root = tmp_path / "big"
    write_ascend_pt_profile(root, ranks=64, steps=100, tasks_per_step=10, planes=2, with_kernel_details=False,
                            slow_rank=9, slow_ns=300_000, seed=3)
    out = tmp_path / "big.html"
    assert main(["report", str(root), "-o", str(out), "-q"]) == 0
    assert out.stat().st_size < 2 * 1024 * 1024
    page = out.read_text()
    assert page.count('<svg role="img"') == 9  # the links' heatmap, the op types and the critical path too
    # 6,400 rank-steps: the findings tables list the worst of each kind, the JSON all of them
    assert re.search(r"and \d+ more \(all in --format json\)", page)


def test_json_on_stdout(slow_job, capsysbinary):
    root, _ = slow_job
    assert main(["report", str(root), "--format", "json", "-o", "-", "--ranks", "2-3", "--steps", "51"]) == 0
    document = json.loads(capsysbinary.readouterr().out)
    jsonschema.validate(document, SCHEMA)
    assert document["job"]["ranks"] == [2, 3] and document["job"]["steps"] == [51]
    assert document["job"]["selection"] == {"ranks": [2, 3], "graphs": None, "steps": [51]}
    assert {(s["rank"], s["step"]) for s in document["steps"]} == {(2, 51), (3, 51)}


def test_default_output_beside_the_input(tmp_path, capsys):
    root = tmp_path / "job"
    _write_paddle_like(root, [(3, 10_000, 8_000)])
    assert main(["report", str(root)]) == 0
    assert (tmp_path / "job.report.html").is_file()
    assert main(["report", str(root), "--format", "json", "-q"]) == 0
    jsonschema.validate(json.loads((tmp_path / "job.report.json").read_text()), SCHEMA)
    assert "wrote" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--ranks", "99"], "unknown rank 99"),
    (["--threshold", "nonsense=1"], "'nonsense' is not one of"),
    (["--threshold", "host_idle_share=x"], "expected NAME=NUMBER"),
    (["--format", "pdf"], "invalid choice"),
])
def test_usage_errors_exit_2_and_write_nothing(slow_job, tmp_path, capsys, argv, message):
    root, _ = slow_job
    out = tmp_path / "r.html"
    assert main(["report", str(root), "-o", str(out), *argv]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # not even a partial file


def test_a_broken_input_exits_1_and_writes_nothing(tmp_path, capsys):
    root = tmp_path / "paddle"
    _write_paddle_like(root, [(3, 10_000, 8_000)])
    path = next(root.iterdir())
    path.write_text("[{]")  # no longer JSON
    out = tmp_path / "r.html"
    code = main(["report", str(root), "-o", str(out)])
    err = capsys.readouterr().err
    assert code in (1, 2) and "trace2perfetto: error:" in err
    assert not out.exists() and not list(tmp_path.glob(".r.html.*"))


def test_thresholds_given_on_the_command_line_are_used_and_printed(tmp_path):
    root = tmp_path / "paddle"
    _write_paddle_like(root, [(3, 10_000, 8_000), (4, 10_000, 5_000)])
    document = _json_report(tmp_path, root, "--threshold", "data_loading_share=0.6")
    assert document["thresholds"]["data_loading_share"] == 0.6
    assert [d["step"] for d in document["diagnoses"]] == [3]


# -- what the page says (issue 23, item 12) ---------------------------------------------------------

def test_activity_outside_any_step_is_shown_apart_and_never_judged(tmp_path):
    """MindSpore 1.x's single device: device work before and after its one step. It is no step: no
    finding, no verdict, no column of the step charts; the page says how long it was."""
    root = real_data("mindspore-1x/single-device")
    document = _json_report(tmp_path, root)
    assert [(s["rank"], s["step"]) for s in document["steps"]] == [(1, 1)]
    assert [(s["rank"], s["step"]) for s in document["outside_steps"]] == [(1, None)]
    assert [s["dominant"] for s in document["outside_steps"]] == ["unknown"]  # not judged: not "balanced"
    assert all(d["step"] is not None for d in document["diagnoses"])
    assert document["verdict"]["rank_steps"] == 1
    assert sum(document["verdict"]["counts"].values()) == 1
    assert main(["report", str(root), "-o", str(tmp_path / "r.html"), "-q"]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "<dt>Outside steps</dt>" in page and "not judged" in page


def test_a_job_marking_no_step_is_judged_as_one_step_within_its_bounds(tmp_path):
    """The CANN database alone marks no step: its whole run is the one step judged, bounded where
    CANN measures Free (first to last device task), so no share passes 100%."""
    document = _json_report(tmp_path, real_data("msprof-db"))
    assert [s["step"] for s in document["steps"]] == [None] and document["outside_steps"] == []
    assert document["diagnoses"] and all(0 < d["share"] <= 1 for d in document["diagnoses"])


def test_a_cpu_only_job_says_nothing_of_a_device(tmp_path):
    root = tmp_path / "paddle"
    _write_paddle_like(root, [(3, 10_000, 8_000)])
    report = report_data(root)
    assert [d.kind for d in report.diagnoses] == ["data_loading"]
    assert "device" not in report.diagnoses[0].summary
    write_html(report, tmp_path / "r.html", "trace2perfetto report paddle")
    assert "device got work" not in (tmp_path / "r.html").read_text()


def _time_span(page: str) -> str:
    return re.search(r"<dt>Time span</dt><dd>(.*?)</dd>", page)[1]


def test_ranks_on_their_own_clocks_show_relative_times_not_1970(tmp_path):
    """MindSpore 1.x ranks without host_start.log keep the device's clock (ticks since it started):
    aligned by their collectives they share one timebase, still no wall time, so no date."""
    root = tmp_path / "ms1x"
    write_mindspore1x_profile(root, ranks=2, steps=3, comm_ops=2, host_start=False, seed=4)
    for extra in ([], ["--align", "collectives"]):
        out = tmp_path / "r.html"
        assert main(["report", str(root), "-o", str(out), "-q", *extra]) == 0
        span = _time_span(out.read_text())
        assert not re.search(r"\d{4}-\d\d-\d\dT", span) and "not wall time" in span, extra
        assert _json_report(tmp_path, root, *extra)["job"]["wall_clock"] is False


def test_a_profile_whose_times_start_near_zero_shows_no_1970_date(tmp_path):
    root = real_data("mindspore-cpu") / "pynative-profile"  # CPU only: no device work to time a step
    assert main(["report", str(root), "-o", str(tmp_path / "r.html"), "-q"]) == 0
    assert "1970" not in (tmp_path / "r.html").read_text()


def test_the_top_ops_say_how_many_they_show(tmp_path):
    root = tmp_path / "job"
    write_msprof_profile(root, ranks=2, graphs=(2,), steps=3, tasks_per_step=60, seed=5)  # 60 op names
    out = tmp_path / "r.html"
    assert main(["report", str(root), "-o", str(out), "-q", "--top", "20"]) == 0
    section = out.read_text().split('<section id="ops">')[1].split("</section>")[0]
    listed = section.split("<h3>Over all ranks")[1].split("</table>")[0].count("<tr>") - 1  # less the header
    assert listed == 20
    assert "the top 15 of the 20 listed below" in section and "the top 20 ops by total time" in section
    assert "(the top 15)" not in section


# -- memory -------------------------------------------------------------------------------------

def test_memory_section_holds_the_peaks_of_the_memory_command_and_a_picture(tmp_path, capsys):
    """The report's memory is ``trace2perfetto memory``'s, to the byte; the page draws each rank's
    memory over time with its peaks marked; a profile without memory has no memory key or section."""
    root = real_data("ascend-pt-2rank")
    document = _json_report(tmp_path, root)
    assert main(["memory", str(root), "--format", "json", "-q"]) == 0
    assert document["memory"] == json.loads(capsys.readouterr().out)
    assert {(m["Rank"], m["Component"]) for m in document["memory"]} == {
        (rank, c) for rank in (0, 1) for c in ("APP", "GE", "PTA", "PTA+GE")}
    assert main(["report", str(root), "-o", str(tmp_path / "r.html"), "-q"]) == 0
    page = (tmp_path / "r.html").read_text()
    section = page[page.index('<section id="memory">'):]
    assert section.count('aria-label="Device memory of rank') == 2 and "1187.981445" in section
    assert "memory" not in _json_report(tmp_path, real_data("kineto-2rank"))


@pytest.mark.parametrize("sample", ["generated", "kineto-1.8-resnet50"])
def test_a_kineto_reports_memory_is_the_memory_commands_from_its_one_summary_read(sample, tmp_path, capsys,
                                                                                    monkeypatch):
    """A Kineto trace's ``[memory]`` events are taken as the report's summary read meets them: the
    memory section is ``trace2perfetto memory``'s to the byte, and the trace is not read again for
    it (a read of the memory records apart fails here)."""
    if sample == "generated":
        root = tmp_path / "job"
        write_kineto_traces(root, ranks=2, steps=2, memory_events=True, seed=3)  # allocations: holders
    else:
        root = real_data(sample)  # PyTorch 1.8: deltas only, no holders
    from converters.analyses import memory

    def no_second_read(*args):
        raise AssertionError("the memory records read apart")

    with monkeypatch.context() as patched:
        patched.setattr(memory, "device_memory", no_second_read)
        document = _json_report(tmp_path, root)
    assert main(["memory", str(root), "--format", "json", "-q"]) == 0
    assert document["memory"] == json.loads(capsys.readouterr().out)
    assert document["memory"] and any(row["Peak Allocated(MB)"] for row in document["memory"])


def test_broken_memory_files_cost_the_report_its_memory_only(tmp_path):
    import shutil

    root = shutil.copytree(real_data("ascend-pt-2rank"), tmp_path / "job")
    broken = root / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv"
    broken.write_text("Nothing,Here\n1,2\n")
    report = report_data(root)
    assert report.memory == [] and report.steps
    assert any("memory left out of the report" in w and "memory_record.csv" in w for w in report.warnings)
