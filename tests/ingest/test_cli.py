"""``argus ingest`` on the command line: files -> Avro -> ``argus diagnose``; bad files named
with exit status 3 (0 with ``--skip-bad``) while the rest is written; ``--kafka`` publishes
to the real broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from argus.cli import main
from argus.config import Settings
from argus.ingest.synth import write_synthetic_job


def test_ingest_then_diagnose_with_a_bad_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tr = tmp_path / "traces"
    paths = write_synthetic_job(tr, ranks=4, steps=20, slow_rank=2, kernels_per_step=8)
    (tr / "rank-9.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "na')  # truncated
    out = tmp_path / "job"
    assert main(["ingest", str(tr), "--out", str(out)]) == 3
    cap = capsys.readouterr()
    assert f"skipped {tr / 'rank-9.pt.trace.json'}: truncated JSON" in cap.err
    assert "skipped 1 of 5 files" in cap.err
    assert "read 4 of 5 trace files" in cap.out and "ranks 0-3" in cap.out
    assert (out / "steps.avro").is_file() and (out / "kernels.avro").is_file()
    summary = json.loads((out / "ingest.json").read_text())
    assert summary["step_records"] == 80 and len(summary["skipped"]) == 1
    assert main(["ingest", str(tr), "--out", str(out), "--skip-bad", "--job", "j2", "-j", "2"]) == 0
    capsys.readouterr()
    assert main(["diagnose", str(out)]) == 0
    findings = json.loads((out / "findings.json").read_text())
    assert findings["job"] == "j2"
    culprits = {tuple(v["ranks"]) for v in findings["verdicts"]}
    assert culprits == {(2,)}
    assert len(paths) == 4


def test_ingest_usage_errors(tmp_path: Path) -> None:
    write_synthetic_job(tmp_path / "t", ranks=2, steps=2, kernels_per_step=4)
    assert main(["ingest", str(tmp_path / "t")]) == 2  # neither --out nor --kafka
    assert main(["ingest", str(tmp_path / "t"), "--out", str(tmp_path / "o"), "--job", "a/b"]) == 1
    (tmp_path / "empty").mkdir()
    assert main(["ingest", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 1


@pytest.mark.kafka
def test_ingest_publishes_to_kafka(kafka: Settings, topic_prefix: str, tmp_path: Path) -> None:
    from confluent_kafka import Consumer

    from argus.schemas.codec import Codec
    from argus.topics import topic_name

    write_synthetic_job(tmp_path / "t", ranks=3, steps=5, kernels_per_step=4)
    assert (
        main(["ingest", str(tmp_path / "t"), "--kafka", "--prefix", topic_prefix, "--job", "kj"])
        == 0
    )
    cons = Consumer(
        kafka.kafka_config(**{"group.id": f"{topic_prefix}-t", "auto.offset.reset": "earliest"})
    )
    cons.subscribe([topic_name("raw.steps", topic_prefix), topic_name("raw.kernels", topic_prefix)])
    got: dict[str, list[dict[str, object]]] = {"step_record": [], "kernel_batch": []}
    for _ in range(60):
        for m in cons.consume(100, timeout=0.5):
            if m.error() is None:
                name, rec = Codec().decode(m.value())
                got[name].append(rec)
                assert m.key() == f"kj/{rec['rank']}".encode()
        if sum(map(len, got.values())) >= 30:
            break
    cons.close()
    assert len(got["step_record"]) == 15 and len(got["kernel_batch"]) == 15
    assert {(r["rank"], r["step"]) for r in got["step_record"]} == {
        (r, s) for r in range(3) for s in range(10, 15)
    }


def test_kafka_batch_too_large_for_one_message_is_named() -> None:
    from argus.commands.ingest import _fits_a_message
    from argus.ingest.assemble import IngestError

    n = 45_000
    cols = {"name_idx": bytes(4 * n), "stream": bytes(4 * n), "start_ns": bytes(8 * n)}
    big = {**cols, "duration_ns": bytes(8 * n), "names": ["k"], "rank": 7, "window_id": 12}
    small = {**big, "name_idx": b"\0" * 4, "stream": b"\0" * 4, "start_ns": b"\0" * 8}
    small["duration_ns"] = b"\0" * 8
    assert len(list(_fits_a_message(iter([("raw.kernels", "j/7", small)])))) == 1
    with pytest.raises(IngestError, match=r"rank 7 step 12: 45,000 kernel events .* --out DIR"):
        list(_fits_a_message(iter([("raw.kernels", "j/7", small), ("raw.kernels", "j/7", big)])))


def test_kafka_too_large_step_fails_before_publishing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """45,001 kernels in one step of one rank: --kafka exits 1 naming the file, rank and step
    (no broker is contacted: the check runs before the producer exists)."""
    write_synthetic_job(tmp_path / "t", ranks=1, steps=1, kernels_per_step=45_000, gz=False)
    assert main(["ingest", str(tmp_path / "t"), "--kafka", "--prefix", "never-used"]) == 1
    assert (
        "rank-0.pt.trace.json: rank 0 step 10 has 45,001 kernel events" in capsys.readouterr().err
    )
