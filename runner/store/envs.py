"""Probe environments: one shared dependency layer per lock, one thin virtualenv per tree.

The layer (CPU torch plus the lock in ``runner/data/cpu-lock.txt``) is a virtualenv built once per
(lock digest, interpreter) and never holds sglang. A tree's environment is a ``--no-seed``
virtualenv whose single ``.pth`` file puts, in this order, the tree, the layer's site-packages and
the stand-in finder on ``sys.path``: that tree's sglang is the only one importable, and a second
tree costs a few seconds (the host puts the tree's byte-code into the environment's overlay of the
tree when it builds it, compiling only modules whose bytes no earlier tree had:
runner/store/bytecode.py). Both are built under a scratch name and renamed when complete, then
described by a stamp; an entry without a valid stamp does not exist. Both are read-only to every
run (runner/sandbox/). Both are also sealed (runner/store/seal.py), and the seal is checked before
use: a file added or changed since, a planted ``.pth`` or byte-code, makes a tree's environment
damaged, and it is rebuilt; the shared layer (73 000 entries, 2.4 GiB, shared by every run) is
refused with one line instead, since rebuilding it under other runs would break them.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pydantic import BaseModel, ConfigDict

from runner.store.cache import USED, Store, read_model, write_model
from runner.errors import BadInput, Infrastructure
from runner.files import building_dir, digest_name, sha256_bytes, sha256_file
from runner.store.procs import run_logged
from runner.store.seal import seal
from runner.store import bytecode, torch_source, uv
from runner.store.torch_source import TorchRecord, TorchSource
from runner.store.pypi import WHEEL_TAG
from runner.store.trees import PKG, Tree
from runner.standins.cpu_standins import DECLARED as DECLARED_STANDINS, STANDINS as STANDIN_MODULES

LOCK = Path(__file__).resolve().parents[1] / "data" / "cpu-lock.txt"
STANDINS = Path(__file__).resolve().parents[1] / "standins" / "cpu_standins.py"
FORMAT = 2  # bump when the layout of layers changes (2: torch installed alone from a recorded source)
# Which layer serves which trees, and why; recorded in every layer stamp.
CHOICE = (
    "one shared layer for every tree: the lock's CPU torch serves releases whose metadata pins older torch "
    "(2.5.1 in 0.4.5 onward); a tree's import check decides whether its code runs with it, and private torch "
    "queries renamed since are answered by this torch under their old names (runner/standins)"
)
ENV_FORMAT = 4  # bump when the layout of a tree's environment changes (2: byte-code overlay, 3: compiled by the host, sealed,
# 4: checked-hash byte-code from the byte-code store)
# What a seal leaves out: the stamp that holds it, and the store's last-used marker (gc), which
# every use touches. Neither is code a run could load.
STAMPS = ("env.json", USED)
LAYER_STAMPS = ("layer.json", USED)


class Interpreter(BaseModel):
    model_config = ConfigDict(frozen=True)
    executable: str
    implementation: str  # "CPython"
    version: str  # "3.11.7"
    tag: str  # "cp311"
    machine: str
    # Which byte-code it reads: ``sys.implementation.cache_tag`` and ``importlib.util.MAGIC_NUMBER``
    # (hex). Empty only in stamps written before they were recorded.
    cache_tag: str = ""  # "cpython-311"
    magic: str = ""  # "a70d0d0a"

    @property
    def bytecode_key(self) -> str:
        """Its byte-code store (runner/store/bytecode.py): the cache tag names the implementation and
        its version, the magic number the byte-code format (which changes within a version's pre-releases)."""
        return f"{self.cache_tag}-{self.magic}"


class StandinRecord(BaseModel):
    declared: dict[str, str]  # module -> why it is a stand-in
    sha256: str  # of the stand-in module's source
    tree_lacks: list[str]  # compiled modules this tree does not carry (git checkouts)


class LayerStamp(BaseModel):
    format: int
    key: str
    lock_sha256: str
    interpreter: Interpreter
    site_packages: str  # relative to the layer directory
    packages: list[str]
    torch: TorchRecord  # where the CPU torch came from: source, URL, sha256
    choice: str  # which layer this is and why (CHOICE)
    seal: str | None = None  # runner/store/seal.py; None: built before layers were sealed
    installer: str = "pip"  # what installed the lock (runner/store/uv.py): "uv X.Y.Z"; layers built before say pip


class EnvStamp(BaseModel):
    format: int
    key: str
    tree_digest: str
    layer_key: str
    lock_sha256: str
    interpreter: Interpreter
    standins: StandinRecord
    notes: list[str]
    seal: str
    bytecode: bytecode.BytecodeRecord


@dataclass(frozen=True)
class Env:
    root: Path
    stamp: EnvStamp
    tree: Tree  # the stored tree its overlay links to (its files, as the store verified them)
    layer: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def base_prefix(self) -> Path:
        """The installation of the interpreter this virtualenv runs (``pyvenv.cfg``)."""
        for line in (self.root / "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "base-prefix":
                return Path(value.strip())
        return Path(os.path.realpath(self.python)).parents[1]

    @property
    def read_only(self) -> list[Path]:
        """What a run in this environment must see: the interpreter, the layer, the tree, itself."""
        return [self.base_prefix, self.layer, self.tree.root, self.root]

    @property
    def hidden(self) -> list[Path]:
        """Site-packages of the interpreter's installation (diffprobe itself may live there):
        never on an environment's path, never visible to a run."""
        prefixes = {self.base_prefix, Path("/usr"), Path("/usr/local")}
        return sorted(Path(p) for prefix in prefixes for pattern in ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages")
                      for p in glob.glob(str(prefix / pattern)))


_QUERY = (
    "import importlib.util,json,platform,sys;"
    "print(json.dumps({'implementation':platform.python_implementation(),'version':platform.python_version(),"
    "'tag':sys.implementation.cache_tag.replace('cpython-','cp'),'machine':platform.machine(),"
    "'cache_tag':sys.implementation.cache_tag,'magic':importlib.util.MAGIC_NUMBER.hex()}))"
)


def interpreter(spec: str | None) -> Interpreter:
    """The recorded interpreter choice: ``--python`` (a path or a name on PATH), default the running one."""
    exe = spec or sys.executable
    found = exe if os.path.sep in exe else shutil.which(exe)
    if not found or not Path(found).exists():
        raise BadInput(f"--python {exe}: no such interpreter")
    try:
        out = subprocess.run([found, "-I", "-c", _QUERY], capture_output=True, text=True, timeout=60, check=True).stdout
    except (subprocess.SubprocessError, OSError) as e:
        raise BadInput(f"--python {exe}: cannot run it ({e})") from None
    return Interpreter(executable=str(Path(found).absolute()), **json.loads(out))


def lock_sha256() -> str:
    return sha256_file(LOCK)


def _lock_packages() -> list[str]:
    return [line.strip() for line in LOCK.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _torch_requirement(packages: list[str]) -> str:
    found = [p for p in packages if re.match(r"torch==", p)]
    if len(found) != 1:
        raise Infrastructure(f"{LOCK}: expected one torch==VERSION line, found {len(found)}")
    return found[0]


def _layer(cache: Store, interp: Interpreter, torch: Sequence[TorchSource] = torch_source.DEFAULT) -> tuple[Path, LayerStamp]:
    """The shared dependency layer for this lock and interpreter, built if absent.

    ``torch``: where CPU torch may come from (the command resolves it: ``torch_source.candidates``). The layer is
    keyed by what it holds, not by where it came from: an existing layer is kept, and a source
    named now but not used is said so.
    """
    sources = list(torch)
    lock = lock_sha256()
    key = layer_key(interp)
    final = cache.layer(key)
    stamp = read_model(final / "layer.json", LayerStamp)
    if stamp and stamp.key == key and (final / stamp.site_packages).is_dir():
        _check_seal(cache, final, stamp)
        named = sources[0] if sources[0].chosen_by != "default" else None
        if named and named.location != stamp.torch.source.location:
            cache.notices.warn(f"layer {key} already holds {stamp.torch.requirement} from {torch_source.describe(stamp.torch.source)}; "
                    f"{named.chosen_by} {named.location} not used (remove {final} to rebuild from it)")
        return final, stamp
    if final.exists():
        cache.notices.warn(f"dependency layer {final} is incomplete or damaged; rebuilding it")
        shutil.rmtree(final)
    packages = _lock_packages()
    requirement = _torch_requirement(packages)
    log = cache.log(f"layer-{key}.log")
    with building_dir(final) as scratch:
        _virtualenv(interp, scratch, seed=True, log=log, step="create the dependency layer's virtualenv")
        with cache.notices.step(f"install {requirement} from {' or '.join(torch_source.describe(s) for s in sources)}"):
            record = torch_source.install(scratch / "bin" / "python", requirement, sources, cache.log(f"layer-{key}-torch"))
        cache.notices.say(f"CPU torch {record.version} from {torch_source.describe(record.source)}: {record.url} "
                          f"(sha256 {record.sha256[:16]}…)")
        with cache.notices.step(f"install {len(packages)} locked packages into the shared layer (uv)"):
            python = scratch / "bin" / "python"
            argv, env = uv.install_command(python, LOCK, uv.pip_settings(python), scratch / ".uv-cache", environ=os.environ)
            run_logged(argv, step="install the locked dependency layer", log=log, env=env)
            shutil.rmtree(scratch / ".uv-cache")
        site = _site_packages(scratch / "bin" / "python").relative_to(scratch)
        write_model(scratch / "layer.json", LayerStamp(
            format=FORMAT, key=key, lock_sha256=lock, interpreter=interp, site_packages=str(site), packages=packages,
            torch=record, choice=CHOICE, seal=seal(scratch, exclude=LAYER_STAMPS), installer=uv.version(),
        ))
    return final, read_model(final / "layer.json", LayerStamp)


# Layers whose seal held in this process, and which seal: checked again only after a run that
# could write into them (an unsandboxed one: execute.run_isolated clears this). Sealing the layer
# costs 0.4 s of CPU (73 000 stat calls), 5% of a tree's harness run; a sweep pays it once.
LAYERS_CHECKED: set[tuple[Path, str]] = set()


def _check_seal(cache: Store, root: Path, stamp: LayerStamp) -> None:
    """Refuse a layer altered since it was sealed; seal, as found, one built before layers were."""
    if (root, stamp.seal) in LAYERS_CHECKED:
        return
    found = seal(root, exclude=LAYER_STAMPS)
    if stamp.seal is None:
        cache.notices.warn(f"dependency layer {root} was built without a seal; sealed as it is now")
        write_model(root / "layer.json", stamp.model_copy(update={"seal": found}))
    elif found != stamp.seal:
        raise Infrastructure(f"dependency layer {root} was altered since it was sealed (a planted .pth or byte-code?); "
                             "no tree runs with it: remove it to have it rebuilt")
    LAYERS_CHECKED.add((root, found))


def _virtualenv(interp: Interpreter, dest: Path, *, seed: bool, log: Path, step: str) -> None:
    argv = [sys.executable, "-m", "virtualenv", "--quiet", "--no-download", "--no-periodic-update",
            "--python", interp.executable, *([] if seed else ["--no-seed"]), str(dest)]
    run_logged(argv, step=step, log=log)


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-I", "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def _notes(tree: Tree, interp: Interpreter) -> list[str]:
    """What the user must know about this pairing of tree and interpreter."""
    notes = []
    py, impl, abi, _ = WHEEL_TAG
    compiled = tree.compiled_modules
    if compiled and (interp.implementation != "CPython" or interp.tag != abi):
        notes.append(
            f"{interp.implementation} {interp.version} cannot load this tree's {len(compiled)} compiled modules "
            f"(built for {abi}); where imported they are served by stand-ins"
        )
    return notes


def _tree_lacks(tree: Tree) -> list[str]:
    """Declared compiled stand-ins that the tree does not carry itself (a git checkout has none)."""
    compiled = {p.split(".", 1)[0].replace("/", ".") for p in tree.compiled_modules}
    roots = [m for m in STANDIN_MODULES if m.startswith("sglang.")]
    return [m for m in roots if not any(c.startswith(m + ".") for c in compiled)]


def _overlay(tree: Tree, dest: Path) -> None:
    """Mirror the tree's package as directories of symlinks to its files: exactly the regular files
    the store verified (``tree.files``), nothing found by walking it.

    Python looks for byte-code next to the path it imports from, so the byte-code compiled for the
    overlay lives in this environment and never in the verified tree (whose stored copy must hold
    source only), and no run recompiles SGLang.
    """
    made: set[Path] = set()
    for rel in tree.files:
        target = dest / rel
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        target.symlink_to(tree.root / rel)


def _env(tree: Tree, cache: Store, interp: Interpreter, torch: Sequence[TorchSource] = torch_source.DEFAULT) -> Env:
    """The environment for ``tree``: reused when its stamp is valid, built otherwise."""
    layer_root, layer_stamp = layer(cache, interp, torch)
    standins_sha = sha256_file(STANDINS)
    key = sha256_bytes(f"{ENV_FORMAT}\n{tree.identity.tree_digest}\n{layer_stamp.key}\n{standins_sha}\n{interp.executable}".encode())[:16]
    final = cache.env(key)
    stamp = read_model(final / "env.json", EnvStamp)
    if stamp and stamp.key == key and (final / "bin" / "python").exists() and stamp.seal == seal(final, exclude=STAMPS):
        return Env(final, stamp, tree, layer_root)
    if final.exists():
        cache.notices.warn(f"environment {final} is incomplete, damaged or altered since it was sealed (a planted .pth or byte-code?); rebuilding it")
        shutil.rmtree(final)
    with building_dir(final) as scratch:
        _virtualenv(interp, scratch, seed=False, log=cache.log(f"env-{key}.log"), step="create the tree's virtualenv")
        shutil.copytree(STANDINS.parent, scratch / "standins", ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
        site = _site_packages(scratch / "bin" / "python")
        # The venv is renamed into place, so every path it writes must point at the final name.
        standins_dir = final / "standins"
        _overlay(tree, scratch / "tree")
        (site / "diffprobe.pth").write_text(
            f"{final / 'tree'}\n"
            f"import site; site.addsitedir({str(layer_root / layer_stamp.site_packages)!r})\n"
            f"{standins_dir}\n"
            "import cpu_standins; cpu_standins.install()\n"
        )
        modules = [scratch / "tree" / rel for rel in tree.files if rel.endswith(".py")] + sorted((scratch / "standins").glob("*.py"))
        compiled = bytecode.fill(cache, interp.bytecode_key, interp.cache_tag, scratch / "bin" / "python", modules,
                                 cache.log(f"env-{key}-compile.log"))
        stamp = EnvStamp(
            format=ENV_FORMAT, key=key, tree_digest=tree.identity.tree_digest, layer_key=layer_stamp.key,
            lock_sha256=layer_stamp.lock_sha256, interpreter=interp,
            standins=StandinRecord(declared=DECLARED_STANDINS, sha256=standins_sha, tree_lacks=_tree_lacks(tree)),
            notes=_notes(tree, interp), seal=seal(scratch, exclude=STAMPS), bytecode=compiled,
        )
        write_model(scratch / "env.json", stamp)
    return Env(final, stamp, tree, layer_root)


def layer_key(interp: Interpreter) -> str:
    return sha256_bytes(f"{FORMAT}\n{lock_sha256()}\n{interp.implementation}\n{interp.tag}\n{interp.machine}".encode())[:16]


def layer(cache: Store, interp: Interpreter, torch: Sequence[TorchSource] = torch_source.DEFAULT) -> tuple[Path, LayerStamp]:
    """The shared dependency layer for this lock and interpreter (``_layer``), built by one process
    at a time: a second run wants the same 1.4 GiB layer waits for it instead of building it too."""
    final = cache.layer(layer_key(interp))
    with cache.lock(final):
        root, stamp = _layer(cache, interp, torch)
        if not runs(root / "bin" / "python"):
            cache.notices.warn(f"dependency layer {root}: its interpreter no longer runs; rebuilding it")
            shutil.rmtree(root)
            root, stamp = _layer(cache, interp, torch)
    cache.used(root)
    return root, stamp


def env(tree: Tree, cache: Store, interp: Interpreter, torch: Sequence[TorchSource] = torch_source.DEFAULT) -> Env:
    """The environment for ``tree`` (``_env``), built by one process at a time and checked healthy
    before use, as pre-commit does: its interpreter runs and what it links to (the stored tree, the
    layer) is still there; otherwise it is rebuilt."""
    with cache.lock(cache.env(f"tree-{digest_name(tree.identity.tree_digest)[:16]}")):
        environment = _env(tree, cache, interp, torch)
        if not healthy(cache, environment):
            cache.notices.warn(f"environment {environment.root} no longer runs (its interpreter, tree or layer is gone); rebuilding it")
            shutil.rmtree(environment.root)
            environment = _env(tree, cache, interp, torch)
    cache.used(environment.root)
    return environment


def runs(python: Path) -> bool:
    try:
        return subprocess.run([str(python), "-I", "-B", "-c", ""], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def healthy(cache: Store, environment: Env) -> bool:
    links = [environment.root / "tree" / PKG / "__init__.py", cache.layer(environment.stamp.layer_key)]
    return all(p.exists() for p in links) and runs(environment.python)


def scrubbed_env(home: Path | None = None) -> dict[str, str]:
    """What a probed tree's process may see of ours: nothing but a minimal, fixed environment.

    No proxies, tokens or credentials, no PYTHON* variables (every tree process runs ``-I``, which
    ignores them anyway: a ``PYTHONHASHSEED`` here never took effect); one thread per library so
    that runs are comparable. String hashing stays randomised per run, as in production: a fixed
    seed would be one more thing a tree could read (``sys.flags``) to tell it is probed, and
    ``--repeat`` shows an observation that depends on it. The C heap on transparent huge pages
    (``glibc.malloc.hugetlb=1``, where the kernel's THP mode is ``madvise``): a harness forks one process
    per case from ~420 MiB of imported memory, and page tables of 2 MiB pages make each fork and exit
    cheaper (0.5.21, 170 cases two at a time: ~85 -> ~75 ms of CPU a case, the same observations;
    docs/performance.md). Only where memory lands changes, never what a tree computes.
    """
    env = {
        "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "NO_PROXY": "*",
    }
    if home is not None:
        env["HOME"] = env["TMPDIR"] = str(home)
    return env
