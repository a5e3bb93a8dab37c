"""What a user reads off the tables and warnings: names cut so that rows stay apart, figures never
cut, a what-if's saving always shown, size-cap advice that can work, and ``info``'s estimate of
each output format's size against what converting writes."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import jsonschema
import pytest
from conftest import real_data

from converters.analyses.render import Rows, cut
from converters.cli import main

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "info.schema.json").read_text())

_KERNELS = [  # three kernels of kineto-2rank that differ only in their middle
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, "
    "at::detail::Array<char*, 2> >(int, at::native::CUDAFunctorOnSelf_add<float>, "
    "at::detail::Array<char*, 2>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnOther_add<float>, "
    "at::detail::Array<char*, 2> >(int, at::native::CUDAFunctorOnOther_add<float>, "
    "at::detail::Array<char*, 2>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
]


def test_names_alike_in_their_start_stay_apart_when_cut():
    shown = cut(_KERNELS, 60)
    assert len(set(shown)) == 3 and all(len(s) <= 60 for s in shown)
    assert {"OnSelf", "OnOther"} <= {word for s in shown for word in ("OnSelf", "OnOther") if word in s}


def test_names_alike_but_for_their_middle_everywhere_are_numbered():
    names = [f"{'a' * 50}{x}{'b' * 200}" for x in "xyz"]
    shown = cut(names, 40)
    assert len(set(shown)) == 3 and all(len(s) <= 40 for s in shown)


def test_a_table_cuts_its_texts_and_never_its_figures():
    out = io.StringIO()
    rows = Rows("table", ["Name", "Total"], out=out, cell_width=20)
    rows.add([{"Name": name, "Total": 123456789012345678901234567890} for name in _KERNELS])
    rows.close()
    lines = out.getvalue().splitlines()[1:]
    assert all(line.endswith("123456789012345678901234567890") for line in lines)
    assert len({line.split()[0] for line in lines}) == 3


def test_a_what_if_line_keeps_its_saving():
    out = io.StringIO()
    rows = Rows("table", ["What-if 1"], out=out, cell_width=80)
    rows.add([{"What-if 1": f"every {_KERNELS[0]} on rank 1 10% shorter: -797.0 us"}])
    rows.close()
    assert out.getvalue().splitlines()[1].endswith("on rank 1 10% shorter: -797.0 us")


def test_every_kernel_of_a_real_trace_has_a_row_of_its_own_in_the_table(capsys):
    folder = str(real_data("kineto-2rank"))
    assert main(["ops", folder, "--by", "name", "--ranks", "0", "--format", "csv", "-q"]) == 0
    names = [r["Name"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))]
    assert main(["ops", folder, "--by", "name", "--ranks", "0", "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:-1]
    cells = [re.split(r"\s{2,}", line.strip())[1] for line in lines]
    assert len(cells) == len(names) > 150 and len(set(cells)) == len(set(names))


def test_the_size_cap_advises_what_can_help_a_one_step_json(tmp_path, capsys):
    out = tmp_path / "out" / "vllm.json"
    out.parent.mkdir()
    assert main(["convert", str(real_data("kineto-b200-vllm")), "--kind", "detail", "--max-size", "1M",
                 "-o", str(out)]) == 0
    warning = next(line for line in capsys.readouterr().err.splitlines() if "cut to fit" in line)
    assert "--steps" not in warning and "--ranks" not in warning, warning  # it has one rank, no steps
    assert "--step-marker NAME (to mark steps)" in warning and "kept detail for none of " in warning
    assert "--max-size 0" in warning and ".pftrace" in warning and ".json.gz" in warning


# -- info: each output format's size, estimated -------------------------------------------------

_SAMPLES = ["kineto-2rank", "kineto-gloo-2rank", "kineto-1.8-resnet50", "kineto-b200-vllm",
            "kineto-rocm-mi300", "msprof-2rank", "ascend-pt-2rank", "ascend-pt-db", "msprof-db",
            "mindspore-1x/single-device", "paddle-cpu-chrome", "pp-gpipe-2stage-dev"]


@pytest.mark.parametrize("sample", _SAMPLES)
def test_info_estimates_each_output_formats_size_within_a_quarter(sample, tmp_path, capsys):
    top, _, rest = sample.partition("/")
    folder = real_data(top) / rest
    assert main(["info", str(folder), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    jsonschema.validate(document, SCHEMA)
    estimated = document["estimated_by_format"]
    for kind in ("summary", "detail"):
        for suffix in (".pftrace", ".json", ".json.gz"):
            out = tmp_path / f"{kind}{suffix}"
            assert main(["convert", str(folder), "--kind", kind, "--max-size", "0", "-o", str(out),
                         "-q"]) == 0
            written, guess = out.stat().st_size, estimated[kind][suffix]
            assert abs(guess - written) <= 0.25 * written, (kind, suffix, guess, written)
