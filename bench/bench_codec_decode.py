"""``Codec.decode`` of the live records, the hand-written body readers against fastavro
(``Codec(kernel_batch_reader=False, step_record_reader=False)``), rounds alternated in one
process: CPU µs a record, best of the rounds.

    .venv/bin/python bench/bench_codec_decode.py --rounds 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from argus.schemas import Codec
from argus.sim.layout import Layout
from argus.sim.simulate import simulate
from argus.streams import synth


def _us(codec: Codec, name: str, data: list[bytes]) -> float:
    t0 = time.process_time()
    for d in data:
        codec.decode_as(name, d)
    return 1e6 * (time.process_time() - t0) / len(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    enc = Codec()
    steps = [
        enc.encode("step_record", r)
        for t, _k, r in simulate("compute-straggler", ranks=64, steps=32, kernels=False)
        if t == "raw.steps"
    ]
    lay, rng, mix = Layout.for_ranks(64), np.random.default_rng(0), synth.default_mix(0)
    kernels = [
        enc.encode(
            "kernel_batch",
            synth.kernel_batch(
                rng, mix, job="j", rank=r, window_id=0, n_events=3000, coords=lay.coords(r)
            ),
        )
        for r in range(64)
    ]
    readers, fastavro = Codec(), Codec(kernel_batch_reader=False, step_record_reader=False)
    for name, data in (("step_record", steps), ("kernel_batch", kernels * 4)):
        got: dict[str, list[float]] = {"readers": [], "fastavro": []}
        for _ in range(a.rounds):
            got["readers"].append(_us(readers, name, data))
            got["fastavro"].append(_us(fastavro, name, data))
        r, f = min(got["readers"]), min(got["fastavro"])
        print(
            f"{name} ({len(data[0])} B, {len(data)} records): readers {r:.1f} us,"
            f" fastavro {f:.1f} us a record ({r / f:.2f}x)"
        )


if __name__ == "__main__":
    main()
