"""records.h, where the C modules read the fields of the model's tuples, against the tuples
themselves: a field added or moved in Python without the header fails here, not as a wrong field
read in C (a slice's name written as its lane, a start taken for a duration)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

import converters
from converters import intervals, layout, model
from converters.readers import ascend_db_flows, ascend_db_specs, chrome_trace, kineto, xplane
from converters.readers.common import flows, seek, spill

HEADER = Path(converters.__file__).parent / "records.h"

# The tuples records.h names, each by its class; a constant is <CLASS>_<FIELD> in upper snake case
NAMED_TUPLES = (
    model.Slice, model.Sample, model.FlowEnd,
    layout.Track, layout.Begin, layout.End, layout.Value, layout.Placement,
    intervals.StepIntervals,
    chrome_trace.Route, chrome_trace.ReadContext, chrome_trace.LeftOut, spill.ByStep,
    kineto.InC, kineto.InCCat, xplane.DeviceInC, xplane.HostInC,
    ascend_db_flows.BindRules, ascend_db_specs.TaskSpec, ascend_db_specs.TaskPlaces, ascend_db_specs.CommSpec,
    ascend_db_specs.CommEnums, ascend_db_specs.HostSpec, ascend_db_specs.FillHead,
)
# plain tuples: intervals.Interval (start_ns, end_ns), flows.Bound.arrows' items, seek._NEEDLES' items
RECORDS = {**{cls.__name__: cls._fields for cls in NAMED_TUPLES}, "Interval": ("start", "end"),
           "Arrow": ("key", "start", "end"), "Needle": ("text", "at")}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def _header() -> dict[str, int]:
    """Every ``#define NAME number`` of records.h."""
    found = re.findall(r"^#define\s+(\w+)\s+(\d+)\s*$", HEADER.read_text(), re.MULTILINE)
    return {name: int(value) for name, value in found}


def _owner(constant: str) -> str | None:
    """The record a constant names a field of: the longest prefix that matches."""
    prefixes = [name for name in RECORDS if constant.startswith(_snake(name) + "_")]
    return max(prefixes, key=len, default=None)


@pytest.mark.parametrize("record", RECORDS)
def test_the_header_names_each_field_at_its_position(record):
    fields = RECORDS[record]
    prefix = _snake(record)
    expected = {f"{prefix}_{field.upper()}": i for i, field in enumerate(fields)}
    expected[f"{prefix}_FIELDS"] = len(fields)
    named = {name: value for name, value in _header().items() if _owner(name) == record}
    assert named == expected, f"records.h does not match {record}'s fields {fields}"


def test_the_time_limit_is_the_models():
    shift = re.search(r"^#define\s+TIME_LIMIT_NS\s+\(1LL << (\d+)\)\s*$", HEADER.read_text(), re.MULTILINE)
    assert shift is not None and 1 << int(shift.group(1)) == model.TIME_LIMIT_NS


def test_every_constant_of_the_header_is_a_field():
    assert [name for name in _header() if _owner(name) is None] == []


def test_an_interval_is_a_pair():
    assert typing.get_args(intervals.Interval) == (int, int)


def test_an_arrow_and_a_needle_are_the_tuples_the_header_names():
    assert typing.get_args(typing.get_type_hints(flows.Bound)["arrows"]) == (tuple[str, int, int],)
    assert all(type(text) is bytes and type(at) is int for text, at in seek._NEEDLES)


def test_the_positions_python_copies_slices_by():
    """``model``'s positions are those of records.h, and ``with_flows`` keeps every field before
    the arrows, which end a Slice."""
    header = _header()
    assert (model.SLICE_START_NS, model.SLICE_ARGS, model.SLICE_FLOWS_OUT) == (
        header["SLICE_START_NS"], header["SLICE_ARGS"], header["SLICE_FLOWS_OUT"])
    assert model.Slice._fields[model.SLICE_FLOWS_OUT:] == ("flows_out", "flows_in")
    s = model.Slice(3, model.Layer.STREAM, "Stream 1", "op", 10, 5, b"{}", "AI_CORE", (1,), (2,))
    assert s.with_flows((7,), ()) == s._replace(flows_out=(7,), flows_in=())
