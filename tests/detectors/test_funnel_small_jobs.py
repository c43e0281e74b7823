"""Pages of small real CPU jobs on a loaded host (issue 18 bar: ``make demo`` and the DDP
example with 2 and 4 ranks, the injected rank paged every run, a healthy rank never;
``bench/bench_demo_pages.py``). Three root causes, each a test that failed before its fix:

* a pair's L2 window (the slower of two in each of 4 steps, p = 1/16) paged a healthy rank
  of a 2-rank job on its first window (3-4 pages a run on rank 0);
* a straggler whose bottleneck moved between nested phases (``forward`` around ``mlp``)
  from one window to the next never persisted (a new dedup key each window);
* a single step of one rank (a burst beyond noise, a step-time spike: a process preempted on
  a loaded host) paged at once, also when another rank's burst of the next step joined it;
* in a pair, L2 named the rank that arrived first at the collective (it waited there) for a
  compute excess it had made up before it.
"""

from __future__ import annotations

import json

import numpy as np

from argus.detectors import funnel, l2
from argus.detectors.config import FunnelConfig, L2Config
from argus.detectors.findings import Finding
from tests.detectors.findings_builders import l2 as l2_finding


def _pair(rank: int, phase: str, w: int) -> Finding:
    """L2's finding in a group of two (``n_ranks`` 2, the pair test), window ``w`` (10
    steps)."""
    f = l2_finding((rank,), ("dp", "all"), phase=phase, w=(10 * w, 10 * w + 3), z=1.5)
    ev = {**f.evidence, "n_ranks": "2", "test": json.dumps({str(rank): "persistent"})}
    return Finding(**{**f.__dict__, "evidence": ev, "threshold": 1.5})


def _run(windows: list[list[Finding]], cfg: FunnelConfig | None = None) -> list[list[dict]]:
    state, out = funnel.FunnelState(), []
    for fs in windows:
        state, o = funnel.step(state, fs, cfg)
        state = funnel.FunnelState.from_dict(json.loads(json.dumps(state.to_dict())))
        out.append([a for a in o.alerts if a["action"] == "trigger"])
    return out


def test_a_pair_window_alone_does_not_page_a_repeating_one_does() -> None:
    # healthy rank 0 of a 2-rank job, slower in one window's 4 steps (host contention)
    assert _run([[_pair(0, "backward", 0)], [], [_pair(0, "optimizer", 2)]]) == [[], [], []]
    # the slowed rank of a pair, named window after window: pages at the third
    pages = _run([[_pair(1, "mlp", w)] for w in range(4)])
    assert [len(p) for p in pages] == [0, 0, 1, 0]
    assert pages[2][0]["ranks"] == [1] and pages[2][0]["persistence"] == 3


def test_a_four_rank_window_alone_does_not_page_a_repeating_one_does() -> None:
    """A 4-rank group's window passes at its floor (1/64) without family-wise control: a
    healthy rank's 3 slow steps paged once in 10 4-rank DDP runs; a second window of the
    same rank within 4 windows pages."""

    def four(rank: int, w: int) -> Finding:
        f = _pair(rank, "optimizer", w)
        return Finding(**{**f.__dict__, "evidence": {**f.evidence, "n_ranks": "4"}})

    assert _run([[four(3, 0)], [], [], [], [], [four(3, 5)]]) == [[]] * 6
    assert [len(p) for p in _run([[four(1, w)] for w in range(2)])] == [0, 1]
    # named in windows 1 and 4 (not in a row: a 2x of a short phase, CPU noise): paged at 4
    named = [[], [four(2, 1)], [], [], [four(2, 4)]]
    assert [len(p) for p in _run(named)] == [0, 0, 0, 0, 1]


def test_a_small_groups_page_names_the_phase_its_rank_was_named_for_most() -> None:
    """A live 4-rank DDP job's slowed rank was named in ``mlp``, then once in ``optimizer``,
    and paged as ``optimizer``: the page waits for the phase named most (the earliest on a
    tie)."""

    def four(rank: int, phase: str, w: int) -> Finding:
        f = _pair(rank, phase, w)
        return Finding(**{**f.__dict__, "evidence": {**f.evidence, "n_ranks": "4"}})

    named = [[four(2, "mlp", 0)], [four(2, "optimizer", 1)], [four(2, "mlp", 2)]]
    pages = _run(named)
    assert [len(p) for p in pages] == [0, 0, 1]
    assert pages[2][0]["phase"] == "mlp" and pages[2][0]["ranks"] == [2]
    # the same phase twice pages at the second, as before
    pages = _run([[four(2, "mlp", 0)], [four(2, "mlp", 1)]])
    assert [len(p) for p in pages] == [0, 1] and pages[1][0]["phase"] == "mlp"

    # phases named in the same windows (a slow forward and the late arrival it makes) are
    # all kept, none picked by its name (a 4-rank torch.profiler trace's page named the
    # all-reduce): the culprit is the compute phase, as any window's
    def late(w: int) -> Finding:
        f = four(2, "comm_all_reduce", w)
        return Finding(**{**f.__dict__, "evidence": {**f.evidence, "role": "late_arrival"}})

    pages = _run([[four(2, "forward", w), late(w)] for w in range(2)])
    assert [len(p) for p in pages] == [0, 1] and pages[1][0]["phase"] == "forward"


def test_a_straggler_whose_phase_moves_between_windows_persists() -> None:
    # rank 1's bottleneck is mlp, then the forward around it, then mlp: one straggler
    pages = _run([[_pair(1, ph, w)] for w, ph in enumerate(("mlp", "forward", "mlp"))])
    assert [len(p) for p in pages] == [0, 0, 1]
    assert pages[2][0]["phase"] == "mlp" and pages[2][0]["persistence"] == 3
    # in a larger group too: the confidence grows with the rank's run of windows
    big = [
        l2_finding((2,), ("dp", "all"), phase=ph, w=(10 * w, 10 * w + 3), z=7.0)
        for w, ph in enumerate(("mlp", "forward", "mlp"))
    ]
    pages = _run([[f] for f in big], FunnelConfig(trigger_confidence=0.7))
    # (a phase of its own is an alert of its own, as before: the dedup key holds the phase)
    assert [len(p) for p in pages] == [0, 1, 1]
    assert [p[0]["persistence"] for p in pages[1:]] == [2, 3]


def _burst(
    rank: int, step: int, phase: str = "optimizer", ranks: tuple[int, ...] = (), share: float = 1.5
) -> Finding:
    """L2's straggler finding of one step beyond noise (the ``burst`` test) at ``step``, its
    excess ``share`` median iteration times."""
    named = ranks or (rank,)
    return Finding(
        job="j",
        level="L2",
        kind="straggler",
        group_kind="dp",
        group_id="all",
        ranks=named,
        phase=phase,
        window_start_step=step - 1,
        window_end_step=step + 2,
        window_start_ns=(step - 1) * 100,
        window_end_ns=(step + 2) * 100 + 99,
        score=10.0,
        threshold=6.0,
        evidence={
            "role": "compute",
            "test": json.dumps({str(r): "burst" for r in named}),
            "burst_at": json.dumps({str(r): [step + (r != rank)] for r in named}),
            "burst_share": json.dumps({str(r): share for r in named}),
            "bottleneck": json.dumps(list(named)),
            "n_ranks": "4",
        },
    )


def test_a_one_step_burst_pages_only_when_it_recurs() -> None:
    # a healthy rank's optimizer step 40x its usual once: reported, not paged
    assert _run([[_burst(0, 51)], [], []]) == [[], [], []]
    # the same rank and phase again 30 steps later: a recurring stall, paged
    pages = _run([[_burst(0, 21)], [], [], [_burst(0, 51)]])
    assert [len(p) for p in pages] == [0, 0, 0, 1] and pages[3][0]["ranks"] == [0]
    # events under a step each (a preempted rank of a loaded host: 0.5 and 0.9 of a step,
    # 35 steps apart) page at the third, not the second
    small = [
        [_burst(0, 21, share=0.5)],
        [],
        [_burst(0, 41, share=0.9)],
        [],
        [_burst(0, 61, share=0.6)],
    ]
    assert [len(p) for p in _run(small)] == [0, 0, 0, 0, 1]
    # one step each of two ranks, named together beside the real straggler: only it pages
    straggler = l2_finding((2,), ("dp", "all"), w=(80, 83))
    (page,) = _run([[straggler, _burst(2, 80, ranks=(1, 2))]])[0]
    assert page["ranks"] == [2] and page["phase"] == "mlp"


def test_l2_says_which_steps_were_beyond_noise() -> None:
    rng = np.random.default_rng(5)
    d = 8.0 * np.exp(rng.normal(0.0, 0.25, (16, 10)))
    d[7, 4] += 1500.0  # a 1.5 s data-loading stall at the window's 5th step
    win = l2.GroupWindow(
        "j",
        "dp",
        "g",
        np.arange(16),
        np.arange(100, 110),
        ("data_load",),
        ("host",),
        d[:, :, None] * 1e6,
        iter_ns=np.full((16, 10), 880e6),
    )
    (f,) = l2.detect(win, L2Config())
    assert json.loads(f.evidence["burst_at"]) == {"7": [104]}


def test_a_one_step_spike_of_a_rank_pages_only_when_it_recurs() -> None:
    """A rank off the CPU for 650 ms in one ``forward`` (a 4-rank job at load 18): L2's
    step-time spike (``jitter``) names it; once is not a fault, the same again is."""

    def spike(step: int, share: float = 1.03) -> Finding:
        return Finding(
            job="j",
            level="L2",
            kind="jitter",
            group_kind="dp",
            group_id="all",
            ranks=(3,),
            phase="forward",
            window_start_step=step - 3,
            window_end_step=step,
            window_start_ns=(step - 3) * 100,
            window_end_ns=step * 100 + 99,
            score=6.5,
            threshold=6.0,
            evidence={
                "role": "compute",
                "test": json.dumps({"3": "spike"}),
                "spike_steps": json.dumps({"3": [step]}),
                "step_share": json.dumps({"3": share}),
            },
        )

    assert _run([[spike(113)], [spike(113)], [], []]) == [[], [], [], []]
    pages = _run([[spike(13)], [], [spike(33)]])
    assert [len(p) for p in pages] == [0, 0, 1] and pages[2][0]["ranks"] == [3]
    # a stall of ten steps' time or more (a JIT compile of a new shape) pages at once; a
    # preempted process's 5.4 steps (a 4-rank DDP job on a host at load 8) waits to recur
    assert [len(p) for p in _run([[spike(113, share=12.0)]])] == [1]
    assert [len(p) for p in _run([[spike(113, share=5.4)]])] == [0]


def test_a_pair_names_only_the_rank_that_arrived_late() -> None:
    """2-rank DDP: rank 1's mlp is 3x (it arrives late at dp_allreduce, rank 0 waits there);
    rank 0's attention is 1.8x, made up before the collective: it cost the step nothing."""
    ms = np.array(
        [  # attention, mlp, dp_allreduce per step
            [[18.0, 10.0, 140.0]] * 4,
            [[10.0, 30.0, 100.0]] * 4,
        ]
    ) * np.exp(np.random.default_rng(1).normal(0.0, 0.02, (2, 4, 3)))
    win = l2.GroupWindow(
        "j",
        "dp",
        "all",
        np.arange(2),
        np.arange(4),
        ("attention", "mlp", "dp_allreduce"),
        ("compute", "compute", "comm"),
        ms * 1e6,
        iter_ns=np.full((2, 4), 250e6),
    )
    assert [(f.ranks, f.phase) for f in l2.detect(win)] == [((1,), "mlp")]
