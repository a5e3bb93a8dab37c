"""The Perfetto writer's encoding (its per-event loop is C), read back with Perfetto's own schema."""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_check import read_perfetto

from converters.layout import Lanes, by_lane_and_start
from converters.model import TIME_LIMIT_NS, Layer, RankInfo, Sample, Slice, decoded_args
from converters.writers import perfetto
from converters.writers.perfetto import PerfettoEncoder, encode_args

RANK = RankInfo(rank=0, format="test", path=Path("x"))
T0 = 1_736_408_883_000_000_000  # epoch ns, as readers make them

scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=8), st.floats(allow_nan=True),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.sampled_from([0, 1, 16383, 16384, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64, -1]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=4), inner, max_size=3), max_leaves=6)
keys = st.sampled_from(["Task Type", "size", "id", "x", "ratio", "名"]) | st.text(max_size=6)
arg_dicts = st.dictionaries(keys, values, max_size=6)


def expected(value):
    """What a debug annotation holds for ``value``, as trace_check reads it back."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -(1 << 63) <= value < (1 << 64) else str(value)
    if isinstance(value, float | str):
        return value
    return _Nested(_nulled(value))


class _Nested:
    """A list or dict argument, written as its JSON text (NaN and infinities as null)."""

    def __init__(self, value) -> None:
        self.value = value

    def __eq__(self, text) -> bool:
        return isinstance(text, str) and json.loads(text) == self.value

    def __repr__(self) -> str:
        return f"JSON of {self.value!r}"


def _nulled(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_nulled(v) for v in value]
    if isinstance(value, dict):
        return {k: _nulled(v) for k, v in value.items()}
    return value


def encode(slices: list[Slice], samples: list[Sample] = ()) -> bytes:
    encoder = PerfettoEncoder(0)
    header = PerfettoEncoder().header([RANK])
    return header + encoder.chunk(0, Lanes().place(sorted(slices, key=by_lane_and_start), samples))


def same(read, want) -> bool:
    return (isinstance(want, float) and math.isnan(want) and math.isnan(read)) or want == read


@settings(max_examples=300, deadline=None)
@given(st.lists(arg_dicts, min_size=1, max_size=12), st.booleans())
def test_args_read_back_as_written_whether_dict_or_raw_json(arg_list, raw):
    slices = []
    for i, args in enumerate(arg_list):
        if raw:  # JSON has no NaN and no ints past 64 bits: what a reader's raw args can hold
            args = {k: v for k, v in args.items() if _json_safe(v)}
            written = msgspec.Raw(orjson.dumps(args))
        else:
            written = args
        slices.append(Slice(0, Layer.STREAM, "Stream 1", f"op{i % 3}", T0 + i * 1000, 500, written or None))
    trace = read_perfetto(encode(slices))
    read = sorted(trace.slices, key=lambda s: s.start_ns)
    assert len(read) == len(slices)
    for got, s in zip(read, sorted(slices, key=lambda s: s.start_ns), strict=True):
        args = orjson.loads(bytes(s.args)) if isinstance(s.args, msgspec.Raw) else (s.args or {})
        want = {str(k): expected(v) for k, v in args.items() if v is not None}
        assert got.name == s.name and got.start_ns == s.start_ns and got.dur_ns == s.dur_ns
        assert got.args.keys() == want.keys()
        assert all(same(got.args[k], want[k]) for k in want), (got.args, want)


def _json_safe(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return -(1 << 63) <= value < (1 << 64)
    if isinstance(value, list):
        return all(_json_safe(v) for v in value)
    if isinstance(value, dict):
        return all(_json_safe(v) for v in value.values())
    return True


def test_raw_args_that_are_no_object_are_kept_under_args():
    s = Slice(0, Layer.HOST, "Python 1", "f", T0, 10, msgspec.Raw(b"[1,2]"))
    assert read_perfetto(encode([s])).slices[0].args == {"args": "[1,2]"}


def test_names_past_the_interning_cap_are_written_inline_and_read_back():
    count = perfetto._MAX_INTERNED + 500  # the table stops growing; the rest are inline strings
    slices = [Slice(0, Layer.HOST, "Python 1", f"op{i}", T0 + i * 10, 5, {f"k{i}": f"v{i}"})
              for i in range(count)]
    read = sorted(read_perfetto(encode(slices)).slices, key=lambda s: s.start_ns)
    assert [s.name for s in read] == [f"op{i}" for i in range(count)]
    assert [s.args for s in read] == [{f"k{i}": f"v{i}"} for i in range(count)]


texts_with_surrogates = st.text(st.characters(exclude_categories=()), max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(texts_with_surrogates, texts_with_surrogates), min_size=1, max_size=20),
       st.integers(min_value=0, max_value=3))
def test_strings_are_interned_in_c_as_the_interner_does(pairs, room):
    """The C core interns new names and strings itself, into ``_Interner``'s state: the same
    references, definitions and table as the interner's own (Python) rule, also past its cap
    (``room``: how many strings the tables take before it) and for text with surrogates."""
    in_c, in_python = perfetto._Sequence(1), perfetto._Sequence(1)
    for seq in (in_c, in_python):  # tables nearly full: only ``room`` more strings are interned
        for table in (seq.arg_names, seq.strings):
            table.refs.update((f"filler {i}", b"") for i in range(perfetto._MAX_INTERNED - room))
    for key, value in pairs:
        written = encode_args(in_c, {key: value}, perfetto._annotation, decoded_args)
        assert written == perfetto._annotation(key, value, in_python)
        assert in_c.interned() == in_python.interned()
    for table in ("arg_names", "strings"):
        assert getattr(in_c, table).refs == getattr(in_python, table).refs


def test_event_names_are_interned_in_c_as_the_interner_does():
    names = ["launch", "kernel", "名", "launch", "\ud800 lone", "kernel", ""]
    slices = [Slice(0, Layer.HOST, "Python 1", name, T0 + i * 10, 5) for i, name in enumerate(names)]
    encoder = PerfettoEncoder(0)
    encoder.chunk(0, Lanes().place(slices, []))
    reference = perfetto._Sequence(1).names
    for name in names:
        reference(name)
    assert encoder._sequences[0].names.refs == reference.refs


def test_counters_flows_and_small_timestamps():
    begin = Slice(0, Layer.HOST, "CANN 1", "launch", 5, 10, flows_out=(0xFFFF_FFFF_FFFF_FFFF,))
    end = Slice(0, Layer.STREAM, "Stream 2", "kernel", 20, 3, flows_in=(0xFFFF_FFFF_FFFF_FFFF,))
    samples = [Sample(0, "HBM [Read]", 7, 1.5), Sample(0, "HBM [Read]", 9, -2.0)]
    trace = read_perfetto(encode([begin, end], samples))
    assert trace.flows == 1
    assert {(s.name, s.start_ns, s.dur_ns) for s in trace.slices} == {("launch", 5, 10), ("kernel", 20, 3)}
    assert [(ts, v) for _, _, ts, v in trace.counters] == [(7, 1.5), (9, -2.0)]


def test_times_up_to_the_models_latest_read_back_exactly():
    """Packets hold each time as absolute ns (no origin, no deltas), so the model's latest start
    and its longest slice, ending at 2**63 - 2 ns, fit them: nothing overflows."""
    last = TIME_LIMIT_NS - 1
    first = Slice(0, Layer.HOST, "Python 1", "first", 0, 5, flows_out=(7,))
    longest = Slice(0, Layer.HOST, "Python 1", "longest", last, last, flows_in=(7,))
    trace = read_perfetto(encode([first, longest], [Sample(0, "HBM", 0, 1.0), Sample(0, "HBM", last, 2.0)]))
    assert {(s.name, s.start_ns, s.dur_ns) for s in trace.slices} == {("first", 0, 5),
                                                                       ("longest", last, last)}
    assert [(ts, v) for _, _, ts, v in trace.counters] == [(0, 1.0), (last, 2.0)]
    assert trace.flows == 1


# Raw JSON args as a file may write them: any spacing, escapes, unicode, numbers in any form a JSON
# number takes (exponents, -0, past a double, past 64 bits), repeated keys, nesting, and text that
# is no JSON at all
def _json_string(text: str, ascii_only: bool) -> str:
    """``text`` as JSON, non-ASCII characters (and newlines) as \\u escapes or as themselves."""
    written = json.dumps(text, ensure_ascii=ascii_only)
    return written.replace("\\n", "\\u000a") if ascii_only else written


spaces = st.sampled_from(["", " ", "\n\t ", "\r\n"])
json_numbers = st.one_of(
    st.integers(min_value=-(1 << 70), max_value=1 << 70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["-0", "0", "-0.0", "1E5", "1e+5", "2.5e-3", "1e400", "-1e400", "1e-400", "0.1", "01",
                     "1.", ".5", "-", "1e", "123456789012345678", "1234567890123456789",
                     "-999999999999999999", "18446744073709551615", "4.9e-324", "1.7976931348623157e308"]),
)
# strings long enough for the walk's 8-byte steps, with what stops a step anywhere in them: quotes,
# backslashes, control chars, bytes past ASCII; written as JSON, or raw (mostly no JSON: an error)
string_bytes = "ab \"\\/\t\x1f\x7f\u00e9\u540d"
long_strings = st.one_of(st.builds(_json_string, st.text(string_bytes, max_size=40), st.booleans()),
                         st.text(string_bytes, max_size=40).map(lambda t: '"' + t + '"'))
json_scalars = st.one_of(
    json_numbers, st.sampled_from(["true", "false", "null", "tru", "nul"]),
    st.builds(_json_string, st.text(max_size=8), st.booleans()), long_strings,
    st.sampled_from(['"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t"', '"\\ud83d\\ude00"', '"\\ud800"', '"\\x"', '"a\tb"',
                     '"float;\\r\\nNone"', '"名字"', '"0"', '"true"', '"1.5"']),
)
json_nested_keys = st.one_of(st.builds(_json_string, st.text(max_size=3), st.booleans()),
                             st.sampled_from(['"a\\/b"', '"k"', '"\\n"']))


def _json_array(items: list[str], gap: str) -> str:
    return "[" + gap + ("," + gap).join(items) + gap + "]"


def _json_object(members: list[tuple[str, str]], gap: str) -> str:
    return "{" + gap + ("," + gap).join(f"{k}{gap}:{gap}{v}" for k, v in members) + gap + "}"


# nested values as Kineto writes them ("Input Dims": [[1, 3, 224, 224], []]), any spacing, keys
# repeated or escaped, floats and everything else a scalar can be at any depth
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.builds(_json_array, st.lists(inner, max_size=4), spaces),
    st.builds(_json_object, st.lists(st.tuples(json_nested_keys, inner), max_size=3), spaces),
), max_leaves=10)
json_keys = st.one_of(keys.map(json.dumps), st.sampled_from(['"a\\"b"', '"\\u540d"', '"a']))


@st.composite
def raw_args(draw) -> bytes:
    members = draw(st.lists(st.tuples(json_keys, json_values), max_size=8))
    if draw(st.booleans()) and members:  # a key written twice
        members.append((members[0][0], draw(json_values)))
    gap = draw(spaces)
    text = gap + "{" + gap + ("," + gap).join(f"{k}{gap}:{gap}{v}" for k, v in members) + gap + "}" + gap
    return draw(st.sampled_from([text, text, text, "[1,2]", "3", "{}", text + "x", text[:-2]])).encode()


def _reference_args(raw: bytes, seq) -> bytes:
    """The rule: the args decoded by ``decoded_args``, then encoded as a dict."""
    decoded = decoded_args(raw)
    return encode_args(seq, decoded if isinstance(decoded, dict) else {"args": decoded}, perfetto._annotation,
                       decoded_args)


@settings(max_examples=1500, deadline=None)
@given(st.lists(raw_args(), min_size=1, max_size=6))
def test_raw_args_are_encoded_as_their_decoded_dict_is(raws):
    """The C walk of raw JSON args (no dict made) writes what decoding them and encoding the dict
    writes: the same annotation bytes and the same strings interned, in order; or the same error;
    also for members it remembers (constant on a sequence) rather than encodes again."""
    walked, decoded = perfetto._Sequence(1), perfetto._Sequence(1)
    # again, as the same text (remembered whole) and as another text of the same members (each remembered)
    for raw in raws + raws[::-1] + [b" " + raw for raw in raws]:
        try:
            want = _reference_args(raw, decoded)
        except (msgspec.DecodeError, ValueError) as error:
            with pytest.raises(type(error)):
                encode_args(walked, raw, perfetto._annotation, decoded_args)
            continue
        assert encode_args(walked, raw, perfetto._annotation, decoded_args) == want
        assert walked.interned() == decoded.interned()


def test_flat_raw_args_are_walked_without_decoding():
    calls = []
    raw = b'{"Task Type": "AI_CORE", "id": 7, "ratio": -2.5e-3, "ok": true, "none": null, "s": "a\\r\\nb"}'
    walked, decoded = perfetto._Sequence(1), perfetto._Sequence(1)
    assert encode_args(walked, raw, perfetto._annotation, calls.append) == _reference_args(raw, decoded)
    assert calls == []


def test_nested_raw_args_are_walked_without_decoding():
    """Kineto's nested args (lists of shapes and type names) are written as their compact JSON
    text, as decoding them and encoding the dict writes it, with no call into Python."""
    calls = []
    raw = (b'{"Input Dims": [[1, 3, 224, 224], [], [-0]], '
           b'"Input type": ["float", "", "a\\/b\\r\\n\xc3\xa9"], '
           b'"Concrete Inputs": ["", "1"], "ok": false, "x": { "k" : [null, true, {}] }}')
    walked, decoded = perfetto._Sequence(1), perfetto._Sequence(1)
    assert encode_args(walked, raw, lambda *a: calls.append(a), calls.append) == _reference_args(raw, decoded)
    assert calls == []
    assert list(walked.strings.refs) == [orjson.dumps(v).decode() for k, v in orjson.loads(raw).items()
                                         if isinstance(v, list | dict)]


# nested values of every kind an arg's value holds: text with what JSON escapes, ints to past 64
# bits, floats, tuples, keys that are no str
json_texts = st.text(st.characters(codec="utf-8") | st.sampled_from(list('"\\/\b\f\n\r\t\x00\x1f\x7f')),
                     max_size=8)
nested_scalars = st.one_of(st.none(), st.booleans(), json_texts, st.floats(),
                           st.integers(min_value=-(1 << 65), max_value=1 << 65),
                           st.sampled_from([-(1 << 63), (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64, 0]))
nested_values = st.recursive(nested_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(json_texts, inner, max_size=3), st.dictionaries(st.integers(0, 3), inner, max_size=2),
), max_leaves=12)


def _in_c(value) -> bool:
    """Whether the C core writes ``value`` itself: no floats, ints of 64 bits, str keys."""
    if isinstance(value, float):
        return False
    if isinstance(value, int) and not isinstance(value, bool):
        return -(1 << 63) <= value < (1 << 63)
    if isinstance(value, list | tuple):
        return all(_in_c(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _in_c(v) for k, v in value.items())
    return True


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.tuples(keys, nested_values), min_size=1, max_size=6))
def test_nested_args_are_encoded_in_c_as_the_annotation_rule_does(pairs):
    """Nested values, bools and None are encoded in C as ``_annotation`` (the rule) encodes them:
    the same bytes and strings interned, with no call into Python where they hold no floats and
    no ints past 64 bits; and they read back as their JSON text."""
    in_c, in_python = perfetto._Sequence(1), perfetto._Sequence(1)
    called = []

    def annotation(key, value, seq):
        called.append(value)
        return perfetto._annotation(key, value, seq)

    for key, value in pairs:
        assert encode_args(in_c, {key: value}, annotation, decoded_args) == perfetto._annotation(
            key, value, in_python)
        assert in_c.interned() == in_python.interned()
    assert [v for v in called if _in_c(v)] == []
    args = dict(pairs)
    read = read_perfetto(encode([Slice(0, Layer.HOST, "Python 1", "op", T0, 10, args)])).slices[0].args
    want = {k: orjson.dumps(v).decode() if isinstance(v, list | tuple | dict) else v
            for k, v in args.items() if v is not None and _in_c(v)}
    assert {k: read[k] for k in want} == want


def test_raw_args_past_the_caps_are_encoded_as_their_decoded_dict_is():
    """Past the string table's cap new strings are inline, past the caches' (raw texts, members)
    they are encoded each time: the same bytes as the rule's, the second time too."""
    texts = [orjson.dumps({"k": f"v{i % (perfetto._MAX_INTERNED + 300)}", "n": i % 20000})
             for i in range(2 * perfetto._MAX_INTERNED + 600)]
    walked, decoded = perfetto._Sequence(1), perfetto._Sequence(1)
    for raw in texts + [b" " + text for text in texts]:  # the second time other texts: members remembered
        assert encode_args(walked, raw, perfetto._annotation, decoded_args) == _reference_args(raw, decoded)
    assert walked.interned() == decoded.interned()


def test_a_string_that_reads_as_a_number_is_no_number():
    """The walk remembers members by their JSON text: the string "5" is not the int 5."""
    walked, decoded = perfetto._Sequence(1), perfetto._Sequence(1)
    for raw in (b'{"x":5}', b'{"x":"5"}', b'{"x": 5}', b'{"x":"5" }', b'{"x":"5"}'):
        assert encode_args(walked, raw, perfetto._annotation, decoded_args) == _reference_args(raw, decoded)
