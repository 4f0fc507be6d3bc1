"""The in-tree recording of atomic conditions (probes/conditions.py, probes/recording.py): which are listed, and that the rewrite
records each as evaluated while keeping behaviour (values, short-circuits, how often ``__bool__`` runs,
walrus bindings, exceptions)."""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap

import pytest

from probes import conditions, fixcode, recording

SOURCE = textwrap.dedent('''
    class Loud:
        """Truth with a side effect: the rewrite must ask it as often as the original does."""

        def __init__(self, truth, log):
            self.truth, self.log = truth, log

        def __bool__(self):
            self.log.append(self.truth)
            return self.truth


    def value_and(a, b, c):
        return a and b and c

    def value_or(a, b):
        x = a or b
        return x

    def tested(a, b, log):
        if a and (b or log.append("c") or False):
            return "yes"
        return "no"

    def walrus(items):
        if (n := len(items)) > 1 and not items[0]:
            return n
        return -n

    def comprehension(items):
        return [i for i in items if i is not None and i % 2]

    def ternary(flag, a, b):
        return a if flag in (1, 2) else b

    def looping(n):
        seen = []
        while n > 0:
            seen.append(n)
            n -= 1
        assert seen or n == 0, "never"
        return seen

    def raising(obj):
        if obj.missing:
            return 1
        return 0

    def nested(a, b, c):
        return (a or b) and c

    class Owner:
        def __private(self):
            return self.x is None

        def method(self):
            self.x = None
            return self.__private() or False
''')


@pytest.fixture
def twins(tmp_path):
    """The module twice: as written, and with every condition of every function recording."""
    path = tmp_path / "subject.py"
    path.write_text(SOURCE)
    plain = _load(path, "subject_plain")
    instrumented = _load(path, "subject_recording")
    module = ast.parse(SOURCE)
    names: dict[int, str] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name != "__init__" and node.name != "__bool__":
            qualname = next(q for q in _qualnames(module) if q.endswith(node.name))
            wanted = {}
            for atom, kind in conditions.atoms(fixcode.statements(node)):
                index = len(names)
                names[index] = conditions.key("subject.py", atom)
                wanted[conditions.position(atom)] = (kind, index)
            fn, found = recording.rewrite(node, wanted)
            assert found == set(wanted_index for _, wanted_index in wanted.values())
            owner = qualname.rpartition(".")[0] or None
            function = _resolve(instrumented, qualname)
            body = fn
            if owner:
                body = ast.copy_location(ast.ClassDef(name=owner, bases=[], keywords=[], body=[fn], decorator_list=[]), fn)
            code = compile(ast.fix_missing_locations(ast.Module(body=[body], type_ignores=[])), str(path), "exec")
            recording.instrument(function, _find(code, node.name))
    recording.reset()
    return plain, instrumented, names


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _qualnames(module):
    for node in module.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name
        elif isinstance(node, ast.ClassDef):
            yield from (f"{node.name}.{n.name}" for n in node.body if isinstance(n, ast.FunctionDef))


def _resolve(module, qualname):
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, f"_{obj.__name__}{part}" if part.startswith("__") else part)
    return obj


def _find(code, name):
    for const in code.co_consts:
        if hasattr(const, "co_name"):
            if const.co_name == name:
                return const
            try:
                return _find(const, name)
            except LookupError:
                continue
    raise LookupError(name)


CALLS = [
    ("value_and", lambda m, log: (m.Loud(True, log), m.Loud(False, log), 3)),
    ("value_and", lambda m, log: (m.Loud(True, log), 0, m.Loud(True, log))),
    ("value_and", lambda m, log: ([], 1, 2)),
    ("value_or", lambda m, log: (m.Loud(False, log), "b")),
    ("value_or", lambda m, log: ("a", m.Loud(False, log))),
    ("tested", lambda m, log: (m.Loud(True, log), m.Loud(False, log), log)),
    ("tested", lambda m, log: (m.Loud(False, log), m.Loud(True, log), log)),
    ("walrus", lambda m, log: ([0, 1],)),
    ("walrus", lambda m, log: ([1],)),
    ("comprehension", lambda m, log: ([1, None, 2, 3],)),
    ("ternary", lambda m, log: (2, "a", "b")),
    ("ternary", lambda m, log: (5, "a", "b")),
    ("looping", lambda m, log: (3,)),
    ("raising", lambda m, log: (object(),)),
    ("nested", lambda m, log: (m.Loud(False, log), m.Loud(False, log), 1)),
    ("nested", lambda m, log: (m.Loud(False, log), "b", "c")),
]


@pytest.mark.parametrize("name, args", CALLS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CALLS)])
def test_the_rewrite_keeps_behaviour(twins, name, args):
    plain, recording, _ = twins
    outcomes = []
    for module in (plain, recording):
        log: list = []
        try:
            result = getattr(module, name)(*args(module, log))
            outcomes.append(("returned", _shape(result), log))
        except Exception as exc:  # noqa: BLE001 - the exception is the behaviour compared
            outcomes.append(("raised", type(exc).__name__, log))
    assert outcomes[0] == outcomes[1]


def _shape(value):
    return ("Loud", value.truth) if type(value).__name__ == "Loud" else value


def test_a_method_keeps_its_private_names(twins):
    _, instrumented, names = twins
    assert instrumented.Owner().method() is True
    seen = recording.seen(names)
    assert any(values == [True] for values in seen.values())


def test_each_condition_is_seen_as_it_went(twins):
    _, instrumented, names = twins
    instrumented.walrus([0, 1])
    instrumented.walrus([1])
    seen = recording.seen(names)
    line = SOURCE.splitlines().index("    if (n := len(items)) > 1 and not items[0]:") + 1
    assert seen[f"subject.py:{line}:7"] == [False, True]  # (n := len(items)) > 1
    assert seen[f"subject.py:{line}:37"] == [False]  # items[0], under not: evaluated only when the first held


def test_atoms_split_boolean_expressions_and_tests():
    fn = ast.parse(textwrap.dedent('''
        def f(req, xs):
            if req.a is None and not (req.b or req.c(1)):
                pass
            y = [x for x in xs if x in req.d]
            while req.e > 0:
                assert req.f, "m"
            return req.g if req.h else req.i == 2
    ''')).body[0]
    found = [(ast.unparse(node), kind) for node, kind in conditions.atoms(fixcode.statements(fn))]
    assert found == [
        ("req.a is None", "truth"), ("req.b", "truth"), ("req.c(1)", "truth"),
        ("x in req.d", "truth"), ("req.e > 0", "truth"), ("req.f", "truth"),
        ("req.h", "truth"), ("req.i == 2", "value"),
    ]


def test_install_records_what_the_host_listed_and_nothing_it_did_not(tmp_path, monkeypatch):
    """The list is the host's: a condition it names is recorded where it stands; one whose place names nothing
    there (other bytes than the host read) is never seen; the function keeps its identity."""
    from runner.judge import conditions as host
    from tests.probes.hand_tree import load

    source = "def gate(req):\n    if req.a is None or req.b:\n        return 1\n    return 2\n"
    root, module = load(tmp_path, monkeypatch, "handgate", source)
    gate = module.gate
    listed = [{"function": "handgate.gate", "file": "handgate.py", "conditions": [
        {"at": "handgate.py:2:7", "position": [2, 7, 2, 20], "kind": "truth"},
        {"at": "handgate.py:2:24", "position": [2, 24, 2, 29], "kind": "truth"},
        {"at": "handgate.py:3:0", "position": [3, 0, 3, 5], "kind": "truth"}]}]
    names = recording.install(listed, str(root))
    assert sorted(names.values()) == ["handgate.py:2:24", "handgate.py:2:7"] and module.gate is gate
    recording.reset()
    R = type("R", (), {})
    none, given = R(), R()
    none.a, given.a, given.b = None, 1, 0
    assert (gate(none), gate(given)) == (1, 2)
    assert recording.seen(names) == {"handgate.py:2:7": [False, True], "handgate.py:2:24": [False]}
    assert host.wanted(lambda rel: None) == []  # a tree without the fix's files: nothing to record


def test_a_function_defined_twice_is_read_and_recorded_as_the_one_that_runs(tmp_path, monkeypatch):
    """A tree that defines a fix's function again (a fork appending its own) runs the second: the host reads
    that one, and the rewrite never puts the first one's code in its place (behaviour kept: it still raises)."""
    from tests.probes.hand_tree import load

    source = ("def gate(req):\n    if req.a:\n        return 1\n    return 2\n\n\n"
              "def gate(req):\n    if req.b:\n        raise RuntimeError('mine')\n    return 3\n")
    root, module = load(tmp_path, monkeypatch, "twicegate", source)
    node = fixcode.function_node(ast.parse(source), "gate")
    assert node.lineno == 7
    first = [{"function": "twicegate.gate", "file": "twicegate.py", "conditions": [
        {"at": "twicegate.py:2:7", "position": [2, 7, 2, 12], "kind": "truth"}]}]
    assert "twicegate.py:2:7" not in recording.install(first, str(root)).values()
    R = type("R", (), {})
    req = R()
    req.a, req.b = 1, 1
    with pytest.raises(RuntimeError, match="mine"):
        module.gate(req)
    # what the host lists for the bound definition is what the tree records
    last = [{"function": "twicegate.gate", "file": "twicegate.py", "conditions": [
        {"at": "twicegate.py:8:7", "position": [8, 7, 8, 12], "kind": "truth"}]}]
    names = recording.install(last, str(root))
    recording.reset()
    req.b = 0
    assert module.gate(req) == 3
    assert recording.seen(names)["twicegate.py:8:7"] == [False]
