"""Zero-code-change collectors: ``python -m argus.collectors.autorun train.py [args...]``.

Starts the collectors from the environment and the config file (``ARGUS_JOB`` is required),
hooks **every** optimizer globally (``torch.optim.optimizer.register_optimizer_step_*_hook``):
each ``optimizer.step()`` is the ``optimizer`` phase and closes the step, and then runs the
script as ``__main__``. Works under torchrun::

    ARGUS_JOB=run7 torchrun --nproc-per-node 8 -m argus.collectors.autorun train.py --lr 3e-4

What it cannot do without code: named module phases and the DDP all-reduce phase (the model
is built inside the script). A script can still call ``argus.collectors.instrument(...)``;
the collector is already running. Torch's distributed rank is read lazily: when the script
initialises the process group after start, ``RANK`` from torchrun is used (the same value).
"""

from __future__ import annotations

import runpy
import sys
import time
from typing import Any

import argus.collectors as ac


def _install_global_optimizer_hooks(col: Any) -> None:
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    starts: list[Any] = []

    def pre(_opt: Any, _args: Any, _kw: Any) -> None:
        t0 = time.thread_time_ns()
        try:
            if col.phases_on:
                starts.append(col.mark())
        except Exception:
            col.errors += 1
        col.oh_ns += time.thread_time_ns() - t0

    def post(_opt: Any, _args: Any, _kw: Any) -> None:
        t0 = time.thread_time_ns()
        try:
            if starts:
                col.add_phase("optimizer", "compute", "sum", starts.pop(), col.mark())
        except Exception:
            col.errors += 1
        col.oh_ns += time.thread_time_ns() - t0
        if not col.explicit_steps:
            col.auto_stepping = True
            col.step_end()
            col.step_begin()

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    col = ac.start()  # configuration errors are reported here, before the script runs
    try:
        _install_global_optimizer_hooks(col)
        col.step_begin()
    except Exception as exc:  # torch missing or too old: phases by hand still work
        col.errors += 1
        print(f"argus collectors: no automatic optimizer steps ({exc!r})", file=sys.stderr)
    sys.argv = list(args)
    try:
        runpy.run_path(args[0], run_name="__main__")
    finally:
        ac.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
