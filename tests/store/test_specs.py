import pytest

from runner.store import specs
from runner.errors import BadInput


@pytest.mark.parametrize(
    "text, expected",
    [
        ("git+https://github.com/sgl-project/sglang@8f3d6944", specs.GitSpec(url="https://github.com/sgl-project/sglang", rev="8f3d6944")),
        ("git+ssh://git@example.com/x/sglang.git@v0.5.20", specs.GitSpec(url="ssh://git@example.com/x/sglang.git", rev="v0.5.20")),
        ("git+git@example.com:x/sglang.git@main", specs.GitSpec(url="git@example.com:x/sglang.git", rev="main")),
        ("git+file:///srv/sglang@HEAD~1", specs.GitSpec(url="file:///srv/sglang", rev="HEAD~1")),
        ("git+https://github.com/sgl-project/sglang@8f3d6944#ref=refs/pull/38935/head",
         specs.GitSpec(url="https://github.com/sgl-project/sglang", rev="8f3d6944", ref="refs/pull/38935/head")),
        ("pypi:sglang==0.5.20", specs.PypiSpec(version="0.5.20")),
        ("pypi:SGLang==0.5.10.post1", specs.PypiSpec(version="0.5.10.post1")),
        ("path:/opt/vendor/sglang", specs.PathSpec(dir="/opt/vendor/sglang")),
    ],
)
def test_parse_accepts(text, expected):
    assert specs.parse(text) == expected


def test_local_git_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert specs.parse("git+repo@main").url == str(tmp_path / "repo")


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("git+--upload-pack=x@HEAD", "option injection"),
        ("git+-uhttps://x@HEAD", "option injection"),
        ("git+ext::sh -c touch% /tmp/pwned@HEAD", "ext::"),
        ("git+fd::17@HEAD", "transport::"),
        ("git+https://example.com/x@--output=/tmp/x", "option injection"),
        ("git+https://example.com/x@a..b", "not a commit"),
        ("git+https://example.com/x@", "empty revision"),
        ("git+https://example.com/x", "needs a revision"),
        ("git+https://example.com/x@main#ref=--upload-pack=x", "not a full ref name"),
        ("git+https://example.com/x@main#ref=refs/pull/1/head:refs/heads/main", "not a full ref name"),
        ("git+https://example.com/x@main#ref=+refs/pull/1/head", "not a full ref name"),
        ("git+https://example.com/x@main#ref=pull/1/head", "not a full ref name"),
        ("git+https://example.com/x@main#ref=refs/../heads/x", "not a full ref name"),
        ("git+https://example.com/x@main#ref=", "not a full ref name"),
        ("git+https://example.com/x@main#refs/pull/1/head", "not a commit"),
        ("git+https://exa mple.com/x@HEAD", "whitespace"),
        ("git+gopher://example.com/x@HEAD", "unsupported scheme"),
        ("pypi:torch==2.13.0", "expected pypi:sglang==VERSION"),
        ("pypi:sglang>=0.5", "expected pypi:sglang==VERSION"),
        ("pypi:sglang==", "expected pypi:sglang==VERSION"),
        ("path:", "needs a directory"),
        ("sglang==0.5.20", "expected git+"),
    ],
)
def test_parse_refuses(text, fragment):
    with pytest.raises(BadInput) as info:
        specs.parse(text)
    assert fragment in info.value.message
    assert "\n" not in info.value.message


def test_spec_round_trips():
    for text in ["git+https://example.com/x@abc1234", "git+https://example.com/x@abc1234#ref=refs/pull/7/head",
                 "pypi:sglang==0.5.21", "path:/x"]:
        assert str(specs.parse(text)) == text


def test_a_pull_request_source_names_its_ref():
    text = specs.pull_request("https://github.com/sgl-project/sglang", "8f3d6944", 38935)
    assert text == "git+https://github.com/sgl-project/sglang@8f3d6944#ref=refs/pull/38935/head"
    assert specs.parse(text).ref == "refs/pull/38935/head"
