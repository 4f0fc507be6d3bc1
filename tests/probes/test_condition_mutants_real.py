"""Issue 38 item 5: a condition inserted on each input the fix's code reads, generated from the stored tree (not a
hand list), on the real releases that carry each fix: #38935 and #36988, and the later defences (#39500, #41023 on
0.5.21-0.5.23; #40645, whose NIXL half 0.5.21 lacks, #41402, #41404 on 0.5.22-0.5.23).

The generator reads each function of ``duties.FIX_CODE`` from the release's stored bytes and, at the first
single-line ``if`` of its fix's code, makes the duty depend on each attribute of an argument or loop variable
the fix's code reads (``mutation.inputs``: ``if X:`` becomes ``if (X) and not <input>:``), the shape of the
issue's mutants (a retire path skipping requests that asked for logprobs, a door retiring only requests
without a priority). Each runs as ``mutate --hunks`` (one SGLang import per release and fix), judged as an
audit of the changed tree would be: its duties on the cases that reach it, and the condition it wrote, which
those cases must drive both ways, in each configuration its cases run under (``reads_by_site``: a change that
breaks only the default configuration reads so there). The claim: none reads as the tree unchanged does in every
configuration; each reads "not fixed", "regression" or "inconclusive" naming its own condition in at least one.
It holds for #38935 and #36988. Behaviour-preserving changes (a double negation of the same test) read as the
tree unchanged does, configuration by configuration (the fresh equivalents of tests/probes/fresh_hunks.py run in
test_fresh_hunks.py).

Bounded: the later defences read many inputs (the lifetime scenes' functions read a dozen each), so their
changes are a sample, ``SAMPLE`` per release and fix drawn with a fixed seed (``random.Random(SEED)``) from the
generated list, the equivalent ones always kept; the first two fixes run their whole list.
"""

from __future__ import annotations

import ast
import random
import re

import pytest

from probes import fixcode, mutation
from probes.duties import FIX_CODE
from runner.evidence import materials
from runner.judge import conditions
from tests import helpers

pytestmark = pytest.mark.slow  # real releases, their environments and SGLang imports

FIXES = (38935, 36988)
# #40645 reads "not fixed" on 0.5.21 by its NIXL cases (docs/fixed.md, "Which backend's half"): it carries it from 0.5.22
LATER = {39500: ("0.5.21", "0.5.22", "0.5.23"), 40645: ("0.5.22", "0.5.23"),
         41023: ("0.5.21", "0.5.22", "0.5.23"), 41402: ("0.5.22", "0.5.23"), 41404: ("0.5.22", "0.5.23")}
SAMPLE, SEED = 6, 38  # changes of a later defence's code tried per release, drawn with this seed


def read_inputs(fn: ast.FunctionDef, names: tuple[str, ...], own: bool) -> list[str]:
    """The inputs the fix's code in ``fn`` reads: ``mutation.inputs`` (attributes of its arguments and loop
    variables); with ``own``, also its arguments themselves (a room, a generation, an endpoint) and the attributes
    of ``self`` it reads as values (the manager's or queue's configuration and state: its switches, its tables),
    each once, in source order."""
    found = list(mutation.inputs(fn, names))
    if not own:
        return found
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs) if a.arg not in ("self", "cls")]
    called = {id(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}
    read = [n for stmt in fixcode.deciding(fn, names) for n in fixcode.own(stmt)] if names else list(ast.walk(fn))
    loaded = {n.id for n in read if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    found += [p for p in params if p in loaded]
    found += [ast.unparse(n) for n in read if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)
              and isinstance(n.value, ast.Name) and n.value.id == "self" and id(n) not in called]
    return sorted(set(found), key=found.index)


def generated(read, fix: int, own: bool = False) -> list[dict]:
    """One hunk per input each function of ``fix``'s code reads (``read_inputs``), at its first single-line ``if``
    of the fix's code; and one equivalent change of that test (``not (not X)``)."""
    hunks = []
    for qualified, names in FIX_CODE[fix].items():
        found = fixcode.locate(read, qualified)
        if found is None:
            continue
        path, fn = found
        lines = read(path).splitlines(keepends=True)
        segment = "".join(lines[fn.lineno - 1 : fn.end_lineno])
        test = next((s for s in fixcode.statements(fn, names) if isinstance(s, ast.If) and s.test.end_lineno == s.lineno
                     and lines[s.lineno - 1].rstrip().endswith(":")), None)
        if test is None:
            continue
        header = lines[test.lineno - 1]
        if segment.count(header) != 1:
            continue
        indent, condition = re.match(r"(\s*)(?:el)?if (.*):\s*$", header).groups()
        keyword = "elif" if header.lstrip().startswith("elif") else "if"
        short = qualified.rsplit(".", 1)[-1].lstrip("_")
        for attribute in read_inputs(fn, names, own):
            # an input no server of the tree makes true (host destinations, where no backend supports them: the
            # premise read from the stored tree) gives the test `and True`: behaviour kept, as mutate judges it
            kept = conditions.premised_equivalent({"function": qualified, "line": test.lineno,
                                                   "operator": f"insert:{attribute}", "before": condition}, read)
            hunks.append({"id": f"{short}-not-{attribute.replace('.', '-')}", "function": qualified, "old": header,
                          "new": f"{indent}{keyword} ({condition}) and not {attribute}:\n", "equivalent": kept is not None})
        hunks.append({"id": f"{short}-double-negation", "function": qualified, "old": header,
                      "new": f"{indent}{keyword} not (not ({condition})):\n", "equivalent": True})
    return hunks


def sampled(hunks: list[dict]) -> list[dict]:
    """At most ``SAMPLE`` of the changes that condition a duty, drawn with ``SEED``; every equivalent one (the double
    negations, and an inserted input no server of the tree makes true)."""
    changes = [h for h in hunks if not h["equivalent"]]
    kept = changes if len(changes) <= SAMPLE else random.Random(SEED).sample(changes, SAMPLE)
    return [h for h in hunks if h["equivalent"] or h in kept]


def unchanged_by_site(report: dict) -> dict[str, str]:
    """What the tree unchanged reads in each configuration, from the report's baseline cases."""
    from runner.judge import judging

    sites = dict.fromkeys(c["site"] for c in report["baseline"])
    return {site: judging.status_of([(c["role"], c["state"]) for c in report["baseline"] if c["site"] == site])
            for site in sites}


def misread(hunks: list[dict], report: dict) -> list[tuple]:
    """The changes that read wrong: a conditioning change that reads, in every configuration, as the tree unchanged
    (or "inconclusive" without naming a condition), or an equivalent one that reads otherwise in some configuration."""
    before = unchanged_by_site(report)
    read = {m["id"]: m for m in report["mutants"]}
    wrong = []
    for h in hunks:
        m = read[h["id"]]
        by_site = m.get("reads_by_site") or {}
        told = [site for site, word in by_site.items() if word != before.get(site)
                and (word != "inconclusive" or "condition `" in m["why"])]
        if h["equivalent"] and (told or m["reads"] != "fixed"):
            wrong.append((h["id"], m["reads"], by_site, m["why"]))
        elif not h["equivalent"] and not told:
            wrong.append((h["id"], m["reads"], by_site, m["why"]))
    return wrong


@pytest.mark.parametrize("version", ["0.5.21", "0.5.22", "0.5.23"])
@pytest.mark.parametrize("fix", FIXES)
def test_a_condition_on_any_input_read_never_passes_for_fixed(version, fix, release_tree, cache, tmp_path):
    hunks = generated(materials.reader(release_tree(version).root), fix)
    assert sum(not h["equivalent"] for h in hunks) >= 5  # the generator found inputs in the stored code
    report = helpers.mutate_hunks(version, fix, hunks, tmp_path, cache.root)
    assert report["score"]["baseline"] == "fixed"
    read = {m["id"]: m for m in report["mutants"]}
    wrong = []
    for h in hunks:
        m = read[h["id"]]
        if h["equivalent"]:
            if m["reads"] != "fixed":
                wrong.append((h["id"], m["reads"], m["why"]))
        elif m["reads"] == "fixed" or (m["reads"] == "inconclusive" and "condition `" not in m["why"]):
            wrong.append((h["id"], m["reads"], m["why"]))
    assert not wrong, wrong


@pytest.mark.parametrize(("fix", "version"), [(f, v) for f, versions in LATER.items() for v in versions])
def test_a_later_defence_conditioned_on_an_input_it_reads_is_told_in_some_configuration(fix, version, release_tree,
                                                                                       cache, tmp_path):
    """The later defences' code, each inserted condition read configuration by configuration: the change is told
    from the tree unchanged in at least one (its duty fails there, or the condition it wrote was never driven both
    ways); the double negation reads as the tree unchanged in every one (the default configuration of an option off
    by default reads "not fixed" with it and without it)."""
    hunks = sampled(generated(materials.reader(release_tree(version).root), fix, own=True))
    assert any(not h["equivalent"] for h in hunks)  # the generator found inputs in the stored code
    report = helpers.mutate_hunks(version, fix, hunks, tmp_path, cache.root)
    assert report["score"]["baseline"] == "fixed"
    assert not misread(hunks, report)
