"""The package's structure, read with ``ast`` (nothing is imported):

* no import cycle among the modules of src/ringcast, counting imports inside functions;
* no module over the project's hard limit of 500 lines: the package (its C files too), tools/ and the
  stateful harness;
* the TLC library (ringcast.tlc) imports nothing of the protocol;
* the ring's protocol steps (``_writer_*`` / ``_reader_*`` methods of the cursors, whose types
  ringcast/ring.py's classes subclass; C functions of src/ringcast/core/rc_steps.c) are called by
  the endpoint layer alone: in C by the protocol core (core/rc_core.c, rc_wait.c; the binding
  _protocol*.c names none), by no Python module of the package, and by no
  program of the stateful harness or the trace recorder (only the planted-bug variants may),
  which drive the endpoints instead; those programs exist once (ringcast.trace.child);
* no module reads or writes another module's private names (``mq._is_writer``,
  ``getattr(mq, "_x")``): ``self._x`` / ``cls._x`` and names the module defines itself are fine;
  that holds for the package (the trace recorder included) and the stateful harness, whose
  planted-bug variants alone may use the private names of the classes they subclass;
* no step hook looks at its caller's frame.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from _csource import c_unit

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = SRC / "ringcast"
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    mods = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = f.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


MODS = _modules()


def _owner(name: str) -> str | None:
    """The module of the package that importing ``name`` loads (a submodule, or the package
    whose attribute it is); None outside the package or for a C extension."""
    while name and name not in MODS:
        name = name.rpartition(".")[0]
    return name or None


def _is_extension(name: str) -> bool:
    where = SRC.joinpath(*name.split("."))
    return any(where.parent.glob(where.name + ".c")) or any(where.parent.glob(where.name + ".*so"))


def _imports(mod: str, path: Path) -> set[str]:
    """Every module of the package that ``mod`` imports, at any depth (functions included)."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # "from . import x" and "from .pkg import sub" load submodules (a C extension is a
            # leaf: it imports nothing of ours); other names are attributes of ``prefix``
            names = []
            for a in node.names:
                sub = f"{prefix}.{a.name}"
                if sub in MODS:
                    names.append(sub)
                elif not _is_extension(sub) and not _is_extension(prefix):
                    names.append(prefix)
        for n in names:
            if n.split(".")[0] != "ringcast":
                continue
            owner = _owner(n)
            if owner is not None and owner != mod:
                out.add(owner)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph() -> dict[str, set[str]]:
    return {m: _imports(m, p) for m, p in MODS.items()}


def test_the_cycle_finder_sees_function_level_imports(tmp_path):
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(g) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    # a lazy import inside a function counts: ringcast.queue imports ringcast.groups only there
    assert "ringcast.groups" in _imports("ringcast.queue", MODS["ringcast.queue"])


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (a module imports, at any depth, one that imports it back): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_layers_point_down():
    """The bottom layers import nothing above them (steps, layout, atomics, identity, shm, ring,
    waiting, endpoint: no ZeroMQ, no pickling, no queue, no torch)."""
    g = _graph()
    below_queue = ["ringcast.steps", "ringcast.layout", "ringcast.atomics", "ringcast.identity", "ringcast.shm",
                   "ringcast.ring", "ringcast.waiting", "ringcast.endpoint"]
    for m in below_queue:
        assert not (g[m] & {"ringcast.queue", "ringcast.framing", "ringcast.channel", "ringcast.handshake",
                            "ringcast.roles", "ringcast.torch", "ringcast.groups"}), (m, g[m])
    assert g["ringcast.steps"] == set(), g["ringcast.steps"]
    assert g["ringcast.identity"] == set(), g["ringcast.identity"]


def test_modules_are_not_too_long():
    files = [*MODS.values(), *sorted((ROOT / "tools").rglob("*.py")), *sorted((ROOT / "tests" / "stateful").glob("*.py")),
             *sorted(PKG.glob("*.[ch]"))]  # the C code too: each file of a translation unit counts alone
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_tlc_library_imports_nothing_of_the_protocol():
    """ringcast.tlc (the TLC driver: ringcast spec, tools/tlc.py, trace validation) sits at the
    CLI/verification layer: it imports only itself and the shipped files (ringcast._bundled)."""
    g = _graph()
    tlc = {m for m in MODS if m == "ringcast.tlc" or m.startswith("ringcast.tlc.")}
    assert len(tlc) >= 3, tlc
    for m in tlc:
        assert g[m] <= tlc | {"ringcast._bundled"}, (m, g[m])
    # and the package imports no repository script (tools/ is shipped as ringcast._bundled.tools)
    bad = [m for m, p in MODS.items() for n in ast.walk(ast.parse(p.read_text()))
           if isinstance(n, ast.ImportFrom) and "_bundled.tools" in f"{'.' * n.level}{n.module or ''}"
           or isinstance(n, ast.ImportFrom) and (n.module or "").endswith("_bundled") and any(a.name == "tools" for a in n.names)]
    assert not bad, bad


#: the C extension with the ring's and the eventcount's steps (one translation unit), and the
#: names of its methods
PROTOCOL_C = c_unit(PKG / "_protocol.c")
C_METHODS = set(re.findall(r'^\s*\{"(\w+)", \(PyCFunction\)', PROTOCOL_C, flags=re.M))
#: the extension's private types (``_protocol._WriterSteps``): they exist to be subclassed by the
#: modules that import it (ring.py, endpoint.py)
C_TYPES = set(re.findall(r'"ringcast\._protocol\.(_\w+)"', PROTOCOL_C))


def _ring_steps() -> set[str]:
    """The ring's steps: the ``_writer_*`` / ``_reader_*`` methods of ringcast._protocol's cursors."""
    return {n for n in C_METHODS if n.startswith(("_writer_", "_reader_"))}


def _wraps_protocol(path: Path) -> bool:
    """Does the module import ringcast._protocol (``from . import _protocol``, and so define its
    methods' names on its classes)?"""
    return any(isinstance(n, ast.ImportFrom) and n.level == 1 and n.module is None and any(a.name == "_protocol" for a in n.names)
               for n in ast.walk(ast.parse(path.read_text())))


def test_the_steps_are_read_from_the_c_code():
    assert {"_writer_claim", "_writer_publish", "_reader_copy", "_reader_ack"} <= _ring_steps()
    assert {"_park_announce", "_notify_load_waiters", "notify"} <= C_METHODS
    # ring, waiting and endpoint wrap its types; steps checks that it is built and keeps the hook in it
    assert {m for m, p in MODS.items() if _wraps_protocol(p)} == {"ringcast.ring", "ringcast.waiting", "ringcast.endpoint", "ringcast.steps"}


def _c_step_functions() -> dict[str, str]:
    """{C function: the ring step (method name) it is} from the cursors' method tables."""
    return {fn: name for name, fn in re.findall(r'^\s*\{"(\w+)", \(PyCFunction\)(\w+),', PROTOCOL_C, flags=re.M)
            if name in _ring_steps()}


def _core_step_functions() -> set[str]:
    """The protocol core's step functions: core/rc_steps.c's definitions tagged ``Spec: <Action>``."""
    fns, tagged = set(), False
    for line in (PKG / "core" / "rc_steps.c").read_text().splitlines():
        tagged = tagged or "/* Spec" in line
        if (m := re.match(r"^(\w+)\(", line)) and tagged:
            fns.add(m.group(1))
            tagged = False
    return fns


def test_only_the_core_calls_the_c_steps():
    """A ring step's C function (core/rc_steps.c) is called only by the protocol core (rc_core.c,
    rc_wait.c, and the test build's rc_planted.c): the CPython binding (_protocol*.c) names none
    (tests/test_endpoint.py checks its calls too), and the core's sequence calls each."""
    fns = _core_step_functions()
    assert {"writer_claim", "writer_publish", "reader_copy", "reader_ack", "reader_check_evicted"} <= fns, fns
    bad = {f"{f.name}: {fn}" for f in sorted(PKG.glob("_protocol*.c")) for fn in fns if re.search(rf"\b{fn}\b", f.read_text())}
    assert not bad, f"binding code naming a ring step: {bad}"
    core = "".join((PKG / "core" / n).read_text() for n in ("rc_core.c", "rc_wait.c"))
    assert {fn for fn in fns if re.search(rf"\b{fn}\(", core)} == fns


def _step_calls(path: Path, steps: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in steps}


def test_no_module_of_the_package_calls_the_ring_steps():
    """The cursors' step methods are for tests and tools: the endpoints take the steps in their core."""
    steps = _ring_steps()
    assert {"_writer_claim", "_writer_publish", "_reader_copy", "_reader_ack", "_writer_evict"} <= steps
    callers = {m for m, p in MODS.items() if m != "ringcast.ring" and _step_calls(p, steps)}
    assert callers == set(), callers


def test_harness_and_trace_programs_drive_the_endpoint():
    """The stateful harness's programs (tests/stateful, except the planted-bug variants) and the
    trace recorder call no ring step: they run the endpoints MessageQueue runs."""
    steps = _ring_steps()
    files = [p for p in sorted((ROOT / "tests" / "stateful").glob("*.py")) if p.name != "variants.py"]
    files += sorted((PKG / "trace").glob("*.py"))
    bad = {str(p.relative_to(ROOT)): sorted(c) for p in files if (c := _step_calls(p, steps))}
    assert not bad, f"ring steps called outside the endpoint: {bad}"
    # one set of child programs (ringcast.trace.child), stepped through pipes by the harness and
    # serialised by a lock by the recorders: nothing else of either runs the protocol's sides
    programs = {"publish", "receive", "enqueue", "dequeue"}
    callers = {str(p.relative_to(ROOT)): sorted(c) for p in files if p.name != "bench_hook.py"
               and (c := programs & {n.attr for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Attribute)})}
    assert callers == {"src/ringcast/trace/child.py": sorted(programs)}, callers


@pytest.mark.parametrize("where", ["src/ringcast", "tests/stateful", "tests"])
def test_no_frame_inspection(where):
    files = sorted((ROOT / where).glob("*.py" if where == "tests" else "**/*.py"))
    bad = [str(p.relative_to(ROOT)) for p in files
           if p.name != "test_structure.py" and "_getframe" in p.read_text()]
    assert not bad, bad


def _defined_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, module- and class-level
    assignments, and ``self._x = ...`` / ``cls._x = ...`` attributes."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                for e in ast.walk(t):
                    if isinstance(e, ast.Name):
                        out.add(e.id)
                    elif isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id in ("self", "cls"):
                        out.add(e.attr)
    return out


def foreign_private_access(source: str, allowed: set[str] = frozenset()) -> list[str]:
    """``<name>._private`` accesses (and ``getattr``/``setattr``/``hasattr`` with a literal
    private name) on something other than ``self``/``cls``, to a name this module does not
    define and ``allowed`` does not list: ``'line: expression'`` for each."""
    tree = ast.parse(source)
    mine = _defined_names(tree) | set(allowed)
    bad = []
    for n in ast.walk(tree):
        name = target = None
        if isinstance(n, ast.Attribute):
            name, target = n.attr, n.value
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "setattr", "hasattr", "delattr")
              and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)):
            name, target = n.args[1].value, n.args[0]
        if name is None or not name.startswith("_") or name.startswith("__") or name in mine:
            continue
        if isinstance(target, ast.Name) and target.id in ("self", "cls"):
            continue
        bad.append(f"{n.lineno}: {ast.unparse(n)}")
    return bad


def test_the_private_access_check_sees_cross_module_reads():
    src = (
        "class Q:\n    def __init__(self):\n        self._mine = 1\n"
        "def f(mq, other):\n    mq._mine\n    self_like = mq._is_writer\n"
        "    getattr(mq, '_group_writer_rank', None)\n    mq._group_writer_rank = 0\n    other.public\n"
    )
    bad = foreign_private_access(src)
    assert [b.split(": ", 1)[1] for b in bad] == [
        "mq._is_writer", "getattr(mq, '_group_writer_rank', None)", "mq._group_writer_rank"], bad
    assert foreign_private_access(src, {"_is_writer", "_group_writer_rank"}) == []


def test_no_module_touches_another_modules_private_names():
    """Only the endpoint calls the ring's step methods (``_writer_*``/``_reader_*``, see
    test_only_the_endpoint_calls_the_ring_steps); nothing else reaches into another module's
    objects: the torch half and the group layer use ``MessageQueue``'s public ``is_writer``,
    ``is_local_reader``, ``writer_rank``."""
    steps = _ring_steps()
    bad = {}
    for m, p in MODS.items():
        wraps = _wraps_protocol(p)
        allowed = (steps if m == "ringcast.endpoint" else C_METHODS if wraps else set()) | (C_TYPES if wraps else set())
        found = foreign_private_access(p.read_text(), allowed)
        if found:
            bad[str(p.relative_to(ROOT))] = found
    assert not bad, f"modules touching another module's private names: {bad}"


def _private_names(*mods: str) -> set[str]:
    """The private names the given modules of the package define (with the C methods of the
    extension types their classes subclass)."""
    return {n for m in mods for n in _defined_names(ast.parse(MODS[m].read_text())) | (C_METHODS if _wraps_protocol(MODS[m]) else set())
            if n.startswith("_")}


def test_the_harness_touches_no_private_names():
    """The stateful harness (tests/stateful) reaches no further into the package than the
    package's own modules do (ringcast.trace is one of them: the test above): no ``mq._endpoint``,
    ``run._fail`` from another module. The planted bugs (variants.py) subclass the ring's
    endpoints and cursors and the arena's sides and reorder their real steps: they may use the
    private names ringcast.ring, ringcast.endpoint and ringcast.arena define, nothing else."""
    planted = _private_names("ringcast.ring", "ringcast.endpoint", "ringcast.arena")
    bad = {}
    for p in sorted((ROOT / "tests" / "stateful").glob("*.py")):
        found = foreign_private_access(p.read_text(), planted if p.name == "variants.py" else set())
        if found:
            bad[str(p.relative_to(ROOT))] = found
    assert not bad, f"stateful harness modules touching another module's private names: {bad}"
