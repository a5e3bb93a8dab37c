"""``report --baseline DIR``: the report says what changed from another run, with diff's figures."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from converters.cli import main
from fixtures.ascend_pt_gen import write_ascend_pt_profile

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "report.schema.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """A job, and the same job with rank 1 5 ms slower a step (the others wait for it)."""
    root = tmp_path_factory.mktemp("runs")
    write_ascend_pt_profile(root / "base", ranks=2, steps=6, tasks_per_step=10, planes=2, seed=3)
    write_ascend_pt_profile(root / "new", ranks=2, steps=6, tasks_per_step=10, planes=2, seed=3, slow_rank=1,
                            slow_ns=5_000_000)
    return root / "base", root / "new"


def _report(tmp_path: Path, profile: Path, baseline: Path) -> dict:
    out = tmp_path / "r.json"
    assert main(["report", str(profile), "--baseline", str(baseline), "--format", "json", "-o", str(out),
                 "-q"]) == 0
    document = json.loads(out.read_text())
    jsonschema.validate(document, SCHEMA)
    return document


def test_a_run_against_itself_changed_nothing(runs, tmp_path):
    base, _ = runs
    compared = _report(tmp_path, base, base)["baseline"]
    assert compared["path"] == str(base)
    assert compared["steps"] and compared["types"]
    for row in compared["steps"] + compared["types"]:
        assert row["Delta Time(us)"] in (0, None) and not row["Significant"]


def test_a_slower_run_shows_its_step_time_regression(runs, tmp_path):
    base, new = runs
    steps = {row["Name"]: row for row in _report(tmp_path, new, base)["baseline"]["steps"]}
    step_time = steps["Step Time"]
    assert step_time["New Mean(us)"] > step_time["Base Mean(us)"] + 1000  # the slow rank's 5 ms a step
    assert step_time["Significant"]  # beyond the base's own steps' spread, though the new ones vary


def test_the_page_has_the_section_with_its_picture(runs, tmp_path):
    base, new = runs
    out = tmp_path / "r.html"
    assert main(["report", str(new), "--baseline", str(base), "-o", str(out), "-q"]) == 0
    section = out.read_text().split('<section id="baseline">')[1].split("</section>")[0]
    assert "Compared with the baseline" in section and section.count('<svg role="img"') == 1
    assert "Step Time" in section and "Op types that changed most" in section


def test_the_report_is_never_written_inside_the_baseline(runs, capsys):
    base, new = runs
    assert main(["report", str(new), "--baseline", str(base), "-o", str(base / "r.html"), "-q"]) == 2
    assert "error" in capsys.readouterr().err and not (base / "r.html").exists()
