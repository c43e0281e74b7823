"""How cluster quantiles travel in ``kernel_summary``: float32, or the float32 median plus
16-bit log offsets.

Two encodings of a (C, L) matrix of cluster quantiles (ns) at ``quantile_levels``:

* ``float32`` (every method up to ``kde-q4i``): ``cluster_quantiles_ns`` holds all L levels
  as float32, (C, L) row-major; ``cluster_log_offsets`` is empty. 4·L bytes per cluster.
* ``log16`` (``kde-q7l``): ``cluster_quantiles_ns`` holds only the median, float32 (C,);
  ``cluster_log_offsets`` holds the other L − 1 levels, in level order, as int16
  ``k = round(LOG16_STEPS_PER_UNIT · ln(q / m))`` with ``m`` the median *as sent* (float32), so
  a reader gets ``q' = m · exp(k / LOG16_STEPS_PER_UNIT)``. 4 + 2·(L − 1) bytes per cluster:
  7 levels cost 16 bytes, what ``kde-q4i``'s 4 float32 levels cost.

Precision of ``log16``: one step is 1/2048 in ln(ns), so a decoded quantile is within
``exp(1/4096) − 1 ≈ 0.0244 %`` of the float32 median times the exact ratio, i.e. relative
error ≤ 2.5e-4 all in (float32 adds 6e-8). A cluster quantile estimated from n events has a
sampling error of order ``1/√n`` (≥ 1 % for n ≤ 10,000), 40× larger or more: the encoding is
invisible to W1 comparisons. The range is ±16 ln units (a ratio of 8.9·10⁶ between a quantile
and its cluster's median); beyond it the offset saturates (a cluster that wide does not occur:
the KDE splits far smaller gaps). Rounding is monotone, so the decoded quantiles of a cluster
stay non-decreasing.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = [
    "ENCODINGS",
    "LOG16_MAX_REL_ERROR",
    "LOG16_STEPS_PER_UNIT",
    "decode_log16",
    "decode_log16_ln",
    "encode_log16",
    "median_index",
    "through_wire",
]

#: int16 steps per ln unit of the ``log16`` offsets (resolution 1/2048 ≈ 4.9e-4 in ln).
LOG16_STEPS_PER_UNIT = 2048
#: Largest relative error of a ``log16`` quantile against the float32 median times the exact
#: ratio: half a step, ``exp(0.5 / 2048) − 1``.
LOG16_MAX_REL_ERROR = float(np.expm1(0.5 / LOG16_STEPS_PER_UNIT))
#: Known encodings of the quantile columns.
ENCODINGS = ("float32", "log16")

_I16 = np.iinfo(np.int16)


def median_index(levels: np.ndarray) -> int:
    """Index of level 0.5 in ``levels`` (L,); ``ValueError`` when it is absent.

    Cached per level set: every summary a reader decodes asks it (a few levels, so the key
    costs less than the search)."""
    return _median_index(tuple(np.asarray(levels, dtype=np.float64).reshape(-1).tolist()))


@functools.lru_cache(maxsize=256)
def _median_index(levels: tuple[float, ...]) -> int:
    hit = [i for i, v in enumerate(levels) if abs(v - 0.5) <= 1e-12]
    if len(hit) != 1:
        raise ValueError(f"the log16 encoding needs level 0.5 once, levels are {list(levels)}")
    return hit[0]


def encode_log16(q_ns: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Encode quantiles as float32 medians and int16 log offsets.

    Parameters
    ----------
    q_ns : (C, L) float, ns, > 0
        Quantiles of each cluster at ``levels``, non-decreasing along a row.
    levels : (L,) float
        The levels; must contain 0.5.

    Returns
    -------
    median : (C,) float32, ns
    offsets : (C, L − 1) int16
        ``round(LOG16_STEPS_PER_UNIT · ln(q / median))`` of every level but 0.5, saturated to
        the int16 range.
    """
    q = np.asarray(q_ns, dtype=np.float64)
    j = median_index(levels)
    med = q[:, j].astype(np.float32)
    tiny = np.finfo(np.float64).tiny
    log_med = np.maximum(med.astype(np.float64), tiny)
    np.log(log_med, out=log_med)
    # every column but the median's (a copy), then in place: ln(q / median) in steps
    ratio = q[:, _others(q.shape[1], j)]
    np.maximum(ratio, tiny, out=ratio)
    np.log(ratio, out=ratio)
    ratio -= log_med[:, None]
    ratio *= LOG16_STEPS_PER_UNIT
    np.rint(ratio, out=ratio)
    np.clip(ratio, _I16.min, _I16.max, out=ratio)
    return med, ratio.astype(np.int16)


@functools.lru_cache(maxsize=64)
def _others(n_levels: int, j: int) -> np.ndarray:
    """(L − 1,) column indices 0..L−1 without j (read-only, cached)."""
    out = np.delete(np.arange(n_levels), j)
    out.setflags(write=False)
    return out


def decode_log16(median_ns: np.ndarray, offsets: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """(C, L) float64 quantiles, ns, from (C,) medians and (C, L − 1) int16 offsets."""
    lv = np.asarray(levels, dtype=np.float64).reshape(-1)
    j = median_index(lv)
    med = np.asarray(median_ns, dtype=np.float64).reshape(-1)
    k = np.asarray(offsets, dtype=np.float64).reshape(med.size, lv.size - 1)
    out = np.empty((med.size, lv.size))
    out[:, _others(lv.size, j)] = med[:, None] * np.exp(k / LOG16_STEPS_PER_UNIT)
    out[:, j] = med
    return out


def decode_log16_ln(median_ns: np.ndarray, offsets: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """(C, L) float64 ln of the quantiles (ln ns) from (C,) medians and (C, L − 1) int16
    offsets: ``ln(max(m, tiny)) + k / LOG16_STEPS_PER_UNIT``, what ``ln`` of
    :func:`decode_log16` gives up to the last bits, with no ``exp`` and one ``log`` per
    cluster. A row whose median is ≤ 0 is ``ln(tiny)`` throughout (the floor
    :func:`argus.summaries.lognormal.log_quantiles` clamps to). Rows are not made
    non-decreasing here."""
    lv = np.asarray(levels, dtype=np.float64).reshape(-1)
    j = median_index(lv)
    med = np.asarray(median_ns, dtype=np.float64).reshape(-1)
    tiny = np.finfo(np.float64).tiny
    lm = np.log(np.maximum(med, tiny))
    k = np.asarray(offsets).reshape(med.size, lv.size - 1) * (1.0 / LOG16_STEPS_PER_UNIT)
    k += lm[:, None]
    out = np.empty((med.size, lv.size))
    out[:, :j] = k[:, :j]
    out[:, j] = lm
    out[:, j + 1 :] = k[:, j:]
    low = med <= 0.0
    if low.any():
        out[low] = np.log(tiny)
    return out


def through_wire(q_ns: np.ndarray, levels: np.ndarray, encoding: str) -> np.ndarray:
    """(C, L) float64: the quantiles a reader decodes after ``encoding`` (no bytes made)."""
    q = np.asarray(q_ns, dtype=np.float64)
    if encoding == "float32":
        out: np.ndarray = q.astype(np.float32).astype(np.float64)
        return out
    if encoding == "log16":
        return decode_log16(*encode_log16(q, levels), levels)
    raise ValueError(f"unknown quantile encoding {encoding!r}; known: {ENCODINGS}")
