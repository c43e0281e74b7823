"""GPU check of the collectors: CUPTI always on, CUDA-event phases, overhead ratio.

UNVERIFIED: written without access to a GPU (the session that wrote it had none). The CUPTI
calls follow the cupti-python documentation; the first run on a GPU host is the real test.

Run on a CUDA host (no broker needed: records go to a closed port and are dropped and
counted; a tap keeps a sample before encoding)::

    pip install cupti-python            # the build matching the CUDA major version
    python bench/gpu_cupti_check.py                       # one GPU (NCCL world of 1)
    torchrun --nproc-per-node 8 bench/gpu_cupti_check.py  # NCCL kernels across GPUs

It checks and prints:

1. the backend really is CUPTI and phases use CUDA events;
2. a phase on a side stream is timed on that stream: a matmul enqueued on a side stream
   takes milliseconds of GPU time but microseconds of host time; the phase must report the
   GPU time (within 30% of a reference timed with events on the same stream);
3. steps/s with all channels on vs off, alternated A/B over several rounds, median ratio
   (bar: <= 2% slower, aim 1%);
4. a sample of real kernel records: names, streams and their kinds, NCCL kernels on their
   own stream (with one GPU NCCL may not launch a kernel at all; use >= 2 GPUs to see them).

Exit code 0 when every check passes, 1 otherwise; ``--out`` writes all figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--block", type=int, default=30, help="steps per A or B block")
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    from torch import nn

    import argus.collectors as ac
    from examples.ddp_transformer import TinyLM

    checks: dict[str, Any] = {}
    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU", file=sys.stderr)
        return 1
    try:
        from cupti import cupti

        get_version = getattr(cupti, "get_version", None)
        checks["cupti_version"] = str(get_version()) if get_version else "unknown"
    except Exception as exc:
        print(
            f"cupti-python is not importable ({exc!r}): pip install cupti-python", file=sys.stderr
        )
        return 1
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_closed_port()))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)

    vocab = 32000
    model = TinyLM(vocab, args.d_model, max(1, args.d_model // 64), args.layers, args.seq + 1).to(
        dev
    )
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)

    samples: dict[str, list[Any]] = {"kernel_batch": [], "step_record": []}

    def tap(name: str, rec: Any) -> None:
        if name in samples and len(samples[name]) < 200:
            samples[name].append(rec)

    bootstrap = os.environ.get("ARGUS_KAFKA_BOOTSTRAP") or f"127.0.0.1:{_closed_port()}"
    col = ac.start(
        job="gpu-check",
        model=ddp,
        optimizer=opt,
        ddp=ddp,
        auto_step=False,
        phases={"attention": [b.attn for b in model.blocks], "mlp": [b.mlp for b in model.blocks]},
        kafka_config={"bootstrap.servers": bootstrap},
        kernels_backend="cupti",
        control=False,
        stacks=False,
        publish_topology=False,
    )
    col.producer.tap = tap
    checks["backend"] = getattr(col.kernel_source, "source", None)
    checks["timer"] = col.timer
    ok = checks["backend"] == "cupti" and checks["timer"] == "cuda_event"

    def train_step(i: int) -> None:
        tokens = torch.randint(0, vocab, (args.batch, args.seq + 1), device=dev)
        with ac.step(i):
            logits = ddp(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    for i in range(10):  # warm-up (cuBLAS handles, NCCL communicators, CUPTI buffers)
        train_step(i)
    torch.cuda.synchronize()

    # 2. side-stream phase --------------------------------------------------------------------
    side = torch.cuda.Stream()
    a = torch.randn(8192, 8192, device=dev)
    torch.cuda.synchronize()
    ref0, ref1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(side):
        ref0.record(side)
        for _ in range(5):
            a @ a
        ref1.record(side)
    torch.cuda.synchronize()
    ref_ms = ref0.elapsed_time(ref1)
    marker_step = 1_000_000
    with ac.step(marker_step):
        t0 = time.perf_counter()
        with torch.cuda.stream(side), ac.phase("side_matmul", stream=side):
            for _ in range(5):
                a @ a
        host_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    deadline = time.time() + 10
    side_rec = None
    while time.time() < deadline and side_rec is None:
        side_rec = next((r for r in samples["step_record"] if r["step"] == marker_step), None)
        time.sleep(0.05)
    side_ms = None
    if side_rec is not None:
        ph = {p["name"]: p for p in side_rec["phases"]}
        if "side_matmul" in ph:
            side_ms = ph["side_matmul"]["duration_ns"] / 1e6
    side_ok = side_ms is not None and abs(side_ms - ref_ms) <= 0.3 * ref_ms
    checks["side_stream"] = {
        "phase_ms": side_ms,
        "reference_gpu_ms": ref_ms,
        "host_enqueue_ms": host_ms,
        "ok": side_ok,
    }
    ok &= side_ok

    # 3. A/B overhead -------------------------------------------------------------------------
    blocks: list[dict[str, Any]] = []
    step = 0
    for _ in range(args.rounds):
        for mode in ("off", "on"):
            col.set_channels(phases=mode == "on", kernels=mode == "on")
            train_step(step)
            step += 1
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.block):
                train_step(step)
                step += 1
            torch.cuda.synchronize()
            blocks.append({"mode": mode, "steps_per_s": args.block / (time.perf_counter() - t0)})
    over = []
    for i, b in enumerate(blocks):
        if b["mode"] == "on":
            refs = [
                blocks[j]["steps_per_s"]
                for j in (i - 1, i + 1)
                if 0 <= j < len(blocks) and blocks[j]["mode"] == "off"
            ]
            over.append(1 - b["steps_per_s"] / statistics.mean(refs))
    checks["overhead"] = {
        "median": statistics.median(over),
        "all": over,
        "blocks": blocks,
        "bar": 0.02,
        "ok": statistics.median(over) <= 0.02,
    }
    ok &= checks["overhead"]["ok"]
    col.set_channels(phases=True, kernels=True)
    train_step(step)
    ac.shutdown(timeout_s=3)

    # 4. kernel sample ------------------------------------------------------------------------
    from argus.schemas import unpack

    names: Counter[str] = Counter()
    stream_kinds: dict[int, str] = {}
    nccl_streams: set[int] = set()
    other_streams: set[int] = set()
    n_events = dropped = 0
    for rec in samples["kernel_batch"]:
        idx = unpack(rec["name_idx"], "uint32")
        st = unpack(rec["stream"], "uint32")
        n_events += len(idx)
        dropped += rec["dropped"]
        for i, s in zip(idx.tolist(), st.tolist(), strict=True):
            nm = rec["names"][i]
            names[nm] += 1
            (nccl_streams if nm.startswith(("ncclDevKernel", "ncclKernel")) else other_streams).add(
                s
            )
        for s in rec["streams"]:
            stream_kinds[s["id"]] = s["kind"]
    checks["kernels"] = {
        "batches": len(samples["kernel_batch"]),
        "events": n_events,
        "dropped": dropped,
        "top": names.most_common(12),
        "streams": stream_kinds,
        "nccl_streams": sorted(nccl_streams),
        "nccl_on_own_stream": bool(nccl_streams) and not (nccl_streams & other_streams),
    }
    ok &= n_events > 0
    phase_names = sorted({p["name"] for r in samples["step_record"] for p in r["phases"]})
    checks["phases_seen"] = phase_names
    checks["collector"] = {"dropped": col.producer.dropped_records, "errors": col.errors}
    checks["ok"] = bool(ok)
    if rank == 0:
        print(json.dumps(checks, indent=1, default=str))
        if args.out:
            Path(args.out).write_text(json.dumps(checks, indent=1, default=str))
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
