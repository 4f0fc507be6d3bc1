"""The colours of each word a view prints: one map per vocabulary of runner/judge/judging.py."""

VERDICT = {"fix observed": "green", "fix not observed": "red", "regression": "bold red", "inconclusive": "yellow"}
TRANSITION = {"bug -> clean": "green", "bug -> bug": "red", "clean -> bug": "bold red", "clean -> clean": "dim"}
# A status, or for a model or a server "bug observed" / "no bug observed"; anything else is red.
STATUS = {"fixed": "green", "clean": "green", "no bug observed": "green", "not fixed": "red", "bug observed": "red",
          "regression": "bold red", "inconclusive": "yellow", "not applicable": "dim", "not probed": "dim"}


def status(word: str) -> str:
    """The colour of a status word; a "fixed" qualified by what it does not rest on ("fixed, with N lines of the
    fix no case reaches") is yellow: read it before taking it."""
    return STATUS.get(word) or ("yellow" if word.startswith("fixed, ") else "red")


# The same vocabulary as fills of the release-line picture (views/timeline.py); "no bug observed" is a
# tree before the bug window whose bug cases ran clean.
FILL = {"not fixed": "#cf222e", "regression": "#82071e", "fixed": "#2da44e", "no bug observed": "#aceebb",
        "clean": "#aceebb", "inconclusive": "#d4a72c", "not applicable": "#eaeef2", "not probed": "#ffffff"}
# An acceptance gate (views/report/gates.py), and the words of what backs it: a case's state, a check
# held or not (a fix's status there takes STATUS).
GATE = {"passed": "green", "failed": "red", "not run": "yellow"}
BACKING = {"clean": "green", "bug": "red", "held": "green", "not held": "red", "not_applicable": "dim", "not used": "dim"}
