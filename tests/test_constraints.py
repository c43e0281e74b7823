"""Reproducible installs: pyproject.toml's ranges and constraints.txt's tested pins agree."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lock() -> ModuleType:
    spec = importlib.util.spec_from_file_location("argus_ci_lock", ROOT / ".ci" / "lock.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


lock = _lock()
PYPROJECT = (ROOT / "pyproject.toml").read_text()
CONSTRAINTS = (ROOT / "constraints.txt").read_text()


def test_every_dependency_is_bounded_and_pinned_within_its_range() -> None:
    assert lock.check_agreement(PYPROJECT, CONSTRAINTS) == []
    pins, _ = lock.parse_constraints(CONSTRAINTS)
    assert pins["fastavro"].startswith("1.") and "torch" in pins  # the extras are covered


def test_disagreements_are_named() -> None:
    """Each way the two files can disagree is reported, naming the package."""
    extra_dep = PYPROJECT.replace('"click>=8.0,<9",', '"click>=8.0,<9",\n  "left-pad>=1.2,<2",')
    assert lock.check_agreement(extra_dep, CONSTRAINTS) == [
        "pyproject.toml: left-pad<2,>=1.2 is not pinned in constraints.txt"
    ]
    unbounded = PYPROJECT.replace('"fastavro>=1.9,<2"', '"fastavro>=1.9"')
    assert lock.check_agreement(unbounded, CONSTRAINTS) == [
        "pyproject.toml: fastavro>=1.9 has no upper bound"
    ]
    pins, _ = lock.parse_constraints(CONSTRAINTS)
    outside = CONSTRAINTS.replace(f"numpy=={pins['numpy']}", "numpy==1.25.2")
    assert lock.check_agreement(PYPROJECT, outside) == [
        "constraints.txt: numpy==1.25.2 is outside pyproject's numpy<3,>=1.26"
    ]
    ranged = CONSTRAINTS.replace(f"rich=={pins['rich']}", "rich>=13")
    problems = lock.check_agreement(PYPROJECT, ranged)
    assert any("'rich>=13' is not an exact pin" in p for p in problems), problems
    assert any("rich<16,>=13 is not pinned" in p for p in problems), problems


def test_an_untested_extra_must_be_declared() -> None:
    new_extra = PYPROJECT.replace(
        "[project.optional-dependencies]\n",
        '[project.optional-dependencies]\nrocksdb = ["rocksdict>=0.3,<0.4"]\n',
    )
    with pytest.raises(SystemExit, match="rocksdb"):
        lock.check_agreement(new_extra, CONSTRAINTS)


@pytest.mark.skipif(
    os.environ.get("ARGUS_DEPS_LATEST") == "1", reason="make deps-latest: newest allowed, not pins"
)
def test_this_venv_is_the_pinned_one(tmp_path: Path) -> None:
    """The suite runs on the pinned versions (a venv installed without -c, or a bump without
    `make lock`, fails here), through the same command CI can run."""

    def check(constraints: Path) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(ROOT / ".ci" / "lock.py"), "check", "--installed"]
        cmd += ["--constraints", str(constraints)]
        return subprocess.run(cmd, capture_output=True, text=True, check=False)

    run = check(ROOT / "constraints.txt")
    assert run.returncode == 0, run.stderr
    pins, _ = lock.parse_constraints(CONSTRAINTS)
    other = tmp_path / "constraints.txt"
    other.write_text(
        CONSTRAINTS.replace(f"fastavro=={pins['fastavro']}", "fastavro==1.9.0").replace(
            f"croniter=={pins['croniter']}\n", ""
        )
    )
    run = check(other)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        f"croniter {pins['croniter']} is installed but not pinned (run `make lock`)",
        f"fastavro {pins['fastavro']} is installed, constraints.txt pins 1.9.0",
    ]
