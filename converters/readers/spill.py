"""Slices filed by step on disk, so a reader of one big file holds one step at a time."""

from __future__ import annotations

import pickle
import tempfile
from collections import defaultdict
from collections.abc import Hashable

from ..model import Layer, Slice


class StepSpill:
    """Slices filed by step (any key) in a temporary file; memory keeps only where each lies."""

    _LAYERS = list(Layer)

    def __enter__(self) -> StepSpill:
        self._file = tempfile.TemporaryFile(prefix="trace2perfetto-spill-")
        self._segments: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
        self._end = 0
        return self

    def __exit__(self, *_: object) -> None:
        self._file.close()

    def add(self, index: Hashable, slices: list[Slice]) -> None:
        rows = [(s.layer.order, s.lane, s.name, s.start_ns, s.dur_ns,
                 s.args if s.args is None or type(s.args) is dict else bytes(s.args), s.task_type)
                for s in slices]
        data = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
        self._file.seek(self._end)
        self._file.write(data)
        self._segments[index].append((self._end, len(data)))
        self._end += len(data)

    def load(self, index: Hashable, rank: int) -> list[Slice]:
        out: list[Slice] = []
        for offset, length in self._segments.pop(index, []):
            self._file.seek(offset)
            for layer, *rest in pickle.loads(self._file.read(length)):
                out.append(Slice(rank, self._LAYERS[layer], *rest))
        return out
