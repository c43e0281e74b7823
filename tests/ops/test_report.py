"""`argus report`: a self-contained page with its charts; rendered in headless Chromium."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from argus.cli import main
from argus.config import Settings
from argus.report import ReportError, report_data, svg_cdf, svg_heatmap
from argus.sim.simulate import T0_NS, publish, simulate, write_avro

CHROMIUM = Path("/usr/bin/chromium")
SIM = dict(ranks=32, steps=30, seed=3)


@pytest.fixture(scope="module")
def straggler_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "cs"
    write_avro(simulate("compute-straggler", **SIM), out)  # type: ignore[arg-type]
    return out


def _check_page(page: str) -> None:
    # self-contained: no scripts, no external references (SVG namespaces aside)
    assert "<script" not in page and "src=" not in page and "href=" not in page
    assert "url(" not in page and "@import" not in page
    assert not re.findall(r"https?://(?!www\.w3\.org/2000/svg)", page)
    for section in ("iter", "heat", "w1", "cdf", "funnel"):
        assert f"id='{section}'" in page
    assert page.count("<svg") == 4
    assert 'class="band"' in page  # the L1 window
    assert 'class="straggler"' in page and 'class="peer"' in page
    # the culprit: mlp in dp group pp0.tp1, ranks 7 and 15, highlighted in the heatmap
    assert "phase mlp in dp group pp0.tp1" in page
    assert re.search(r'font-weight="bold" fill="#c00">&#9654; rank 7<', page)
    # the verdict leads the page, with the culprit's ranks and an ISO start
    assert page.index("id='verdict'") < page.index("id='iter'")
    assert "data-ranks='7,15'" in page and "ranks 7, 15 in dp group pp0.tp1" in page
    assert re.search(r"<th>since</th><td>2026-05-28T20:26:\d\d\.\d{3}Z", page)
    # its row: ranks, phase / strongest kernel divergence of theirs (any of the MLP's)
    assert re.search(r"<td>7,15</td><td>mlp / [a-z0-9_]+</td>", page)


def test_report_from_file(straggler_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", "--from-file", str(straggler_dir), "-o", str(out)]) == 0
    _check_page(out.read_text())


def test_svg_helpers_and_errors() -> None:
    import numpy as np

    svg = svg_heatmap(np.array([[1.0, np.nan], [3.0, 4.0]]), ["a", "b"], ["0", "1"])
    assert svg.count("<rect") == 4 and "#eeeeee" in svg  # NaN cell grey
    cdf = svg_cdf({"r1": np.arange(10.0), "r2": np.arange(5.0) + 3}, ["r2"])
    assert cdf.count('class="straggler"') == 1 and cdf.count('class="peer"') == 1
    with pytest.raises(ReportError, match="no step records"):
        report_data([], None)  # type: ignore[arg-type]


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium absent (apt-get install chromium)"
)
def test_report_renders_in_chromium(straggler_dir: Path, tmp_path: Path) -> None:
    from PIL import Image

    page = tmp_path / "report.html"
    assert main(["report", "--from-file", str(straggler_dir), "-o", str(page)]) == 0
    png = tmp_path / "shot.png"
    subprocess.run(
        [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}",
            "--window-size=1400,2400", page.resolve().as_uri(),
        ],
        check=True, capture_output=True, timeout=90,
    )  # fmt: skip
    assert png.stat().st_size > 30_000
    import numpy as np

    img = Image.open(png).convert("RGB")
    assert img.size == (1400, 2400)
    a = np.asarray(img).reshape(-1, 3).astype(int)
    non_white = float((a.min(axis=1) < 235).mean())
    assert non_white > 0.05, f"page looks blank ({non_white:.1%} non-white)"
    colours = np.unique(a, axis=0)
    assert len(colours) > 200  # charts, not a flat colour
    r, g, b = colours.T
    # the straggler's CDF lines (#d62728) and the viridis yellow of the heatmap are drawn
    assert ((abs(r - 214) < 20) & (g < 80) & (b < 80)).any()
    assert ((r > 200) & (g > 200) & (b < 90)).any()


@pytest.mark.kafka
def test_report_from_kafka(kafka: Settings, topic_prefix: str, tmp_path: Path) -> None:
    recs = list(simulate("compute-straggler", **SIM))  # type: ignore[arg-type]
    publish(iter(recs), kafka, prefix=topic_prefix)
    end = max(r["end_ns"] for s, _k, r in recs if s == "raw.steps")
    out = tmp_path / "k.html"
    rc = main(
        ["report", "--job", "sim-compute-straggler", "--from", str(T0_NS), "--to", str(end),
         "--prefix", topic_prefix, "-o", str(out)]
    )  # fmt: skip
    assert rc == 0
    _check_page(out.read_text())
    assert main(["report", "--job", "x", "-o", str(out)]) == 2  # --from/--to missing


@pytest.mark.kafka
def test_report_after_raw_kernels_expired(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    """Only kernel summaries left: W1 and CDFs from the reconstructed distributions."""
    from argus.diagnose import batch_summaries

    recs = list(simulate("compute-straggler", **SIM))  # type: ignore[arg-type]
    steps = [x for x in recs if x[0] == "raw.steps"]
    summ = [("summary.kernels", k, batch_summaries(r)) for s, k, r in recs if s == "raw.kernels"]
    publish(iter(steps + summ), kafka, prefix=topic_prefix)
    end = max(r["end_ns"] for _s, _k, r in steps)
    out = tmp_path / "s.html"
    rc = main(
        ["report", "--job", "sim-compute-straggler", "--from", str(T0_NS), "--to", str(end),
         "--prefix", topic_prefix, "-o", str(out)]
    )  # fmt: skip
    assert rc == 0
    page = out.read_text()
    _check_page(page)
    assert "reconstructed from kernel summaries" in page


def _shot(page: Path, png: Path, tmp: Path, size: tuple[int, int] = (1400, 2400)) -> Any:
    """Screenshot ``page`` in headless Chromium; the image as an (H, W, 3) int array."""
    import numpy as np
    from PIL import Image

    subprocess.run(
        [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={tmp / 'profile'}", f"--screenshot={png}",
            f"--window-size={size[0]},{size[1]}", page.resolve().as_uri(),
        ],
        check=True, capture_output=True, timeout=90,
    )  # fmt: skip
    img = np.asarray(Image.open(png).convert("RGB")).astype(int)
    assert img.shape[:2] == (size[1], size[0])
    flat = img.reshape(-1, 3)
    non_white = float((flat.min(axis=1) < 235).mean())
    assert non_white > 0.05, f"page looks blank ({non_white:.1%} non-white)"
    assert len(np.unique(flat, axis=0)) > 200  # charts, not a flat colour
    return img


def _marked_rows(page: str) -> list[int]:
    """Ranks the heatmap of the culprit's group marks (label with the marker, outlined)."""
    heat = page[page.index("id='heat'") : page.index("id='w1'")]
    assert heat.count('class="culprit-row"') >= 1
    return sorted(int(r) for r in re.findall(r'fill="#c00">&#9654; rank (\d+)<', heat))


def _red_box_rows(img: Any) -> int:
    """Rows of the screenshot that hold the verdict box's or the outlines' red (#c00/#e00)."""
    import numpy as np

    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    red = (r > 180) & (g < 40) & (b < 40)
    return int(np.count_nonzero(red.any(axis=1)))


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium absent (apt-get install chromium)"
)
def test_report_rank_culprit_screenshot(straggler_dir: Path, tmp_path: Path) -> None:
    """A rank culprit (compute-straggler, ranks 7 and 15): named in the top verdict, its
    group drawn with exactly those ranks marked, and the page renders."""
    page = tmp_path / "rank.html"
    assert main(["report", "--from-file", str(straggler_dir), "-o", str(page)]) == 0
    text = page.read_text()
    top = text[text.index("id='verdict'") : text.index("id='iter'")]
    assert "data-ranks='7,15'" in top and "straggler in phase mlp" in top
    assert "dp group pp0.tp1" in top and "hosts node0000, node0001" in top
    assert "phase mlp in dp group pp0.tp1" in text
    assert _marked_rows(text) == [7, 15]
    img = _shot(page, tmp_path / "rank.png", tmp_path)
    assert _red_box_rows(img) > 50  # the verdict box's border and the marked rows


@pytest.fixture(scope="module")
def link_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "ld"
    write_avro(simulate("link-degradation", ranks=64, steps=40, seed=3), out)
    return out


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium absent (apt-get install chromium)"
)
def test_report_group_culprit_screenshot(link_dir: Path, tmp_path: Path) -> None:
    """A group culprit (link-degradation: EDP group pp1.tp0.ep0 = ranks 32, 40, 48, 56):
    the verdict names the group and its member ranks; the heatmap draws that group (not an
    unrelated dp group) beside its sibling EDP groups with all four members marked."""
    page = tmp_path / "group.html"
    assert main(["report", "--from-file", str(link_dir), "-o", str(page)]) == 0
    text = page.read_text()
    top = text[text.index("id='verdict'") : text.index("id='iter'")]
    assert "data-ranks='32,40,48,56'" in top
    assert "edp group pp1.tp0.ep0: members ranks 32, 40, 48, 56" in top
    assert "slow for the whole edp group" in top
    heat_title = re.search(r"Rank x step heatmap: ([^<]*)<", text)
    assert heat_title and "edp group pp1.tp0.ep0" in heat_title[1]
    assert "expert_grad_sync" in heat_title[1] and " dp group" not in heat_title[1]
    assert _marked_rows(text) == [32, 40, 48, 56]
    # the CDF draws the members red, not grey
    assert "red: rank 32, rank 40, rank 48, rank 56" in text
    img = _shot(page, tmp_path / "group.png", tmp_path)
    assert _red_box_rows(img) > 50


def test_report_around_picks_the_verdict(straggler_dir: Path, tmp_path: Path) -> None:
    page = tmp_path / "a.html"
    rc = main(["report", "--from-file", str(straggler_dir), "--around", "nope", "-o", str(page)])
    assert rc == 1 and not page.exists()  # a typed error naming the verdicts there
