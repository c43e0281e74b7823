"""The in-memory engine announces each rank's kernel names as the live compressor does (in its
first window, then every ``REANNOUNCE_WINDOWS`` windows), and finds what it finds with every
summary naming its kernels, restarts included (the L3 role keeps a scope's names)."""

from __future__ import annotations

from typing import Any

from argus.sim import simulate
from argus.streams.memory import batches_summaries, run_engine


def _job() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    steps: list[dict[str, Any]] = []
    batches: list[dict[str, Any]] = []
    for topic, _key, rec in simulate("compute-straggler", ranks=32, steps=40, seed=5):
        (steps if topic == "raw.steps" else batches).append(rec)
    return steps, batches


def _key(r: dict[str, Any]) -> tuple[str, int, int]:
    return (str(r["job"]), int(r["window_id"]), int(r["rank"]))


def test_names_announced_once_then_every_n_windows_the_rest_equal() -> None:
    _, batches = _job()
    full = sorted(batches_summaries(batches), key=_key)
    lean = batches_summaries(list(reversed(batches)), announce_every=8)
    assert [_key(r) for r in lean] == [_key(r) for r in full]  # event order, whatever came in
    seen: dict[int, int] = {}
    for a, b in zip(full, lean, strict=True):
        assert {k: v for k, v in a.items() if k != "kernel_names"} == {
            k: v for k, v in b.items() if k != "kernel_names"
        }
        n = seen[a["rank"]] = seen.get(a["rank"], 0) + 1
        if n == 1 or n % 8 == 0:  # the first window, then every 8th: all the names
            assert b["kernel_names"] == a["kernel_names"] != []
        else:
            assert b["kernel_names"] == []
    assert min(seen.values()) >= 16


def test_the_lean_summaries_find_what_full_ones_find_restarts_included() -> None:
    steps, batches = _job()
    full = run_engine(steps, kernel_summaries=batches_summaries(batches))  # every name, always
    own = run_engine(steps, kernel_batches=batches)
    restarted = run_engine(steps, kernel_batches=batches, restart_every=97)
    assert any(a["level"] == "L3" for a in full.findings)
    strip = [{k: v for k, v in a.items() if k != "detected_ns"} for a in full.anomalies]
    assert [{k: v for k, v in a.items() if k != "detected_ns"} for a in own.anomalies] == strip
    assert [a["id"] for a in restarted.findings] == [a["id"] for a in full.findings]
    l3 = [a for a in restarted.findings if a["level"] == "L3"]
    assert l3 and not any("kernel#" in str(a) for a in l3)  # the names, not their ids


def test_name_announcements_forget_a_producer_every_n_windows() -> None:
    from argus.summaries.summary_record import NameAnnouncements

    names = NameAnnouncements(every=3)
    first = names.known("j/0")
    first.update({1, 2})  # named with window 1
    assert names.known("j/0") == {1, 2}  # window 2: nothing to announce again
    assert names.known("j/1") == set()  # another rank keeps its own
    assert names.known("j/0") == set()  # window 3: all of them again
