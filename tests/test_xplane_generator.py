"""``fixtures/xplane_gen.py`` against the real XSpace (``xplane-jax-conv``): the planes, lines and
stats the reader reads have the sample's names and forms; a cut file is the reader's error."""

from __future__ import annotations

import re

import pytest
from conftest import real_data

from converters import discover
from converters.errors import InputError
from converters.readers import xplane_pb2
from fixtures.xplane_gen import write_xspace

_LINE = re.compile(r"^(Stream #|Host Threads/|python$|py_xla_execute/|tf_pjrt_thread_pool/)")


def _shape(space) -> dict:
    """The names the reader depends on, by plane kind."""
    shape: dict[str, set] = {}
    for plane in space.planes:
        kind = re.sub(r"\d+$", "N", plane.name)
        names = shape.setdefault(kind, set())
        names |= {found[1] if (found := _LINE.match(line.name)) else line.name for line in plane.lines}
        ids = plane.stat_metadata
        names |= {f"stat {ids[s.metadata_id].name} {s.WhichOneof('value')}"
                  for line in plane.lines for e in line.events for s in e.stats
                  if ids[s.metadata_id].name in ("correlation_id", "kernel_details", "step_num")}
        names |= {f"plane stat {ids[s.metadata_id].name}" for s in plane.stats
                  if ids[s.metadata_id].name == "profile_start_time"}
    return shape


def test_the_generated_xspace_has_the_real_ones_planes_lines_and_stats(tmp_path):
    real = xplane_pb2.XSpace.FromString((real_data("xplane-jax-conv") / "tw003.xplane.pb").read_bytes())
    made = write_xspace(tmp_path, devices=8, rccl=False, copies=False, step_annotations=False)
    ours = xplane_pb2.XSpace.FromString(made.paths[0].read_bytes())
    theirs, mine = _shape(real), _shape(ours)
    assert set(mine) == set(theirs)
    for kind in theirs:
        assert mine[kind] <= theirs[kind], kind  # nothing the sample does not have, but what is asked
    assert [p.name for p in ours.planes] == [p.name for p in real.planes]
    assert max(line.timestamp_ns for p in ours.planes for line in p.lines) < 10**9  # from the capture's start


def test_a_generated_cut_file_is_an_error_naming_the_file_and_the_plane(tmp_path):
    made = write_xspace(tmp_path, cut=True)
    with pytest.raises(InputError, match="cut inside its plane") as error:
        discover(tmp_path)
    assert error.value.path == made.paths[0]
