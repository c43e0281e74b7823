"""A self-contained HTML report of a job's window: inline SVG charts, no external assets.

Sections:

1. iteration time per step (job max over ranks, ms) with the L1 windows shaded;
2. a rank x step heatmap of one phase's time in one comparison group (the culprit's group
   and phase when L2 named one, else the slowest-phase group);
3. the pairwise W1 matrix (ms) between the ranks of the flagged kernel's group, from the raw
   kernel durations of the flagged window (:func:`argus.detectors.l3.pairwise_w1` over
   quantile functions, the same distance L3 uses);
4. CDF overlays of the straggler's durations vs each peer's (the flagged kernel's, else the
   flagged phase's);
5. the funnel table (verdicts) and the finding counts.

:func:`report_data` and :func:`render_html` are pure; :func:`report_from_dir` and
:func:`report_from_kafka` read records and run :func:`argus.diagnose.diagnose`.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from argus.detectors.config import DetectorsConfig
from argus.diagnose import DiagnoseResult
from argus.errors import ArgusError
from argus.ranks import rank_ranges

__all__ = [
    "ReportData",
    "ReportError",
    "render_html",
    "report_data",
    "report_from_dir",
    "report_from_kafka",
    "svg_cdf",
    "svg_heatmap",
    "svg_line",
]

_Q_LEVELS = np.linspace(0.005, 0.995, 100)
_STOPS = np.array(  # viridis, 5 stops
    [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=float
)


class ReportError(ArgusError):
    """A report that cannot be made (no step records)."""


def _color(v: float) -> str:
    """Viridis colour of ``v`` in 0..1 (NaN: light grey)."""
    if not np.isfinite(v):
        return "#eeeeee"
    x = min(max(v, 0.0), 1.0) * (len(_STOPS) - 1)
    i = min(int(x), len(_STOPS) - 2)
    c = _STOPS[i] + (_STOPS[i + 1] - _STOPS[i]) * (x - i)
    return "#{:02x}{:02x}{:02x}".format(*tuple(round(t) for t in c))


def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def svg_line(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    bands: Sequence[tuple[float, float, str]] = (),
    width: int = 1200,
    height: int = 260,
    xlabel: str = "",
    ylabel: str = "",
) -> str:
    """A line chart; ``bands`` are shaded x ranges ``(x0, x1, label)``."""
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    ml, mr, mt, mb = 60, 20, 15, 40
    pw, ph = width - ml - mr, height - mt - mb
    ok = np.isfinite(ys)
    x0, x1 = (float(xs.min()), float(xs.max())) if xs.size else (0.0, 1.0)
    y0, y1 = (0.0, float(ys[ok].max()) * 1.05) if ok.any() else (0.0, 1.0)
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = y1 if y1 > y0 else y0 + 1

    def px(v: float) -> float:
        return ml + (v - x0) / (x1 - x0) * pw

    def py(v: float) -> float:
        return mt + ph - (v - y0) / (y1 - y0) * ph

    out = [
        f'<svg class="chart" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for b0, b1, label in bands:
        a, b = px(max(b0, x0)), px(min(b1, x1))
        out.append(
            f'<rect class="band" x="{a:.1f}" y="{mt}" width="{max(b - a, 2):.1f}" height="{ph}" '
            f'fill="#e45756" fill-opacity="0.25"><title>{_e(label)}</title></rect>'
        )
    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    pts = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in zip(xs[ok], ys[ok], strict=True))
    out.append(
        f'<polyline class="series" points="{pts}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>'
    )
    for t in np.linspace(y0, y1, 5):
        out.append(
            f'<text x="{ml - 6}" y="{py(t) + 4:.1f}" text-anchor="end" font-size="11">{t:.0f}</text>'
        )
    for t in np.linspace(x0, x1, 9):
        out.append(
            f'<text x="{px(t):.1f}" y="{mt + ph + 16}" text-anchor="middle" font-size="11">{t:.0f}</text>'
        )
    out.append(
        f'<text x="{ml + pw / 2}" y="{height - 6}" text-anchor="middle" font-size="12">{_e(xlabel)}</text>'
        f'<text x="14" y="{mt + ph / 2}" font-size="12" transform="rotate(-90 14 {mt + ph / 2})" '
        f'text-anchor="middle">{_e(ylabel)}</text></svg>'
    )
    return "".join(out)


def svg_heatmap(
    m: np.ndarray,
    rows: Sequence[str],
    cols: Sequence[str],
    *,
    cell: int = 0,
    width: int = 1200,
    unit: str = "ms",
    highlight_rows: Sequence[int] = (),
) -> str:
    """A heatmap of ``m`` (R, C), colour scaled from min to max of the finite values."""
    a = np.asarray(m, float)
    r, c = a.shape
    ml, mt = 90, 10
    cw = cell or max(2, min(24, (width - ml - 20) // max(c, 1)))
    ch = cell or max(6, min(20, 600 // max(r, 1)))
    ok = np.isfinite(a)
    lo, hi = (float(a[ok].min()), float(a[ok].max())) if ok.any() else (0.0, 1.0)
    span = hi - lo if hi > lo else 1.0
    w, h = ml + c * cw + 20, mt + r * ch + 40
    out = [
        f'<svg class="chart heatmap" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">'
    ]
    outlines: list[str] = []
    for i in range(r):
        for j in range(c):
            v = a[i, j]
            out.append(
                f'<rect x="{ml + j * cw}" y="{mt + i * ch}" width="{cw}" height="{ch}" '
                f'fill="{_color((v - lo) / span)}"><title>{_e(rows[i])} {_e(cols[j])}: '
                f"{v:.3f} {unit}</title></rect>"
            )
        hot = i in highlight_rows
        weight = "bold" if hot else "normal"
        fill = "#c00" if hot else "#000"
        if hot:
            outlines.append(
                f'<rect class="culprit-row" x="{ml - 1}" y="{mt + i * ch}" width="{c * cw + 2}" '
                f'height="{ch}" fill="none" stroke="#e00" stroke-width="2"/>'
            )
        if ch >= 8 or hot:
            mark = "&#9654; " if hot else ""
            out.append(
                f'<text x="{ml - 4}" y="{mt + i * ch + ch / 2 + 4:.1f}" text-anchor="end" '
                f'font-size="{min(11, ch + 1)}" font-weight="{weight}" fill="{fill}">'
                f"{mark}{_e(rows[i])}</text>"
            )
    out.extend(outlines)
    step = max(1, c // 12)
    for j in range(0, c, step):
        out.append(
            f'<text x="{ml + j * cw + cw / 2}" y="{mt + r * ch + 14}" text-anchor="middle" '
            f'font-size="10">{_e(cols[j])}</text>'
        )
    out.append(
        f'<text x="{ml}" y="{mt + r * ch + 32}" font-size="11">{lo:.3f} {unit} '
        f'<tspan fill="{_color(0)}">&#9632;</tspan> ... <tspan fill="{_color(1)}">&#9632;</tspan>'
        f" {hi:.3f} {unit}</text></svg>"
    )
    return "".join(out)


def svg_cdf(
    series: Mapping[str, np.ndarray],
    highlight: Sequence[str],
    *,
    width: int = 700,
    height: int = 320,
    xlabel: str = "ms",
) -> str:
    """Empirical CDFs of each series (highlighted ones red and thick, the others grey)."""
    vals = [np.sort(np.asarray(v, float)) for v in series.values() if len(v)]
    ml, mr, mt, mb = 50, 20, 15, 40
    pw, ph = width - ml - mr, height - mt - mb
    allv = np.concatenate(vals) if vals else np.array([0.0, 1.0])
    x0, x1 = float(np.percentile(allv, 0.5)), float(np.percentile(allv, 99.5))
    x1 = x1 if x1 > x0 else x0 + 1

    def px(v: np.ndarray) -> np.ndarray:
        return ml + (np.clip(v, x0, x1) - x0) / (x1 - x0) * pw

    out = [
        f'<svg class="chart cdf" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    order = [k for k in series if k not in highlight] + [k for k in series if k in highlight]
    for k in order:
        v = np.sort(np.asarray(series[k], float))
        if not v.size:
            continue
        if v.size > 400:
            v = np.quantile(v, np.linspace(0, 1, 400))
        y = mt + ph - np.arange(1, v.size + 1) / v.size * ph
        pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px(v), y, strict=True))
        hot = k in highlight
        out.append(
            f'<polyline class="{"straggler" if hot else "peer"}" points="{pts}" fill="none" '
            f'stroke="{"#d62728" if hot else "#999"}" stroke-width="{2.5 if hot else 1}" '
            f'stroke-opacity="{1 if hot else 0.6}"><title>{_e(k)}</title></polyline>'
        )
    for t in np.linspace(x0, x1, 6):
        out.append(
            f'<text x="{float(px(np.array(t))):.1f}" y="{mt + ph + 16}" text-anchor="middle" '
            f'font-size="11">{t:.3g}</text>'
        )
    for t in (0, 0.5, 1):
        out.append(
            f'<text x="{ml - 6}" y="{mt + ph - t * ph + 4}" text-anchor="end" font-size="11">{t}</text>'
        )
    out.append(
        f'<text x="{ml + pw / 2}" y="{height - 6}" text-anchor="middle" font-size="12">'
        f"{_e(xlabel)}</text></svg>"
    )
    return "".join(out)


@dataclass
class ReportData:
    """What the page shows (all numbers in ms)."""

    job: str
    steps: np.ndarray
    iter_ms: np.ndarray
    l1_windows: list[tuple[int, int, str]] = field(default_factory=list)
    heat_title: str = ""
    heat: np.ndarray | None = None
    heat_ranks: list[int] = field(default_factory=list)
    heat_steps: list[int] = field(default_factory=list)
    culprit_ranks: list[int] = field(default_factory=list)
    w1_title: str = ""
    w1: np.ndarray | None = None
    w1_ranks: list[int] = field(default_factory=list)
    cdf_title: str = ""
    cdf: dict[str, np.ndarray] = field(default_factory=dict)
    cdf_highlight: list[str] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    headline: dict[str, str] = field(default_factory=dict)
    """The top verdict: ``what``, ``where``, ``since``, ``how_much``, ``evidence``,
    ``dedup_key``, ``drill`` (commands); empty when the funnel is silent."""
    marked_ranks: list[int] = field(default_factory=list)
    """Ranks the heatmap marks as the culprit's (its ranks, or its group's members)."""


def _kernel_durations(
    batches: Sequence[Mapping[str, Any]], kernel: str, stream: int | None, s0: int, s1: int
) -> dict[int, np.ndarray]:
    from argus.schemas.arrays import unpack

    parts: dict[int, list[np.ndarray]] = defaultdict(list)
    for rec in batches:
        if not s0 <= int(rec["window_id"]) <= s1 or kernel not in rec.get("names", []):
            continue
        k = list(rec["names"]).index(kernel)
        idx = unpack(rec["name_idx"], "uint32", field="name_idx")
        d = unpack(rec["duration_ns"], "int64", field="duration_ns")
        sel = idx == k
        if stream is not None:
            sel &= unpack(rec["stream"], "uint32", field="stream") == stream
        if sel.any():
            parts[int(rec["rank"])].append(d[sel] / 1e6)
    return {r: np.concatenate(v) for r, v in sorted(parts.items())}


def _summary_quantiles(
    summaries: Sequence[Mapping[str, Any]],
    kernel: str,
    stream: int | None,
    s0: int,
    s1: int,
    n_probs: int,
) -> dict[int, np.ndarray]:
    """Per rank, the reconstructed quantile function (ms, on L3's grid) of ``kernel``."""
    from argus.detectors.l3_window import merge_summaries
    from argus.diagnose import summary_groups
    from argus.summaries.lognormal import default_probs, quantile_matrix
    from argus.summaries.summary_record import KernelNames

    book = KernelNames()
    parts: dict[int, list[Any]] = defaultdict(list)
    for rec in sorted(summaries, key=lambda r: (int(r["window_id"]), int(r["rank"]))):
        groups = summary_groups(rec, book)  # every record: names are announced once per rank
        if not s0 <= int(rec["window_id"]) <= s1:
            continue
        for (name, st), summ in groups.items():
            if name == kernel and (stream is None or st == stream):
                parts[int(rec["rank"])].append(summ)
    if not parts:
        return {}
    ranks = sorted(parts)
    q = quantile_matrix([merge_summaries(parts[r]) for r in ranks], default_probs(n_probs))
    return {r: q[i] / 1e6 for i, r in enumerate(ranks)}


def _primary_verdict(verdicts: Sequence[Any], focus: str | None) -> Any:
    """The verdict the page leads with: the one ``focus`` names (dedup key, verdict id or
    one of its findings' ids), else the most levels, then confidence, then persistence."""
    if focus:
        for v in verdicts:
            ids = {v.to_anomaly()["id"], *(f.id for f in v.culprit.findings)}
            if focus in (v.dedup_key, *ids):
                return v
        return None
    if not verdicts:
        return None
    return max(
        verdicts,
        key=lambda v: (len(v.culprit.levels), v.confidence, v.persistence, v.dedup_key),
    )


def _culprit_heat(
    v: Any, gws: Sequence[Any], max_ranks: int
) -> tuple[np.ndarray, list[int], list[int], str, list[int], float | None] | None:
    """The culprit's own group drawn: ``(matrix ms (R, S), ranks, steps, title, marked
    ranks, marked/peer median ratio)``; None when its group is not among ``gws``.

    A rank culprit: its group's ranks, the culprit's phase (else the phase where its ranks
    are slowest relative to the group). A group culprit: its members (all marked) and the
    ranks of the sibling groups of the same kind, the phase where the group is slowest
    relative to them.
    """
    c = v.culprit
    kin = [g for g in gws if g.group_kind == c.group_kind]
    own = next((g for g in kin if g.group_id == c.group_id), None)
    if own is None:
        return None
    marked = [int(r) for r in c.ranks] or [int(r) for r in own.ranks]
    groups = [own] if c.ranks else [own, *[g for g in kin if g is not own]]
    rows: dict[int, dict[int, dict[str, float]]] = {}
    for g in groups:
        for i, r in enumerate(g.ranks):
            row = rows.setdefault(int(r), {})
            for j, st in enumerate(g.steps):
                cell = row.setdefault(int(st), {})
                for k, ph in enumerate(g.phases):
                    cell[ph] = float(g.durations_ns[i, j, k])
    phases = sorted({ph for g in groups for ph in g.phases})
    peers = [r for r in rows if r not in marked]

    def med(ranks: Sequence[int], ph: str) -> float:
        xs = [
            x for r in ranks for cell in rows[r].values() if np.isfinite(x := cell.get(ph, np.nan))
        ]
        return float(np.median(xs)) if xs else float("nan")

    ratios = {ph: med(marked, ph) / med(peers, ph) if peers else float("nan") for ph in phases}
    if c.phase in phases:
        ph = str(c.phase)
    else:
        ok = {p: r for p, r in ratios.items() if np.isfinite(r)}
        if not ok:
            return None
        ph = max(ok, key=lambda p: (ok[p], p))
    ranks = sorted(rows)
    if len(ranks) > max_ranks:
        keep = [r for r in ranks if r in marked][:max_ranks]
        keep += [r for r in ranks if r not in marked][: max_ranks - len(keep)]
        ranks = sorted(keep)
    steps = sorted({st for r in ranks for st in rows[r]})
    m = np.array(
        [[rows[r].get(st, {}).get(ph, np.nan) / 1e6 for st in steps] for r in ranks], dtype=float
    )
    title = f"phase {ph} in {c.group_kind} group {c.group_id}"
    if not c.ranks:
        title += f" (all {len(marked)} members marked) vs the other {c.group_kind} groups"
    ratio = ratios.get(ph)
    return (
        m,
        ranks,
        steps,
        title,
        marked,
        (ratio if ratio is not None and np.isfinite(ratio) else None),
    )


def _headline(
    v: Any,
    result: DiagnoseResult,
    steps: Sequence[Mapping[str, Any]],
    marked: Sequence[int],
    heat_title: str,
    ratio: float | None,
) -> dict[str, str]:
    """The verdict at the top of the page: what, where, since when (ISO), how much slower."""
    import shlex

    from argus.detectors.funnel.render import drilldown_commands
    from argus.drill.window import iso

    c = v.culprit
    p = c.primary
    ranks = list(c.ranks) or list(marked)
    hosts = sorted({str(r.get("host", "")) for r in steps if int(r["rank"]) in set(ranks)} - {""})
    what = {
        "straggler": f"straggler in phase {c.phase}",
        "kernel_divergence": f"kernel {c.kernels[0] if c.kernels else p.kernel} diverged",
        "group_divergence": f"kernel {p.kernel} slow for the whole {c.group_kind} group",
        "regression": "iteration time regressed",
        "jitter": "iteration-time spikes",
    }.get(p.kind, p.kind)
    if c.kernels and p.kind == "straggler":
        what += f" (kernels {', '.join(c.kernels[:3])})"
    who = f"ranks {rank_ranges(ranks)}" if ranks else "the whole job"
    where = (
        f"{who} in {c.group_kind} group {c.group_id}"
        if c.ranks
        else f"{c.group_kind} group {c.group_id}: members {who}"
    )
    if hosts:
        where += f"; hosts {', '.join(hosts[:8])}" + (" ..." if len(hosts) > 8 else "")
    since_ns = min(
        [int(x.first_seen_ns) for x in result.verdicts if x.dedup_key == v.dedup_key]
        + [int(v.first_seen_ns)]
    )
    much = []
    if p.baseline > 0 and p.observed > 0 and p.unit:
        much.append(
            f"{p.observed / p.baseline:.1f}x: {p.observed:.3g} {p.unit} vs {p.baseline:.3g} "
            f"{p.unit} ({p.level} {p.kind})"
        )
    if ratio is not None:
        much.append(f"{ratio:.1f}x the peers' median in {heat_title.split(' in ')[0]}")
    key = v.dedup_key
    return {
        "what": what,
        "where": where,
        "ranks": ",".join(map(str, ranks)),
        "since": f"{iso(since_ns)} (latest flagged window: steps {c.window_start_step}-{c.window_end_step})",
        "how_much": "; ".join(much) or "n/a",
        "evidence": (
            f"levels {'+'.join(c.levels)}, persistence {v.persistence}, confidence "
            f"{v.confidence:.2f}"
        ),
        "dedup_key": key,
        "drill": "\n".join(
            [*drilldown_commands(key).values(), f"argus replay --around {shlex.quote(key)}"]
        ),
    }


def report_data(
    steps: Sequence[Mapping[str, Any]],
    result: DiagnoseResult,
    *,
    kernel_batches: Sequence[Mapping[str, Any]] = (),
    kernel_summaries: Sequence[Mapping[str, Any]] = (),
    config: DetectorsConfig | None = None,
    max_ranks: int = 64,
    focus: str | None = None,
    strict_focus: bool = True,
) -> ReportData:
    """Chart inputs from the step records, the kernel records and their diagnosis.

    The W1 matrix and kernel CDFs use the raw kernel durations when ``kernel_batches`` hold
    the flagged kernel, else the distributions reconstructed from ``kernel_summaries``
    (:func:`argus.summaries.lognormal.quantile_matrix` on L3's probability grid, what L3 saw).
    ``focus`` (a dedup key or finding id) picks the verdict shown at the top and drawn; by
    default the verdict with the most levels, then confidence, then persistence. A ``focus``
    that matches nothing raises with ``strict_focus``, else the page notes it.

    Raises
    ------
    ReportError
        No step records, or ``focus`` matches no verdict.
    """
    from argus.detectors.inputs import group_windows, job_series
    from argus.detectors.l3 import pairwise_w1
    from argus.routing import Routing

    if not steps:
        raise ReportError("no step records to report on")
    cfg = config or DetectorsConfig()
    series = job_series(steps, job=result.job)
    d = ReportData(result.job, series.steps, series.iter_ns / 1e6)
    l1 = [f for f in result.findings if f.level == "L1"]
    d.l1_windows = [(f.window_start_step, f.window_end_step, f"L1 {f.kind}") for f in l1]
    d.verdicts = [{**v.to_anomaly(), "levels": "+".join(v.culprit.levels)} for v in result.verdicts]
    for f in result.findings:
        d.counts[f.level] = d.counts.get(f.level, 0) + 1
    # heatmap: the top culprit's own group (and, for a group culprit, its sibling groups of
    # the same kind), its phase, its ranks marked; else the group/phase with the largest spread
    gws = group_windows(steps, Routing.from_config(cfg.routing), job=result.job)
    primary = _primary_verdict(result.verdicts, focus)
    if focus and primary is None:
        keys = ", ".join(v.dedup_key for v in result.verdicts[:8]) or "none"
        msg = f"--around {focus!r}: no verdict or finding with it here (verdicts: {keys})"
        if strict_focus:
            raise ReportError(msg)
        d.notes.append(msg + "; showing the strongest verdict instead.")
        primary = _primary_verdict(result.verdicts, None)
    drawn = _culprit_heat(primary, gws, max_ranks) if primary is not None else None
    if drawn is not None:
        d.heat, d.heat_ranks, d.heat_steps, d.heat_title, d.marked_ranks, ratio = drawn
        d.culprit_ranks = list(d.marked_ranks)
    else:
        ratio = None
        best = -1.0
        target = None
        for g in gws:
            for p in range(len(g.phases)):
                x = g.durations_ns[:, :, p]
                if np.isfinite(x).any():
                    spread = float(
                        np.nanmax(np.nanmedian(x, axis=1)) - np.nanmin(np.nanmedian(x, axis=1))
                    )
                    if spread > best:
                        best, target = spread, (g, p)
        if target is not None:
            g, p = target
            keep = np.arange(len(g.ranks))[:max_ranks]
            d.heat = g.durations_ns[keep, :, p] / 1e6
            d.heat_ranks = [int(r) for r in g.ranks[keep]]
            d.heat_steps = [int(s) for s in g.steps]
            d.heat_title = f"phase {g.phases[p]} in {g.group_kind} group {g.group_id}"
    if primary is not None:
        d.headline = _headline(primary, result, steps, d.marked_ranks, d.heat_title, ratio)
    # W1 matrix + CDF: the flagged kernel (L3), else the flagged phase's durations
    l3 = [f for f in result.findings if f.level == "L3" and f.kernel]
    culprit_l3: list[Any] = []
    ordered = ([primary] if primary is not None else []) + [
        v for v in result.verdicts if v is not primary
    ]
    for v in ordered:
        ks = list(v.culprit.kernels)
        mine = [x for x in v.culprit.findings if x.level == "L3" and x.kernel]
        culprit_l3 += sorted(mine, key=lambda x: ks.index(x.kernel) if x.kernel in ks else len(ks))
    l3 = [x for x in culprit_l3 if x.kernel] + l3
    if l3:
        own = [x for x in culprit_l3 if primary is not None and x in primary.culprit.findings]
        f = own[0] if own else next((x for x in l3 if x.ranks), l3[0])
        dur = _kernel_durations(
            kernel_batches, str(f.kernel), f.stream, f.window_start_step, f.window_end_step
        )
        grp = next(
            (g for g in gws if g.group_kind == f.group_kind and g.group_id == f.group_id), None
        )
        source = "raw kernel durations"
        if not dur and kernel_summaries:
            dur = _summary_quantiles(
                kernel_summaries, str(f.kernel), f.stream, f.window_start_step,
                f.window_end_step, cfg.l3.n_probs,
            )  # fmt: skip
            source = "reconstructed from kernel summaries"
        members = dict(dur)
        group_culprit = not f.ranks and grp is not None
        if (
            not group_culprit
            and grp is not None
            and len(set(grp.ranks.tolist()) & set(members)) >= 2
        ):
            members = {r: v for r, v in members.items() if r in set(grp.ranks.tolist())}
        if len(members) > max_ranks:
            flagged = set(f.ranks) or (set(grp.ranks.tolist()) if grp is not None else set())
            chosen = [r for r in members if r in flagged]
            chosen += [r for r in members if r not in flagged][: max_ranks - len(chosen)]
            members = {r: members[r] for r in sorted(chosen)}
        if len(members) >= 2:
            q = np.stack([np.quantile(v, _Q_LEVELS) for v in members.values()])
            d.w1 = pairwise_w1(q)
            d.w1_ranks = list(members)
            d.w1_title = (
                f"kernel {f.kernel} (stream {f.stream}), steps "
                f"{f.window_start_step}-{f.window_end_step}, {f.group_kind} {f.group_id}; "
                f"{source}"
            )
            d.cdf = {f"rank {r}": v for r, v in members.items()}
            hot = list(f.ranks) or (
                [int(r) for r in grp.ranks if int(r) in members] if group_culprit and grp else []
            )
            hot = hot or [int(max(members, key=lambda r: float(np.median(members[r]))))]
            d.cdf_highlight = [f"rank {r}" for r in hot]
            d.cdf_title = (
                f"{f.kernel} durations (ms), {f.group_kind} group {f.group_id} vs other groups"
                if group_culprit
                else f"{f.kernel} durations (ms), straggler vs peers"
            )
        else:
            d.notes.append(
                f"L3 flagged {f.kernel}, but its raw kernel timings are not in the input "
                "(raw.kernels retention): no W1 matrix or kernel CDF."
            )
    if not d.cdf and d.heat is not None and d.culprit_ranks:
        d.cdf = {
            f"rank {r}": row[np.isfinite(row)] for r, row in zip(d.heat_ranks, d.heat, strict=True)
        }
        d.cdf_highlight = [f"rank {r}" for r in d.culprit_ranks if f"rank {r}" in d.cdf]
        d.cdf_title = f"{d.heat_title}: per-step time (ms), straggler vs peers"
    return d


_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.meta{color:#666;font-size:13px} table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left} th{background:#f3f3f3}
.note{color:#a60;font-size:13px} .none{color:#2a2;font-size:14px}
.verdict{border:2px solid #c00;background:#fff4f4;padding:8px 12px;margin:10px 0;max-width:1180px}
.verdict h2{margin:0 0 6px;border:none;color:#c00} .verdict th{width:140px}
.verdict.none{border-color:#2a2;background:#f4fff4;color:#2a2}
pre.drill{background:#f6f6f6;padding:6px;font-size:12px;margin:8px 0 0}
"""


def _verdict_html(d: ReportData) -> str:
    """The verdict box at the top of the page (what, where, since, how much, drill-down)."""
    h = d.headline
    if not h:
        return (
            "<section id='verdict' class='verdict none'>The funnel is silent: no culprit.</section>"
        )
    rows = [
        ("what", h["what"]),
        ("where", h["where"]),
        ("since", h["since"]),
        ("how much slower", h["how_much"]),
        ("evidence", h["evidence"]),
        ("dedup key", h["dedup_key"]),
    ]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return (
        f"<section id='verdict' class='verdict' data-ranks='{_e(h['ranks'])}'>"
        f"<h2>Verdict</h2><table>{body}</table>"
        f"<pre class='drill'>{_e(h['drill'])}</pre></section>"
    )


def render_html(d: ReportData, *, title: str = "") -> str:
    """The page: one HTML string with inline CSS and SVG; no scripts, no external assets."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{_e(title or f'argus report: {d.job}')}</title><style>{_CSS}</style></head><body>",
        f"<h1>argus report: {_e(d.job)}</h1>",
        _verdict_html(d),
        f"<div class='meta'>steps {int(d.steps[0])}-{int(d.steps[-1])}; findings "
        + (", ".join(f"{k}: {v}" for k, v in sorted(d.counts.items())) or "none")
        + f"; {len(d.verdicts)} culprit(s)</div>",
        "<h2 id='iter'>Iteration time (ms) with L1 windows</h2>",
        svg_line(
            d.steps,
            d.iter_ms,
            bands=[(a, b, t) for a, b, t in d.l1_windows],
            xlabel="step",
            ylabel="iteration time (ms)",
        ),
    ]
    if not d.l1_windows:
        parts.append("<div class='none'>L1 silent: no iteration-time windows flagged.</div>")
    parts.append(f"<h2 id='heat'>Rank x step heatmap: {_e(d.heat_title or 'no group')}</h2>")
    if d.heat is not None:
        hl = [i for i, r in enumerate(d.heat_ranks) if r in d.culprit_ranks]
        parts.append(
            svg_heatmap(
                d.heat,
                [f"rank {r}" for r in d.heat_ranks],
                [str(s) for s in d.heat_steps],
                highlight_rows=hl,
            )
        )
        if hl:
            parts.append(
                "<div class='meta'>&#9654; red, outlined rows: the culprit's ranks "
                + _e(rank_ranges([d.heat_ranks[i] for i in hl]))
                + "</div>"
            )
    parts.append(f"<h2 id='w1'>W1 matrix (ms): {_e(d.w1_title or 'no flagged kernel')}</h2>")
    if d.w1 is not None:
        labels = [f"rank {r}" for r in d.w1_ranks]
        parts.append(
            svg_heatmap(d.w1, labels, [str(r) for r in d.w1_ranks], cell=max(8, 480 // len(labels)))
        )
    parts.append(f"<h2 id='cdf'>CDF: {_e(d.cdf_title or 'no straggler')}</h2>")
    if d.cdf:
        parts.append(svg_cdf(d.cdf, d.cdf_highlight))
        parts.append(
            "<div class='meta'>red: " + _e(", ".join(d.cdf_highlight)) + "; grey: peers</div>"
        )
    for n in d.notes:
        parts.append(f"<div class='note'>{_e(n)}</div>")
    parts.append("<h2 id='funnel'>Funnel</h2>")
    if d.verdicts:
        cols = ["levels", "group", "ranks", "phase / kernel", "steps", "persistence", "confidence"]
        parts.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>")
        for v in d.verdicts:
            row = [
                v["levels"],
                f"{v['group_kind']} {v['group_id']}",
                ",".join(map(str, v["ranks"][:16])) + ("..." if len(v["ranks"]) > 16 else ""),
                " / ".join(x for x in (v.get("phase"), v.get("kernel")) if x),
                f"{v['window_start_step']}-{v['window_end_step']}",
                v["persistence"],
                f"{v['confidence']:.2f}",
            ]
            parts.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>")
        parts.append("</table>")
    else:
        parts.append("<div class='none'>The funnel is silent: no culprit.</div>")
    parts.append("</body></html>\n")
    return "".join(parts)


def _diagnose(
    steps: list[dict[str, Any]],
    batches: list[dict[str, Any]],
    summaries: list[dict[str, Any]],
    job: str | None,
    config: DetectorsConfig | None,
    window_steps: int,
    focus: str | None = None,
    why: str = "",
    strict: bool = True,
) -> str:
    from argus.diagnose import diagnose

    if not steps:
        raise ReportError("no step records to report on" + (f": {why}" if why else ""))
    res = diagnose(
        steps, kernel_batches=batches, kernel_summaries=summaries, config=config,
        window_steps=window_steps, job=job,
    )  # fmt: skip
    sel = [r for r in steps if r.get("job") == res.job]
    return render_html(
        report_data(
            sel, res, kernel_batches=batches, kernel_summaries=summaries, config=config,
            focus=focus, strict_focus=strict,
        )
    )  # fmt: skip


def report_from_dir(
    path: Any, *, job: str | None = None, config: DetectorsConfig | None = None,
    window_steps: int = 10, focus: str | None = None,
) -> str:  # fmt: skip
    """The report of a directory of Avro files (``argus simulate --out DIR``).

    Raises
    ------
    DetectorInputError
        Unreadable files.
    ReportError
        No step records.
    """
    from pathlib import Path

    from argus.diagnose import read_avro

    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    p = Path(path)
    for f in sorted(p.glob("*.avro")) if p.is_dir() else [p]:
        name, it = read_avro(f)
        by[name].extend(it)
    return _diagnose(
        by["step_record"], by["kernel_batch"], by["kernel_summary"], job, config, window_steps,
        focus,
    )  # fmt: skip


def report_from_kafka(
    settings: Any, job: str, tr: Any, *, config: DetectorsConfig | None = None,
    window_steps: int = 10, prefix: str | None = None, lag_ns: int | None = None,
    focus: str | None = None,
) -> str:  # fmt: skip
    """The report of ``job`` over event-time range ``tr`` read from Kafka (like replay).

    Raises
    ------
    ReplayError
        A read failed.
    ReportError
        No step records in the range.
    """
    from argus.replay import align_steps, read_range
    from argus.topics import topic_name

    pfx = settings.topic_prefix if prefix is None else prefix
    kw: dict[str, Any] = {"job": job, "lag_ns": lag_ns}
    steps = align_steps(read_range(settings, topic_name("raw.steps", pfx), tr, **kw), window_steps)
    batches = read_range(settings, topic_name("raw.kernels", pfx), tr, **kw)
    summaries = (
        [] if batches else read_range(settings, topic_name("summary.kernels", pfx), tr, **kw)
    )
    if steps:
        lo = min(int(r["step"]) for r in steps)
        batches = [r for r in batches if int(r["window_id"]) >= lo]
        summaries = [r for r in summaries if int(r["window_id"]) >= lo]
    why = ""
    if not steps:
        from argus.replay import why_empty

        why = why_empty(settings, topic_name("raw.steps", pfx), job, tr, lag_ns=lag_ns)
    return _diagnose(steps, batches, summaries, job, config, window_steps, focus, why, False)
