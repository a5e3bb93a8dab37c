"""The step spill gives back every record as it was filed (its rows are C, written by marshal), and
the steps that end a key's arrows as filed beside them."""

from __future__ import annotations

from array import array
from collections import defaultdict
from decimal import Decimal

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.intervals import is_compute
from converters.model import FlowEnd, Layer, Sample, Slice
from converters.readers import _core
from converters.readers.common.spill import _LAYERS, _ORDER, StepSpill
from converters.readers.common.spilled_flows import SpilledFinishes, file_by_step, launched_work_by_rule

texts = st.text(max_size=6)
times = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts
flat_args = st.dictionaries(texts, scalars, max_size=4)
slices = st.builds(
    Slice, st.just(3), st.sampled_from(list(Layer)), texts, texts, times, st.integers(0, 1 << 40),
    st.none() | flat_args | st.binary(max_size=20).map(msgspec.Raw) | st.binary(max_size=20), texts,
    st.lists(st.integers(0, (1 << 64) - 1), max_size=2).map(tuple),
    st.lists(st.integers(0, (1 << 64) - 1), max_size=2).map(tuple),
)
samples = st.builds(Sample, st.just(3), texts, times, st.floats(allow_nan=False))
flow_ends = st.builds(FlowEnd, st.just(3), st.sampled_from(list(Layer)), texts, times, texts, st.booleans())
records = st.lists(st.one_of(slices, samples, flow_ends), max_size=30)


def _as_filed(record):
    """Raw JSON args come back as bytes (the writers take either)."""
    if type(record) is Slice and isinstance(record.args, msgspec.Raw):
        return record._replace(args=bytes(record.args))
    return record


@settings(max_examples=200, deadline=None)
@given(st.lists(records, min_size=1, max_size=4))
def test_every_record_comes_back_in_order_under_its_step(batches):
    with StepSpill() as spill:
        for step, batch in enumerate(batches):
            spill.add(step % 2, batch)
        for key in (0, 1):
            back = spill.load(key, rank=3)
            want = [_as_filed(r) for step, batch in enumerate(batches) if step % 2 == key for r in batch]
            assert back == want
            assert [type(r) for r in back] == [type(r) for r in want]
            assert all(type(r.layer) is Layer for r in back if type(r) is not Sample)


def test_args_marshal_cannot_write_are_pickled():
    odd = Slice(0, Layer.HOST, "Python 1", "f", 1, 2, {"x": Decimal("1.5"), "y": [1, {"z": None}]})
    with StepSpill() as spill:
        spill.add("a", [odd])
        assert spill.load("a", rank=0) == [odd]
        assert spill.load("a", rank=0) == []  # loaded once: its place is forgotten


def test_a_record_of_another_type_is_refused():
    with StepSpill() as spill, pytest.raises(TypeError, match="not a record"):
        spill.add(0, [("not", "a", "record")])


packable_slices = st.builds(
    Slice, st.just(3), st.sampled_from(list(Layer)), texts, texts, times, st.integers(0, 1 << 40),
    st.none() | st.binary(max_size=20).map(msgspec.Raw) | st.binary(max_size=20), texts,
    st.lists(st.integers(0, (1 << 64) - 1), max_size=2).map(tuple),
    st.lists(st.integers(0, (1 << 64) - 1), max_size=2).map(tuple),
)
packable = st.lists(st.one_of(packable_slices, samples, flow_ends), max_size=40)


@settings(max_examples=300, deadline=None)
@given(packable, st.lists(st.sampled_from([f"Stream {i}" for i in range(100)]), min_size=1, max_size=200))
def test_records_without_dict_args_are_packed_and_come_back_whole(batch, lanes):
    # lanes shared by many records (one str object each, as a reader's routes make them)
    shared = {text: text for text in lanes}
    batch = batch + [Slice(3, Layer.STREAM, shared[lane], "k", i, 1) for i, lane in enumerate(lanes)]
    packed = _core.pack(batch, _ORDER, Slice, Sample, FlowEnd)
    assert packed is not None
    back = _core.unpack(packed, 3, _LAYERS, Slice, Sample, FlowEnd)
    assert back == [_as_filed(r) for r in batch]
    assert [type(r) for r in back] == [type(r) for r in batch]


def test_more_shared_texts_than_the_packer_remembers_come_back_whole():
    # the reader shares a batch's names among its records (_core.read_events): thousands of them
    names = [f"kernel_{i}" for i in range(3000)]
    batch = [Slice(3, Layer.STREAM, "Stream 1", name, i, 1) for i, name in enumerate(names + names)]
    packed = _core.pack(batch, _ORDER, Slice, Sample, FlowEnd)
    back = _core.unpack(packed, 3, _LAYERS, Slice, Sample, FlowEnd)
    assert back == [_as_filed(r) for r in batch]
    assert back[0].name is back[3000].name and back[-1].name == "kernel_2999"


def test_what_cannot_be_packed_is_said_not_lost():
    huge = Slice(0, Layer.HOST, "Python 1", "f", 1 << 70, 2)
    with_dict = Slice(0, Layer.HOST, "Python 1", "f", 1, 2, {"x": 1})
    for record in (huge, with_dict):
        assert _core.pack([record], _ORDER, Slice, Sample, FlowEnd) is None
        with StepSpill() as spill:
            spill.add(0, [record])
            assert spill.load(0, rank=0) == [record]
    with pytest.raises(ValueError, match="ends early"):
        _core.unpack(_core.pack([huge._replace(start_ns=1)], _ORDER, Slice, Sample, FlowEnd)[:-3], 0, _LAYERS,
                     Slice, Sample, FlowEnd)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdefgh"), max_size=6), min_size=1, max_size=12),
       st.lists(st.sets(st.sampled_from("abcdefgh")), min_size=12, max_size=12), st.integers(1, 5))
def test_the_spilled_finishes_say_the_last_step_in_reach_that_ends_a_key(finishing, asked, reach):
    """``SpilledFinishes.lasts`` against the rule: for each key asked at a step, the last of the
    next ``reach`` steps whose arrow ends have that key."""
    count = len(finishing)
    with StepSpill() as spill:
        for index, keys in enumerate(finishing):
            file_by_step([FlowEnd(3, Layer.HOST, "CANN 1", index, key, False) for key in keys],
                         list(range(count)), spill)
        finishes = SpilledFinishes(spill, count, reach)
        for index in range(count):
            want = {key: later for later in range(index + 1, min(index + reach, count - 1) + 1)
                    for key in asked[index] if key in finishing[later]}
            assert finishes.lasts(index, asked[index]) == want


@settings(max_examples=300, deadline=None)
@given(records, st.lists(times, max_size=5).map(sorted))
def test_packing_by_step_in_one_pass_files_as_by_step_and_pack_do(batch, starts):
    """``_core.pack_by_step`` against the rules it fuses: each step's runs hold ``by_step``'s
    records of the step, as ``pack`` packs them, and the hashes of the keys of the arrows ending
    there; None if any step's records cannot be packed."""
    buckets, hashes = _core.by_step(batch, starts, Slice, Sample, FlowEnd)
    packed = {index: _core.pack(bucket, _ORDER, Slice, Sample, FlowEnd) for index, bucket in buckets.items()}
    runs = _core.pack_by_step(batch, starts, _ORDER, Slice, Sample, FlowEnd)
    if None in packed.values():
        assert runs is None
        return
    filed, finishes = defaultdict(list), defaultdict(bytes)
    for index, data, found in runs:
        filed[index] += _core.unpack(data, 3, _LAYERS, Slice, Sample, FlowEnd)
        finishes[index] += found
    assert filed == {index: _core.unpack(data, 3, _LAYERS, Slice, Sample, FlowEnd)
                     for index, data in packed.items()}
    assert {index: found for index, found in finishes.items() if found} == {
        index: array("q", found).tobytes() for index, found in hashes.items()}
    assert all(runs[i][0] != runs[i + 1][0] for i in range(len(runs) - 1))  # a run ends where its step does


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, max_size=20),
       st.dictionaries(st.integers(-3, 8), st.lists(texts, max_size=8), max_size=6), st.integers(-2, 6))
def test_the_later_steps_of_keys_are_found_in_c_as_by_the_rule(keys, ending, index):
    loaded = {step: array("q", map(hash, ending[step])) for step in sorted(ending)}
    want = {}
    for step, hashes in loaded.items():
        want.update({key: step for key in keys if step > index and hash(key) in hashes})
    assert _core.later_steps(keys, loaded, index) == want
    assert _core.later_steps(dict.fromkeys(keys), loaded, index) == want


launched = st.lists(st.one_of(
    st.builds(Slice, st.just(3), st.sampled_from(list(Layer)), texts, texts,
              st.integers(-(1 << 62), 1 << 62), st.integers(0, 1 << 40), st.none(),
              st.sampled_from(["GPU_KERNEL", "Memcpy HtoD", "Memset", "AI_CORE", "NOTIFY_WAIT", ""])),
    flow_ends), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.lists(launched, min_size=1, max_size=3))
def test_the_work_of_launched_records_is_found_in_c_as_by_the_rule(batches):
    """``Launched.file``'s span of a step's compute and communication, and the keys of the arrows
    ending there, by ``_core.launched_work`` as by its rule, the type cache shared across batches."""
    computes: dict[str, bool] = {}
    for batch in batches:
        assert _core.launched_work(batch, Slice, FlowEnd, Layer.COMM_OP, Layer.STREAM, computes,
                                   is_compute) == launched_work_by_rule(batch)
    assert all(computes[t] == is_compute(t) for t in computes)


@given(records, st.integers(1, 1 << 40) | st.sampled_from([1, 7, 10_000_000, 100_000_000]))
def test_records_are_filed_by_window_in_c_as_by_the_rule(batch, window_ns):
    """``ByTime.add``'s filing (in C): each record under its start // window_ns, floored as Python
    floors it, the windows in the order first met, each one's records in order."""
    rule: dict[int, list] = defaultdict(list)
    for r in batch:
        rule[r.start_ns // window_ns].append(r)
    found = _core.by_window(batch, window_ns, Slice, Sample, FlowEnd)
    assert list(found.items()) == list(rule.items())
