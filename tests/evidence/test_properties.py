"""Property-based tests (hypothesis) over everything diffprobe parses from users: pins.toml, source
specs and bundles. Whatever the input, the answer is a value or one BadInput line, never a crash;
an altered bundle never verifies as intact."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from runner.evidence import bundle, pins, receipts
from runner.store import specs
from runner.errors import BadInput, DiffprobeError
from tests.helpers import case, receipt

PROJECT_PINS = (Path(__file__).resolve().parents[2] / "pins.toml").read_text()
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- pins.toml ----------------------------------------------------------------------------------

TOML_ALPHABET = st.sampled_from(list('[]{}="., \n#\'\\-_01abcfiorstuxz') + ["\x00", "é", "fixes", "schema_version", "true"])
toml_ish = st.lists(TOML_ALPHABET, max_size=80).map("".join)


@st.composite
def mutated_pins(draw) -> str:
    """The project's own pins.toml with one edit: a slice cut, text inserted, or a line replaced."""
    text = PROJECT_PINS
    at = draw(st.integers(0, len(text)))
    kind = draw(st.sampled_from(["cut", "insert", "line"]))
    if kind == "cut":
        return text[:at] + text[at + draw(st.integers(1, 200)):]
    if kind == "insert":
        return text[:at] + draw(st.one_of(toml_ish, st.text(max_size=20))) + text[at:]
    lines = text.splitlines(keepends=True)
    i = draw(st.integers(0, len(lines) - 1))
    return "".join(lines[:i] + [draw(toml_ish) + "\n"] + lines[i + 1:])


def _load_pins(text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "pins.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            pins.load(path)
        except BadInput as e:
            assert e.message.startswith(f"{path}: ") and "\n" not in e.message and "\r" not in e.message


@FAST
@given(toml_ish)
def test_any_toml_ish_text_loads_or_is_one_bad_input_line_naming_the_file(text):
    _load_pins(text)


@FAST
@given(mutated_pins())
def test_any_mutation_of_the_project_pins_loads_or_is_one_bad_input_line(text):
    _load_pins(text)


# --- source specs -------------------------------------------------------------------------------

SPEC_ALPHABET = st.sampled_from(list("-@:/.~^_ \t\nAaz09+=#") + ["git+", "pypi:", "path:", "sglang==", "::", "ext::", "https://",
                                                                   "ssh://", "file://", "..", "--upload-pack=x", "-o", "git@h:",
                                                                   "#ref=", "refs/", "refs/pull/1/head"])
spec_ish = st.lists(SPEC_ALPHABET, max_size=12).map("".join)


def _option_like(value: str) -> bool:
    host = value.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1] if "://" in value else ""
    return value.startswith("-") or host.startswith("-") or "::" in value or any(c.isspace() or ord(c) < 32 for c in value)


@FAST
@given(st.one_of(spec_ish, st.text(max_size=40), spec_ish.map(lambda s: "git+" + s)))
def test_any_string_is_a_valid_spec_or_one_bad_input_line(text):
    try:
        spec = specs.parse(text)
    except BadInput as e:
        assert "\n" not in e.message
        return
    if isinstance(spec, specs.GitSpec):
        assert not _option_like(spec.url) and not _option_like(spec.rev)
        assert ".." not in spec.rev
        if spec.ref is not None:  # a refspec source: never an option, a second refspec or a forced update
            assert spec.ref.startswith("refs/") and not _option_like(spec.ref) and not set(":+*") & set(spec.ref)
        assert specs.parse(str(spec)) == spec
    elif isinstance(spec, specs.PathSpec):
        assert spec.dir and not any(ord(c) < 32 for c in spec.dir)
    else:
        assert specs.parse(str(spec)) == spec


# --- bundles ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> Path:
    base = receipt("0.5.20", [case("rejected", bug=True), case("valid", role="guard")])
    head = receipt("0.5.21", [case("rejected"), case("valid", role="guard")])
    diff = receipts.differential(38935, "t", ["admission"], [(bundle.receipt_name(base), base)],
                                 [(bundle.receipt_name(head), head)], "fix observed")
    root = bundle.write(tmp_path_factory.mktemp("b") / "bundle", kind="run", created_at="2026-11-30T00:00:00Z",
                        receipts=[base, head], differentials=[diff], pins_sha256=None)
    assert bundle.verify(root) == []
    return root


FILES = ["SHA256SUMS", "bundle.json", "differentials/fix-38935.json", "receipts/sglang-0.5.20.admission.json",
         "receipts/sglang-0.5.21.admission.json"]


@st.composite
def damage(draw):
    """One alteration of a bundle: a byte changed, a file cut short, a file added, a manifest line
    appended or a file removed."""
    name = draw(st.sampled_from(FILES))
    kind = draw(st.sampled_from(["flip", "truncate", "extra", "manifest-line", "remove"]))
    if kind == "flip":
        return kind, name, (draw(st.floats(0, 1, exclude_max=True)), draw(st.integers(1, 255)))
    if kind == "truncate":
        return kind, name, draw(st.floats(0, 1, exclude_max=True))
    if kind == "extra":
        return kind, draw(st.sampled_from(["x.json", "receipts/x.json", "differentials/fix-1.json", ".hidden"])), draw(st.binary(max_size=20))
    if kind == "manifest-line":
        return kind, "SHA256SUMS", draw(st.one_of(st.text(max_size=80), st.just("0" * 64 + "  ../outside"),
                                                  st.just("0" * 64 + "  receipts/x.json")))
    return kind, name, None


def _apply(root: Path, kind: str, name: str, arg) -> None:
    path = root / name
    if kind != "extra" and not (path.is_file() and path.stat().st_size):  # emptied or removed by an earlier damage
        return
    if kind == "flip":
        data = bytearray(path.read_bytes())
        offset, mask = arg
        data[int(offset * len(data))] ^= mask
        path.write_bytes(bytes(data))
    elif kind == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: int(arg * len(data))])
    elif kind == "extra":
        path.write_bytes(arg)
    elif kind == "manifest-line":
        with open(path, "a", encoding="utf-8", errors="surrogatepass") as f:
            f.write(arg + "\n")
    else:
        path.unlink()


def _contents(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(damage(), min_size=1, max_size=3))
def test_an_altered_bundle_never_verifies_and_never_crashes(intact, damages):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "bundle"
        shutil.copytree(intact, root)
        for kind, name, arg in damages:
            _apply(root, kind, name, arg)
        assume(_contents(root) != _contents(intact))  # two flips of one byte undo each other
        try:
            problems = bundle.verify(root)
        except BadInput as e:
            assert "\n" not in e.message
            problems = [e.message]
        assert problems, damages
        with pytest.raises(DiffprobeError) as info:
            bundle.load(root)
        assert info.value.exit_code in (1, 2)
