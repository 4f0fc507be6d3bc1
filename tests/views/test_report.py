"""``diffprobe report``: the terminal summary and the self-contained HTML page of a bundle.

Bundles are built here from receipts made with ``receipts.make``, shaped like what the real probes
record, so the evidence levels can be checked against bundles that do and do not back each step.
"""

from __future__ import annotations

import io
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import orjson
import pytest
from rich.console import Console

from runner import cli, ui
from runner.views.report import incident
from runner.evidence import bundle
from runner.judge.observations import Case, CaseError
from runner.evidence.receipts import Differential, Environment, ModelIdentity, ProbeRef, Standins, differential, make, seal
from runner.store.sources import TreeIdentity
from tests.helpers import committed_bundles

HOSTILE = '<script>alert(1)</script><img src="https://evil.example/x.png"> [/] [bold]'
HOSTILE_ID = 'evil [/] [bold]<i>"'

PROBES = {
    "admission": ProbeRef(id="admission", fix=38935, sha256="a" * 64, files={"admission.py": "b" * 64}),
    "prefill-cleanup": ProbeRef(id="prefill-cleanup", fix=36988, sha256="c" * 64, files={"prefill_cleanup.py": "d" * 64}),
}
TITLES = {38935: "Retire rejected requests at the PD admission door", 36988: "Clean up aborted prefill results"}
ENV = Environment(python="3.11.7", implementation="CPython", platform="Linux", diffprobe="0.1.0", diffprobe_sha256="0" * 64,
                  standins=Standins(declared={"triton": "GPU kernel compiler; not usable on CPU"},
                                    used=["triton", "triton.language"], tree_lacks=[], sha256="e" * 64))

# What the probes record, abridged: the rejected request at a door, an aborted prefill result.
DOOR_BUG = {"kv_endpoints": [{"name": "kv_sender#1"}], "queues": {"bootstrap": ["rejected"]}, "retired": [],
            "request": {"finished": False, "prompt_tokens": 1}}
DOOR_CLEAN = {"kv_endpoints": [], "queues": {"bootstrap": []}, "retired": ["rejected"], "request": {"finished": True}}
DECODE_BUG = {"kv_endpoints": [{"name": "kv_receiver#1"}], "queues": {"prealloc": ["rejected"]}, "retired": []}
DECODE_CLEAN = {"kv_endpoints": [], "queues": {"prealloc": []}, "retired": ["rejected"]}
VALID = {"kv_endpoints": [{"name": "kv_sender#1"}], "queues": {"bootstrap": ["valid"]}, "retired": []}
RESULT_BUG = {"before": {"holds_kv": True}, "results": [{"inflight_queue": ["r"], "kv_chunks_sent": [{"kwargs": {"last_chunk": True}}],
                                                          "metadata_frees": [], "kv_releases": []}]}
RESULT_CLEAN = {"before": {"holds_kv": True}, "results": [{"inflight_queue": [], "kv_chunks_sent": [], "metadata_frees": [7],
                                                            "kv_releases": [{"kv": True}]}]}


def case(case_id: str, site: str, role: str, cls: str, effects: dict, title: str = "a case") -> Case:
    return Case(id=case_id, site=site, role=role, title=title, signature=f"signature of {case_id}", outcome="observed",
                classification=cls, effects=effects, duration_ms=1)


def admission(prefill: str = "bug", decode: str = "bug") -> list[Case]:
    return [
        case("prefill-door-rejected", "prefill-door", "bug", prefill, DOOR_BUG if prefill == "bug" else DOOR_CLEAN),
        case("decode-door-rejected", "decode-door", "bug", decode, DECODE_BUG if decode == "bug" else DECODE_CLEAN),
        case("prefill-door-valid", "prefill-door", "guard", "clean", VALID),
        case(HOSTILE_ID, "prefill-door", "guard", "clean", {**VALID, HOSTILE: [HOSTILE]}, title=HOSTILE),
    ]


def cleanup(cls: str) -> list[Case]:
    effects = RESULT_BUG if cls == "bug" else RESULT_CLEAN
    return [case("aborted-final-result", "prefill-result", "bug", cls, effects),
            case("late-result-after-retire", "prefill-result", "bug", cls, effects),
            case("healthy-final-result", "prefill-result", "guard", "clean", RESULT_BUG)]


def pypi(version: str) -> TreeIdentity:
    return TreeIdentity(kind="pypi", source=f"pypi:sglang=={version}", version=version,
                        artifact=f"sglang-{version}-cp311-cp311-manylinux_2_34_x86_64.whl", artifact_sha256="f" * 64,
                        tree_digest=f"h1:tree-{version}=", files=4000)


def receipt(probe: str, source, cases: list[Case]):
    r = make(PROBES[probe], source, ENV, cases, started_at="2026-11-30T00:00:00Z", finished_at="2026-11-30T00:00:01Z")
    return bundle.receipt_name(r), r


def fix_diff(fix: int, probe: str, base, head):
    return differential(fix, TITLES[fix], [probe], [base], [head], "fix observed")


def write(out: Path, kind: str, named: list, diffs: list) -> Path:
    return bundle.write(out, kind=kind, created_at="2026-11-30T00:00:00Z", receipts=[r for _, r in named],
                        differentials=diffs, pins_sha256=None)


def run_like(out: Path, admission_base: list[Case] | None = None) -> Path:
    """A bundle shaped like ``diffprobe run --via releases``: both fixes, base and head each."""
    pc = receipt("prefill-cleanup", pypi("0.5.19"), cleanup("bug")), receipt("prefill-cleanup", pypi("0.5.20"), cleanup("clean"))
    ad = (receipt("admission", pypi("0.5.20"), admission_base or admission()),
          receipt("admission", pypi("0.5.21"), admission("clean", "clean")))
    return write(out, "run", [*pc, *ad], [fix_diff(36988, "prefill-cleanup", *pc), fix_diff(38935, "admission", *ad)])


@pytest.fixture
def run_bundle(tmp_path) -> Path:
    return run_like(tmp_path / "bundle")


@pytest.fixture
def terminal(monkeypatch) -> io.StringIO:
    buf = io.StringIO()
    monkeypatch.setattr(ui, "out", Console(file=buf, width=250, highlight=False, soft_wrap=True))
    return buf


def html_of(bundle_dir: Path, out: Path) -> str:
    assert cli.main(["report", str(bundle_dir), "--html", str(out)]) == 0
    return out.read_text()


def levels(page: str) -> dict[int, str]:
    """Each step's evidence level, read from the steps table."""
    rows = re.findall(r'<tr><td><b>(\d)</b></td><td>.*?</td><td><span class="level [a-z]+">([^<]+)</span>', page)
    return {int(n): level for n, level in rows}


class StrictPage(HTMLParser):
    """Fails on unbalanced or misnested tags and collects ids, links, styles and text."""

    VOID = {"meta", "br", "hr", "img", "input", "link", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.ids: list[str] = []
        self.links: list[str] = []
        self.attrs: list[tuple[str, str]] = []
        self.styles: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            self.attrs.append((k, v or ""))
            if k == "id":
                self.ids.append(v)
            if k in ("href", "src"):
                self.links.append(v)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        raise AssertionError(f"self-closing <{tag}/> in HTML")

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)
        if self.stack and self.stack[-1] == "style":
            self.styles.append(data)


def parse(page: str) -> StrictPage:
    assert page.startswith("<!DOCTYPE html>\n")
    p = StrictPage()
    p.feed(page)
    p.close()
    assert p.stack == [], f"unclosed: {p.stack}"
    return p


def assert_self_contained(p: StrictPage) -> None:
    assert not [link for link in p.links if re.match(r"\s*(https?:)?//", link, re.I)], "external link or asset"
    assert not [link for link in p.links if re.match(r"\s*(javascript|data):", link, re.I)]
    assert not [k for k, _ in p.attrs if k.startswith("on") or k == "style"], "event handler or inline style"
    css = "".join(p.styles)
    assert "url(" not in css and "@import" not in css


# --- terminal --------------------------------------------------------------------------------


@pytest.mark.slow
def test_terminal_summary_names_sources_transitions_verdicts_standins_and_limits(run_bundle, terminal):
    assert cli.main(["report", str(run_bundle), "--all"]) == 0
    out = terminal.getvalue()
    assert "✓ verified (4 receipts, 2 differentials)" in out
    assert "base: sglang 0.5.20 (PyPI)  pypi  tree h1:tree-0.5.20=" in out
    assert "head: sglang 0.5.21 (PyPI)  pypi  tree h1:tree-0.5.21=" in out
    assert out.count("verdict: fix observed (as pinned)  — CPU differential") == 2
    assert re.search(r"prefill-door-rejected .*bug → clean .*KV senders created 1 → 0; queue entries 1 → 0; "
                     r"retired at the door 0 → 1", out)
    assert "stand-ins used: triton (GPU kernel compiler; not usable on CPU)" in out
    assert "not tested" in out and all(limit in out for limit in bundle.LIMITS)
    assert "sha256sum -c SHA256SUMS" in out and f"diffprobe verify {run_bundle}" in out


@pytest.mark.slow
def test_receipt_text_cannot_inject_terminal_markup(run_bundle, terminal):
    """A case id like '[/]' from an untrusted fork would otherwise crash rich or restyle the output."""
    assert cli.main(["report", str(run_bundle), "--all"]) == 0
    assert HOSTILE_ID in terminal.getvalue()


# --- refusing what does not verify ---------------------------------------------------------------


@pytest.mark.slow
def test_a_tampered_bundle_is_refused_in_one_line(run_bundle, tmp_path, capsys):
    name = next((run_bundle / "receipts").iterdir())
    name.write_bytes(name.read_bytes().replace(b'"bug"', b'"clean"', 1))
    assert cli.main(["report", str(run_bundle), "--html", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not verify" in err and "diffprobe verify" in err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_not_a_bundle_and_html_inside_the_bundle_are_bad_input(run_bundle, tmp_path):
    assert cli.main(["report", str(tmp_path)]) == 2
    assert cli.main(["report", str(run_bundle), "--html", str(run_bundle / "report.html")]) == 2
    assert bundle.verify(run_bundle) == []


# --- the HTML page -------------------------------------------------------------------------------


@pytest.mark.slow
def test_html_is_strict_self_contained_and_every_link_resolves(run_bundle, tmp_path):
    out = tmp_path / "site" / "report.html"
    page = html_of(run_bundle, out)
    p = parse(page)
    assert_self_contained(p)
    assert len(p.ids) == len(set(p.ids)), "duplicate ids"
    for link in p.links:
        if link.startswith("#"):
            assert link[1:] in p.ids, link
        else:
            assert (out.parent / unquote(link)).resolve().is_file(), link
    assert "<script" not in page.lower().replace("&lt;script", "")
    assert HOSTILE not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert HOSTILE_ID not in page and "evil [/] [bold]&lt;i&gt;&quot;" in page


@pytest.mark.slow
def test_steps_backed_by_the_bundle_link_the_exact_receipt_and_case(run_bundle, tmp_path):
    page = html_of(run_bundle, tmp_path / "r.html")
    assert levels(page) == {1: "CPU differential", 2: "CPU differential", 3: "vendor disclosure", 4: "CPU differential",
                            5: "CPU differential", 6: "vendor disclosure", 7: "vendor disclosure"}
    base, head = "sglang-0.5.20.admission--prefill-door-rejected", "sglang-0.5.21.admission--prefill-door-rejected"
    step2 = page[page.index('<td><b>2</b></td>'):page.index('<td><b>3</b></td>')]
    assert f'href="#{base}"' in step2 and f'href="#{head}"' in step2
    assert 'href="bundle/receipts/sglang-0.5.20.admission.json"' in step2
    assert f'<tr id="{base}">' in page and "changed: KV senders created 1 → 0" in step2


def test_a_step_whose_case_did_not_go_bug_to_clean_is_not_covered(tmp_path):
    """At a base where the prefill door already retires the rejected request, step 2 has no CPU evidence."""
    b = run_like(tmp_path / "bundle", admission_base=admission(prefill="clean", decode="bug"))
    page = html_of(b, tmp_path / "r.html")
    assert levels(page)[2] == "not covered" and levels(page)[5] == "CPU differential"
    assert "#38935 admission/prefill-door-rejected: clean → clean" in page


def model(reject: bool) -> ModelIdentity:
    return ModelIdentity(source=f"synthetic model, reject {'on' if reject else 'off'}", switches={"reject": reject})


def test_model_receipts_are_labelled_and_never_back_a_step(tmp_path):
    base, head = receipt("admission", model(False), admission()), receipt("admission", model(True), admission("clean", "clean"))
    b = write(tmp_path / "bundle", "model", [base, head], [fix_diff(38935, "admission", base, head)])
    page = html_of(b, tmp_path / "r.html")
    assert levels(page)[2] == "not covered" and "CPU differential" not in set(levels(page).values())
    assert "(model or gate receipts: not a CPU differential)" in page
    assert "Model or gate receipts: not a CPU differential of SGLang code." in page
    assert page.count('<span class="level model">executable model</span>') == 2
    matrix = page[page.index('id="matrix"'):page.index('id="limits"')]
    assert re.findall(r'<span class="st ([a-z-]+)">', matrix) == ["bug-observed", "no-bug-observed"]  # not "fixed"


@pytest.mark.slow
def test_before_after_table_highlights_exactly_the_side_effects_that_changed(run_bundle, tmp_path):
    page = html_of(run_bundle, tmp_path / "r.html")
    section = page[page.index('id="fix-36988"'):page.index('id="fix-38935"')]
    assert "re-queued (inflight)" in section and "KV chunks sent" in section and "metadata frees" in section
    row = re.search(r'<tr><td><a href="#[^"]+--aborted-final-result">.*?</tr>', section).group(0)
    assert row.count('class="diff"') == 4  # re-queue, last-chunk send, metadata free, KV free
    guard = re.search(r'<tr><td><a href="#[^"]+--healthy-final-result">.*?</tr>', section).group(0)
    assert 'class="diff"' not in guard


def test_sweep_bundle_renders_a_matrix_of_sources_by_fixes(tmp_path):
    crashed = Case(id="decode-door-rejected", site="decode-door", role="bug", title="t", signature="s", outcome="error",
                   classification="inconclusive", error=CaseError(type="Signal", message="SIGSEGV", where="process"),
                   duration_ms=1)
    broken_guard = [*admission("clean", "clean")[:2], case("prefill-door-valid", "prefill-door", "guard", "bug", DOOR_CLEAN)]
    named = [receipt("admission", pypi("0.5.20"), admission(decode="clean")),
             receipt("admission", pypi("0.5.21"), admission("clean", "clean")),
             receipt("admission", pypi("0.5.22"), broken_guard),
             receipt("admission", pypi("0.5.23"), [admission("clean")[0], crashed]),
             receipt("prefill-cleanup", pypi("0.5.20"), cleanup("clean"))]
    b = write(tmp_path / "sweep", "sweep", named, [])
    p = parse(page := html_of(b, tmp_path / "r.html"))
    assert_self_contained(p)
    matrix = page[page.index('id="matrix"'):page.index('id="limits"')]
    assert [m for m in re.findall(r'<span class="st ([a-z-]+)">', matrix)] == [
        "fixed", "not-fixed", "not-probed", "fixed", "not-probed", "regression", "not-probed", "inconclusive"]
    assert "at prefill-door (1 bug, 3 clean)" in matrix and "at prefill-door (2 clean, 1 bug)" in matrix
    assert "No base/head differential in this bundle" in page and set(levels(page).values()) <= {"not covered", "vendor disclosure"}


def test_a_differential_that_does_not_follow_from_its_receipts_is_refused(tmp_path, capsys):
    """verify re-derives every differential (issue #11): a resealed one with another verdict does not verify."""
    base, head = receipt("admission", pypi("0.5.20"), admission()), receipt("admission", pypi("0.5.21"), admission("clean", "clean"))
    body = fix_diff(38935, "admission", base, head).model_dump(mode="json") | {"verdict": "regression"}
    forged = Differential.model_validate(body | {"digest": seal(body)})
    root = write(tmp_path / "bundle", "run", [base, head], [forged])
    assert cli.main(["report", str(root), "--html", str(tmp_path / "r.html")]) == 1
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_the_page_is_written_atomically_and_replaces_an_old_one(run_bundle, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("old")
    html_of(run_bundle, out)
    assert out.read_text().startswith("<!DOCTYPE html>") and sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "r.html"]


@pytest.mark.parametrize("reference", committed_bundles())
def test_committed_reference_bundle_renders(reference, tmp_path):
    page = html_of(reference, tmp_path / "r.html")
    assert_self_contained(parse(page))
    assert len(levels(page)) == 7


# --- a real browser ------------------------------------------------------------------------------


def chromium(tmp_path: Path, url: str, *args: str) -> tuple[str, list[str]]:
    """Run headless chromium with resolving disabled and a net log; return stdout and the URLs the
    page itself asked the network for (requests in the page's file:// network partition)."""
    netlog = tmp_path / f"net-{len(list(tmp_path.glob('net-*')))}.json"
    proc = subprocess.run(
        [shutil.which("chromium") or "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", '--host-resolver-rules=MAP * ~NOTFOUND',
         f"--log-net-log={netlog}", *args, url],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = orjson.loads(netlog.read_bytes())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    requested = [e["params"]["url"] for e in log["events"]
                 if e["type"] == start and "file://" in e.get("params", {}).get("network_isolation_key", "")]
    return proc.stdout, requested


class Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)


def visible_text(dom: str) -> str:
    t = Text()
    t.feed(dom)
    return re.sub(r"\s+", " ", "".join(t.parts))


@pytest.mark.needs("chromium")
@pytest.mark.slow
def test_chromium_renders_the_report_offline(run_bundle, tmp_path):
    out = tmp_path / "r.html"
    html_of(run_bundle, out)
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><html><head><title>c</title></head><body><img src="http://192.0.2.1/x.png"></body></html>')
    _, asked = chromium(tmp_path, control.as_uri(), "--dump-dom")
    assert asked == ["http://192.0.2.1/x.png"], "the net log no longer shows page requests; this test would prove nothing"

    dom, asked = chromium(tmp_path, out.as_uri(), "--dump-dom")
    assert asked == []
    text = visible_text(dom)
    assert all(step.text in text for step in incident.STEPS)
    assert "#36988 Clean up aborted prefill results fix observed (as pinned)" in text
    assert "#38935 Retire rejected requests at the PD admission door fix observed (as pinned)" in text
    assert "What this bundle does not test" in text and all(limit in text for limit in bundle.LIMITS)

    shot = tmp_path / "report.png"
    _, asked = chromium(tmp_path, out.as_uri(), f"--screenshot={shot}", "--window-size=1280,4000")
    assert asked == []
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1280, 4000)
