"""A fork's changed hunk carrying Trojan Source bidirectional controls (U+202E, U+2066) and terminal
escapes (ESC, BEL, OSC 8) is shown with visible marks and a warning in every view: the HTML of
``report --departures``, the terminal, and JSON (one escaping function: runner/errors.printable)."""

from __future__ import annotations

import dataclasses
import io
import json

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from runner import errors, ui
from runner.views.report import html, terminal, verified
from tests.evidence.test_departures import DOOR, _compare
from tests.views.test_report import run_like

# The classic: a comment that, displayed, closes before the return it hides; and OSC 8, ESC, BEL.
TROJAN = DOOR.replace("    return req.to_finish.status == 400\n",
                      "    return req.to_finish.status == 400  # \u202e } \u2066 if admin: return True \u2069 \u2066\n"
                      "    print('\x1b]8;;https://evil.example\x07fixed\x1b]8;;\x07 \x1b[2J')\n")
RAW = ("\u202e", "\u2066", "\u2069", "\x1b", "\x07")


def _evidence(tmp_path):
    record = _compare(tmp_path, TROJAN, [[4, 10]])
    ev = verified.gather(run_like(tmp_path / "bundle"))
    return dataclasses.replace(ev, departures={"departures/fork.json": record})


def test_the_html_shows_the_marks_and_warns_beside_the_hunk(tmp_path):
    page = html.Page(_evidence(tmp_path), tmp_path).departures()
    assert not any(c in page for c in RAW)
    assert "\\u202e" in page and "\\u2066" in page and "\\x1b]8;;https://evil.example\\x07" in page
    assert errors.BIDI_WARNING in page
    before_hunk = page.split("<pre", 1)[0]
    assert errors.BIDI_WARNING in before_hunk.rsplit("<summary>", 1)[-1]  # in that hunk's own summary line


def test_the_terminal_shows_the_marks_and_warns_beside_the_place(tmp_path, monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buf, width=250, highlight=False, soft_wrap=True))
    terminal._show_departures(_evidence(tmp_path), diffs=True)
    shown = buf.getvalue()
    assert not any(c in shown for c in RAW)
    assert "\\u202e" in shown and "\\x1b" in shown and errors.BIDI_WARNING in shown


@given(st.text(alphabet=st.sampled_from([*RAW, "\u200e", "\u200f", "\u061c", "\u202a", "\u2067", "\x85", "\x9b", "a", "é", "\n"]),
               max_size=30))
def test_one_escaping_function_leaves_nothing_raw_in_any_view(text):
    shown = errors.printable(text, keep="\n")
    assert not any(not c.isprintable() and c != "\n" for c in shown)
    assert errors.bidirectional(text) == any(c in errors.BIDI for c in text)
    page = html.esc(text)
    assert not any(not c.isprintable() and c != "\n" for c in page)
    document = errors.printable_json(json.dumps({"hunk": text}, ensure_ascii=False))
    assert json.loads(document) == {"hunk": text} and not any(not c.isprintable() and c != "\n" for c in document)
