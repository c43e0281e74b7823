"""The stacks channel: a sidecar that samples Python stacks of training processes with py-spy.

``argus collect stacks`` runs next to the training processes (one per host). At a low,
configurable rate it takes a non-blocking dump of each process
(``py-spy dump --pid P --json --nonblocking``: the target is not paused, so a stack can
occasionally be torn), folds every thread's frames into a collapsed stack
``thread;func (file:line);...`` (root first) and counts identical stacks over a window. One
``stack_batch`` record per process per window goes to the raw stacks topic, key ``job/rank``.

Processes come from the collectors' per-host registry (:mod:`argus.collectors.registry`) or
from explicit pids. Without ptrace permission py-spy cannot read a process: the sidecar says
so once per process, in one message with the remedy, and carries on with the others; the
in-process channels are unaffected (they do not depend on it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argus.errors import ArgusError

__all__ = [
    "NO_PERMISSION_HINT",
    "StackDumpError",
    "StackSampler",
    "Target",
    "classify_dump_error",
    "collapse_dump",
    "dump_stacks",
    "find_py_spy",
    "finish_recording",
    "parse_raw",
    "start_recording",
]

log = logging.getLogger("argus.collectors.stacks")

NO_PERMISSION_HINT = (
    "py-spy has no permission to read process {pid}: run the sidecar as root or with "
    "CAP_SYS_PTRACE (Docker: --cap-add SYS_PTRACE; Kubernetes: securityContext.capabilities"
    ".add [SYS_PTRACE]), or set kernel.yama.ptrace_scope=0. The stacks channel skips this "
    "process; the other channels are not affected."
)


class StackDumpError(ArgusError, RuntimeError):
    """A py-spy dump failed; ``reason`` is ``no-permission``, ``gone``, ``timeout`` or ``failed``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def classify_dump_error(stderr: str, pid_alive: bool) -> str:
    """Reason code for a failed dump from py-spy's stderr.

    Examples
    --------
    >>> classify_dump_error("Caused by: Permission denied (os error 13)", True)
    'no-permission'
    >>> classify_dump_error("Error: Failed to find python version", False)
    'gone'
    """
    low = stderr.lower()
    if "permission denied" in low or "operation not permitted" in low or "eperm" in low:
        return "no-permission"
    if not pid_alive or "no such process" in low:
        return "gone"
    return "failed"


def find_py_spy() -> str | None:
    """Path of the py-spy binary: on ``PATH`` or next to this Python interpreter."""
    found = shutil.which("py-spy")
    if found:
        return found
    cand = Path(sys.executable).parent / "py-spy"
    return str(cand) if cand.exists() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def dump_stacks(pid: int, *, py_spy: str | None = None, timeout_s: float = 5.0) -> list[Any]:
    """One non-blocking py-spy dump of ``pid``: the parsed JSON list of threads.

    Raises
    ------
    StackDumpError
        py-spy missing, timed out, failed (reason code in ``.reason``), or printed no JSON.
    """
    exe = py_spy or find_py_spy()
    if exe is None:
        raise StackDumpError("failed", "py-spy is not installed (pip install py-spy)")
    try:
        r = subprocess.run(
            [exe, "dump", "--pid", str(pid), "--json", "--nonblocking"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise StackDumpError("timeout", f"py-spy dump of {pid} took over {timeout_s} s") from None
    if r.returncode != 0:
        reason = classify_dump_error(r.stderr, _alive(pid))
        first = next((ln for ln in r.stderr.splitlines() if ln.strip()), "no output")
        raise StackDumpError(reason, f"py-spy dump of {pid}: {first.strip()}")
    try:
        data = json.loads(r.stdout)
    except ValueError as exc:
        raise StackDumpError("failed", f"py-spy printed no JSON for {pid}: {exc}") from None
    if not isinstance(data, list):
        raise StackDumpError("failed", f"py-spy JSON for {pid} is not a list of threads")
    return data


def collapse_dump(threads: Sequence[Mapping[str, Any]], *, idle: bool = True) -> list[str]:
    """Collapsed stacks, one per thread with frames: ``thread;func (file:line);...`` root first.

    Parameters
    ----------
    threads : sequence of mapping
        py-spy ``dump --json`` output (frames are leaf first there).
    idle : bool
        Keep threads py-spy reports as not active (waiting); they show where a stalled
        training loop waits.

    Examples
    --------
    >>> collapse_dump([{"thread_name": "MainThread", "thread_id": 1, "active": True,
    ...   "frames": [{"name": "f", "short_filename": "a.py", "line": 3},
    ...              {"name": "<module>", "short_filename": "a.py", "line": 9}]}])
    ['MainThread;<module> (a.py:9);f (a.py:3)']
    """
    out = []
    for th in threads:
        frames = th.get("frames") or []
        if not frames or (not idle and not th.get("active", True)):
            continue
        name = th.get("thread_name") or f"thread {th.get('os_thread_id') or th.get('thread_id')}"
        parts = [str(name)]
        for fr in reversed(frames):
            fn = fr.get("short_filename") or fr.get("filename") or "?"
            parts.append(f"{fr.get('name', '?')} ({fn}:{fr.get('line', 0)})")
        out.append(";".join(parts))
    return out


_THREAD_RE = re.compile(r"^thread \((\d+)\)(?:: (.*))?$")
_SUMMARY_RE = re.compile(r"Samples: (\d+) Errors: (\d+)")


def parse_raw(text: str) -> Counter[str]:
    """Collapsed stacks with counts from ``py-spy record --format raw --threads`` output.

    The thread element ``thread (TID): NAME`` becomes ``NAME`` (or ``thread TID``), so stacks
    look the same as :func:`collapse_dump`'s.

    Examples
    --------
    >>> parse_raw("thread (7): MainThread;<module> (a.py:9);f (a.py:3) 12\n")
    Counter({'MainThread;<module> (a.py:9);f (a.py:3)': 12})
    """
    out: Counter[str] = Counter()
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        first, sep, rest = stack.partition(";")
        m = _THREAD_RE.match(first)
        if m:
            first = m.group(2) or f"thread {m.group(1)}"
        out[first + sep + rest] += int(count)
    return out


@dataclass
class _Recording:
    pid: int
    proc: subprocess.Popen[str]
    path: Path
    rate_hz: int
    duration_s: int
    start_ns: int


def start_recording(
    pid: int, *, rate_hz: float, duration_s: float, out_dir: Path, py_spy: str | None = None
) -> _Recording:
    """Start ``py-spy record`` (non-blocking sampling, raw collapsed output) on ``pid``.

    One py-spy process samples for the whole window, so its start-up cost (reading the
    target's binaries, tens of ms of CPU) is paid once per window, not once per sample.
    """
    exe = py_spy or find_py_spy()
    if exe is None:
        raise StackDumpError("failed", "py-spy is not installed (pip install py-spy)")
    rate = max(1, round(rate_hz))
    dur = max(1, round(duration_s))
    path = out_dir / f"stacks-{pid}-{time.time_ns()}.txt"
    proc = subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--nonblocking",
            "--rate",
            str(rate),
            "--duration",
            str(dur),
            "--format",
            "raw",
            "--threads",
            "--idle",
            "--output",
            str(path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with contextlib.suppress(OSError):  # sample in the training job's gaps (collectors.priority)
        os.setpriority(os.PRIO_PROCESS, proc.pid, 19)
    return _Recording(pid, proc, path, rate, dur, time.time_ns())


def finish_recording(rec: _Recording, *, timeout_s: float = 10.0) -> tuple[Counter[str], int, int]:
    """Wait for a recording; return ``(stacks, samples attempted, errors)``.

    Raises
    ------
    StackDumpError
        py-spy failed (``.reason`` as for :func:`dump_stacks`) or did not finish in time.
    """
    try:
        out, err = rec.proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        rec.proc.kill()
        rec.proc.communicate()
        raise StackDumpError("timeout", f"py-spy record of {rec.pid} did not end") from None
    try:
        text = rec.path.read_text() if rec.path.exists() else ""
    finally:
        with contextlib.suppress(OSError):
            rec.path.unlink()
    if rec.proc.returncode != 0 and not text:
        pid = rec.pid
        reason = classify_dump_error(err, _alive(pid))
        first = next((ln for ln in err.splitlines() if ln.strip()), "no output")
        raise StackDumpError(reason, f"py-spy record of {pid}: {first.strip()}")
    attempted = rec.rate_hz * rec.duration_s
    errors = 0
    m = _SUMMARY_RE.search(out)
    if m:
        errors = int(m.group(2))
    return parse_raw(text), attempted, errors


@dataclass
class Target:
    """One process to sample."""

    pid: int
    job: str
    rank: int
    host: str = ""


@dataclass
class _Window:
    start_ns: int
    stacks: Counter[str] = field(default_factory=Counter)
    samples: int = 0
    errors: int = 0


class StackSampler:
    """Samples targets at ``rate_hz`` and emits one ``stack_batch`` per target per window.

    Parameters
    ----------
    targets : callable
        Returns the current targets (re-read every window, so new ranks are picked up).
    publish : callable
        Receives each ``stack_batch`` record (a dict) at the end of its window.
    rate_hz : float
        Dumps per second per target.
    window_s : float
        Window length, seconds.
    rate_for : callable, optional
        ``rate_for(target) -> Hz or 0`` overrides ``rate_hz`` per target (runtime control; 0
        switches the target off).
    method : str
        ``"record"`` (default): one ``py-spy record --nonblocking`` process per target per
        window samples at the rate (>= 1 Hz, whole seconds), so py-spy's start-up is paid once
        per window; rate changes apply from the next window. ``"dump"``: one
        ``py-spy dump --nonblocking`` per sample (any rate, but each dump costs ~20 ms of CPU).
    """

    def __init__(
        self,
        targets: Callable[[], Iterable[Target]],
        publish: Callable[[dict[str, Any]], None],
        *,
        rate_hz: float = 1.0,
        window_s: float = 10.0,
        rate_for: Callable[[Target], float] | None = None,
        py_spy: str | None = None,
        method: str = "record",
    ) -> None:
        if method not in ("record", "dump"):
            raise ValueError(f"method must be record or dump, got {method!r}")
        if not rate_hz > 0:
            raise ValueError(f"rate_hz must be > 0, got {rate_hz}")
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self._targets = targets
        self._publish = publish
        self.rate_hz = rate_hz
        self.window_s = window_s
        self._rate_for = rate_for or (lambda t: self.rate_hz)
        self._py_spy = py_spy or find_py_spy()
        self._windows: dict[int, _Window] = {}
        self._next_due: dict[int, float] = {}
        self._denied: set[int] = set()
        self._stop = threading.Event()
        self.published = 0
        self.dumps = 0
        self.method = method

    def stop(self) -> None:
        self._stop.set()

    def run(self, *, duration_s: float | None = None) -> None:
        """Sample until :meth:`stop` (or ``duration_s`` seconds); flush the open windows."""
        if self.method == "record":
            self._run_record(duration_s)
        else:
            self._run_dump(duration_s)

    def _run_record(self, duration_s: float | None) -> None:
        import tempfile

        t_end = None if duration_s is None else time.monotonic() + duration_s
        with tempfile.TemporaryDirectory(prefix="argus-stacks-") as td:
            while not self._stop.is_set():
                now = time.monotonic()
                if t_end is not None and now >= t_end - 0.5:
                    break
                length = self.window_s if t_end is None else min(self.window_s, t_end - now)
                running: list[tuple[Target, float, _Recording]] = []
                for t in self._targets():
                    rate = self._rate_for(t)
                    if t.pid in self._denied or rate <= 0:
                        continue
                    try:
                        rec = start_recording(
                            t.pid,
                            rate_hz=rate,
                            duration_s=length,
                            out_dir=Path(td),
                            py_spy=self._py_spy,
                        )
                    except (StackDumpError, OSError) as exc:
                        log.warning("stacks: cannot start py-spy for %d: %s", t.pid, exc)
                        continue
                    running.append((t, rate, rec))
                if not running:
                    self._stop.wait(min(1.0, length))
                    continue
                for t, rate, rec in running:
                    self._finish(t, rate, rec, timeout_s=length + 10.0)

    def _finish(self, t: Target, rate: float, rec: _Recording, *, timeout_s: float) -> None:
        try:
            stacks, attempted, errors = finish_recording(rec, timeout_s=timeout_s)
        except StackDumpError as exc:
            stacks, attempted, errors = Counter(), rec.rate_hz * rec.duration_s, 0
            errors = attempted
            if exc.reason == "no-permission":
                if t.pid not in self._denied:
                    log.error(NO_PERMISSION_HINT.format(pid=t.pid))
                self._denied.add(t.pid)
            elif exc.reason != "gone":
                log.warning("stacks: %s", exc)
        self.dumps += attempted
        self._publish(
            {
                "job": t.job,
                "rank": t.rank,
                "pid": t.pid,
                "host": t.host,
                "window_start_ns": rec.start_ns,
                "window_end_ns": time.time_ns(),
                "sample_rate_hz": float(rec.rate_hz),
                "samples": attempted,
                "errors": errors,
                "stacks": [{"stack": k, "count": c} for k, c in stacks.most_common()],
            }
        )
        self.published += 1

    def _run_dump(self, duration_s: float | None) -> None:
        t_end = None if duration_s is None else time.monotonic() + duration_s
        current: dict[int, Target] = {}
        window_end = time.monotonic() + self.window_s
        current = {t.pid: t for t in self._targets()}
        while not self._stop.is_set():
            now = time.monotonic()
            if t_end is not None and now >= t_end:
                break
            if now >= window_end:
                self._flush(current)
                window_end = now + self.window_s
                current = {t.pid: t for t in self._targets()}
            wait = min(window_end, t_end or window_end) - now
            for pid, t in list(current.items()):
                if pid in self._denied:
                    continue
                rate = self._rate_for(t)
                if rate <= 0:
                    continue
                due = self._next_due.get(pid, now)
                if now >= due:
                    self.sample(t)
                    self._next_due[pid] = max(due + 1.0 / rate, now)
                    due = self._next_due[pid]
                wait = min(wait, due - time.monotonic())
            self._stop.wait(max(0.005, min(wait, 0.5)))
        self._flush(current)

    def sample(self, t: Target) -> None:
        """Take one dump of ``t`` into its open window."""
        w = self._windows.get(t.pid)
        if w is None:
            w = self._windows[t.pid] = _Window(time.time_ns())
        w.samples += 1
        self.dumps += 1
        try:
            w.stacks.update(collapse_dump(dump_stacks(t.pid, py_spy=self._py_spy)))
        except StackDumpError as exc:
            w.errors += 1
            if exc.reason == "no-permission":
                if t.pid not in self._denied:
                    log.error(NO_PERMISSION_HINT.format(pid=t.pid))
                self._denied.add(t.pid)
            elif exc.reason != "gone":
                log.debug("%s", exc)

    def _flush(self, targets: Mapping[int, Target]) -> None:
        end = time.time_ns()
        for pid, w in list(self._windows.items()):
            t = targets.get(pid)
            del self._windows[pid]
            if t is None or w.samples == 0:
                continue
            self._publish(
                {
                    "job": t.job,
                    "rank": t.rank,
                    "pid": pid,
                    "host": t.host,
                    "window_start_ns": w.start_ns,
                    "window_end_ns": end,
                    "sample_rate_hz": float(self._rate_for(t)),
                    "samples": w.samples,
                    "errors": w.errors,
                    "stacks": [{"stack": s, "count": c} for s, c in w.stacks.most_common()],
                }
            )
            self.published += 1

    @property
    def denied(self) -> set[int]:
        """Pids py-spy may not read (reported once each)."""
        return set(self._denied)
