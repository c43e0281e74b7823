"""``Codec.decode`` of the live records, the hand-written body readers against fastavro
(``Codec(kernel_batch_reader=False, step_record_reader=False)``), rounds alternated in one
process: CPU µs a record, best of the rounds.

    .venv/bin/python bench/bench_codec_decode.py --rounds 5
"""

from __future__ import annotations

import argparse
import time

from bench_kafka_clients import _values

from argus.schemas import Codec
from argus.sim.simulate import simulate


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
    kernels = _values(256)  # 16 ranks' 3,000-event batches, repeated
    readers, fastavro = Codec(), Codec(kernel_batch_reader=False, step_record_reader=False)
    for name, data in (("step_record", steps), ("kernel_batch", kernels)):
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
