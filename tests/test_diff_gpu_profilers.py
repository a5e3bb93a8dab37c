"""``diff`` across the GPU profilers (issue 42): the Nsight Systems sample against ``kineto-2rank``,
and the JAX XSpace sample (8 MI300X) against a Kineto run on an MI300X (``kineto-rocm-mi300``).
What matched and what did not, as shares of each side's device time, is checked against each
run's own ``ops --by name --format json`` rows, matched here with ``op_families.json`` read by the
test; and a run that marks no steps (its whole capture one pseudo step) compared with one that
does gives no per-step figure (docs/analysis.md §10)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import jsonschema
import pytest

from converters.cli import main
from tests.conftest import real_data

ROOT = Path(__file__).parent.parent
SCHEMA = json.loads((ROOT / "schemas" / "diff.schema.json").read_text())
PAIRS = {  # BASE (Kineto, with ProfilerStep#N) and NEW (no steps marked: the whole capture)
    "nsys": ("kineto-2rank", "nsys-cloverleaf"),
    "xplane": ("kineto-rocm-mi300", "xplane-jax-conv"),
}


def _json(capsys, *argv: str) -> list[dict]:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def _family(name: str) -> str:
    """The row a kernel joins across formats: the first family of op_families.json one of whose
    patterns it matches, else its own name (read here, not through the code under test)."""
    table = json.loads((ROOT / "converters" / "analyses" / "op_families.json").read_text())["families"]
    for family, patterns in table:
        if any(re.search(p, name, re.IGNORECASE) for p in patterns):
            return family
    return name


def _device_time(capsys, path: Path) -> dict[str, float]:
    """Per family (or name): the run's device time (µs), from its ``ops --by name`` rows."""
    found: dict[str, float] = defaultdict(float)
    for row in _json(capsys, "ops", str(path), "--by", "name", "--format", "json", "-q"):
        found[_family(row["Name"])] += row["Total Time(us)"]
    return found


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_matched_and_unmatched_shares_are_those_of_each_runs_ops(pair, capsys):
    """Each side's share of device time matched by family and by name, and the unmatched rest, add
    up from the rows, and equal what the two runs' ``ops`` rows give matched by family in the test."""
    base, new = (real_data(name) for name in PAIRS[pair])
    sides = [_device_time(capsys, base), _device_time(capsys, new)]
    both = set(sides[0]) & set(sides[1])
    rows = _json(capsys, "diff", str(base), str(new), "--by", "name", "--format", "json", "-q")
    jsonschema.validate(rows, SCHEMA)
    device = [r for r in rows if r["Kind"] == "device"]
    assert {r["Name"] for r in device if r["Matched"] != "unmatched"} == both
    for label, mine in zip(("Base", "New"), sides, strict=True):
        total = sum(mine.values())
        assert sum(r[f"{label} Time(us)"] for r in device) == pytest.approx(total, abs=0.01)
        matched = sum(mine[name] for name in both) / total * 100
        assert sum(r[f"{label} Share(%)"] for r in device if r["Matched"] != "unmatched") == pytest.approx(
            matched, abs=0.01)
        assert sum(r[f"{label} Share(%)"] for r in device) == pytest.approx(100, abs=0.01)
    # the note says the same shares (of BASE's, then NEW's device time)
    assert main(["diff", str(base), str(new), "--by", "name"]) == 0
    text = capsys.readouterr().out
    for mine in sides:
        share = sum(mine[name] for name in both) / sum(mine.values())
        assert f"{share:.1%}" in text.rsplit("\n--by name:", 1)[1]


def test_the_gemms_of_xplane_and_kineto_on_mi300x_match_by_family(capsys):
    """hipBLASLt's GEMMs are ``Cijk_...`` kernels under JAX and under PyTorch alike (Tensile's name
    for C = A x B): matched as matmul, the largest share the two have in common."""
    base, new = (real_data(name) for name in PAIRS["xplane"])
    rows = _json(capsys, "diff", str(base), str(new), "--by", "name", "--format", "json", "-q")
    [matmul] = [r for r in rows if r["Name"] == "matmul"]
    assert matmul["Matched"] == "by family" and matmul["Base Count"] > 0 and matmul["New Count"] == 40
    assert matmul["New Time(us)"] == pytest.approx(11852.414)  # xplane-jax-conv/SOURCE.md: the WGM1 GEMM


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_a_whole_capture_against_steps_compares_no_per_step_figure(pair, capsys):
    """NEW marks no steps: its one sample per rank is its whole capture, which is no step of BASE's.
    Every per-step delta, noise and verdict is unknown (null), never a number; each side's own
    figures stay, and the warning says why."""
    base, new = (real_data(name) for name in PAIRS[pair])
    assert main(["diff", str(base), str(new), "--by", "step", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)
    jsonschema.validate(rows, SCHEMA)
    assert "NEW marks no steps" in err
    for row in rows:
        assert row["Delta Time(us)"] is None and row["Delta(%)"] is None and row["Noise(us)"] is None
        assert row["Significant"] is False
    [step] = [r for r in rows if r["Name"] == "Step Time"]
    assert step["Base Mean(us)"] is not None and step["New Mean(us)"] is not None
    assert main(["diff", str(base), str(new), "--by", "step", "--fail-above", "0", "-q"]) == 0
    capsys.readouterr()
    by_name = _json(capsys, "diff", str(base), str(new), "--by", "name", "--format", "json", "-q")
    assert all(r["Delta(%)"] is None and r["Significant"] is False for r in by_name)
    assert all(r["Delta Time(us)"] == pytest.approx(r["New Time(us)"] - r["Base Time(us)"], abs=0.002)
               for r in by_name)


def test_the_activity_outside_the_steps_is_no_step(capsys):
    """``kineto-rocm-mi300``: three ProfilerStep#N and device work launched in none (its pseudo step,
    30 ms of it): the step figures are of the three steps only, as ``overlap`` gives them; the
    totals by name keep everything ``ops`` counts."""
    sample = real_data("kineto-rocm-mi300")
    steps = [r for r in _json(capsys, "overlap", str(sample), "--format", "json", "-q")
             if r.get("Step") not in (None, "-")]
    rows = _json(capsys, "diff", str(sample), str(sample), "--by", "step", "--format", "json", "-q")
    [step] = [r for r in rows if r["Name"] == "Step Time"]
    assert step["Base Steps"] == len(steps) == 3
    assert step["Delta Time(us)"] == 0 and step["Significant"] is False
    [computing] = [r for r in rows if r["Name"] == "Computing"]
    assert computing["Base Mean(us)"] == pytest.approx(sum(r["Computing"] for r in steps) / 3, abs=0.002)
    by_name = _json(capsys, "diff", str(sample), str(sample), "--by", "name", "--format", "json", "-q")
    ops = sum(_device_time(capsys, sample).values())
    assert sum(r["Base Time(us)"] for r in by_name if r["Kind"] == "device") == pytest.approx(ops, abs=0.01)


PUBLIC = ROOT / "fixtures" / "public"  # its SOURCE.md: GindaChen/nsys-ai's exports (MIT)
MFU = ("nsys-h100-2proc-nccl", "nsys-h100-2proc-nccl-after")  # one job before and after a change


def _kernels_of(folder: Path) -> dict[str, tuple[int, int]]:
    """Per kernel (demangled name, as Nsight names it), its count and time (ns), by SQL on the
    export itself; NCCL's kernels (communication, in ``--by comm``) apart under ``"nccl"``."""
    import sqlite3

    [export] = folder.glob("*.sqlite")
    with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT d.value, s.value LIKE 'nccl%', count(*), sum(k.end - k.start) "
                          "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName "
                          "JOIN StringIds s ON s.id = k.shortName GROUP BY 1, 2").fetchall()
    found: dict[str, tuple[int, int]] = {}
    for name, nccl, count, ns in rows:
        key = "nccl" if nccl else name
        held = found.get(key, (0, 0))
        found[key] = (held[0] + count, held[1] + ns)
    return found


def test_two_real_nsight_runs_compare_kernel_by_kernel_as_their_exports_count(capsys):
    """Two Nsight 2026.2 exports of one two-GPU job, before and after a change: ``diff --by name``
    has a row per kernel with each run's count and time as SQL counts them on each export (both
    processes), and ``--by comm`` NCCL's send/receive kernels of each."""
    base, new = (PUBLIC / name for name in MFU)
    truth = _kernels_of(base), _kernels_of(new)
    rows = _json(capsys, "diff", str(base), str(new), "--by", "name", "--format", "json", "-q")
    jsonschema.validate(rows, SCHEMA)
    got = {r["Name"]: ((r["Base Count"], r["Base Time(us)"]), (r["New Count"], r["New Time(us)"]))
           for r in rows}
    names = (set(truth[0]) | set(truth[1])) - {"nccl"}
    assert set(got) == names and len(names) == 26
    for name in names:
        for side, (count, us) in zip(truth, got[name], strict=True):
            assert (count, us) == (side[name][0], side[name][1] / 1000)
    assert all(r["Matched"] == "by name" and r["Base Mean(us)"] is not None for r in rows)
    comm = _json(capsys, "diff", str(base), str(new), "--by", "comm", "--format", "json", "-q")
    counts = (sum(r["Base Count"] for r in comm), sum(r["New Count"] for r in comm))
    assert counts == (truth[0]["nccl"][0], truth[1]["nccl"][0]) == (66, 62)
