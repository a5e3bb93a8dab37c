"""Records filed by step on disk, so a reader of one big file holds one step at a time.

Records go to disk packed by ``_core.pack`` (a format of their own: 2-3x faster both ways than
marshal, which was 3x faster than pickle); a batch it cannot pack (args that are dicts, ints past
64 bits) goes as plain rows (``_core.rows``) written by marshal, or pickled where marshal cannot
write some args.
"""

from __future__ import annotations

import marshal
import pickle
import tempfile
from collections import defaultdict
from collections.abc import Hashable

from ..model import FlowEnd, Layer, Sample, Slice
from . import _core


class StepSpill:
    """Slices filed by step (any key) in a temporary file; memory keeps only where each lies."""

    def __enter__(self) -> StepSpill:
        self._file = tempfile.TemporaryFile(prefix="trace2perfetto-spill-")
        self._segments: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
        self._end = 0
        return self

    def __exit__(self, *_: object) -> None:
        self._file.close()

    def add(self, index: Hashable, records: list[Slice | Sample | FlowEnd]) -> None:
        packed = _core.pack(records, _ORDER, Slice, Sample, FlowEnd)
        if packed is not None:
            self._write(index, _PACKED + packed)
            return
        found = _core.rows(records, _ORDER, Slice, Sample, FlowEnd)  # args as dicts, huge ints
        try:
            data = _MARSHAL + marshal.dumps(found)
        except ValueError:  # a value marshal cannot write, in some args
            data = _PICKLE + pickle.dumps(found, protocol=pickle.HIGHEST_PROTOCOL)
        self._write(index, data)

    def _write(self, index: Hashable, data: bytes) -> None:
        self._file.seek(self._end)
        self._file.write(data)
        self._segments[index].append((self._end, len(data)))
        self._end += len(data)

    def add_values(self, index: Hashable, value: object) -> None:
        """File any picklable value (e.g. an array of hashes) under ``index``, beside the records."""
        self._write(index, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def load_values(self, index: Hashable) -> list:
        """The values filed by ``add_values`` under ``index``, in the order they were added."""
        values = []
        for offset, length in self._segments.pop(index, []):
            self._file.seek(offset)
            values.append(pickle.loads(self._file.read(length)))
        return values

    def load(self, index: Hashable, rank: int) -> list[Slice | Sample | FlowEnd]:
        out: list[Slice | Sample | FlowEnd] = []
        for offset, length in self._segments.pop(index, []):
            self._file.seek(offset)
            data = memoryview(self._file.read(length))
            if data[:1] == _PACKED:
                out += _core.unpack(data[1:], rank, _LAYERS, Slice, Sample, FlowEnd)
                continue
            found = marshal.loads(data[1:]) if data[:1] == _MARSHAL else pickle.loads(data[1:])
            out += _core.records(found, rank, _LAYERS, Slice, Sample, FlowEnd)
        return out


_PACKED, _MARSHAL, _PICKLE = b"c", b"m", b"p"
_ORDER = {layer: layer.order for layer in Layer}
_LAYERS = list(Layer)
