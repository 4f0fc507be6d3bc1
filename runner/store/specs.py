"""The one source syntax: ``git+URL_OR_PATH@REV[#ref=REF]``, ``pypi:sglang==VERSION``, ``path:DIR``,
``wheel:FILE.whl`` and the container images ``oci:DIR[@TAG|@sha256:HEX]``, ``docker-archive:FILE.tar``,
``registry:HOST/NAME[:TAG|@sha256:HEX]``.

Parsing is pure and strict. Everything a git source carries ends up on a git command line, so
anything that could be read as an option or a command transport is refused here, before any
process starts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from runner.errors import BadInput

_REV = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/~^-]*$")
_REF = re.compile(r"^refs/[A-Za-z0-9_-][A-Za-z0-9._/-]*$")
_REF_KEY = "#ref="
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*([.+_-]?[A-Za-z0-9]+)*$")
_SAFE_SCHEMES = ("https://", "http://", "ssh://", "git://", "file://")
# scp-like ssh syntax: user@host:path (no scheme, a colon before any slash)
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[A-Za-z0-9._/~-]+$")
PACKAGE = "sglang"
# The syntax as help texts and errors show it (one place: every command that takes a source says it).
SYNTAX = (f"git+URL_OR_PATH@REV[#ref=REF], pypi:{PACKAGE}==VERSION, path:DIR, wheel:FILE.whl, "
          "oci:DIR[@TAG|@sha256:HEX], docker-archive:FILE.tar or registry:HOST/NAME[:TAG|@sha256:HEX]")


class GitSpec(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["git"] = "git"
    url: str
    rev: str
    # Where ``rev`` lives outside the remote's heads and tags (a squash-merged PR's head is only under
    # refs/pull/N/head): fetched with them, so the source text alone says how to find the commit.
    ref: str | None = None

    def __str__(self) -> str:
        return f"git+{self.url}@{self.rev}" + (f"{_REF_KEY}{self.ref}" if self.ref else "")


def pull_request(url: str, rev: str, number: int) -> str:
    """The source text of ``rev`` as a commit of pull request ``number`` of ``url``."""
    return str(GitSpec(url=url, rev=rev, ref=f"refs/pull/{number}/head"))


class PypiSpec(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["pypi"] = "pypi"
    version: str

    def __str__(self) -> str:
        return f"pypi:{PACKAGE}=={self.version}"


class PathSpec(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["path"] = "path"
    dir: str

    def __str__(self) -> str:
        return f"path:{self.dir}"


class WheelSpec(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["wheel"] = "wheel"
    file: str

    def __str__(self) -> str:
        return f"wheel:{self.file}"


class ImageSpec(BaseModel):
    """A container image: ``where`` is the layout directory (oci), the archive (docker-archive) or
    ``HOST/NAME`` (registry); ``tag`` or ``digest`` picks one image of it (a registry's default tag:
    ``latest``)."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["oci", "docker-archive", "registry"]
    where: str
    tag: str | None = None
    digest: str | None = None

    def __str__(self) -> str:
        pick = f"@{self.digest}" if self.digest else f"{':' if self.kind == 'registry' else '@'}{self.tag}" if self.tag else ""
        return f"{self.kind}:{self.where}{pick}"


Spec = GitSpec | PypiSpec | PathSpec | WheelSpec | ImageSpec
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# a registry host (a name or an IPv4 address, an optional port) and a repository path, as the
# distribution spec spells them: nothing skopeo could read as an option or another transport
_HOST = re.compile(r"^(localhost|[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+)(:[0-9]{1,5})?$")
_REPO = re.compile(r"^[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$")


def _local(text: str, body: str, what: str) -> str:
    if not body:
        raise BadInput(f"source {text!r}: {what}")
    if any(ord(c) < 32 for c in body):
        raise BadInput(f"source {text!r}: refused, control characters in a path")
    return body


def _image(text: str, kind: str, body: str) -> ImageSpec:
    if kind == "registry":
        host, _, repo = body.partition("/")
        repo, at, digest = repo.partition("@")
        tag = None
        if not at and ":" in repo:
            repo, _, tag = repo.rpartition(":")
        if not _HOST.match(host) or not _REPO.match(repo):
            raise BadInput(f"source {text!r}: expected registry:HOST[:PORT]/NAME[:TAG|@sha256:HEX]")
        if at and not DIGEST.match(digest) or tag is not None and not _TAG.match(tag):
            raise BadInput(f"source {text!r}: not a tag or a sha256:HEX digest after the name")
        return ImageSpec(kind="registry", where=f"{host}/{repo}", tag=None if at else tag or "latest",
                         digest=digest if at else None)
    where, at, pick = body.rpartition("@") if kind == "oci" else ("", "", "")
    if not at or not (DIGEST.match(pick) or _TAG.match(pick)):
        where, pick = body, ""
    where = _local(text, where, f"{kind}: needs a {'directory' if kind == 'oci' else 'file'}")
    return ImageSpec(kind=kind, where=where, tag=pick if pick and not DIGEST.match(pick) else None,
                     digest=pick if DIGEST.match(pick) else None)


def parse(text: str) -> Spec:
    text = text.strip()
    kind, colon, body = text.partition(":")
    if colon and kind in ("oci", "docker-archive", "registry"):
        return _image(text, kind, body)
    if text.startswith("wheel:"):
        return WheelSpec(file=_local(text, text[6:], "wheel: needs a .whl file"))
    if text.startswith("git+"):
        body = text[4:]
        if "@" not in body:
            raise BadInput(f"source {text!r}: a git source needs a revision: git+URL_OR_PATH@REV")
        url, rev = body.rsplit("@", 1)
        rev, has_ref, ref = rev.partition(_REF_KEY)
        return GitSpec(url=check_git_url(url), rev=check_rev(rev), ref=check_ref(ref) if has_ref else None)
    if text.startswith("pypi:"):
        req = text[5:]
        name, sep, version = req.partition("==")
        if not sep or name.strip().lower() != PACKAGE or not _VERSION.match(version.strip()):
            raise BadInput(f"source {text!r}: expected pypi:{PACKAGE}==VERSION (an exact release)")
        return PypiSpec(version=version.strip())
    if text.startswith("path:"):
        d = text[5:]
        if not d:
            raise BadInput(f"source {text!r}: path: needs a directory")
        if any(ord(c) < 32 for c in d):
            raise BadInput(f"source {text!r}: refused, control characters in a path")
        return PathSpec(dir=d)
    raise BadInput(f"source {text!r}: expected {SYNTAX}")


def check_git_url(url: str) -> str:
    """Accept a URL with a known network/file scheme, an scp-like ssh address, or a local path.

    Refused: an empty value, anything starting with ``-`` (``--upload-pack=...`` and friends), a
    host starting with ``-`` (ssh would read ``ssh://-oProxyCommand=...`` as an option), any
    ``transport::address`` form (``ext::`` runs a command, ``fd::`` reads a descriptor), control
    characters and whitespace.
    """
    if not url:
        raise BadInput("git source: empty repository URL")
    if url.startswith("-"):
        raise BadInput(f"git source {url!r}: refused, a repository may not start with '-' (option injection)")
    if "::" in url:
        raise BadInput(f"git source {url!r}: refused, 'transport::' forms such as ext:: can run commands")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise BadInput(f"git source {url!r}: refused, whitespace or control characters")
    if url.startswith(_SAFE_SCHEMES) or _SCP_LIKE.match(url):
        authority = url.split("://", 1)[1].split("/", 1)[0] if "://" in url else url.split(":", 1)[0]
        if authority.rsplit("@", 1)[-1].startswith("-"):
            raise BadInput(f"git source {url!r}: refused, a host may not start with '-' (option injection)")
        return url
    if "://" in url:
        raise BadInput(f"git source {url!r}: unsupported scheme (use https, ssh, git, file or a local path)")
    if ":" in url.split("/", 1)[0]:
        raise BadInput(f"git source {url!r}: not a URL, scp-like address or local path")
    return str(local_path(url, f"git source {url!r}"))


def local_path(text: str, what: str) -> Path:
    """``text`` as an absolute path, ``~user`` expanded; an unknown user is bad input, not a crash."""
    try:
        return Path(text).expanduser().resolve()
    except RuntimeError:
        raise BadInput(f"{what}: cannot expand {text.split('/', 1)[0]!r} (no such user)") from None


def check_rev(rev: str) -> str:
    if not rev:
        raise BadInput("git source: empty revision after '@'")
    if rev.startswith("-"):
        raise BadInput(f"git revision {rev!r}: refused, a revision may not start with '-' (option injection)")
    if not _REV.match(rev) or ".." in rev or rev.endswith((".lock", "/", ".")):
        raise BadInput(f"git revision {rev!r}: not a commit, branch or tag name")
    return rev


def check_ref(ref: str) -> str:
    """A ref fetched beside heads and tags: a full ref name under ``refs/``, nothing git could read
    as an option or a second refspec (``:``, ``+``, whitespace), no ``..`` or empty component."""
    if not _REF.match(ref) or ".." in ref or "//" in ref or "/." in ref or ref.endswith((".lock", "/", ".")):
        raise BadInput(f"git ref {ref!r}: not a full ref name (refs/pull/N/head, say)")
    return ref
