"""Drill-down windows and paths: ``--last``, ``--around``, why a read came back empty,
and output paths checked before the work (issue 20)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from argus.cli import main
from argus.config import Settings
from argus.drill.window import (
    Extent,
    WindowError,
    explain_empty,
    iso,
    parse_duration,
    window_around,
)
from argus.sim.simulate import T0_NS, publish, simulate, write_avro

SIM = dict(ranks=32, steps=30, seed=3)
JOB = "sim-compute-straggler"


def test_durations_and_iso() -> None:
    assert parse_duration("15m") == 15 * 60 * 10**9
    assert parse_duration("90s") == parse_duration("1.5min") == 90 * 10**9
    assert parse_duration("500ms") == 5 * 10**8 and parse_duration("2") == 2 * 10**9
    for bad in ("", "15x", "-3m", "0s", "m"):
        with pytest.raises(WindowError, match="duration"):
            parse_duration(bad)
    assert iso(T0_NS) == "2026-05-28T20:26:40.000Z"


def test_window_around_alert_and_finding() -> None:
    alerts = [
        {"dedup_key": "j/dp/pp0.tp1/7,15/mlp", "job": "j", "first_seen_ns": 100,
         "last_seen_ns": 200, "ranks": [15, 7], "group_kind": "dp", "group_id": "pp0.tp1",
         "phase": "mlp", "kernels": ["gemm"], "summary": "s", "details": {}},
        {"dedup_key": "j/dp/pp0.tp1/7,15/mlp", "job": "j", "first_seen_ns": 150,
         "last_seen_ns": 400, "ranks": [7, 15], "group_kind": "dp", "group_id": "pp0.tp1",
         "phase": "mlp", "kernels": [], "summary": "s2", "details": {"members": "32,40"}},
    ]  # fmt: skip
    w = window_around("j/dp/pp0.tp1/7,15/mlp", alerts, pad_ns=10)
    assert (w.source, w.job, w.start_ns, w.end_ns) == ("alert", "j", 100, 400)
    assert (w.read_start_ns, w.read_end_ns, w.ranks) == (90, 410, (7, 15))
    assert w.members == (32, 40) and w.culprit_ranks == (7, 15)
    an = [{"id": "ab12", "job": "j", "window_start_ns": 5, "window_end_ns": 9, "ranks": [],
           "group_kind": "edp", "group_id": "pp1.tp0.ep0", "level": "L3", "kind": "k"}]  # fmt: skip
    w = window_around("ab12", alerts, an, pad_ns=0)
    assert (w.source, w.start_ns, w.end_ns, w.group_id) == ("anomaly", 5, 9, "pp1.tp0.ep0")
    with pytest.raises(WindowError, match=r"no alert .* j/dp/pp0\.tp1/7,15/mlp"):
        window_around("nope", alerts, an)


def test_explain_empty_names_the_cause() -> None:
    kw: dict[str, Any] = {"topic": "p.raw.steps", "job": "j", "start_ns": 0, "end_ns": 10}
    msg = explain_empty(**kw, exists=False, extent=None, prefix_topics=["argus.raw.steps"])
    assert msg.startswith("prefix:") and "argus.raw.steps" in msg
    msg = explain_empty(**kw, exists=True, extent=Extent(), other_jobs=["a", "b"])
    assert "no records of job 'j'" in msg and "jobs there: a, b" in msg
    ext = Extent()
    ext.add({"start_ns": T0_NS, "end_ns": T0_NS + 5, "step": 3, "rank": 1}, 1, (0, 10))
    msg = explain_empty(**kw, exists=True, extent=ext)
    assert msg.startswith("time range:") and iso(T0_NS) in msg and "step/window 3" in msg
    ext = Extent()
    ext.add({"start_ns": 2, "end_ns": 4, "step": 0, "rank": 1}, 7_000, (0, 10))  # 7 s late
    msg = explain_empty(**kw, exists=True, extent=ext, lag_ns=10**9)
    assert msg.startswith("lag limit:") and "7.0 s" in msg
    msg = explain_empty(**kw, exists=True, extent=ext, ranks=[5])
    assert msg.startswith("ranks:")


@pytest.fixture(scope="module")
def straggler_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "cs"
    write_avro(simulate("compute-straggler", **SIM), out)  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize(
    "argv",
    [
        ["trace", "--job", JOB, "--ranks", "1", "--from", "0", "--to", "1"],
        ["stacks", "--job", JOB, "--rank", "1", "--from", "0", "--to", "1"],
        ["replay", "--job", JOB, "--from", "0", "--to", "1"],
    ],
)
def test_missing_output_dir_fails_first(argv: list[str], tmp_path: Path, capsys: Any) -> None:
    """Before: each read Kafka (or failed on its topics) first; the path was never named."""
    bad = tmp_path / "missing" / "x.out"
    t0 = time.monotonic()
    rc = main([*argv, "--prefix", "no-such-prefix", "-o", str(bad)])
    assert rc == 2 and time.monotonic() - t0 < 5
    assert f"directory {bad.parent} does not exist" in capsys.readouterr().err


def test_report_missing_output_dir_fails_before_the_work(
    straggler_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    """Before: the whole diagnosis ran, then a FileNotFoundError traceback."""
    bad = tmp_path / "missing" / "r.html"
    t0 = time.monotonic()
    assert main(["report", "--from-file", str(straggler_dir), "-o", str(bad)]) == 2
    assert time.monotonic() - t0 < 2  # the diagnosis takes several seconds
    assert "does not exist" in capsys.readouterr().err
    assert main(["report", "--from-file", str(straggler_dir), "-o", str(tmp_path)]) == 2


def test_ranks_reversed_rejected(capsys: Any) -> None:
    assert main(["trace", "--job", "j", "--ranks", "5-3", "--from", "0", "--to", "1"]) == 2
    assert "reversed" in capsys.readouterr().err


def test_window_options_exclusive(capsys: Any) -> None:
    rc = main(["replay", "--job", "j", "--last", "15m", "--from", "0", "--to", "1"])
    assert rc == 2 and "give one of" in capsys.readouterr().err
    assert main(["replay", "--job", "j", "--last", "15 parsecs"]) == 2


def _publish_with_alerts(kafka: Settings, prefix: str) -> tuple[list[Any], dict[str, Any]]:
    from confluent_kafka import Producer

    from argus.diagnose import diagnose
    from argus.schemas.codec import Codec

    recs = list(simulate("compute-straggler", **SIM))  # type: ignore[arg-type]
    publish(iter(recs), kafka, prefix=prefix)
    res = diagnose(
        [r for s, _k, r in recs if s == "raw.steps"],
        kernel_batches=[r for s, _k, r in recs if s == "raw.kernels"],
    )
    assert res.alerts
    codec = Codec()
    prod = Producer(kafka.kafka_config())
    for a in res.alerts:
        prod.produce(
            f"{prefix}.alerts", key=a["dedup_key"].encode(), value=codec.encode("alert", a)
        )
    for an in res.anomalies[:50]:
        key = f"{an['job']}/{an['group_kind']}/{an['group_id']}".encode()
        prod.produce(f"{prefix}.anomalies", key=key, value=codec.encode("anomaly", an))
    assert prod.flush(30) == 0
    return recs, {**res.alerts[0], "_anomaly": res.anomalies[0]}


@pytest.mark.kafka
def test_around_trace_and_empty_reads(
    kafka: Settings, topic_prefix: str, tmp_path: Path, capsys: Any
) -> None:
    """`argus trace --around <dedup_key>`: the alert's window, its culprit ranks marked and
    two peers, one track per (rank, stream), no `#n` lanes; empty reads name their cause."""
    from tests.ops.test_trace import _parse

    recs, alert = _publish_with_alerts(kafka, topic_prefix)
    key = alert["dedup_key"]
    assert alert["ranks"] == [7, 15]
    # a finding id resolves from argus.anomalies to its own window
    from argus.drill.read import find_around

    an = alert["_anomaly"]
    w = find_around(kafka, an["id"], prefix=topic_prefix, pad_ns=0)
    assert (w.source, w.job, w.start_ns, w.end_ns) == (
        "anomaly",
        JOB,
        an["window_start_ns"],
        an["window_end_ns"],
    )
    out = tmp_path / "a.pftrace"
    assert main(["trace", "--around", key, "--prefix", topic_prefix, "-o", str(out)]) == 0
    procs, tracks, _events = _parse(out.read_bytes())
    names = sorted(procs.values())
    assert [n for n in names if n.endswith("CULPRIT")] == [
        "rank 15 (node0001) CULPRIT",
        "rank 7 (node0000) CULPRIT",
    ]
    assert len(names) == 4  # and two peers of the same dp group
    per = Counter((parent, name) for parent, name in tracks.values())
    assert max(per.values()) == 1 and not any("#" in n for _p, n in per)
    assert any(n == "iteration time (ms)" for _p, n in per)
    err = capsys.readouterr().err
    assert f"alert {key}: job {JOB}, ranks 7,15" in err

    end = max(r["end_ns"] for s, _k, r in recs if s == "raw.steps")
    # time range: --last 15m is now; the simulator's events are in May 2026
    assert main(["replay", "--job", JOB, "--last", "15m", "--prefix", topic_prefix,
                 "-o", str(tmp_path / "r.json")]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert "time range: nothing of job" in err and iso(T0_NS)[:19] in err
    # lag limit: produced now, months after the records' event time
    assert main(["replay", "--job", JOB, "--from", str(T0_NS), "--to", str(end), "--max-lag", "5",
                 "--prefix", topic_prefix, "-o", str(tmp_path / "r.json")]) == 1  # fmt: skip
    assert "lag limit:" in capsys.readouterr().err
    # prefix
    assert main(["replay", "--job", JOB, "--from", str(T0_NS), "--to", str(end),
                 "--prefix", topic_prefix + "x", "-o", str(tmp_path / "r.json")]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert "prefix: topic" in err and f"{topic_prefix}.raw.steps" in err
    # stacks --around: the culprit's first rank against an automatic peer of its dp group
    summ = [
        ("summary.stacks", f"{JOB}/{rk}", {
            "job": JOB, "rank": rk, "window_start_ns": T0_NS, "window_end_ns": end,
            "samples": 100, "stacks": [
                {"stack": "MainThread;train (t.py:1);mlp (m.py:9)", "count": hot},
                {"stack": "MainThread;train (t.py:1);load (d.py:4)", "count": 100 - hot}]})
        for rk, hot in ((7, 90), (1, 20))
    ]  # fmt: skip
    publish(iter(summ), kafka, prefix=topic_prefix)
    assert main(["stacks", "--around", key, "--vs", "auto", "--prefix", topic_prefix]) == 0
    out_text = capsys.readouterr().out
    assert "rank 7: 100 samples; rank 1: 100 samples" in out_text
    assert "+70.0  mlp (m.py:9)" in out_text
    # replay --around: the same verdict again
    rj = tmp_path / "around.json"
    assert main(["replay", "--around", key, "--prefix", topic_prefix, "-o", str(rj)]) == 0
    import json

    doc = json.loads(rj.read_text())
    assert key in {a["dedup_key"] for a in doc["alerts"]}
    capsys.readouterr()
    # the report of the same alert leads with it
    page = tmp_path / "a.html"
    assert main(["report", "--around", key, "--prefix", topic_prefix, "-o", str(page)]) == 0
    text = page.read_text()
    assert "data-ranks='7,15'" in text and key in text
