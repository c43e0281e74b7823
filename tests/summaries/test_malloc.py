"""argus.malloc: a compressor process reuses heap pages for its large numpy temporaries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

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


# In a fresh interpreter: the advice's state after no_numpy_hugepages, and the minor page
# faults of writing a fresh 64 MB array (16,384 pages of 4 KB; 32 faults in huge pages).
_HUGE_CHILD = """
import json, resource
import numpy as np
from numpy._core.multiarray import _set_madvise_hugepage
from argus.malloc import no_numpy_hugepages
off = no_numpy_hugepages()
advice = _set_madvise_hugepage(False)  # returns the state it replaces
_set_madvise_hugepage(advice)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = np.empty(8 << 20)
a[:] = 1.0
print(json.dumps({"off": off, "advice": advice,
                  "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0}))
"""


def _huge(env: dict[str, str | None]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _HUGE_CHILD],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in {**os.environ, **env}.items() if v is not None},
    )
    got: dict[str, Any] = json.loads(out.stdout)
    return got


def _thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return "none"


def test_workers_take_large_arrays_in_small_pages() -> None:
    got = _huge({"NUMPY_MADVISE_HUGEPAGE": None})
    assert got["off"] is True and got["advice"] is False
    if _thp_mode() == "madvise":  # huge pages only where advised: none were
        assert got["faults"] > 15_000


def test_an_operators_numpy_hugepage_choice_wins() -> None:
    got = _huge({"NUMPY_MADVISE_HUGEPAGE": "1"})
    assert got["off"] is False and got["advice"] is True
    if _thp_mode() == "madvise":  # advised: the array came in huge pages
        assert got["faults"] < 2_000


def test_build_app_turns_the_advice_off() -> None:
    from numpy._core.multiarray import _set_madvise_hugepage

    from argus.config import load_settings
    from argus.streams.app import build_app

    before = _set_madvise_hugepage(True)
    try:
        if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
            pytest.skip("the operator's NUMPY_MADVISE_HUGEPAGE decides")
        build_app(load_settings(), ["l3"])
        assert _set_madvise_hugepage(True) is False
    finally:
        _set_madvise_hugepage(before)
