"""Whether a tree's source defines a dotted name an upstream test asked for.

A test that imports ``sglang.x.y.name``, patches ``sglang.x.Class.attr`` or reads an attribute of one
of the tree's classes fails when the tree has no such thing: the test targets another era of the code,
and its failure says so, not how the tree behaves (SWE-bench counts such a test, missing from the
base's results, as failed at base). The plugin reports what the test asked for
(``probes/pytest_outcomes.py``, ``wanted``); whether the tree lacks it is decided here, from the
stored tree's source, by name: the tree's code does not run, so it cannot answer for itself.

Only a certain absence counts: a module whose file is not in the tree, or a name its module (or a
class and its bases in the tree) never binds. Whatever the source leaves open -- a star import, a
module ``__getattr__``, a class with ``__getattr__``, a base from outside the tree, a name bound to
a value whose attributes only running it would show, a file too large or that does not parse --
is "cannot tell", and the failure keeps the cause it had.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "sglang"
MAX_SOURCE = 8 << 20  # no module of SGLang comes near this; a larger file is not parsed ("cannot tell")
# Bases that add no attribute a test would look up on a class
EMPTY_BASES = {"object", "ABC", "Generic", "Protocol"}
UNKNOWN = object()  # the source leaves it open


@dataclass
class Source:
    """The modules of one tree (``root`` holds ``sglang/``), parsed on demand."""

    root: Path
    parsed: dict[str, ast.Module | None] = field(default_factory=dict)
    _messages: Messages | None = None

    @property
    def messages(self) -> Messages:
        if self._messages is None:
            self._messages = Messages(self.root)
        return self._messages

    def lacks(self, name: str) -> str | None:
        """The first dotted prefix of ``name`` the tree's source certainly does not define, or None
        (defined, or cannot tell)."""
        parts = name.split(".")
        if parts[0] != PACKAGE or not all(p.isidentifier() for p in parts):
            return None
        found = self._resolve(parts, depth=0)
        return None if found is None or found is UNKNOWN else found

    def read(self, path: str) -> bytes | None:
        """A file of the tree by its path under the root (``sglang/...``), within the bound."""
        parts = path.split("/")
        if parts[0] != PACKAGE or any(p in ("", ".", "..") for p in parts):
            return None
        file = self.root.joinpath(*parts)
        if not file.is_file() or file.is_symlink() or file.stat().st_size > MAX_SOURCE:
            return None
        return file.read_bytes()

    def constructor(self, parts: list[str], depth: int = 0) -> tuple[dict[str, str], set[str]] | None:
        """What the constructor chain of the class ``parts`` (dotted, split) assigns to ``self``: every
        name -> ``path:line in Class.__init__``, and the names it assigns whatever the arguments (not
        under a condition or a loop). Its own ``__init__``, then its bases' when it has none or calls
        ``super().__init__``; None when the class is not in the tree's source."""
        found = self._class(parts)
        if found is None or depth > 20:
            return None
        module, cls = found
        every: dict[str, str] = {}
        always: set[str] = set()
        init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is not None:
            for name, (node, unconditional) in _assigned(init).items():
                every[name] = f"{'/'.join(module)}.py:{node.lineno} in {cls.name}.__init__"
                if unconditional:
                    always.add(name)
            if not _calls_super_init(init):
                return every, always
        scope = self._module(module)
        for base in cls.bases:
            dotted = _dotted(base.value if isinstance(base, ast.Subscript) else base)
            binding = _bindings(scope.body).get(dotted[0]) if dotted and scope else None
            if not isinstance(binding, tuple):
                continue
            kind, node = binding
            target = [*module, *dotted] if kind == "class" else \
                [*(_imported(node, dotted[0], module, self._is_package(module)) or []), *dotted[1:]] if kind == "import" else []
            inherited = self.constructor(target, depth + 1) if target and target[0] == PACKAGE else None
            if inherited:
                every = {**inherited[0], **every}
                always |= inherited[1]
        return every, always

    def lineage(self, parts: list[str], depth: int = 0) -> list[tuple[list[str], ast.ClassDef]] | None:
        """The class ``parts`` and its bases in the tree, each as (module, class node); None when the
        class, or a base that is neither the tree's nor one adding nothing, cannot be read."""
        found = self._class(parts)
        if found is None or depth > 20:
            return None
        module, cls = found
        chain = [found]
        scope = self._module(module)
        for base in cls.bases:
            dotted = _dotted(base.value if isinstance(base, ast.Subscript) else base)
            if dotted and dotted[-1] in EMPTY_BASES:
                continue
            binding = _bindings(scope.body).get(dotted[0]) if dotted and scope else None
            if not isinstance(binding, tuple):
                return None
            kind, node = binding
            target = [*module, *dotted] if kind == "class" else \
                [*(_imported(node, dotted[0], module, self._is_package(module)) or []), *dotted[1:]] if kind == "import" else []
            inherited = self.lineage(target, depth + 1) if target and target[0] == PACKAGE else None
            if inherited is None:
                return None
            chain += inherited
        return chain

    def named_tuple(self, cls: str) -> tuple[int, str] | None:
        """(fields, where) of a ``typing.NamedTuple`` class of the tree; None for anything else."""
        found = self._class(cls.split("."))
        if found is None:
            return None
        module, node = found
        if not any((_dotted(b) or [""])[-1] == "NamedTuple" for b in node.bases):
            return None
        fields = [n for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
        return len(fields), f"{'/'.join(module)}.py:{node.lineno}"

    def tuples_stored(self, cls: str, attribute: str, depth: int) -> list[tuple[int, str]] | None:
        """Every tuple the tree's code of ``cls`` (and its bases) stores ``depth`` subscripts deep into
        ``self.<attribute>``, as (length, where); None when one store is not a tuple display of a known
        length (a call's result, a starred element, a deeper path) or none is found: cannot tell."""
        chain = self.lineage(cls.split("."))
        if chain is None or depth not in (0, 1):
            return None
        built: list[tuple[int, str]] = []
        for module, node in chain:
            for value, at in _stores(node, attribute, depth):
                if not isinstance(value, ast.Tuple) or any(isinstance(e, ast.Starred) for e in value.elts):
                    return None
                built.append((len(value.elts), f"{'/'.join(module)}.py:{at}"))
        return built or None

    def _class(self, parts: list[str]) -> tuple[list[str], ast.ClassDef] | None:
        """(module, class node) of a dotted class name the tree's source defines at module level or nested."""
        for i in range(len(parts) - 1, 0, -1):
            if self._file(parts[:i]) is not None:
                break
        else:
            return None
        module = self._module(parts[:i])
        body, cls = module.body if module else [], None
        for part in parts[i:]:
            cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
            if cls is None:
                return None
            body = cls.body
        path = self._file(parts[:i])
        return ([*parts[:i - 1], path.stem] if path.name != "__init__.py" else [*parts[:i], "__init__"]), cls

    # --- modules ---------------------------------------------------------------------------------

    def _file(self, parts: list[str]) -> Path | None:
        base = self.root.joinpath(*parts)
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file() and not path.is_symlink():
                return path
        return None

    def _is_package(self, parts: list[str]) -> bool:
        return self.root.joinpath(*parts).is_dir()

    def _module(self, parts: list[str]) -> ast.Module | None:
        key = ".".join(parts)
        if key not in self.parsed:
            path = self._file(parts)
            tree = None
            if path is not None and path.stat().st_size <= MAX_SOURCE:
                try:
                    tree = ast.parse(path.read_bytes())
                except (SyntaxError, ValueError):
                    tree = None
            self.parsed[key] = tree
        return self.parsed[key]

    def _resolve(self, parts: list[str], depth: int):
        """None when defined, a dotted prefix when certainly missing, UNKNOWN when the source leaves it open."""
        if depth > 20:  # re-exports chasing each other
            return UNKNOWN
        for i in range(len(parts), 0, -1):  # the longest prefix that is a module of the tree
            if self._file(parts[:i]) is not None:
                break
            if self._is_package(parts[:i]):  # a namespace package: its submodules are all it holds
                return None if i == len(parts) else ".".join(parts[: i + 1])
        else:
            return PACKAGE
        module = self._module(parts[:i])
        if module is None:
            return UNKNOWN
        rest = parts[i:]
        if not rest:
            return None
        return self._in_module(module.body, parts[:i], rest, depth)

    def _in_module(self, body: list[ast.stmt], where: list[str], rest: list[str], depth: int):
        binding = _bindings(body).get(rest[0])
        if binding is None:
            if _dynamic_module(body):
                return UNKNOWN
            return ".".join([*where, rest[0]])
        if binding is UNKNOWN:
            return UNKNOWN
        if len(rest) == 1:
            return None
        kind, node = binding
        if kind == "class":
            return self._in_class(node, where, [*where, rest[0]], rest[1:], depth)
        if kind == "import":
            target = _imported(node, rest[0], where, self._is_package(where))
            return self._resolve([*target, *rest[1:]], depth + 1) if target and target[0] == PACKAGE else UNKNOWN
        return UNKNOWN  # a function's or a value's attributes: only running it would tell

    def _in_class(self, cls: ast.ClassDef, module: list[str], dotted: list[str], rest: list[str], depth: int):
        names = _class_bindings(cls, self._module(module))
        if names is UNKNOWN:
            return UNKNOWN
        if rest[0] in names:
            kind, node = names[rest[0]]
            if len(rest) == 1:
                return None
            return self._in_class(node, module, [*dotted, rest[0]], rest[1:], depth) if kind == "class" else UNKNOWN
        unknown = False
        for base in cls.bases:
            found = self._in_base(base, module, rest, depth)
            if found is None:
                return None  # defined by a base
            unknown |= found is UNKNOWN
        return UNKNOWN if unknown else ".".join([*dotted, rest[0]])

    def _in_base(self, base: ast.expr, module: list[str], rest: list[str], depth: int):
        """None when the base defines ``rest``, a prefix when it certainly does not, UNKNOWN otherwise."""
        if isinstance(base, ast.Subscript):
            base = base.value
        dotted = _dotted(base)
        if dotted is None:
            return UNKNOWN
        if dotted[-1] in EMPTY_BASES and len(dotted) <= 2:
            return "empty"
        scope = self._module(module)
        binding = _bindings(scope.body).get(dotted[0]) if scope else None
        if binding is None or binding is UNKNOWN:
            return UNKNOWN
        kind, node = binding
        if kind == "class" and len(dotted) == 1:
            return self._in_class(node, module, [*module, dotted[0]], rest, depth + 1)
        if kind == "import":
            target = _imported(node, dotted[0], module, self._is_package(module))
            if target and target[0] == PACKAGE:
                return self._resolve([*target, *dotted[1:], *rest], depth + 1)
        return UNKNOWN


@dataclass(frozen=True)
class Fed:
    """A tagged message the test built and handed to a call: its tag, frames, where it was built, the call."""

    tag: bytes
    length: int
    built: str
    call: ast.Call


@dataclass(frozen=True)
class Built:
    """A message the test had the tree's own builder make (``Note(room, ip, port).to_zmq()``): the class,
    the method, how many arguments the test gave the class, where, and the call it was handed to."""

    cls: str
    method: str
    arguments: int
    built: str
    call: ast.Call


def built_by(node: ast.AST) -> tuple[str, str, int] | None:
    """``C(args).m()`` written with no spread argument: (C, m, how many arguments C was given)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Call)):
        return None
    inner = node.func.value
    cls = inner.func.attr if isinstance(inner.func, ast.Attribute) else inner.func.id if isinstance(inner.func, ast.Name) else None
    if cls is None or any(isinstance(a, ast.Starred) for a in inner.args) or any(k.arg is None for k in inner.keywords):
        return None
    return cls, node.func.attr, len(inner.args) + len(inner.keywords)


# --- messages: the frames a tree's producer of a tagged message builds --------------------------


@dataclass
class Messages:
    """The tree's own producers of multipart messages (a list or tuple display whose first element is
    a bytes tag, as ``send_multipart([b"ABORT", room, ip, port])`` or a builder ``frames = [TAG, room]``
    then extended), and the functions of the modules that name the tag (its handlers), read from the
    stored source once per tag."""

    root: Path
    texts: dict[str, str] | None = None
    found: dict[bytes, tuple[list[tuple[int, str]] | None, set[str], set[str]]] = field(default_factory=dict)

    def of(self, tag: bytes) -> tuple[list[tuple[int, str]] | None, set[str], set[str]]:
        """(every producer's full length and place, or None when one cannot be told; the names of the
        functions defined in the modules that name the tag; the names bound to the tag)."""
        if tag not in self.found:
            self.found[tag] = self._scan(tag)
        return self.found[tag]

    def _sources(self) -> dict[str, str]:
        if self.texts is None:
            self.texts = {}
            for file in sorted((self.root / PACKAGE).rglob("*.py")):
                if file.is_file() and not file.is_symlink() and file.stat().st_size <= MAX_SOURCE:
                    self.texts[file.relative_to(self.root).as_posix()] = file.read_bytes().decode("utf-8", "replace")
        return self.texts

    def _scan(self, tag: bytes) -> tuple[list[tuple[int, str]] | None, set[str], set[str]]:
        literals = (repr(tag), repr(tag).replace("'", '"', 1)[:-1] + '"')
        texts = self._sources()
        named = {path: text for path, text in texts.items() if any(lit in text for lit in literals)}
        modules = {path: _parse(text) for path, text in named.items()}
        names = {t.id for m in modules.values() if m for node in m.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and node.value.value == tag
                 for t in node.targets if isinstance(t, ast.Name)}
        for path, text in texts.items():
            if path not in modules and any(name in text for name in names):
                modules[path] = _parse(text)
        built: list[tuple[int, str]] | None = []
        handlers: set[str] = set()
        for path, module in sorted(modules.items()):
            if module is None:
                return None, set(), names
            handlers |= {n.name for n in ast.walk(module) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            for length, line in produced(module, tag, names):
                if length is None:
                    built = None
                elif built is not None:
                    built.append((length, f"{path}:{line}"))
        return built, handlers, names


    def senders(self, cls: str, method: str) -> tuple[list[tuple[int, str]], set[str]] | None:
        """How many arguments each of the tree's senders gives ``cls`` when it builds a message with
        ``cls(...).method()``, outside the class itself (its parsers build partial ones), with the
        place; and the functions of the modules that name the class (its handlers). None when
        ``method`` of a class of that name is no message builder of the tree (no tagged display it
        returns) or a sender spreads its arguments."""
        texts = self._sources()
        builder = False
        found: list[tuple[int, str]] = []
        handlers: set[str] = set()
        for path, text in texts.items():
            if cls not in text:
                continue
            module = _parse(text)
            if module is None:
                return None
            handlers |= {n.name for n in ast.walk(module) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            inside: set[ast.AST] = set()
            tags = {t.id for node in module.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, bytes) for t in node.targets if isinstance(t, ast.Name)}
            for node in ast.walk(module):
                if isinstance(node, ast.ClassDef) and node.name == cls:
                    inside |= set(ast.walk(node))
                    builder |= any(isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name == method and
                                   any(True for _ in produced(m, None, tags)) for m in node.body)
            for node in ast.walk(module):
                if isinstance(node, ast.Call) and node not in inside and isinstance(node.func, ast.Attribute) and \
                        node.func.attr == method and isinstance(node.func.value, ast.Call) and \
                        _dotted(node.func.value.func) and _dotted(node.func.value.func)[-1] == cls:
                    made = built_by(node)
                    if made is None:
                        return None
                    found.append((made[2], f"{path}:{node.lineno}"))
        return (found, handlers) if builder else None


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def is_tag(node: ast.expr, tag: bytes | None, names: set[str] = frozenset()) -> bool:
    """A bytes constant (``tag`` itself when given), or a name the tree binds to it."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, bytes) and (tag is None or node.value == tag)
    return isinstance(node, ast.Name) and node.id in names


def tagged(node: ast.AST, tag: bytes | None, names: set[str] = frozenset()) -> bool:
    return isinstance(node, (ast.List, ast.Tuple)) and bool(node.elts) and is_tag(node.elts[0], tag, names)


def produced(module: ast.AST, tag: bytes | None, names: set[str] = frozenset()):
    """(full length, line) of each message display of ``tag`` (None: any bytes tag) a module builds: a
    display sent or returned as it is, or assigned to a local list that its function then extends
    (``extend``/``+=`` a display, ``append``, ``insert``: every branch taken, the message at its
    fullest). A display compared against (``msg[0] in (b"A", b"B")``) is no message; a starred element
    or an extension by anything but a display is (None, line): cannot tell."""
    parents = {child: node for node in ast.walk(module) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(module):
        if not tagged(node, tag, names) or isinstance(parents.get(node), ast.Compare):
            continue
        if any(isinstance(e, ast.Starred) for e in node.elts):
            yield None, node.lineno
            continue
        holder = parents.get(node)
        if isinstance(holder, ast.Assign) and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name):
            yield _grown(_function_of(node, parents) or module, holder.targets[0].id, len(node.elts)), node.lineno
        else:
            yield len(node.elts), node.lineno


def _grown(scope: ast.AST, name: str, length: int) -> int | None:
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == name:
            if node.func.attr in ("append", "insert"):
                length += 1
            elif node.func.attr == "extend":
                grown = node.args[0] if node.args else None
                if not isinstance(grown, (ast.List, ast.Tuple)) or any(isinstance(e, ast.Starred) for e in grown.elts):
                    return None
                length += len(grown.elts)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            if not isinstance(node.value, (ast.List, ast.Tuple)) or any(isinstance(e, ast.Starred) for e in node.value.elts):
                return None
            length += len(node.value.elts)
    return length


def _is_attribute(node: ast.expr, attribute: str, anyones: bool = False) -> bool:
    """``self.<attribute>`` (``anyones``: ``<anything>.<attribute>``)."""
    return isinstance(node, ast.Attribute) and node.attr == attribute and \
        (anyones or isinstance(node.value, ast.Name) and node.value.id == "self")


ADDERS = {"append": 0, "appendleft": 0, "add": 0, "insert": 1, "setdefault": 1}


def _stores(cls: ast.AST, attribute: str, depth: int, anyones: bool = False):
    """(value, line) of each store into ``self.<attribute>`` (``anyones``: any object's) ``depth``
    subscripts deep in a class body (or a module): depth 0, an assignment to it; depth 1, an item
    assigned, added (append, add, insert, setdefault, heappush) or listed in a display assigned to it.
    A store of another shape yields (None, line)."""
    def _is_self_attribute(node: ast.expr, name: str) -> bool:
        return _is_attribute(node, name, anyones)

    parents = {child: node for node in ast.walk(cls) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if depth == 0 and _is_self_attribute(target, attribute):
                    yield node.value, node.lineno
                elif depth == 1 and isinstance(target, ast.Subscript) and _is_self_attribute(target.value, attribute):
                    yield node.value, node.lineno
                elif depth == 1 and _is_self_attribute(target, attribute):
                    shown = node.value
                    items = shown.elts if isinstance(shown, (ast.List, ast.Tuple, ast.Set)) else \
                        shown.values if isinstance(shown, ast.Dict) else None
                    if isinstance(shown, ast.Name):  # a local list built in the same function
                        yield from _local_items(_function_of(node, parents), shown.id, attribute, anyones)
                    elif items is None and not isinstance(shown, ast.Call):
                        yield None, node.lineno
                    for item in items or ():
                        yield item, node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if depth == 1 and func.attr in ADDERS and _is_self_attribute(func.value, attribute):
                position = ADDERS[func.attr]
                yield (node.args[position] if len(node.args) > position else None), node.lineno
            elif depth == 1 and func.attr == "heappush" and node.args and _is_self_attribute(node.args[0], attribute):
                yield (node.args[1] if len(node.args) > 1 else None), node.lineno


def _function_of(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> ast.AST | None:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node
    return None


def _local_items(function: ast.AST | None, name: str, attribute: str, anyones: bool):
    """(value, line) of each item a function puts in its local list ``name``: items of a display
    assigned to it, or added (append, add, insert); an item that is an entry of ``self.<attribute>``
    itself (the target of a ``for`` over it) is a re-store, no new tuple. Another binding: (None, line)."""
    if function is None:
        yield None, 0
        return
    entries = {name for n in ast.walk(function) if isinstance(n, (ast.For, ast.AsyncFor))
               for name in _entry_names(n.target, n.iter, attribute, anyones)}
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name) and target.id == name:
                    if isinstance(node.value, (ast.List, ast.Tuple, ast.Set)):
                        yield from ((item, node.lineno) for item in node.value.elts)
                    else:
                        yield None, node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ADDERS and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == name:
            position = ADDERS[node.func.attr]
            item = node.args[position] if len(node.args) > position else None
            if not (isinstance(item, ast.Name) and item.id in entries):
                yield item, node.lineno


def _entry_names(target: ast.expr, iterated: ast.expr, attribute: str, anyones: bool):
    """The names a ``for`` binds to an entry of ``self.<attribute>``: ``for e in self.x``, or its
    place in ``zip(..., self.x, ...)`` or ``enumerate(self.x)``."""
    if isinstance(target, ast.Name) and _is_attribute(iterated, attribute, anyones):
        yield target.id
    elif isinstance(target, ast.Tuple) and isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name):
        args = [None, *iterated.args[:1]] if iterated.func.id == "enumerate" else \
            iterated.args if iterated.func.id == "zip" else []
        for element, arg in zip(target.elts, args):
            if isinstance(element, ast.Name) and arg is not None and _is_attribute(arg, attribute, anyones):
                yield element.id


def _dotted(node: ast.expr) -> list[str] | None:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return [*inner, node.attr] if inner else None
    return None


def _walk_top(body: list[ast.stmt]):
    """Statements at one scope's level, entering if/try/with/for blocks (their bindings count)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            yield from _walk_top(node.body)
            yield from _walk_top(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                yield from _walk_top(block)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                yield from _walk_top(case.body)


def _targets(node: ast.expr):
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            yield from _targets(element)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)


def _bindings(body: list[ast.stmt]) -> dict:
    """name -> (kind, node) for what a scope binds; after a star import, any other name is UNKNOWN."""
    out: dict = {}
    star = False
    for node in _walk_top(body):
        if isinstance(node, ast.ClassDef):
            out[node.name] = ("class", node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = ("function", node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                out[alias.asname or alias.name.split(".")[0]] = ("import", node)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                star |= alias.name == "*"
                out[alias.asname or alias.name] = ("import", node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in _targets(target):
                    out[name] = ("value", node)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            for name in _targets(node.target):
                out[name] = ("value", node)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                for name in _targets(item.optional_vars) if item.optional_vars is not None else ():
                    out[name] = ("value", node)
    return _Star(out) if star else out


class _Star(dict):
    """The bindings of a scope with a star import: any name it does not spell may come from it."""

    def get(self, key, default=None):
        return super().get(key, UNKNOWN)


def _dynamic_module(body: list[ast.stmt]) -> bool:
    """A module that may bind names its source does not spell: ``__getattr__``, ``globals()``, ``exec``."""
    if any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__" for node in _walk_top(body)):
        return True
    for node in (n for statement in body for n in ast.walk(statement)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("globals", "exec"):
            return True
    return False


def _class_bindings(cls: ast.ClassDef, module: ast.Module | None):
    """name -> (kind, node) a class defines: its body, ``self.x`` / ``cls.x`` assignments in its
    methods, ``Class.x = ...`` in its module, ``__slots__`` strings; UNKNOWN for a class that
    answers attributes dynamically or gets them through ``setattr``."""
    found = _bindings(cls.body)
    if isinstance(found, _Star) or "__getattr__" in found or "__getattribute__" in found:
        return UNKNOWN
    out = dict(found)
    for scope, owners in ((cls, {"self", "cls"}), (module, {cls.name})):
        for node in ast.walk(scope) if scope else ():
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            for element in (e for target in targets for e in ast.walk(target)):
                if isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name) and element.value.id in owners:
                    out.setdefault(element.attr, ("value", node))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and node.args \
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in owners:
                return UNKNOWN  # attributes named at run time
    slots = out.get("__slots__")
    if slots and slots[0] == "value":
        for element in ast.walk(slots[1]):
            if isinstance(element, ast.Constant) and isinstance(element.value, str):
                out.setdefault(element.value, ("value", slots[1]))
    for decorator in cls.decorator_list:  # a class a decorator may rebuild (attrs, pydantic): cannot tell
        if _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator) not in (["dataclass"], ["dataclasses", "dataclass"]):
            return UNKNOWN
    return out


def _imported(node: ast.Import | ast.ImportFrom, name: str, module: list[str], is_package: bool) -> list[str] | None:
    """The dotted name a local ``name`` stands for after ``node`` (an import), absolute."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname == name:
                return alias.name.split(".")
            if alias.asname is None and alias.name.split(".")[0] == name:
                return [name]
        return None
    for alias in node.names:
        if (alias.asname or alias.name) == name:
            if node.level:
                package = module if is_package else module[:-1]
                if node.level - 1 > len(package):
                    return None
                base = package[: len(package) - (node.level - 1)]
            else:
                base = []
            return [*base, *(node.module.split(".") if node.module else []), alias.name]
    return None


# --- the code a failure crossed: call sites, signatures, constructors ---------------------------


@dataclass
class Code:
    """The code one side ran, as stored: the tree's source and the test's files (path under the
    test directory -> bytes), read where a failure's frames point (probes/pytest_outcomes.py)."""

    tree: Source
    test_files: dict[str, bytes]
    parsed: dict[tuple[str, str], ast.Module | None] = field(default_factory=dict)

    def module(self, owner: str, path: str | None) -> ast.Module | None:
        """A file of the tree (``sglang/...``) or of the test's, parsed; None when absent or unreadable."""
        if path is None or owner not in ("sglang", "test"):
            return None
        if (owner, path) not in self.parsed:
            data = self.test_files.get(path) if owner == "test" else self.tree.read(path)
            try:
                self.parsed[owner, path] = ast.parse(data) if data is not None else None
            except (SyntaxError, ValueError):
                self.parsed[owner, path] = None
        return self.parsed[owner, path]

    def call(self, owner: str, path: str | None, line: int, end_line: int, col: int, end_col: int) -> ast.Call | None:
        """The call expression at exactly those positions."""
        module = self.module(owner, path)
        for node in ast.walk(module) if module else ():
            if isinstance(node, ast.Call) and (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset) == \
                    (line, end_line, col, end_col):
                return node
        return None

    def function(self, owner: str, path: str | None, line: int, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None:
        """The one function (or lambda) whose code starts at ``line`` (its first decorator's, if any)
        and whose name is the last part of ``qualname``; None when absent or ambiguous."""
        module = self.module(owner, path)
        name = qualname.rsplit(".", 1)[-1]
        found = []
        for node in ast.walk(module) if module else ():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                found += [node] if first == line else []
            elif isinstance(node, ast.Lambda) and name == "<lambda>" and node.lineno == line:
                found.append(node)
        return found[0] if len(found) == 1 else None

    def test_stores(self, attribute: str, depth: int, length: int, near: tuple[str, int] | None = None) -> str | None:
        """Where the test's files store a tuple display of ``length`` into any object's ``<attribute>``
        ``depth`` subscripts deep (``path:line``), the function holding ``near`` (a test frame's
        path and line) first; None when they store none."""
        found = []
        for path in sorted(self.test_files):
            module = self.module("test", path)
            for value, line in _stores(module, attribute, depth, anyones=True) if module else ():
                if isinstance(value, ast.Tuple) and len(value.elts) == length and \
                        not any(isinstance(e, ast.Starred) for e in value.elts):
                    found.append((path, line))
        if near is not None and (module := self.module("test", near[0])) is not None:
            spans = [(f.lineno, f.end_lineno) for f in ast.walk(module) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and f.lineno <= near[1] <= (f.end_lineno or f.lineno)]
            if spans:
                first, last = max(spans)  # the innermost function holding the frame's line
                found.sort(key=lambda f: not (f[0] == near[0] and first <= f[1] <= last))
        return f"{found[0][0]}:{found[0][1]}" if found else None

    def fed(self, path: str, function: str, line: int) -> list[Fed | Built]:
        """The messages the test function ``function`` of ``path`` (holding ``line``, its frame) hands to
        a call up to that line: a display whose first element is a bytes tag, written in the call or
        returned by a helper of the test's files the call makes (each of its returns such a display, of
        one length), or one a builder of the tree made from the test's arguments (``C(...).m()``)."""
        module = self.module("test", path)
        scopes = [n for n in ast.walk(module) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.name == function and n.lineno <= line <= (n.end_lineno or n.lineno)] if module else []
        if len(scopes) != 1:
            return []
        found = []
        for call in (n for n in ast.walk(scopes[0]) if isinstance(n, ast.Call) and n.lineno <= line):
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                if tagged(arg, None) and not any(isinstance(e, ast.Starred) for e in arg.elts):
                    found.append(Fed(arg.elts[0].value, len(arg.elts), f"{path}:{arg.lineno}", call))
                elif (made := built_by(arg)) is not None:
                    found.append(Built(*made, f"{path}:{arg.lineno}", call))
                elif isinstance(arg, ast.Call) and (made := self._helper_message(arg.func)):
                    found.append(Fed(*made, call))
        return found

    def test_builds(self, cls: str, method: str) -> dict[int, str]:
        """How many arguments the test's files give ``cls`` wherever they build ``cls(...).method()``."""
        found: dict[int, str] = {}
        for path in sorted(self.test_files):
            for node in ast.walk(self.module("test", path) or ast.Module([], [])):
                if (made := built_by(node)) and made[:2] == (cls, method):
                    found.setdefault(made[2], f"{path}:{node.lineno}")
        return found

    def _helper_message(self, func: ast.expr) -> tuple[bytes, int, str] | None:
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        defs = [(path, n) for path in sorted(self.test_files) for n in ast.walk(self.module("test", path) or ast.Module([], []))
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
        if len(defs) != 1:
            return None
        path, helper = defs[0]
        returned = [n.value for n in ast.walk(helper) if isinstance(n, ast.Return)]
        shapes = {(v.elts[0].value, len(v.elts)) if tagged(v, None) and not any(isinstance(e, ast.Starred) for e in v.elts)
                  else None for v in returned}
        if len(shapes) != 1 or None in shapes:
            return None
        tag, length = shapes.pop()
        return tag, length, f"{path}:{returned[0].lineno}"

    def test_defines(self, name: str | None) -> bool:
        """The test's files define a function of that name (a call to it may reach the test's own)."""
        return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
                   for path in sorted(self.test_files) for n in ast.walk(self.module("test", path) or ast.Module([], [])))

    def test_lengths(self, tag: bytes, names: set[str]) -> dict[int, str]:
        """Every length of a ``tag`` message display the test's files build (the tag written, or a
        name the tree binds to it), with its first place."""
        found: dict[int, str] = {}
        for path in sorted(self.test_files):
            module = self.module("test", path)
            for length, line in produced(module, tag, names) if module else ():
                found.setdefault(length, f"{path}:{line}") if length is not None else None
        return found

    def enclosing(self, owner: str, path: str | None, inner: ast.AST) -> ast.AST | None:
        """The innermost function (or the module) of a file holding ``inner``."""
        module = self.module(owner, path)
        if module is None:
            return None
        best: ast.AST = module
        for node in ast.walk(module):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not inner and \
                    any(child is inner for child in ast.walk(node)):
                if best is module or node.lineno >= best.lineno:
                    best = node
        return best

    def constructor_sets(self, cls: str, name: str, has: list[str] | None) -> tuple[str, str | None] | None:
        """Where the tree's constructor of ``cls`` (dotted) sets ``self.<name>``, when the instance is
        certainly one the constructor did not build: it lacks ``name`` and the constructor sets it
        whatever the arguments, or it lacks another attribute the constructor always sets (``has``: the
        instance's own attribute names when it failed). Returns (where, that other attribute or None);
        None when the constructor does not set it, or could have left it unset."""
        found = self.tree.constructor(cls.split("."))
        if found is None or name not in found[0]:
            return None
        every, always = found
        if name in always:
            return every[name], None
        proof = sorted(always - set(has)) if has is not None else []
        return (every[name], proof[0]) if proof else None


def _assigned(init: ast.FunctionDef) -> dict[str, tuple[ast.stmt, bool]]:
    """``self.<name>`` assignments of ``init``'s own body (not of a nested function or class): name ->
    (its first statement, whether one is unconditional: not under an if, a loop, a match, a handler)."""
    found: dict[str, tuple[ast.stmt, bool]] = {}

    def visit(body: list[ast.stmt], unconditional: bool) -> None:
        for node in body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            for target in (e for t in targets for e in ast.walk(t)):
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                    first, always = found.get(target.attr, (node, False))
                    found[target.attr] = (first, always or unconditional)
            if isinstance(node, (ast.With, ast.AsyncWith)):
                visit(node.body, unconditional)
            elif isinstance(node, ast.Try):
                visit(node.body + node.finalbody, unconditional)
                visit([n for h in node.handlers for n in h.body] + node.orelse, False)
            elif isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While)):
                visit(node.body + node.orelse, False)
            elif isinstance(node, ast.Match):
                visit([n for case in node.cases for n in case.body], False)

    visit(init.body, True)
    return found


def _calls_super_init(init: ast.FunctionDef) -> bool:
    for node in init.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__init__":
            return True
    return False
