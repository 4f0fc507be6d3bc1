"""The HTML report's one style sheet: inline in the page (no external asset), readable printed."""

CSS = """
:root { --ok:#1a7f37; --bad:#b42318; --warn:#9a6700; --muted:#57606a; --line:#d0d7de; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, "Segoe UI", "DejaVu Sans", Arial, sans-serif; color: #1f2328; }
main { max-width: 1240px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 1.5em; margin: 0; } h2 { font-size: 1.2em; margin: 1.6em 0 .4em; border-bottom: 2px solid var(--line); }
h3 { font-size: 1.05em; margin: 1em 0 .3em; }
.sub, .note { color: var(--muted); font-size: .88em; }
code, pre { font: .85em/1.35 ui-monospace, "DejaVu Sans Mono", monospace; }
pre { white-space: pre-wrap; word-break: break-all; margin: .2em 0; }
table { border-collapse: collapse; width: 100%; margin: .4em 0; }
th, td { border: 1px solid var(--line); padding: 4px 6px; vertical-align: top; text-align: left; overflow-wrap: anywhere; }
th { background: #f6f8fa; font-size: .88em; }
a { color: #0550ae; }
.glance { border: 2px solid #1f2328; border-radius: 6px; padding: 4px 16px; margin-top: 12px; background: #fbfcfd; }
.glance ul { margin: 0 0 .5em; }
.verdict, .level, .st, .tr { display: inline-block; padding: 0 6px; border-radius: 4px; font-weight: 600;
  font-size: .88em; }
.verdict.fix-observed, .st.fixed, .st.clean, .st.no-bug-observed, .tr.bug-clean { background: #dafbe1; color: var(--ok); }
.verdict.fix-not-observed, .verdict.regression, .st.not-fixed, .st.regression, .st.fixed-on-unreviewed-code, .st.behaves-like-head-on-unreviewed-code,
.st.bug, .st.bug-observed, .tr.bug-bug, .tr.clean-bug { background: #ffebe9; color: var(--bad); }
.verdict.inconclusive, .st.inconclusive, .tr.inconclusive, .tr.not-comparable { background: #fff8c5; color: var(--warn); }
.st[class*="fixed-with-"], .st.fixed-when-enabled-off-by-default { background: #fff8c5; color: var(--warn); }
.verdict.accepted, .st.passed, .st.held { background: #dafbe1; color: var(--ok); }
.verdict.not-accepted, .st.failed, .st.not-held { background: #ffebe9; color: var(--bad); }
.st.not-run, .st.error, .st.timeout { background: #fff8c5; color: var(--warn); }
.gates td:first-child { width: 2em; text-align: center; } .gates td:nth-child(2) { width: 14em; }
.gates ul { margin: .2em 0; padding-left: 1.2em; } .gates li.check { margin-left: 1.4em; list-style: circle; }
.backer + .backer { margin-top: .6em; border-top: 1px dashed var(--line); padding-top: .3em; }
.tr.clean-clean, .st.not-applicable, .st.not-probed, .st.not-used { background: #f6f8fa; color: var(--muted); }
.level.cpu { background: #dafbe1; color: var(--ok); } .level.vendor { background: #ddf4ff; color: #0550ae; }
.level.none { background: #fff8c5; color: var(--warn); } .level.model { background: #fbefff; color: #8250df; }
.steps td:first-child { width: 2em; text-align: center; } .steps td:nth-child(3) { width: 11em; }
.effects td:nth-child(n+4), .effects th:nth-child(n+4) { text-align: center; }
.effects th { font-weight: 600; font-size: .8em; }
.changed { color: #1f2328; }
.diff { background: #ffd33d; font-weight: 700; padding: 1px 5px; border-radius: 3px; }
.na { color: var(--warn); font-size: .85em; }
.warn { border-left: 4px solid var(--bad); padding-left: 8px; color: var(--bad); }
.ids td:first-child { width: 10em; color: var(--muted); } .ids code { word-break: break-all; }
.cases td:last-child { width: 60%; } .cases pre { font-size: .78em; } .manifest { background: #f6f8fa; padding: 6px; }
a.file { font-size: .82em; }
.line { overflow-x: auto; } .line svg { max-width: 100%; height: auto; } .key { margin-right: 10px; white-space: nowrap; }
.limits li { font-weight: 600; }
details.departures { margin: .4em 0; } details.departures > summary { cursor: pointer; font-weight: 600; }
details.departures details { margin: .2em 0 .2em 1.2em; } details.departures details > summary { cursor: pointer; }
.ran { color: var(--warn); } .aware { color: var(--bad); font-weight: 700; }
.hunk { background: #f6f8fa; padding: 6px; font-size: .8em; overflow-x: auto; }
@page { margin: 12mm; }
@media print {
  body { font-size: 10pt; } main { max-width: none; padding: 0; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  a { color: inherit; text-decoration: none; }
  tr, .glance, .ids, article h3 { break-inside: avoid; }
  h2, h3 { break-after: avoid; }
  #receipts { break-before: page; }
}
"""
