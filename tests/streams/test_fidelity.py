"""argus.streams.fidelity and the `argus fidelity` command."""

from __future__ import annotations

import fastavro
import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import spearmanr, wasserstein_distance

from argus.cli import cli
from argus.schemas.codec import load_schemas
from argus.streams import fidelity as F
from argus.streams import synth
from argus.summaries.kde import PAPER, ROBUST, KdeConfig, summarize
from argus.summaries.summary_record import summarize_batch


def test_helpers() -> None:
    a, b = np.array([1.0, 3, 2, 5, 4]), np.array([10.0, 30, 25, 50, 41])
    assert F.spearman(a, b) == pytest.approx(spearmanr(a, b).statistic)
    assert np.isnan(F.spearman([1, 1, 1], [1, 2, 3]))
    assert (
        F.f1_score([], []) == 1.0
        and F.f1_score([1], []) == 0.0
        and F.f1_score([1, 2], [2]) == pytest.approx(2 / 3)
    )
    w = np.ones((8, 8)) - np.eye(8)
    w[3, :] = w[:, 3] = 9.0
    w[3, 3] = 0
    assert F.iqr_flags(w) == (3,)
    assert F.iqr_flags(np.zeros((3, 3))) == ()


def test_raw_pairwise_w1_exact_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    xs = [rng.lognormal(5, 0.3, n) for n in (7, 13, 40, 1)]
    w = F.raw_pairwise_w1(xs)
    for i in range(4):
        for j in range(4):
            assert w[i, j] == pytest.approx(wasserstein_distance(xs[i], xs[j]), rel=1e-9, abs=1e-9)
    grid = F.raw_pairwise_w1(xs, probs=F.default_probs(4096))
    np.testing.assert_allclose(grid, w, rtol=0.05, atol=1e-6)


def _ranks(seed: int, slow: dict[int, float], n: int = 300, r: int = 16) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.lognormal(9 + np.log(slow.get(k, 1.0)), 0.1, n) for k in range(r)]


def test_check_group_flags_the_slow_rank_on_both() -> None:
    raw = _ranks(1, {5: 2.0, 11: 1.6})
    res = F.check_group(raw, [summarize(x, config=ROBUST) for x in raw], exact_raw=True)
    # both slow ranks stand out either way; a healthy rank 1% above the bare Tukey fence may
    # flip (rank 0 here: 983 vs fence 987 raw, 979 vs 964 reconstructed)
    assert {5, 11} <= set(res.raw_flags) and {5, 11} <= set(res.recon_flags) and res.flag_f1 >= 0.8
    assert res.spearman > 0.8 and res.raw_w1.shape == (16, 16)
    with pytest.raises(ValueError):
        F.check_group(raw, [])


def test_more_quantiles_are_more_faithful_on_iid_ranks() -> None:
    # healthy i.i.d. ranks: distances are sampling noise, the hardest thing to reproduce
    raw = _ranks(2, {}, n=500, r=24)
    rho = {
        lv: F.check_group(
            raw, [summarize(x, config=KdeConfig(quantile_levels=lv)) for x in raw], exact_raw=True
        ).spearman
        for lv in [(0.5, 0.99), (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)]
    }
    assert rho[(0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)] > rho[(0.5, 0.99)] + 0.05


@pytest.fixture(scope="module")
def window() -> list[dict]:
    mix = synth.default_mix(0)
    rng = np.random.default_rng(4)
    return [
        synth.kernel_batch(
            rng,
            mix,
            job="j",
            rank=r,
            window_id=9,
            n_events=3000,
            slowdown={"*": 2.5} if r == 2 else None,
        )
        for r in range(12)
    ]


def test_check_batches_samples_groups_and_accepts_published_summaries(window: list[dict]) -> None:
    rep = F.check_batches(window, config=ROBUST, max_groups=6)
    assert rep.n_groups == 6 and np.isfinite(rep.spearman_median) and 0 <= rep.flag_agreement <= 1
    assert sum(2 in g.raw_flags for _, g in rep.groups) >= 4  # the slow rank stands out in raw data
    again = F.check_batches(window, config=ROBUST, max_groups=6)
    assert [k for k, _ in again.groups] == [k for k, _ in rep.groups]  # deterministic per window
    other = F.check_batches(window, config=ROBUST, max_groups=6, seed=123)
    assert [k for k, _ in other.groups] != [k for k, _ in rep.groups]  # rotates with the seed
    pub = [summarize_batch(b, config=ROBUST) for b in window]
    via = F.check_batches(window, summaries=pub, max_groups=6)
    for (k1, g1), (k2, g2) in zip(rep.groups, via.groups, strict=True):
        assert k1 == k2
        np.testing.assert_allclose(
            g1.recon_w1, g2.recon_w1, rtol=1e-6
        )  # float32 ties may round apart
    assert F.check_batches(window[:3]).n_groups == 0
    with pytest.raises(ValueError):
        F.check_batches(window, summaries=pub[:2])


def test_evaluate_synthetic_reports_every_kind() -> None:
    rows = F.evaluate_synthetic(
        config=PAPER, n_ranks=8, n_windows=1, n_events=3000, exact_raw=False
    )
    assert [r.kind for r in rows] == [*synth.KINDS, "all"]
    allrow = rows[-1]
    assert allrow.n_groups >= 140 and 0.3 < allrow.spearman_median <= 1 and 0 <= allrow.raw_f1 <= 1


def test_fidelity_command_synthetic() -> None:
    res = CliRunner().invoke(
        cli,
        [
            "fidelity",
            "--ranks",
            "6",
            "--windows",
            "1",
            "--events",
            "2000",
            "--grid",
            "--method",
            "kde-q4i",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (
        "[kde-q4i]" in res.output and "stationary" in res.output and "kde-p50p99" not in res.output
    )
    bad = CliRunner().invoke(cli, ["fidelity", "--slow", "3-x"])
    assert bad.exit_code != 0


def test_fidelity_command_on_avro_container_file(tmp_path, window: list[dict]) -> None:
    schema = load_schemas()["kernel_batch"].parsed
    path = tmp_path / "batches.avro"
    with path.open("wb") as fh:
        fastavro.writer(fh, schema, window)
    res = CliRunner().invoke(
        cli, ["fidelity", "--method", "kde-p50p99", "--max-groups", "3", "--grid", str(path)]
    )
    assert res.exit_code == 0, res.output
    assert "j window 9: 12 ranks, 3 kernels" in res.output
    junk = tmp_path / "junk.avro"
    junk.write_bytes(b"not avro")
    res = CliRunner().invoke(cli, ["fidelity", str(junk)])
    assert res.exit_code != 0 and "not a readable Avro container file" in res.output
