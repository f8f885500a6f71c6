"""alnsort.stages with one wrong split guess: the second split's start is
moved 3 bytes into its record (not a record start), as a bad guess would
be. Used by test_cluster.py to check the driver's repair of several
inputs: the split's sample (and reach) fails, the previous map's proven
end repairs it, and the maps whose prior changed with it run again."""

from __future__ import annotations

from alnsort.stages import *  # noqa: F401,F403 - the real stages
from alnsort.stages import split as _split


def split(inputs, parts, **kwargs):
    out = _split(inputs, parts, **kwargs)
    assert out[0]["input"] == out[1]["input"], "the first two splits must share an input"
    out[1]["start"] += 3
    out[0]["end"] = out[1]["start"]
    return out
