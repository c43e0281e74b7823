"""A per-host registry of training processes, so the stacks sidecar can find them.

:func:`argus.collectors.start` writes ``<state_dir>/collectors/<pid>.json`` (job, rank, pid,
host, start time) and removes it at exit; ``argus collect stacks`` reads the folder and keeps
the entries whose pid is alive. Nothing here runs during a step.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["ProcessEntry", "list_processes", "register_process", "unregister_process"]


@dataclass(frozen=True)
class ProcessEntry:
    job: str
    rank: int
    pid: int
    host: str
    started_ns: int
    groups: dict[str, str] = field(default_factory=dict)


def _dir(state_dir: Path) -> Path:
    return Path(state_dir) / "collectors"


def register_process(state_dir: Path, entry: ProcessEntry) -> Path | None:
    """Write the entry; returns its path, or ``None`` when the folder is not writable."""
    try:
        d = _dir(state_dir)
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{entry.pid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(entry)))
        tmp.replace(path)
        return path
    except OSError:
        return None


def unregister_process(state_dir: Path, pid: int) -> None:
    with contextlib.suppress(OSError):
        (_dir(state_dir) / f"{pid}.json").unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_processes(state_dir: Path, job: str | None = None) -> list[ProcessEntry]:
    """Live registered training processes on this host (optionally of one job), by rank."""
    out: list[ProcessEntry] = []
    d = _dir(state_dir)
    if not d.is_dir():
        return out
    for p in d.glob("*.json"):
        try:
            e = ProcessEntry(**json.loads(p.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if not _alive(e.pid):
            # stale entry of a process that died without cleaning up
            with contextlib.suppress(OSError):
                p.unlink()
            continue
        if job is None or e.job == job:
            out.append(e)
    return sorted(out, key=lambda e: (e.job, e.rank))
