from pathlib import Path

import pytest

from runner.app.pipeline import probes_of
from runner.evidence import catalog, pins
from runner.errors import BadInput

PROJECT_PINS = Path(__file__).resolve().parents[2] / "pins.toml"


def test_project_pins_are_valid_and_complete():
    p = pins.load(PROJECT_PINS)
    assert set(p.fixes) == {1, 2, 3, 4, 5, 6, 36988, 38935, 39500, 40645, 41023, 41402, 41404}
    assert (p.fixes[36988].releases.without, p.fixes[36988].releases.with_) == ("0.5.19", "0.5.20")
    assert (p.fixes[38935].releases.without, p.fixes[38935].releases.with_) == ("0.5.20", "0.5.21")
    assert p.fixes[38935].base == "17ba2c2e7c7b81f31a8a9e693e7435ab262c16b4"
    assert p.fixes[36988].head == "2ee5742a"  # short form allowed; resolved when used
    assert p.fixes[38935].probes == ["admission"] and p.fixes[36988].probes == ["prefill-cleanup"]
    assert all(len(r.sha256) == 64 for r in p.releases.values())
    # the later defences: pinned by the release brackets their probes' sweep found, no PR commits
    later = {n: f for n, f in p.fixes.items() if n not in (36988, 38935)}
    assert all(not f.has_commits for f in later.values()) and p.fixes[38935].has_commits
    assert {n: (f.releases.without, f.releases.with_) for n, f in later.items()} == {
        39500: ("0.5.20", "0.5.21"), 40645: ("0.5.21", "0.5.22"), 41023: ("0.5.20", "0.5.21"),
        41402: ("0.5.21", "0.5.22"), 41404: ("0.5.21", "0.5.22"), 1: ("0.5.22", "0.5.23"), 2: ("0.5.22", "0.5.23"), 3: ("0.5.22", "0.5.23"),
        4: ("0.5.22", "0.5.23"),
        5: ("0.5.22", "0.5.23"), 6: ("0.5.22", "0.5.23")}
    assert {n for n, f in p.fixes.items() if f.local} == {1, 2, 3, 4, 5, 6}  # found in a release, no upstream PR number
    assert p.fixes[39500].sites == ["with-kv-checksum"] and p.fixes[41023].sites == ["default"]


def test_a_tree_is_probed_with_the_probes_its_fixes_name_in_catalog_order():
    """What ``audit``/``sweep`` run: every pinned fix's probes by default, only the --fix ones' otherwise;
    a pins file naming fewer fixes runs fewer probes."""
    p = pins.load(PROJECT_PINS)
    assert probes_of(p) == tuple(catalog.PROBES)  # the project's pins name every probe
    assert probes_of(p, [41402, 38935]) == ("admission", "lifetime-peers")
    narrowed = p.model_copy(update={"fixes": {36988: p.fixes[36988]}})
    assert probes_of(narrowed) == ("prefill-cleanup",)
    with pytest.raises(BadInput, match=r"unknown fix L1 \(pinned: #36988\)"):
        probes_of(narrowed, [1])


def test_base_and_head_are_pinned_together(tmp_path):
    text = _mutate('head = "8f3d6944b76c428d884582cb6c82a39db1465360"\n', "")
    with pytest.raises(BadInput, match="base and head are pinned together"):
        pins.load(_write(tmp_path, text))


def _write(tmp_path, text):
    path = tmp_path / "pins.toml"
    path.write_text(text)
    return path


def _mutate(old, new):
    text = PROJECT_PINS.read_text()
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    "text, expected",
    [
        (_mutate('base = "9c254df8cdbe99ef5f58e7fcd932da052f258538"', 'base = "not-a-sha"'), "fixes.36988.base: must be a lower-case hex commit SHA"),
        (_mutate('probes = ["admission"]', 'probes = ["nonsense"]'), "fixes.38935.probes: unknown probe 'nonsense'"),
        (_mutate('probes = ["admission"]', "probes = []"), "fixes.38935.probes:"),
        (_mutate('title = "Clean up aborted prefill results"\n', ""), "fixes.36988.title: required key is missing"),
        (_mutate("schema_version = 1", "schema_version = 2"), "schema_version:"),
        (_mutate('upstream = "https://github.com/sgl-project/sglang"', 'upstream = "ext::sh -c x"'), "upstream: git source"),
        (_mutate('package_dir = "python/sglang"', 'package_dir = "../sglang"'), "package_dir:"),
        (_mutate('[fixes.36988]', '[fixes.36988]\ncolour = "red"'), "fixes.36988.colour: unknown key"),
        (_mutate('releases = { without = "0.5.19", with = "0.5.20" }', 'releases = { without = "0.5.1", with = "0.5.20" }'), "0.5.1 is not listed"),
        (_mutate('[fixes.36988]', '[fixes.abc]'), "fixes.abc"),
        (_mutate('releases = { without = "0.5.20", with = "0.5.21" }\n\n# Read in 0.5.21',
                 'releases = { without = "0.5.2", with = "0.5.21" }\n\n# Read in 0.5.21'),
         "fixes.40645.duties[0].releases: 0.5.2 is not listed"),
        (_mutate("schema_version = 1", "schema_version = 1\n[[["), "not valid TOML"),
    ],
)
def test_malformed_pins_give_one_line_naming_file_and_key(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(BadInput) as info:
        pins.load(path)
    message = info.value.message
    assert message.startswith(str(path) + ": ")
    assert expected in message
    assert "\n" not in message


def test_missing_pins_file(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        pins.load(tmp_path / "absent.toml")


def test_unknown_fix_number():
    with pytest.raises(BadInput, match=r"unknown fix #12345 \(pinned: L1, L2, L3, L4, L5, L6, #36988, #38935, #39500, #40645, #41023, #41402, #41404\)"):
        pins.load(PROJECT_PINS).fix(12345)


def test_the_pinned_duty_brackets_are_what_the_committed_release_line_shows():
    """Each part of a fix pinned at another release than the fix (issue 40) is reproduced, case by case,
    by the committed release-line bundle's receipts; and the whole fix's bracket stays later."""
    from runner.commands.sweep import version_key
    from runner.evidence.receipts import Receipt
    from runner.judge import duty_windows
    p = pins.load(PROJECT_PINS)
    root = next((PROJECT_PINS.parent / "evidence").glob("release-line-*"))
    pinned = [(n, d) for n, f in p.fixes.items() for d in f.duties]
    assert {n for n, _ in pinned} == {40645, 41402, 41404}
    for n, d in pinned:
        cases = [[c for probe in p.fixes[n].probes
                  for c in Receipt.model_validate_json((root / "receipts" / f"sglang-{version}.{probe}.json").read_bytes()).cases]
                 for version in (d.releases.without, d.releases.with_)]
        assert duty_windows.bracket(d.duties, d.cases, *cases) == [], (n, d.title)
        assert version_key(d.releases.with_) < version_key(p.fixes[n].releases.with_)


_LOCAL = """
[fixes.7]
title = "A defence found in a release"
summary = "Found by sweeping the releases."
releases = { without = "0.5.22", with = "0.5.23" }
probes = ["admission"]
"""


@pytest.mark.parametrize("extra, expected", [
    (_LOCAL, "fixes.7: local = true exactly for ids 1-999"),  # a small id not marked local
    (_LOCAL.replace("[fixes.7]", "[fixes.40000]\nlocal = true"), "fixes.40000: local = true exactly for ids 1-999"),
    (_LOCAL.replace("[fixes.7]", "[fixes.0]\nlocal = true"), "fixes.0: a fix id is a positive integer"),
    (_LOCAL.replace("[fixes.7]", "[fixes.-3]\nlocal = true"), "fixes.-3: a fix id is a positive integer"),
])
def test_local_ids_are_exactly_the_ids_under_1000(tmp_path, extra, expected):
    """A defence with no upstream PR number gets a local id 1-999 marked ``local = true``; an id under 1000
    not marked local (it would be read as upstream's #7), or a PR number marked local, is refused."""
    with pytest.raises(BadInput) as info:
        pins.load(_write(tmp_path, PROJECT_PINS.read_text() + extra))
    assert expected in info.value.message and "\n" not in info.value.message


def test_a_local_fix_is_named_l_n_wherever_it_is_named(tmp_path):
    p = pins.load(_write(tmp_path, PROJECT_PINS.read_text() + _LOCAL.replace("[fixes.7]", "[fixes.7]\nlocal = true")))
    assert p.fixes[7].local and not p.fixes[38935].local
    with pytest.raises(BadInput, match=r"unknown fix L8 \(pinned: (L\d+, )*L7, #36988, .*#41404\)"):
        p.fix(8)
    assert probes_of(p, [7]) == ("admission",)
