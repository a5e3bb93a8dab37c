"""``trace2perfetto overlap``: the per-rank, per-step table in three formats."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import jsonschema
import pytest

from converters.cli import main
from fixtures.msprof_gen import write_msprof_profile

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "overlap.schema.json").read_text())


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("overlap")
    write_msprof_profile(root, ranks=2, graphs=(2,), steps=3, seed=3)
    return root


def test_json_is_valid_against_its_schema_and_adds_up(profile, capsys):
    assert main(["overlap", str(profile), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    jsonschema.validate(rows, SCHEMA)
    assert [(r["Rank"], r["Step"]) for r in rows] == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]
    for r in rows:
        alone = r["Communication(Not Overlapped)"]
        assert r["Stage"] == pytest.approx(r["Computing"] + alone + r["Free"], abs=0.01)
        assert r["Overlapped"] == pytest.approx(r["Communication"] - alone, abs=0.01)


def test_csv_has_step_trace_time_columns_plus_rank(profile, capsys):
    assert main(["overlap", str(profile), "--format", "csv", "--ranks", "1", "--steps", "2"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 1 and rows[0]["Rank"] == "1" and rows[0]["Step"] == "2"
    wanted = {"Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free"}
    assert wanted <= set(rows[0])


def test_table_and_errors(profile, capsys):
    assert main(["overlap", str(profile)]) == 0
    assert "Computing" in capsys.readouterr().out
    assert main(["overlap", str(profile), "--ranks", "9"]) == 2
    assert "unknown rank 9" in capsys.readouterr().err
    assert main(["overlap", "--help"]) == 0


def test_the_library_gives_the_same_rows_as_a_dataframe(profile, capsys):
    """From Python: the analysis' rows, and the same records as the CLI's CSV in a DataFrame."""
    from converters.analyses import overlap, render

    table = render.frame(map(overlap.record, overlap.overlap_report(profile)))
    assert main(["overlap", str(profile), "--format", "csv"]) == 0
    printed = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(table.columns) == list(printed[0])
    assert [(r["Rank"], r["Step"]) for r in table.to_dict("records")] == [
        (int(r["Rank"]), int(r["Step"])) for r in printed]
    assert table["Computing"].tolist() == [float(r["Computing"]) for r in printed]


def test_without_pandas_a_dataframe_is_a_clear_error(monkeypatch):
    import sys

    from converters.analyses import render

    monkeypatch.setitem(sys.modules, "pandas", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'trace2perfetto\[pandas\]'"):
        render.frame([{"Rank": 0}])
