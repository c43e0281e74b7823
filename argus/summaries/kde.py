"""Windowed KDE valley clustering of kernel durations (paper §5.2), vectorized across groups.

For every (kernel, stream) group of one rank-window, the log-durations are smoothed with a
Gaussian kernel density estimate; the density's valleys split the group into clusters, and
each cluster is kept as ``(count, quantiles)``: the paper's ``(count, p50, p99)``, or more
quantile levels for the improved methods (see :data:`PAPER`, :data:`ROBUST` and
:data:`COMPACT`, the default).

How it is computed (all groups at once, no Python loop per group or per event)
-------------------------------------------------------------------------------
1. Reject durations that are zero, negative, NaN or infinite (counted in :class:`Rejected`).
2. ``x = ln(duration)``; one ``np.sort`` of the composite key ``x + group · stride - x0``
   orders every group's log-durations at once (no permutation needed).
3. Per group: Scott bandwidth ``h = 1.06 · σ · n^(-1/5)`` on ``x`` (``σ`` the sample standard
   deviation; Silverman's ``0.9 · min(σ, IQR/1.349)`` is available).
4. Each group that can hold a kept valley gets its own grid with
   ``grid_points_per_bandwidth`` points per ``h`` (2: the Gaussian is 2 steps wide for every
   group), over its data's range, capped at ``max_grid_points`` (then the grid step grows
   and the effective bandwidth is ``grid_points_per_bandwidth`` steps): ~1 point per
   1-2 events on small groups. All grids are laid end to end in one flat array, one kernel
   support apart, the counts are binned with one ``np.bincount`` and the density is one
   ``scipy.ndimage.correlate1d`` with a Gaussian truncated at ``kernel_support · h`` (3: 13
   taps): O(n + Σ grid), not O(n × grid).
5. Valleys are the density's local minima (a flat run counts once, at its right end); its
   neighbouring peaks are the turns of the density just before and after it. A valley is
   kept, scanning left to right, when the cluster it closes has at least
   ``min_samples_per_side`` events, the cluster it opens can still have that many, and it lies
   at least ``min_log_gap`` from the previous kept boundary, and (with ``valley_depth`` < 1,
   the improved methods) its density is at most that fraction of the lower neighbouring
   peak. With ``isolate_log_gap`` set
   (the improved method), a split where the sorted data has an empty gap of at least that
   many log-units is kept even when a side has fewer events: a rare 40× JIT spike becomes a
   one-event cluster instead of vanishing inside its neighbour's p99. Boundaries also keep
   ``min_log_gap`` from the group's smallest and largest value, so a few tail events a
   hair apart from the rest do not become a cluster. With ``refine_passes`` (the improved
   method) steps 3-5 run again inside each cluster with its own bandwidth: only in the
   clusters next to a split of the previous pass (any other cluster is a whole group or was
   searched already with the same data), and among those only the ones that can hold a
   boundary at all (range ≥ 2 · ``min_log_gap``, and ≥ 2 · ``min_samples_per_side`` events
   or a data gap of ``isolate_log_gap``): skipping the others changes no result.
6. Quantiles of each cluster are exact order statistics (numpy's default linear
   interpolation, on durations in ns).

:func:`summarize_blocks` runs many independent blocks (rank-windows) in one call, each block
with its own ``x0``, stride and sort; every float is computed from one group's (or cluster's)
own values, positions inside it and integer offsets, so each block's result is bit for bit
its own :func:`summarize_many`; only the call's fixed cost is shared.

The grid (step 4) was 3 points per bandwidth and a support of 4 bandwidths, two pads per
group, until issue 21: ~4,000 grid points for a 3,000-event rank-window, most of them pads,
and the density pass dominated the compressor. The coarser grid changes some summaries'
bits (a boundary's bin, a rare noise dip) but none of the compression or fidelity figures
beyond their noise (BENCHMARKS.md, "Batched compressor (issue 21)").

References
----------
ARGUS, arXiv:2606.20374, §5.2 (notes: ``shared/notes/paper.md`` §5). Bandwidth: D. W. Scott,
*Multivariate Density Estimation* (1992); B. W. Silverman, *Density Estimation* (1986).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.ndimage import correlate1d

from argus.config import POSITIVE, ConfigError, Range, build_config, check_ranges
from argus.errors import ArgusError
from argus.summaries.quantile_wire import ENCODINGS

__all__ = [
    "COMPACT",
    "DEFAULT",
    "PAPER",
    "ROBUST",
    "BlockSummaries",
    "Cluster",
    "KdeConfig",
    "ManySummary",
    "Rejected",
    "Summary",
    "SummaryInputError",
    "config_for_method",
    "summarize",
    "summarize_blocks",
    "summarize_many",
]


_KEY_LIMIT = 2.0**36  # above this, group·stride + x loses precision: use lexsort


class SummaryInputError(ArgusError, ValueError):
    """The arrays given to :func:`summarize_many` have the wrong shape or dtype.

    Bad *values* (zero, negative, NaN, inf durations) never raise; they are counted.
    """


#: :class:`KdeConfig`'s numeric fields and their ranges
_RANGES = {
    "bandwidth_factor": POSITIVE,
    "grid_points_per_bandwidth": Range(ge=1),
    "max_grid_points": Range(ge=16),
    "kernel_support": Range(ge=1),
    "min_samples_per_side": Range(ge=1),
    "min_log_gap": Range(ge=0),
    "isolate_log_gap": POSITIVE,
    "max_clusters": Range(ge=1, le=255),
    "refine_passes": Range(ge=0, le=8),
    "valley_depth": Range(gt=0, le=1),
}


@dataclass(frozen=True, kw_only=True)
class KdeConfig:
    """How durations are clustered and summarised. Frozen; validated on construction.

    Parameters
    ----------
    method : str
        Name that travels in ``kernel_summary.method``. ``"kde-p50p99"`` is the paper's.
    quantile_levels : tuple of float
        Levels kept per cluster, strictly increasing in (0, 1); must contain 0.5 and 0.99
        (every consumer can read p50 and p99). Paper: ``(0.5, 0.99)``.
    bandwidth_rule : {"scott", "silverman"}
        ``scott``: ``h = factor · σ · n^(-1/5)`` (paper, factor 1.06). ``silverman``:
        ``σ`` replaced by ``min(σ, IQR/1.349)``, which smooths multimodal groups less.
    bandwidth_factor : float
        The factor above (1.06 in the paper's Scott rule; 0.9 is Silverman's).
    grid_points_per_bandwidth : float
        Grid resolution, points per bandwidth. 2 puts valleys within h/4 of the exact ones,
        far below ``min_log_gap`` (3 before issue 21: 1.5x the grid for no measured gain).
    max_grid_points : int
        Cap of one group's grid. Beyond it the step grows (effective bandwidth
        ``grid_points_per_bandwidth`` steps): only groups whose range is > ~250 bandwidths
        (e.g. a tight kernel plus a 40× spike) are affected, and their far modes stay apart.
    kernel_support : float
        Gaussian truncated at ± this many bandwidths (3: the cut mass is 0.27 %); it makes
        gaps between modes exactly zero-density, so no floating-point noise creates valleys.
    min_samples_per_side : int
        Fewest events a cluster may have (paper filter (a)). Default 3: a p99 from fewer than
        three events is a single order statistic, and a 2-event "mode" is noise.
    min_log_gap : float
        Least distance between consecutive kept boundaries, in ln(ns) (paper filter (b)).
        Default 0.15 (a 16% duration ratio): clusters narrower than that carry no signal for
        fail-slow (L3 looks for 1.5×+ shifts) and cost bytes.
    isolate_log_gap : float
        Keep a split despite ``min_samples_per_side`` when the data has an empty gap of at
        least this many ln-units there (``inf`` disables it: the paper). ROBUST uses 1.0
        (a 2.7× jump with nothing in between), which isolates JIT spikes and stragglers.
    refine_passes : int
        Re-run the valley search inside each cluster, with the cluster's own bandwidth, up
        to this many times (0: the paper). Scott's σ of a multimodal group is its spread
        between modes, so its bandwidth can smooth close modes into one; inside a cluster the
        bandwidth fits the cluster. A unimodal cluster does not split again.
    max_clusters : int
        Most clusters per group (≤ 255: the wire field is uint8). Extra boundaries are
        dropped, keeping those with the widest data gaps.
    valley_depth : float
        Keep a valley only where the density is at most this fraction of the lower of its
        two neighbouring peaks (1: any local minimum, the paper). Scott's bandwidth leaves
        shallow noise dips in ~2 % of unimodal samples of 20-1,000 events; refinement, which
        re-runs the search inside each mode with the mode's own smaller bandwidth, turns
        them into spurious splits. Splits at a data gap of ``isolate_log_gap`` always pass.
    quantile_encoding : {"float32", "log16"}
        How ``kernel_summary`` carries the quantiles (:mod:`argus.summaries.quantile_wire`):
        all levels as float32 (4 B each), or the float32 median plus int16 log offsets of
        the other levels (2 B each, relative error ≤ 2.5e-4).
    """

    method: str = "kde-p50p99"
    quantile_levels: tuple[float, ...] = (0.5, 0.99)
    bandwidth_rule: str = "scott"
    bandwidth_factor: float = 1.06
    grid_points_per_bandwidth: float = 2.0
    max_grid_points: int = 1024
    kernel_support: float = 3.0
    min_samples_per_side: int = 3
    min_log_gap: float = 0.15
    isolate_log_gap: float = math.inf
    refine_passes: int = 0
    max_clusters: int = 32
    valley_depth: float = 1.0
    quantile_encoding: str = "float32"

    def __post_init__(self) -> None:
        lv = tuple(float(v) for v in self.quantile_levels)
        object.__setattr__(self, "quantile_levels", lv)
        if (
            not lv
            or any(not 0.0 < v < 1.0 for v in lv)
            or any(b <= a for a, b in itertools.pairwise(lv))
        ):
            raise ConfigError(
                f"kde.quantile_levels must be strictly increasing in (0, 1), got {lv}"
            )
        if 0.5 not in lv or 0.99 not in lv:
            raise ConfigError(f"kde.quantile_levels must contain 0.5 and 0.99, got {lv}")
        if self.quantile_encoding not in ENCODINGS:
            raise ConfigError(
                f"kde.quantile_encoding must be one of {ENCODINGS}, got {self.quantile_encoding!r}"
            )
        if self.bandwidth_rule not in ("scott", "silverman"):
            raise ConfigError(
                f"kde.bandwidth_rule must be scott or silverman, got {self.bandwidth_rule!r}"
            )
        check_ranges(self, "kde", _RANGES)
        if not self.method:
            raise ConfigError("kde.method must be a non-empty name")

    @classmethod
    def from_mapping(cls, values: Any) -> KdeConfig:
        """Build from a settings section (e.g. ``settings.section("streams").get("kde")``).

        ``method`` alone selects a preset (``kde-p50p99``, ``kde-q4i`` or ``kde-q7l``;
        :data:`DEFAULT` when absent); other keys override its fields, converted and checked
        by :func:`argus.config.build_config` (an unknown key or a bad value raises
        :class:`~argus.config.ConfigError` naming it).
        """
        values = dict(values or {})
        base = config_for_method(str(values.pop("method", DEFAULT.method)))
        return build_config(cls, values, section="kde", base=base)


#: The paper's summary: Scott bandwidth, (count, p50, p99) per cluster.
PAPER = KdeConfig()

#: The improved summary ``kde-q4i``: quantiles (p10, p50, p90, p99) per cluster, far outliers
#: (JIT spikes) isolated as their own clusters, and two refinement passes that split modes
#: Scott's bandwidth smooths together (only at valleys <= 0.8 of the lower peak, so noise
#: dips inside one mode do not split it). ~1.5x the paper's bytes (still > 3,700x smaller than
#: Kineto JSON); rank-comparison fidelity 0.92-1.0 instead of 0.77-0.93 (BENCHMARKS.md,
#: "Compression"). For i.i.d. healthy ranks, stationary kernels need more quantiles for
#: rho >= 0.95: :data:`COMPACT` keeps 7 in the same bytes.
ROBUST = KdeConfig(
    method="kde-q4i",
    quantile_levels=(0.1, 0.5, 0.9, 0.99),
    isolate_log_gap=1.0,
    refine_passes=2,
    valley_depth=0.8,
)

#: The default summary ``kde-q7l``: ``kde-q4i``'s clustering (outlier isolation, two
#: refinement passes) with 7 quantile levels (p5, p20, p35, p50, p70, p90, p99) sent as the
#: float32 median plus int16 log offsets (:mod:`argus.summaries.quantile_wire`): 20 bytes per
#: cluster like ``kde-q4i``'s four float32, and enough of each cluster's shape that the
#: reconstructed W1 orders even i.i.d. healthy ranks' sampling noise as the raw data do
#: (stationary median Spearman 0.97 instead of 0.93). Levels chosen by measurement
#: (BENCHMARKS.md, "Compression", table 4): W1 weighs the upper part of a duration
#: distribution most, so the levels are denser there; 8 levels would break the 3,700x bar.
COMPACT = KdeConfig(
    method="kde-q7l",
    quantile_levels=(0.05, 0.2, 0.35, 0.5, 0.7, 0.9, 0.99),
    isolate_log_gap=1.0,
    refine_passes=2,
    valley_depth=0.8,
    quantile_encoding="log16",
)

#: What the compressor (``summarize_batch``), ``argus diagnose`` and replay use when no
#: method is configured.
DEFAULT = COMPACT

_PRESETS = {PAPER.method: PAPER, ROBUST.method: ROBUST, COMPACT.method: COMPACT}


def config_for_method(method: str) -> KdeConfig:
    """The preset named ``method`` (``"kde-p50p99"``, ``"kde-q4i"`` or ``"kde-q7l"``)."""
    try:
        return _PRESETS[method]
    except KeyError:
        raise ConfigError(f"unknown summary method {method!r}; known: {sorted(_PRESETS)}") from None


# -- results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rejected:
    """Durations rejected before clustering, by reason (counts)."""

    nonpositive: int = 0
    nan: int = 0
    inf: int = 0

    @property
    def total(self) -> int:
        return self.nonpositive + self.nan + self.inf

    def __add__(self, other: Rejected) -> Rejected:
        return Rejected(
            self.nonpositive + other.nonpositive, self.nan + other.nan, self.inf + other.inf
        )


@dataclass(frozen=True)
class Cluster:
    """One cluster of a summary: ``count`` events with the given quantiles (ns)."""

    count: int
    p50_ns: float
    p99_ns: float
    quantiles_ns: tuple[float, ...]
    quantile_levels: tuple[float, ...]


@dataclass(frozen=True, eq=False)
class Summary:
    """The clusters of one group (one rank, kernel, stream, window).

    Attributes
    ----------
    quantile_levels : (L,) float64
        Levels of the quantile columns, increasing, containing 0.5 and 0.99.
    counts : (K,) int64
        Events per cluster; clusters are ordered by duration and disjoint.
    quantiles_ns : (K, L) float64, ns
        Quantiles of each cluster at ``quantile_levels``.
    method : str
        Summary method name (``kde-p50p99`` for the paper's).
    rejected : int
        Events of this group dropped as invalid (not in ``counts``).
    """

    quantile_levels: np.ndarray
    counts: np.ndarray
    quantiles_ns: np.ndarray
    method: str = PAPER.method
    rejected: int = 0

    def __post_init__(self) -> None:
        lv = np.asarray(self.quantile_levels, dtype=np.float64).reshape(-1)
        c = np.asarray(self.counts, dtype=np.int64).reshape(-1)
        q = np.asarray(self.quantiles_ns, dtype=np.float64).reshape(c.size, lv.size)
        object.__setattr__(self, "quantile_levels", lv)
        object.__setattr__(self, "counts", c)
        object.__setattr__(self, "quantiles_ns", q)

    @property
    def n(self) -> int:
        """Events summarised (Σ counts)."""
        return int(self.counts.sum())

    def __len__(self) -> int:
        return int(self.counts.size)

    def _col(self, level: float) -> np.ndarray:
        hit = np.flatnonzero(np.isclose(self.quantile_levels, level))
        if hit.size == 0:
            raise KeyError(f"level {level} not in {self.quantile_levels.tolist()}")
        return self.quantiles_ns[:, int(hit[0])]

    @property
    def p50_ns(self) -> np.ndarray:
        """(K,) median of each cluster, ns."""
        return self._col(0.5)

    @property
    def p99_ns(self) -> np.ndarray:
        """(K,) 99th percentile of each cluster, ns."""
        return self._col(0.99)

    @property
    def clusters(self) -> tuple[Cluster, ...]:
        lv = tuple(self.quantile_levels.tolist())
        p50, p99 = self.p50_ns, self.p99_ns
        return tuple(
            Cluster(int(c), float(p50[k]), float(p99[k]), tuple(self.quantiles_ns[k].tolist()), lv)
            for k, c in enumerate(self.counts)
        )

    def __iter__(self) -> Iterator[Cluster]:
        return iter(self.clusters)

    def __repr__(self) -> str:
        rows = ", ".join(
            f"({c.count}, p50={c.p50_ns:.4g}, p99={c.p99_ns:.4g})" for c in self.clusters
        )
        return f"Summary({self.method}, n={self.n}, [{rows}])"


@dataclass(frozen=True, eq=False)
class ManySummary:
    """Columnar result of :func:`summarize_many`: G groups, C clusters, L levels.

    Attributes
    ----------
    group_ids : (G,) int64
        The distinct group ids given, increasing.
    group_n : (G,) int64
        Valid events per group (Σ of its clusters' counts).
    group_first : (G + 1,) int64
        Clusters of group g are rows ``group_first[g]:group_first[g + 1]``.
    cluster_group : (C,) int64
        Index into ``group_ids`` of each cluster row.
    cluster_count : (C,) int64
        Events per cluster.
    cluster_quantiles_ns : (C, L) float64, ns
        Quantiles per cluster at ``quantile_levels``.
    quantile_levels : (L,) float64
    method : str
    rejected : Rejected
        Invalid durations over all groups (not attributed to groups).
    """

    group_ids: np.ndarray
    group_n: np.ndarray
    group_first: np.ndarray
    cluster_group: np.ndarray
    cluster_count: np.ndarray
    cluster_quantiles_ns: np.ndarray
    quantile_levels: np.ndarray
    method: str
    rejected: Rejected = field(default_factory=Rejected)

    @property
    def n_groups(self) -> int:
        return int(self.group_ids.size)

    @property
    def n_clusters(self) -> int:
        return int(self.cluster_count.size)

    @property
    def group_clusters(self) -> np.ndarray:
        """(G,) int64 number of clusters per group."""
        return np.diff(self.group_first)

    def summary(self, g: int) -> Summary:
        """The :class:`Summary` of the g-th group (an index, not a group id)."""
        a, b = int(self.group_first[g]), int(self.group_first[g + 1])
        return Summary(
            self.quantile_levels,
            self.cluster_count[a:b],
            self.cluster_quantiles_ns[a:b],
            self.method,
        )

    def summaries(self) -> dict[int, Summary]:
        """``{group id: Summary}`` for every group."""
        return {int(gid): self.summary(i) for i, gid in enumerate(self.group_ids)}


@dataclass(frozen=True, eq=False)
class BlockSummaries:
    """Result of :func:`summarize_blocks`: the groups of B blocks in one :class:`ManySummary`.

    Attributes
    ----------
    many : ManySummary
        Every block's groups, block by block (each block's by increasing id); ``group_ids``
        are the ids as given (the same id may recur in several blocks); ``rejected`` is the
        total.
    block_groups : (B + 1,) int64
        Groups of block b are rows ``block_groups[b]:block_groups[b + 1]`` of ``many``.
    rejected : tuple of Rejected
        Invalid durations of each block.
    """

    many: ManySummary
    block_groups: np.ndarray
    rejected: tuple[Rejected, ...]

    @property
    def n_blocks(self) -> int:
        return int(self.block_groups.size - 1)

    def block(self, b: int) -> ManySummary:
        """Block b's result, as :func:`summarize_many` of its events alone returns it."""
        m = self.many
        g0, g1 = int(self.block_groups[b]), int(self.block_groups[b + 1])
        c0, c1 = int(m.group_first[g0]), int(m.group_first[g1])
        return ManySummary(
            group_ids=m.group_ids[g0:g1],
            group_n=m.group_n[g0:g1],
            group_first=m.group_first[g0 : g1 + 1] - c0,
            cluster_group=m.cluster_group[c0:c1] - g0,
            cluster_count=m.cluster_count[c0:c1],
            cluster_quantiles_ns=m.cluster_quantiles_ns[c0:c1],
            quantile_levels=m.quantile_levels,
            method=m.method,
            rejected=self.rejected[b],
        )


# -- the computation ----------------------------------------------------------------------------


def summarize(durations_ns: npt.ArrayLike, *, config: KdeConfig = PAPER) -> Summary:
    """Cluster the durations of one group and summarise each cluster.

    Parameters
    ----------
    durations_ns : (n,) array_like of float or int, ns
        Kernel durations of one (rank, kernel, stream, window). Zero, negative, NaN and
        infinite values are rejected and counted in ``Summary.rejected``.
    config : KdeConfig
        Clustering parameters; :data:`PAPER` by default.

    Returns
    -------
    Summary
        Clusters ordered by duration. No clusters when no valid duration was given.

    Examples
    --------
    >>> s = summarize([1000, 1010, 990, 1005, 995, 10_000, 10_100, 9_900, 10_050, 9_950])
    >>> s.counts.tolist(), s.p50_ns.round().tolist()
    ([5, 5], [1000.0, 10000.0])
    """
    d = np.asarray(durations_ns)
    if d.ndim != 1:
        raise SummaryInputError(f"durations_ns must be 1-D, got shape {d.shape}")
    many = summarize_many(np.zeros(d.size, dtype=np.int64), d, config=config)
    rej = many.rejected.total
    if many.n_groups == 0:
        lv = np.asarray(config.quantile_levels)
        return Summary(lv, np.zeros(0, np.int64), np.zeros((0, lv.size)), config.method, rej)
    s = many.summary(0)
    return Summary(s.quantile_levels, s.counts, s.quantiles_ns, s.method, rej)


def _validate(
    group_ids: npt.ArrayLike, durations_ns: npt.ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    g = np.asarray(group_ids)
    d = np.asarray(durations_ns)
    if g.ndim != 1 or d.ndim != 1:
        raise SummaryInputError(
            f"group_ids and durations_ns must be 1-D, got shapes {g.shape} and {d.shape}"
        )
    if g.size != d.size:
        raise SummaryInputError(
            f"group_ids has {g.size} entries but durations_ns has {d.size}; pass one group id per event"
        )
    if g.size and g.dtype.kind not in "iu":
        raise SummaryInputError(f"group_ids must be integers, got dtype {g.dtype}")
    if d.size and d.dtype.kind not in "iuf":
        raise SummaryInputError(f"durations_ns must be numbers, got dtype {d.dtype}")
    if g.size and g.dtype.kind == "i" and g.min() < 0:
        raise SummaryInputError("group_ids must be non-negative")
    return g, d


def _reject(d: np.ndarray) -> tuple[np.ndarray | None, Rejected]:
    """Mask of valid durations (None when all are valid) and the rejection counts."""
    if d.size == 0 or (float(d.min()) > 0.0 and float(d.max()) < np.inf):  # NaN fails both
        return None, Rejected()
    valid = (d > 0.0) & (d < np.inf)
    nan = int(np.isnan(d).sum())
    inf = int(np.isposinf(d).sum())
    return valid, Rejected(nonpositive=int(d.size - valid.sum()) - nan - inf, nan=nan, inf=inf)


def _densify(g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense label of each event (n,) int64 (groups ordered by id), distinct ids (G,)
    increasing, counts (G,)."""
    limit = 4 * g.size + 4096
    gmax = int(g.max())
    base = 0 if gmax < limit else int(g.min())
    if gmax - base < limit:  # ids in a small range: a lookup table, no sort
        gi = (g - base if base else g).astype(np.intp, copy=False)
        counts_all = np.bincount(gi, minlength=gmax - base + 1)
        present = counts_all > 0
        lut = present.cumsum()
        lut -= 1
        ids = present.nonzero()[0].astype(np.int64) + base
        return lut[gi].astype(np.int64, copy=False), ids, counts_all[present].astype(np.int64)
    ids, labels, counts = np.unique(g, return_inverse=True, return_counts=True)
    return labels.reshape(-1).astype(np.int64), ids.astype(np.int64), counts.astype(np.int64)


@functools.lru_cache(maxsize=16)
def _gaussian_taps(points_per_bw: float, support: float) -> tuple[np.ndarray, int]:
    """Normalised Gaussian taps (2·pad + 1,) at ``points_per_bw`` points per bandwidth,
    truncated at ``support`` bandwidths; read-only (cached)."""
    pad = math.ceil(support * points_per_bw)
    t = np.arange(-pad, pad + 1) / points_per_bw
    taps = np.exp(-0.5 * t * t)
    taps /= taps.sum()
    taps.setflags(write=False)
    return taps, pad


def _empty(config: KdeConfig, rejected: Rejected) -> ManySummary:
    lv = np.asarray(config.quantile_levels, dtype=np.float64)
    z = np.zeros(0, dtype=np.int64)
    return ManySummary(
        z, z, np.zeros(1, np.int64), z, z, np.zeros((0, lv.size)), lv, config.method, rejected
    )


def summarize_many(
    group_ids: npt.ArrayLike,
    durations_ns: npt.ArrayLike,
    *,
    config: KdeConfig = PAPER,
) -> ManySummary:
    """Cluster and summarise the durations of many groups at once.

    Parameters
    ----------
    group_ids : (n,) array_like of non-negative int
        Group of each event (e.g. a dense (kernel, stream) index). Any values; dense small
        ids are fastest.
    durations_ns : (n,) array_like of float or int, ns
        Duration of each event. Zero, negative, NaN and infinite values are rejected and
        counted in ``ManySummary.rejected``; they never raise.
    config : KdeConfig
        Clustering parameters; :data:`PAPER` by default.

    Returns
    -------
    ManySummary
        Columnar clusters of every group with at least one valid event.

    Raises
    ------
    SummaryInputError
        Arrays not 1-D, of different lengths, or of non-numeric / negative-id dtype.

    Notes
    -----
    Cost: one sort of n floats, about ten passes over the events per valley search (one
    ``bincount``, the rest in place), one convolution over Σ grid sizes, and a few array
    passes over groups and valley candidates; see the module docstring. Refinement passes
    cost the same per event over the clusters they search (about a third of the events on
    the bench workload).
    """
    g_in, d_in = _validate(group_ids, durations_ns)
    return _summarize(g_in, d_in, np.array([g_in.size], np.int64), config).many


def summarize_blocks(
    group_ids: npt.ArrayLike,
    durations_ns: npt.ArrayLike,
    block_sizes: npt.ArrayLike,
    *,
    config: KdeConfig = PAPER,
    group_block: npt.ArrayLike | None = None,
    group_counts: npt.ArrayLike | None = None,
) -> BlockSummaries:
    """:func:`summarize_many` of several independent blocks (e.g. rank-windows) in one call.

    The events of block b are the ``block_sizes[b]`` events after those of the blocks before
    it; groups never span blocks (the same group id in two blocks is two groups). Block b's
    result (:meth:`BlockSummaries.block`) is bit for bit what ``summarize_many`` gives for
    its events alone: every float operation sees the values the single call sees (per-block
    log offset and stride, positions inside a group or cluster); only the fixed cost of
    the call (about 100 numpy calls) is paid once instead of once per block.

    Parameters
    ----------
    group_ids : (n,) array_like of non-negative int
    durations_ns : (n,) array_like of float or int, ns
    block_sizes : (B,) array_like of non-negative int
        Events per block; they sum to n.
    config : KdeConfig
    group_block : (G,) array_like of int, optional
        When the caller has numbered the groups already (the compressor): ``group_ids`` are
        indices 0..G-1 into it, ``group_block[g]`` is group g's block (non-decreasing), and a
        block's groups are reported in index order; ``many.group_ids`` are these indices.
        Saves the densification (a few passes over the events); the caller guarantees that
        every event's group lies in the event's block.
    group_counts : (G,) array_like of int, optional
        With ``group_block``: the number of events of each group (the caller counted them
        while numbering), saving a count over the events; used only when no event is
        rejected. The caller guarantees them.

    Raises
    ------
    SummaryInputError
        As :func:`summarize_many`, or block sizes that are negative or do not sum to n.
    """
    g_in, d_in = _validate(group_ids, durations_ns)
    sizes = np.asarray(block_sizes)
    if sizes.ndim != 1 or (sizes.size and sizes.dtype.kind not in "iu"):
        raise SummaryInputError(
            f"block_sizes must be 1-D integers, got {sizes.dtype} {sizes.shape}"
        )
    sizes = sizes.astype(np.int64)
    if (sizes < 0).any() or int(sizes.sum()) != g_in.size:
        raise SummaryInputError(
            f"block_sizes must be >= 0 and sum to the {g_in.size} events, "
            f"got sum {int(sizes.sum())}"
        )
    gb = None
    if group_block is not None:
        gb = np.asarray(group_block, dtype=np.int64)
        if gb.ndim != 1 or (g_in.size and int(g_in.max()) >= gb.size):
            raise SummaryInputError("group_ids must index group_block")
    gc = None
    if gb is not None and group_counts is not None:
        gc = np.asarray(group_counts).astype(np.int64)
        if gc.shape != gb.shape:
            raise SummaryInputError("group_counts must have one count per group")
    return _summarize(g_in, d_in, sizes, config, gb, gc)


def _summarize(
    g_in: np.ndarray,
    d_in: np.ndarray,
    sizes: np.ndarray,
    config: KdeConfig,
    group_block_in: np.ndarray | None = None,
    group_counts_in: np.ndarray | None = None,
    slots: tuple[np.ndarray, np.ndarray, int] | None = None,
) -> BlockSummaries:
    """The computation of :func:`summarize_blocks` (inputs validated; ``sizes`` (B,) int64;
    ``group_block_in``, ``group_counts_in``: its ``group_block``, ``group_counts``).

    ``slots``, with ``group_block_in``: ``(used, group, n)`` when ``g_in`` holds slots < n
    rather than groups (the compressor's (name, stream) slots): slot ``used[k]`` is group
    ``group[k]``, no event has another slot. The groups' log offsets are then looked up per
    slot (no per-event group array) when every event is valid.

    See the module doc for the steps. With several blocks, each block keeps its own log
    offset ``x0`` and ``stride`` and the sort runs per block; floats are computed per group
    or cluster from its own values (positions inside it, offsets added in integers), so
    each block's numbers equal those of a call on it alone.
    """
    n_blocks = sizes.size
    bounds = np.zeros(n_blocks + 1, np.int64)
    np.cumsum(sizes, out=bounds[1:])
    valid, rejected = _reject(d_in)
    per_block = [Rejected()] * n_blocks if n_blocks > 1 else [rejected]
    if valid is not None:
        if n_blocks > 1:
            per_block, bounds = _reject_blocks(d_in, valid, bounds)
        g_in, d_in = np.compress(valid, g_in), np.compress(valid, d_in)
    if d_in.size == 0:
        return _empty_blocks(config, rejected, per_block)
    sizes = np.diff(bounds)
    nz = np.flatnonzero(sizes)  # blocks with valid events
    nb = nz.size
    lv = _levels(config)

    # (2) one sort per block orders its groups' log-durations: xs (n,) holds ln(duration) plus
    # the group's offset off[g] = g · stride - x0 (g the group's dense index in its block, x0
    # and stride the block's: groups never overlap); everything below uses differences inside
    # a group only. Large temporaries are dropped as soon as they are used.
    x = np.log(d_in, dtype=np.float64)
    del d_in
    if nb == 1:
        x0s, his = [float(x.min())], [float(x.max())]
    else:
        x0s = np.minimum.reduceat(x, bounds[nz]).tolist()
        his = np.maximum.reduceat(x, bounds[nz]).tolist()
    strides = [2.0 ** math.ceil(math.log2(hi - lo + 1.0)) for lo, hi in zip(x0s, his, strict=True)]
    if group_block_in is None:
        label, ids, counts, group_block, first = _densify_blocks(g_in, sizes[nz])
    else:
        counted = group_counts_in if valid is None else None  # counts of all events
        if slots is not None and counted is None:  # events rejected: their groups
            g_in = np.take(_slot_table(slots), g_in)
            slots = None
        label, ids, counts, group_block, first = _numbered(g_in, group_block_in, sizes, counted)
    del g_in
    n_groups = ids.size
    stride_b = np.asarray(strides)
    off = (np.arange(n_groups) - first[group_block]) * stride_b[group_block]
    off -= np.asarray(x0s)[group_block]
    composite = np.diff(first) * stride_b < _KEY_LIMIT
    for b in np.flatnonzero(~composite).tolist():  # the key would lose precision: lexsort
        off[first[b] : first[b + 1]] = 0.0
    xs = x
    if slots is None:
        xs += np.take(off, label)  # take: ~2x a fancy index's speed on a small table
    else:  # label holds slots: their offsets (the unused ones are never read)
        off_slot = np.empty(slots[2])
        off_slot[slots[0]] = off[slots[1]]
        xs += off_slot.take(label)
        del off_slot
        if not composite.all():
            label = np.take(_slot_table(slots), label)  # the lexsort below needs the groups
    for b, (a, e) in enumerate(zip(bounds[nz].tolist(), bounds[nz + 1].tolist(), strict=True)):
        if composite[b]:
            xs[a:e].sort()
        else:
            xb = xs[a:e].copy()
            xs[a:e] = xb[np.lexsort((xb, label[a:e]))]
    del x, label
    ends = np.cumsum(counts)
    starts = ends - counts

    # (3)-(5) valley splits per group, then (refinement) inside each cluster
    splits = _valley_splits(xs, starts, counts, config)
    fresh = splits  # splits of the last pass: only the clusters around them can split again
    for _ in range(config.refine_passes):
        if fresh.size == 0:
            break
        cuts = np.concatenate((starts, splits, [xs.size]))
        cuts.sort()
        b_idx = cuts.searchsorted(fresh)  # fresh split = cuts[b_idx]
        # the two clusters on either side of each fresh split (a cluster may border two)
        seg = np.concatenate((b_idx - 1, b_idx))
        seg.sort()
        seg = seg[np.concatenate(([True], seg[1:] != seg[:-1]))]
        seg_start = cuts[seg]
        seg_n = cuts[seg + 1] - seg_start
        fresh = _valley_splits(xs, seg_start, seg_n, config, contiguous=False)
        if fresh.size == 0:
            break
        splits = np.concatenate((splits, fresh))
        splits.sort()
    split_group = starts.searchsorted(splits, side="right") - 1  # a split is inside a group
    splits, split_group = _cap_clusters(xs, splits, split_group, n_groups, config.max_clusters)

    # (6) clusters = runs of xs between group starts and kept splits
    gfirst = np.zeros(n_groups + 1, np.int64)
    np.cumsum(np.bincount(split_group, minlength=n_groups) + 1, out=gfirst[1:])
    cgroup = np.arange(n_groups).repeat(np.diff(gfirst))
    cstart = np.sort(np.concatenate((starts, splits)))
    cend = np.append(cstart[1:], xs.size)
    ccount = cend - cstart
    quant = _cluster_quantiles(xs, cstart, ccount, lv, off[cgroup])
    many = ManySummary(
        group_ids=ids,
        group_n=counts,
        group_first=gfirst,
        cluster_group=cgroup.astype(np.int64),
        cluster_count=ccount.astype(np.int64),
        cluster_quantiles_ns=quant,
        quantile_levels=lv,
        method=config.method,
        rejected=rejected,
    )
    block_groups = np.zeros(n_blocks + 1, np.int64)
    block_groups[nz + 1] = np.diff(first)
    np.cumsum(block_groups, out=block_groups)
    return BlockSummaries(many, block_groups, tuple(per_block))


def _slot_table(slots: tuple[np.ndarray, np.ndarray, int]) -> np.ndarray:
    """(n,) int64 group of each slot (:func:`_summarize`'s ``slots``; unused ones 0)."""
    table = np.zeros(slots[2], np.int64)
    table[slots[0]] = slots[1]
    return table


def _levels(config: KdeConfig) -> np.ndarray:
    """(L,) float64 quantile levels of ``config``, built once per config (read-only)."""
    lv = _LEVELS.get(config.quantile_levels)
    if lv is None:
        lv = np.asarray(config.quantile_levels, dtype=np.float64)
        lv.setflags(write=False)
        _LEVELS[config.quantile_levels] = lv
    return lv


_LEVELS: dict[tuple[float, ...], np.ndarray] = {}


def _reject_blocks(
    d: np.ndarray, valid: np.ndarray, bounds: np.ndarray
) -> tuple[list[Rejected], np.ndarray]:
    """Per-block rejection counts and the block bounds (B + 1,) over the valid events.

    ``d`` (n,) all durations, ``valid`` (n,) their mask; ``bounds`` (B + 1,) the blocks'
    event offsets."""
    n_blocks = bounds.size - 1
    blk = np.arange(n_blocks).repeat(np.diff(bounds))
    bad = np.bincount(blk[~valid], minlength=n_blocks).tolist()
    nan = np.bincount(blk[np.isnan(d)], minlength=n_blocks).tolist()
    inf = np.bincount(blk[np.isposinf(d)], minlength=n_blocks).tolist()
    per_block = [
        Rejected(nonpositive=b - a - i, nan=a, inf=i) for b, a, i in zip(bad, nan, inf, strict=True)
    ]
    kept = np.zeros(n_blocks + 1, np.int64)
    np.cumsum(np.bincount(blk[valid], minlength=n_blocks), out=kept[1:])
    return per_block, kept


def _empty_blocks(
    config: KdeConfig, rejected: Rejected, per_block: list[Rejected]
) -> BlockSummaries:
    return BlockSummaries(
        _empty(config, rejected), np.zeros(len(per_block) + 1, np.int64), tuple(per_block)
    )


def _numbered(
    g: np.ndarray, group_block: np.ndarray, sizes: np.ndarray, counts: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_densify_blocks` of groups the caller numbered (``g`` (n,) < G, valid events
    only; ``group_block`` (G,) non-decreasing block of each; ``sizes`` (B,) valid events per
    block; ``counts`` (G,) the events of each group in ``g`` when known): groups left without
    an event are dropped, blocks without one too."""
    if counts is None:
        counts = np.bincount(g, minlength=group_block.size)
    present = counts > 0
    ids = np.arange(group_block.size, dtype=np.int64)
    label = g.astype(np.int64, copy=False)
    if not present.all():
        ids = ids[present]
        counts = counts[present]
        group_block = group_block[present]
        lut = present.cumsum()
        lut -= 1
        label = lut[g]
    pos = np.cumsum(sizes > 0) - 1  # block -> index among the blocks with events
    group_block = pos[group_block]
    first = np.searchsorted(group_block, np.arange(int(pos[-1]) + 2)).astype(np.int64)
    return label, ids, counts.astype(np.int64, copy=False), group_block, first


def _densify_blocks(
    g: np.ndarray, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Dense groups of the blocks' events (``sizes`` (nb,) > 0 events each, in order).

    Returns ``label`` (n,) int64, each event's group index (global: groups ordered by block,
    then id); ``ids`` (G,) the groups' ids; ``counts`` (G,); ``group_block`` (G,) the block of
    each group; ``first`` (nb + 1,) the first group of each block.
    """
    nb = sizes.size
    if nb == 1:
        label, ids, counts = _densify(g)
        return label, ids, counts, np.zeros(ids.size, np.int64), np.array([0, ids.size], np.int64)
    gmin, gmax = int(g.min()), int(g.max())
    width = gmax - gmin + 1
    if nb * width < 2**62:
        key = np.arange(0, nb * width, width, dtype=np.int64).repeat(sizes)
        key += g - gmin if gmin else g
        label, ids, counts = _densify(key)
        group_block = ids // width
        ids = ids - group_block * width + gmin
    else:  # ids too far apart to combine with the block: one block at a time
        parts = []
        at = 0
        n_before = 0
        for i, s in enumerate(sizes.tolist()):
            lab, gid, cnt = _densify(g[at : at + s])
            parts.append((lab + n_before, gid, cnt, np.full(gid.size, i, np.int64)))
            at += s
            n_before += gid.size
        label = np.concatenate([p[0] for p in parts])
        ids = np.concatenate([p[1] for p in parts])
        counts = np.concatenate([p[2] for p in parts])
        group_block = np.concatenate([p[3] for p in parts])
    first = np.searchsorted(group_block, np.arange(nb + 1)).astype(np.int64)
    return label, ids, counts, group_block, first


def _valley_splits(
    xs: np.ndarray,
    starts: np.ndarray,
    counts: np.ndarray,
    config: KdeConfig,
    *,
    contiguous: bool = True,
) -> np.ndarray:
    """Kept valley split positions (into ``xs``) for sorted segments, increasing.

    ``xs`` (n,) is sorted within each segment ``[starts[s], starts[s] + counts[s])``; the
    segments are non-empty, disjoint and in increasing order; ``contiguous``: they lie end
    to end from 0 to n. Only differences inside a segment are used, so each segment may carry
    its own offset, and no float depends on where a segment lies (a block's splits are those
    of a call on its segments alone). Steps 3-5 of the module doc, on the segments that can
    hold a kept valley (:func:`_may_split`, exact) only. Per event: a gather, one
    subtraction, three products or sums, two segment sums and one ``bincount``; the rest is
    per grid point or per segment.
    """
    keep = _may_split(xs, starts, counts, config)
    kept = np.flatnonzero(keep)
    if kept.size == 0:
        return kept
    n_k = counts[kept]
    sk = np.cumsum(n_k) - n_k  # first event of each kept segment in x_k
    moved = starts[kept] - sk  # x_k[i] = xs[i + moved[segment]]
    if kept.size == counts.size and contiguous:
        x_k = xs
    elif contiguous:
        x_k = np.compress(keep.repeat(counts), xs)  # ~2x a boolean index's speed
    else:
        take = moved.repeat(n_k)
        take += np.arange(take.size)
        x_k = np.take(xs, take)
        del take
    # (3) per-segment bandwidth (moments about the segment's minimum, for precision)
    gmin = x_k[sk]
    rng_k = x_k[sk + n_k - 1] - gmin
    xc = gmin.repeat(n_k)
    np.subtract(x_k, xc, out=xc)
    s1 = np.add.reduceat(xc, sk)
    tmp = np.multiply(xc, xc)
    s2 = np.add.reduceat(tmp, sk)
    del tmp
    nf = n_k.astype(np.float64)
    var = s2 - s1 * s1 / nf
    var /= np.maximum(nf - 1.0, 1.0)
    sigma = np.sqrt(np.maximum(var, 0.0, out=var), out=var)
    if config.bandwidth_rule == "silverman":
        iqr = _order_stat(x_k, sk, n_k, 0.75) - _order_stat(x_k, sk, n_k, 0.25)
        robust = iqr / 1.349
        sigma = np.where((robust > 0) & (robust < sigma), robust, sigma)
    h = config.bandwidth_factor * sigma * nf ** (-0.2)  # > 0: a kept segment's range is

    # (4) flat grid of the kept segments (the others' splits are empty whatever their
    # density); step = h / points_per_bw, capped by max_grid_points. A kept segment's grid is
    # ``pad`` points, then its ``inner`` points (its data's range), the next segment's grid
    # right after (one trailing pad closes the last): the kernel reaches ``pad`` points, so
    # a segment's inner density is its own events' alone. The dip where two segments' tails
    # meet is a valley with no event of its segment on one side, or at its last inner point
    # (closer than min_log_gap to its data's top): step 5 drops it.
    taps, pad = _gaussian_taps(config.grid_points_per_bandwidth, config.kernel_support)
    inner_max = max(config.max_grid_points - 2 * pad - 1, 1)
    step = np.maximum(h / config.grid_points_per_bandwidth, rng_k / inner_max)
    size_k = np.ceil(rng_k / step).astype(np.int64) + (1 + pad)
    goff_k = np.cumsum(size_k) - size_k  # first grid point of each kept segment
    # grid point of each event: goff + pad + floor(xc / step) (bin k holds [k, k + 1) steps
    # above the segment's minimum). The float part depends on the segment's own values only
    # (the same in any call); the offset is added in integers. xc <= rng, so no event passes
    # its segment's last inner point.
    t = xc
    del xc
    t *= (1.0 / step).repeat(n_k)
    ti = t.astype(np.intp)
    del t
    ti += (goff_k + pad).repeat(n_k)
    hist = np.bincount(ti, minlength=int(goff_k[-1] + size_k[-1]) + pad)
    dens = correlate1d(hist, taps, output=np.float64, mode="constant")  # taps symmetric
    del hist

    # (5) valleys: local minima, a flat run counted at its right end: a grid point where the
    # density starts rising and last changed by falling. The density's turns alternate
    # (maximum, minimum, ..., maximum: it starts and ends at zero), so each valley's two
    # neighbouring peaks are the turns just before and after it.
    d = dens[1:] - dens[:-1]
    up = d > 0
    nz = (up | (d < 0)).nonzero()[0]  # bool masks: cheaper than d.nonzero() and d[nz] > 0
    rising = np.take(up, nz)
    del d, up
    turn = (rising[1:] != rising[:-1]).nonzero()[0] + 1
    ext = nz[turn]  # grid points of the turns, a maximum first
    at_min = rising[turn].nonzero()[0]  # >= 1, and < ext.size - 1
    if at_min.size == 0:
        return at_min
    cand = ext[at_min]
    # index into kept: goff_k.searchsorted(cand, side="right") - 1 as a take from the grid
    # points' segments (~15 % faster; clip: a point past the grid is the last segment's)
    cg = np.arange(kept.size).repeat(size_k).take(cand, mode="clip")
    # the valley bin's centre above the segment's minimum: a boundary keeps min_log_gap from
    # the data's bottom and top (step 5), so the others (~2/3) are dropped before searching
    xb = (cand - goff_k[cg] - pad + 0.5) * step[cg]
    inside = (xb >= config.min_log_gap) & (xb <= rng_k[cg] - config.min_log_gap)
    if not inside.all():
        # compress (the method: no Python wrapper): ~2x a boolean index's speed
        at_min, cand, cg, xb = (a.compress(inside) for a in (at_min, cand, cg, xb))
        if cand.size == 0:
            return at_min
    pos = ti.searchsorted(cand)  # events of kept segments in bins < cand go left
    del ti
    pos += moved[cg]  # ... as an index into xs
    if config.valley_depth >= 1.0:
        deep = np.ones(cand.size, dtype=bool)
    else:
        dv = dens[ext]
        deep = dv[at_min] <= config.valley_depth * np.minimum(dv[at_min - 1], dv[at_min + 1])
    return _filter_valleys(pos, cg, deep, xb, xs, starts[kept], starts[kept] + n_k, config)


def _narrowest(config: KdeConfig) -> float:
    """Least range (ln units) of a segment that can hold a boundary: boundaries keep
    ``min_log_gap`` from both ends (a hair under 2 · min_log_gap, for rounding)."""
    return 2.0 * config.min_log_gap * (1.0 - 1e-9)


def _may_split(xs: np.ndarray, start: np.ndarray, n: np.ndarray, config: KdeConfig) -> np.ndarray:
    """(S,) bool: segment ``xs[start[s] : start[s] + n[s]]`` (sorted) can have a kept valley.

    Exact, not a heuristic: a boundary keeps ``min_log_gap`` from both ends of the segment,
    and leaves ``min_samples_per_side`` events on each side unless it is at a data gap of
    ``isolate_log_gap``; a segment that can satisfy neither is not searched again.
    """
    m = config.min_samples_per_side
    rng = xs[start + n - 1] - xs[start]
    ok: np.ndarray = (n >= 2) & (rng > 0) & (rng >= _narrowest(config))
    few = ok & (n < 2 * m)  # then only a split at a wide data gap can be kept (m >= 2 here)
    if few.any():
        if math.isinf(config.isolate_log_gap):
            ok &= ~few
        else:
            a, c = start[few], n[few]
            j = a[:, None] + np.minimum(np.arange(2 * m - 2)[None, :], (c - 2)[:, None])
            ok[few] = (xs[j + 1] - xs[j]).max(axis=1) >= config.isolate_log_gap
    return ok


def _order_stat(xs: np.ndarray, starts: np.ndarray, counts: np.ndarray, q: float) -> np.ndarray:
    """(S,) linear order statistic q of each segment (its float offset inside the segment
    does not depend on where the segment lies)."""
    p = q * (counts - 1)
    lo = p.astype(np.int64)
    frac = p - lo
    lo += starts
    hi = lo + (frac > 0)
    out: np.ndarray = xs[lo] + frac * (xs[hi] - xs[lo])
    return out


def _cluster_quantiles(
    xs: np.ndarray, cstart: np.ndarray, ccount: np.ndarray, levels: np.ndarray, off: np.ndarray
) -> np.ndarray:
    """(C, L) quantiles in ns with numpy's linear rule on the durations (not their logs).

    ``ln(duration) = xs - off[c]`` for the events of cluster c. Positions are split into the
    cluster's first event (an integer) and an offset inside the cluster, so the floats do
    not depend on where the cluster lies in ``xs``.
    """
    pl = np.multiply.outer(ccount - 1, levels)  # positions inside each cluster
    lo = pl.astype(np.int64)  # floor: >= 0
    pl -= lo  # in place from here: (C, L) temporaries are most of this function's time
    lo += cstart[:, None]
    hi = lo + (pl > 0)  # lo itself where the position is an event (then pl = 0)
    o = off[:, None]
    a = np.take(xs, lo)
    a -= o
    np.exp(a, out=a)
    b = np.take(xs, hi)
    b -= o
    np.exp(b, out=b)
    b -= a
    b *= pl
    b += a
    return b


def _filter_valleys(
    pos: np.ndarray,
    cg: np.ndarray,
    deep: np.ndarray,
    xb: np.ndarray,
    xs: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    config: KdeConfig,
) -> np.ndarray:
    """Split positions (into xs) of the kept valleys, increasing. See module doc, step 5.

    ``pos`` (V,) the valleys' split indices into ``xs``, ``cg`` their segment, ``deep``
    whether they pass ``valley_depth``, ``xb`` their bin centres above the segment's minimum
    (ln units, already within ``min_log_gap`` of neither end of the segment's data);
    ``starts``, ``ends`` (S,) the segments' bounds in ``xs``.
    """
    m = config.min_samples_per_side
    mlg = config.min_log_gap
    left = pos - starts[cg]
    right = ends[cg] - pos
    idx = ((left > 0) & (right > 0)).nonzero()[0]
    if idx.size == 0:
        return idx
    pos, cg, xb = pos[idx], cg[idx], xb[idx]
    strong = xs[pos] - xs[pos - 1] >= config.isolate_log_gap
    # enough events on each side (or a wide data gap)
    ok = strong | ((left[idx] >= m) & (right[idx] >= m) & deep[idx])
    idx = ok.nonzero()[0]
    if idx.size == 0:
        return idx
    pos, cg, strong, xb = pos[idx], cg[idx], strong[idx], xb[idx]

    # greedy left-to-right scan: a boundary keeps min_log_gap from the previous kept one (or
    # the data's bottom) and min_samples_per_side events from it (unless both are at wide
    # gaps). Vectorized over segments: round k handles each segment's k-th candidate.
    new_seg = np.empty(cg.size, dtype=bool)
    new_seg[0] = True
    np.not_equal(cg[1:], cg[:-1], out=new_seg[1:])
    if new_seg.all():  # one candidate per segment (the common case): a single round
        keep = ((pos - starts[cg] >= m) | strong) & (xb >= mlg)
        out: np.ndarray = pos[keep]
        return out
    first = np.flatnonzero(new_seg)
    rank = np.arange(cg.size) - np.repeat(first, np.diff(np.append(first, cg.size)))
    last_pos = starts.copy()
    last_strong = np.ones(starts.size, dtype=bool)
    last_x = np.zeros(starts.size)
    kept = np.zeros(cg.size, dtype=bool)
    by_rank = np.argsort(rank, kind="stable")
    n_rounds = int(rank.max()) + 1
    bounds = np.searchsorted(rank[by_rank], np.arange(n_rounds + 1))
    for k in range(n_rounds):
        sel = by_rank[bounds[k] : bounds[k + 1]]
        g = cg[sel]
        big_enough = (pos[sel] - last_pos[g] >= m) | (strong[sel] & last_strong[g])
        far_enough = xb[sel] - last_x[g] >= mlg
        acc = sel[big_enough & far_enough]
        kept[acc] = True
        ga = cg[acc]
        last_pos[ga] = pos[acc]
        last_strong[ga] = strong[acc]
        last_x[ga] = xb[acc]
    out = pos[kept]
    return out


def _cap_clusters(
    xs: np.ndarray, splits: np.ndarray, group: np.ndarray, n_groups: int, max_clusters: int
) -> tuple[np.ndarray, np.ndarray]:
    """Drop splits beyond ``max_clusters`` per group, keeping those with the widest data gaps;
    ``group`` (S,) is each split's group (< ``n_groups``). Returns the kept splits and their
    groups."""
    limit = max_clusters - 1
    if splits.size <= limit:
        return splits, group
    per = np.bincount(group, minlength=n_groups)
    over = np.flatnonzero(per > limit)
    if over.size == 0:
        return splits, group
    gap = xs[splits] - xs[splits - 1]
    drop = np.zeros(splits.size, dtype=bool)
    for g in over.tolist():
        rows = np.flatnonzero(group == g)
        drop[rows[np.argsort(-gap[rows], kind="stable")[limit:]]] = True
    return splits[~drop], group[~drop]
