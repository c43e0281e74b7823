"""argus.malloc: a compressor process reuses heap pages for its large numpy temporaries."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# In a fresh interpreter: minor page faults of 50 "polls", each making ten 1.5 MB arrays
# alive together, written, then freed (a compressor poll's temporaries), with or without
# keep_freed_blocks.
_CHILD = """
import json, resource, sys
import numpy as np
from argus.malloc import keep_freed_blocks
on = keep_freed_blocks() if sys.argv[1] == "kept" else None
def poll():
    xs = [np.ones(192_000 + i) for i in range(10)]  # 1.5 MB each, pages touched
    del xs
poll()  # warm up: the first time the heap grows
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    poll()
print(json.dumps({"on": on, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0}))
"""


def _run(mode: str, env: dict[str, str] | None = None) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    got: dict[str, object] = json.loads(out.stdout)
    return got


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_blocks_spare_the_page_faults_of_each_temporary() -> None:
    kept, default = _run("kept"), _run("default")
    assert kept["on"] is True
    # default: the freed heap top is trimmed (or blocks mapped afresh): ~375 faults per
    # array, ~190,000 in all
    assert int(default["faults"]) > 50_000  # type: ignore[call-overload]
    assert int(kept["faults"]) < 2_000  # type: ignore[call-overload]


def test_an_operators_malloc_environment_wins() -> None:
    got = _run("kept", {"MALLOC_TRIM_THRESHOLD_": "1000000"})
    assert got["on"] is False
