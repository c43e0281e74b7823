"""Pages of the real CPU demo and the DDP example through the live pipeline (issue 18 bar).

Each run is one real training job (``examples/ddp_transformer.py``: DDP over gloo on CPU,
collectors on, one rank's MLP slowed) through the live pipeline of ``argus demo`` (broker,
private topics, the two worker processes, ``argus.alerts`` watched), one run at a time:

* ``demo``: exactly what ``make demo`` runs (``argus demo``: 4 ranks, 120 steps, rank 2's
  MLP 3x, with the demo's detector overrides ``TRAIN_DETECTORS``, none since issue 18);
* ``ddp2`` / ``ddp4``: the example at its defaults (100 steps, slowdown 3 on the last rank of
  2 / rank 2 of 4) with the detectors at their **defaults** (no override).

A *page* is an alert trigger on ``argus.alerts``. Per run: pages, the ranks they name,
whether one names the injected rank alone with the injected phase (``mlp`` or the
``forward`` around it), and the pages naming a healthy rank or no rank (false pages). The
bar: the injected rank paged every run, a healthy rank never.

    .venv/bin/python bench/bench_demo_pages.py                   # 10 runs of each
    .venv/bin/python bench/bench_demo_pages.py --runs 3 --only ddp2 --out out/pages
    .venv/bin/python bench/bench_demo_pages.py --replay out/bench_demo_pages  # score again

Every run's step records and kernel batches are kept (``--out``, ``*.records.json.gz``);
``--replay DIR`` runs them again through the engine's roles in memory
(:func:`argus.streams.memory.run_engine`, what the workers run) with this checkout's
detectors: the same inputs before and after a detector change.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from argus.config import load_settings  # noqa: E402
from argus.demo import TRAIN_DETECTORS, TRAIN_PHASES, run_demo  # noqa: E402


@dataclass(frozen=True)
class Config:
    """One configuration: ``world`` ranks, ``straggler``'s MLP ``slowdown``x for ``steps``;
    ``detectors_env`` the workers' detector overrides."""

    name: str
    world: int
    straggler: int
    steps: int
    slowdown: float
    detectors_env: dict[str, str]


CONFIGS = {
    "demo": Config("demo", 4, 2, 120, 3.0, dict(TRAIN_DETECTORS)),
    "ddp2": Config("ddp2", 2, 1, 100, 3.0, {}),
    "ddp4": Config("ddp4", 4, 2, 100, 3.0, {}),
}


def score_run(alerts: list[dict[str, Any]], straggler: int) -> dict[str, Any]:
    """Pages (alert triggers) of one run against the injected ``straggler``: counts, the
    ranks named, whether the injected rank and phase were paged, the false pages."""
    trig = [a for a in alerts if a["action"] == "trigger"]
    named: Counter[int] = Counter(r for a in trig for r in a["ranks"])
    hit = [a for a in trig if a["ranks"] == [straggler]]
    false = [a for a in trig if not a["ranks"] or set(a["ranks"]) - {straggler}]
    return {
        "pages": len(trig),
        "keys": len({a["dedup_key"] for a in trig}),
        "ranks_named": dict(sorted(named.items())),
        "injected_rank": bool(hit),
        "injected_phase": any(a["phase"] in TRAIN_PHASES for a in hit),
        "false_pages": len(false),
        "false_healthy_rank": sum(1 for a in false if a["ranks"]),
        "false_no_rank": sum(1 for a in false if not a["ranks"]),
        "false_missing": sum(
            1 for a in false if (a.get("details") or {}).get("kind") == "missing_rank"
        ),
        "false_what": [
            f"{'+'.join(a['levels'])} ranks {a['ranks'] or '-'} {a['phase'] or ','.join(a['kernels'][:1]) or '-'}"
            f" conf {a['confidence']:.2f}"
            for a in false
        ],
        "hit_what": sorted(
            {f"{'+'.join(a['levels'])} {a['phase'] or ','.join(a['kernels'][:1])}" for a in hit}
        ),
    }


def _bytes(o: Any) -> Any:
    """JSON for the kernel batches' byte fields (latin-1, one char a byte)."""
    if isinstance(o, bytes):
        return {"__bytes__": o.decode("latin-1")}
    raise TypeError(type(o).__name__)


def load_records(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A run's recorded ``(step records, kernel batches)`` (``--out``), for
    :func:`argus.streams.memory.run_engine`."""

    def hook(d: dict[str, Any]) -> Any:
        return d["__bytes__"].encode("latin-1") if set(d) == {"__bytes__"} else d

    with gzip.open(path, "rt") as f:
        doc = json.load(f, object_hook=hook)
    return doc["steps"], doc["kernels"]


def run_one(cfg: Config, i: int, out: Path, settle_s: float) -> dict[str, Any]:
    """One live run of ``cfg``; returns its score with the load and timing."""
    settings = load_settings()
    t0 = time.time()
    load0 = os.getloadavg()[0]
    res = run_demo(
        settings,
        source="training",
        steps=cfg.steps,
        out=out / f"{cfg.name}-{i:02d}.json",
        console=Console(file=io.StringIO(), width=120),
        timeout_s=600.0,
        world=cfg.world,
        straggler=cfg.straggler,
        slowdown=cfg.slowdown,
        detectors_env=cfg.detectors_env,
        settle_s=settle_s,
        wait_settle=True,
    )
    with gzip.open(out / f"{cfg.name}-{i:02d}.records.json.gz", "wt") as f:
        json.dump({"steps": res.steps, "kernels": res.kernels}, f, default=_bytes)  # replay
    sc = score_run(res.alerts, cfg.straggler)
    anoms = Counter(
        f"{a['level']}/{a['kind']} {a['ranks'] or '-'} {a['phase'] or '-'}" for a in res.anomalies
    )
    sc.update(
        config=cfg.name,
        run=i,
        started=time.strftime("%H:%M:%S", time.gmtime(t0)),
        wall_s=round(time.time() - t0, 1),
        job_end_s=None if res.job_end_s is None else round(res.job_end_s, 1),
        load_start=round(load0, 2),
        load_end=round(os.getloadavg()[0], 2),
        anomalies=dict(anoms.most_common()),
    )
    return sc


def replay(path: Path, cfg: Config) -> dict[str, Any]:
    """Score one recorded run again with this checkout's detectors (in memory)."""
    import dataclasses

    from argus.detectors.config import DetectorsConfig
    from argus.streams.memory import run_engine

    steps, kernels = load_records(path)
    if not kernels:  # nothing recorded to wait for
        for r in steps:
            r["collector"]["kernels"] = False
    det = DetectorsConfig()
    trig = cfg.detectors_env.get("ARGUS_DETECTORS__FUNNEL__TRIGGER_CONFIDENCE")
    if trig is not None:
        det = dataclasses.replace(
            det, funnel=dataclasses.replace(det.funnel, trigger_confidence=float(trig))
        )
    res = run_engine(steps, kernel_batches=kernels, detectors=det)
    sc = score_run(res.alerts, cfg.straggler)
    sc.update(config=cfg.name, run=int(path.name.split("-")[1].split(".")[0]), started="-")
    sc.update(load_start=float("nan"), load_end=float("nan"), wall_s=0.0)
    return sc


def _missing(r: dict[str, Any]) -> int:
    """False pages of a run that are ``missing_rank`` (L1, no phase): from the score, or from
    ``false_what`` for rows written before the field existed."""
    if "false_missing" in r:
        return int(r["false_missing"])
    return sum(1 for w in r["false_what"] if w.startswith("L1 ranks [") and " - conf" in w)


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| config | run | start (UTC) | load 1 min | pages | ranks named (pages) "
        "| injected rank | injected phase | false: healthy rank | of which missing_rank "
        "| false: no rank |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        named = ", ".join(f"{k}:{v}" for k, v in r["ranks_named"].items()) or "-"
        lines.append(
            f"| {r['config']} | {r['run']} | {r['started']} | {r['load_start']:.1f} | {r['pages']}"
            f" | {named} | {'yes' if r['injected_rank'] else 'NO'}"
            f" | {'yes' if r['injected_phase'] else 'NO'} | {r['false_healthy_rank']}"
            f" | {_missing(r)} | {r['false_no_rank']} |"
        )
    return "\n".join(lines)


def verdict(name: str, rows: list[dict[str, Any]]) -> str:
    """One line: the bar per configuration (injected rank and phase paged in every run, no
    false page in any)."""
    n = len(rows)
    hit = sum(r["injected_rank"] and r["injected_phase"] for r in rows)
    clean = sum(r["false_pages"] == 0 for r in rows)
    false = sum(r["false_pages"] for r in rows)
    missing = sum(_missing(r) for r in rows)
    ok = n > 0 and hit == n and clean == n
    return (
        f"{name}: {'PASS' if ok else 'FAIL'}: injected rank+phase paged in {hit}/{n} runs, "
        f"no false page in {clean}/{n} runs ({false} false pages in all, {missing} of them "
        "missing_rank)"
    )


def _report(rows: list[dict[str, Any]], names: list[str]) -> None:
    print(_table(rows))
    print()
    for n in names:
        print(verdict(n, [r for r in rows if r["config"] == n]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="runs per configuration")
    ap.add_argument("--only", default="demo,ddp2,ddp4", help="configurations, comma-separated")
    ap.add_argument("--settle-s", type=float, default=30.0, help="watch this long after the job")
    ap.add_argument("--out", type=Path, default=Path("out/bench_demo_pages"))
    ap.add_argument(
        "--report", type=Path, default=None, help="print the table of a folder's runs.jsonl"
    )
    ap.add_argument(
        "--replay", type=Path, default=None, help="score the runs recorded in this folder again"
    )
    ap.add_argument(
        "--interleave",
        action="store_true",
        help="run the configurations in turn (demo, ddp2, ddp4, demo, ...) not one after another",
    )
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    for n in names:
        if n not in CONFIGS:
            ap.error(f"unknown configuration {n!r} (known: {', '.join(CONFIGS)})")
    rows: list[dict[str, Any]] = []
    if args.report is not None:  # the runs an interrupted bench left
        for line in (args.report / "runs.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r["config"] in names:
                rows.append(r)
        _report(rows, names)
        return 0
    if args.replay is not None:
        for n in names:
            for path in sorted(args.replay.glob(f"{n}-*.records.json.gz")):
                r = replay(path, CONFIGS[n])
                rows.append(r)
                print(f"{n} {path.name}: pages {r['pages']} false {r['false_what']}", flush=True)
        print()
        _report(rows, names)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    order = (
        [(n, i) for i in range(args.runs) for n in names]
        if args.interleave
        else [(n, i) for n in names for i in range(args.runs)]
    )
    log = args.out / "runs.jsonl"
    for n, i in order:
        r = run_one(CONFIGS[n], i, args.out, args.settle_s)
        rows.append(r)
        with log.open("a") as f:
            f.write(json.dumps(r) + "\n")
        print(
            f"{n} run {i}: pages {r['pages']} named {r['ranks_named']} "
            f"hit {r['injected_rank']}/{r['injected_phase']} {r['hit_what']} "
            f"false {r['false_what']} load {r['load_start']}->{r['load_end']} "
            f"wall {r['wall_s']} s",
            flush=True,
        )
    print()
    _report(rows, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
