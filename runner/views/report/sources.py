"""What each observed source is, in words a newcomer recognises: a release, a commit, a directory, a
live server or a model; every field that pins it down; the stand-ins and the sandbox of its run."""

from __future__ import annotations

from runner.evidence import receipts
from runner.evidence.receipts import TREE_KINDS, Limits, Receipt, Source
from runner.store.sources import TreeIdentity


def describe(source: Source) -> str:
    """One line a newcomer recognises: which release, commit, directory, server or model."""
    if source.kind == "pypi":
        return f"sglang {source.version} (PyPI)"
    if source.kind == "git":
        return f"{source.repo or source.source} @ {(source.commit or '?')[:12]}"
    if source.kind == "path":
        return f"directory {source.path or source.source}"
    if source.kind == "wheel":
        return f"wheel {source.artifact} (sglang {source.version})"
    if isinstance(source, TreeIdentity) and source.image is not None:
        return f"image {source.image.manifest_digest or source.image.config_digest} ({source.source})"
    if source.kind == "server":
        return f"live server {source.url}"
    return source.source


def left_out(names: tuple[str, ...]) -> str:
    """What the source held that was not probed (byte-code, empty directories, a wheel's other members)."""
    if not names:
        return ""
    return f"{len(names)}: " + ", ".join(names[:3]) + (", …" if len(names) > 3 else "")


def identity(source: Source) -> list[tuple[str, str]]:
    """Every field that pins down what was observed, as (label, value)."""
    if isinstance(source, TreeIdentity):
        fields = [("kind", source.kind), ("source", source.source), ("version", source.version),
                  ("commit", source.commit), ("rev", source.rev), ("artifact", source.artifact),
                  ("artifact sha256", source.artifact_sha256), ("tree digest", source.tree_digest),
                  ("files", str(source.files)), ("left out of the tree", left_out(source.left_out))]
        if source.image is not None:
            i = source.image
            fields[2:2] = [("image index", i.index_digest), ("image manifest", i.manifest_digest),
                           ("image config", i.config_digest), ("image layers with the package", ", ".join(i.layers)),
                           ("package in the image", f"/{i.package} (Python {i.python or 'unknown'})")]
    elif source.kind == "server":
        fields = [("kind", "server (live gate)"), ("source", source.source), ("url", source.url),
                  ("reported", ", ".join(f"{k}={v}" for k, v in sorted(source.reported.items())))]
    else:
        on = [k for k, v in sorted(source.switches.items()) if v]
        fields = [("kind", "model (synthetic state machine)"), ("source", source.source),
                  ("switches on", ", ".join(on) or "none")]
    if not isinstance(source, TreeIdentity):
        fields.append(("identity digest", receipts.source_key(source)))
    return [(k, v) for k, v in fields if v]


def standins(r: Receipt) -> list[str]:
    """Declared stand-ins this run imported, each with why it stands in (not every submodule)."""
    s = r.environment.standins
    if s is None:
        return []
    hit = lambda name: any(u == name or u.startswith(name + ".") for u in s.used)  # noqa: E731
    named = [f"{name} ({why})" for name, why in sorted(s.declared.items()) if hit(name)]
    undeclared = sorted({u.split(".")[0] for u in s.used if not any(u == d or u.startswith(d + ".") for d in s.declared)})
    return named + [f"{u} (undeclared)" for u in undeclared]


# Model and gate receipts are labelled for what they are, never as CPU differentials: (short, long).
WHAT = {
    "model": ("executable model", "executable model: a synthetic state machine of PD serving, not SGLang code; "
                                  "not CPU-differential evidence"),
    "server": ("live-server gate", "live-server gate: answers of a running deployment, not a code-path "
                                   "differential; not CPU-differential evidence"),
    "tree": ("CPU probe", "CPU probe of a pinned SGLang tree with recording doubles"),
}


def what_it_is(source: Source, short: bool = False) -> str:
    return WHAT["tree" if source.kind in TREE_KINDS else source.kind][0 if short else 1]


def sandbox(r: Receipt) -> tuple[str, bool]:
    """How the run was isolated, and whether that is the sandbox (README, \"Threat model\")."""
    i = r.environment.isolation
    if i is None:
        return "not recorded (before the sandbox)", False
    if not i.sandboxed:
        return "UNSANDBOXED: the tree's code ran with the user's rights", False
    return f"bubblewrap {i.version} ({', '.join(i.namespaces)} namespaces; writable: {', '.join(i.writable)}; {resources(i.limits)})", True


def resources(found: Limits) -> str:
    """The resource limits a run was under, in a few words (those not in force are not named)."""
    gib = 1 << 30
    words = [f"memory {found.memory / gib:g} GiB" if found.memory else "",
             f"{found.processes} processes" if found.processes else "",
             f"{found.address_space / gib:g} GiB address space" if found.address_space else "",
             f"files up to {found.file_size / gib:g} GiB" if found.file_size else "",
             f"{found.open_files} open files" if found.open_files else ""]
    return "limits: " + (", ".join(w for w in words if w) or "none recorded")
