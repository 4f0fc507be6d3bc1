"""The HTML report fits a 1,280 px screen: headless chromium lays the committed bundle's page out at
that width and finds no horizontal scroll and no element reaching past the window (the timeline
picture and diff hunks scroll inside their own boxes)."""

from __future__ import annotations

import json
import re
import struct

import pytest

from runner import cli
from tests.helpers import EVIDENCE
from tests.views.test_report import chromium

WIDTH = 1280
MEASURE = """<script>
const W = document.documentElement.clientWidth;
const past = [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > W + 1 && !e.closest('.line, .hunk'));
document.body.setAttribute('data-measure', JSON.stringify({scroll: document.documentElement.scrollWidth, client: W,
  past: past.slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))}));
</script>"""


@pytest.mark.needs("chromium")
@pytest.mark.slow
def test_the_page_fits_1280_px_without_horizontal_scroll(tmp_path):
    page = tmp_path / "r.html"
    assert cli.main(["report", str(EVIDENCE / "releases-20261201"), "--html", str(page)]) == 0
    shot = tmp_path / "r.png"
    _, asked = chromium(tmp_path, page.as_uri(), f"--screenshot={shot}", f"--window-size={WIDTH},1600")
    png = shot.read_bytes()
    assert asked == [] and struct.unpack(">II", png[16:24]) == (WIDTH, 1600)
    measured = tmp_path / "measured.html"  # the same page, with a script that measures its layout
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom, _ = chromium(tmp_path, measured.as_uri(), "--dump-dom", f"--window-size={WIDTH},1600")
    found = json.loads(re.search(r'data-measure="([^"]*)"', dom).group(1).replace("&quot;", '"'))
    assert found["scroll"] <= found["client"] and not found["past"], found
