"""The packages' structure, read with ``ast`` (nothing is imported, but for the round trip):

* two packages: the runtime ``ringcast`` and the lab ``ringcast_lab`` (trace, stress, bench, TLC
  runner, induction, the command, the litmus C); the runtime holds none of the lab's code and
  never imports it, at any depth; a queue's round trip loads no lab module;
* the lab uses the runtime only through its public names: no ``_``-prefixed runtime module or
  name, no assignment into a runtime module (the step hook and the clock of :mod:`ringcast.steps`
  are how a harness steers the runtime);
* C lives in per-extension folders (the runtime's ``core/`` and ``binding/``, the lab's
  ``litmus/``), never among Python modules;
* no import cycle among the modules of both packages, counting imports inside functions;
* no module over the project's hard limit of 500 lines: both packages (their C files too), tools/
  and the stateful harness;
* the TLC library (ringcast_lab.tlc) imports nothing of the protocol;
* the ring's protocol steps (``_writer_*`` / ``_reader_*`` methods of the cursors, whose types
  ringcast/ring.py's classes subclass; C functions of src/ringcast/core/rc_steps.c) are called by
  the endpoint layer alone: in C by the protocol core (core/rc_core.c, rc_wait.c; the binding
  binding/_protocol*.c names none), by no Python module of the package, and by no
  program of the stateful harness or the trace recorder (only the planted-bug variants may),
  which drive the endpoints instead; those programs exist once (ringcast_lab.trace.child);
* no module reads or writes another module's private names (``mq._is_writer``,
  ``getattr(mq, "_x")``): ``self._x`` / ``cls._x`` and names the module defines itself are fine;
  that holds for both packages and the stateful harness, whose planted-bug variants alone may use
  the private names of the classes they subclass;
* no step hook looks at its caller's frame.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _csource import c_unit, spec_tagged

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PKG = SRC / "ringcast"
LAB = SRC / "ringcast_lab"
PACKAGES = ("ringcast", "ringcast_lab")
#: the C extensions, by module name: the folder of their sources
EXTENSIONS = {"ringcast._protocol": PKG / "binding", "ringcast._atomics": PKG / "binding", "ringcast_lab._litmus": LAB / "litmus",
              "ringcast_lab._steps": LAB / "steps"}
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    mods = {}
    for top in PACKAGES:
        for f in sorted((SRC / top).rglob("*.py")):
            parts = f.relative_to(SRC).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = f
    return mods


MODS = _modules()
RUNTIME = {m for m in MODS if m.split(".")[0] == "ringcast"}
LAB_MODS = {m for m in MODS if m.split(".")[0] == "ringcast_lab"}


def _owner(name: str) -> str | None:
    """The module of the packages that importing ``name`` loads (a submodule, or the package
    whose attribute it is); None outside them or for a C extension."""
    while name and name not in MODS:
        name = name.rpartition(".")[0]
    return name or None


def _is_extension(name: str) -> bool:
    return name in EXTENSIONS


def _imported(mod: str, path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` for each import of ``mod`` at any depth (functions included): the
    absolute module a statement names (relative ones resolved) and the names it takes from it
    (``[]`` for ``import x``)."""
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            out.append((prefix, [a.name for a in node.names]))
    return out


def _imports(mod: str, path: Path) -> set[str]:
    """Every module of the packages that ``mod`` imports, at any depth (functions included)."""
    out = set()
    for prefix, taken in _imported(mod, path):
        # "from . import x" and "from .pkg import sub" load submodules (a C extension is a
        # leaf: it imports nothing of ours); other names are attributes of ``prefix``
        names = [prefix] if not taken else []
        for a in taken:
            sub = f"{prefix}.{a}"
            if sub in MODS:
                names.append(sub)
            elif not _is_extension(sub) and not _is_extension(prefix):
                names.append(prefix)
        for n in names:
            if n.split(".")[0] not in PACKAGES:
                continue
            owner = _owner(n)
            if owner is not None and owner != mod:
                out.add(owner)
    return out


def test_the_runtime_holds_no_lab_code():
    """src/ringcast/ has no trace, stress, bench, TLC runner, command or litmus code, and its C
    lives in per-extension folders (core/: the protocol core; binding/: the CPython extensions)."""
    names = {p.name for p in PKG.iterdir() if p.name != "__pycache__"}
    assert not names & {"trace", "stress", "bench", "tlc", "cli.py", "_bundled", "induction", "litmus"}, names
    assert not [p.name for p in PKG.rglob("*") if "litmus" in p.name], "litmus code in the runtime"
    assert {p.parent.name for p in PKG.rglob("*.[ch]")} == {"core", "binding"}
    assert {p.parent for p in LAB.rglob("*.[ch]")} == {LAB / "litmus", LAB / "steps"}  # the lab's: litmus, single steps
    for mod, folder in EXTENSIONS.items():
        assert (folder / (mod.rpartition(".")[2] + ".c")).is_file(), mod


def test_the_runtime_never_imports_the_lab():
    g = _graph()
    bad = {m: sorted(g[m] & LAB_MODS) for m in sorted(RUNTIME) if g[m] & LAB_MODS}
    assert not bad, f"runtime modules importing the lab: {bad}"
    text = [str(p.relative_to(ROOT)) for p in PKG.rglob("*.py") if re.search(r"\bringcast_lab\b", p.read_text().split('"""', 2)[-1])]
    assert not text, f"runtime modules naming the lab outside their docstring: {text}"


def _runtime_module_aliases(tree: ast.AST) -> set[str]:
    """The local names a lab module binds to runtime modules (``import ringcast.queue as q``)."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {a.asname or a.name.split(".")[0] for a in n.names if a.name.split(".")[0] == "ringcast"}
        elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "ringcast" and not n.level:
            out |= {a.asname or a.name for a in n.names if f"{n.module}.{a.name}" in MODS}
    return out


def lab_runtime_misuse(mod: str, path: Path) -> list[str]:
    """How the lab module ``mod`` reaches past the runtime's public names: a private runtime module
    or name imported, or an assignment into a runtime module."""
    bad = []
    for prefix, taken in _imported(mod, path):
        if prefix.split(".")[0] != "ringcast":
            continue
        if any(part.startswith("_") for part in prefix.split(".")[1:]):
            bad.append(f"imports the private module {prefix}")
        bad += [f"imports the private name {prefix}.{a}" for a in taken if a.startswith("_") and a != "*"]
    tree = ast.parse(path.read_text())
    aliases = _runtime_module_aliases(tree)
    for n in ast.walk(tree):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for e in ast.walk(t):
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id in aliases:
                    bad.append(f"{e.lineno}: assigns into a runtime module: {ast.unparse(e)}")
    return bad


def test_the_lab_uses_only_the_runtimes_public_names():
    bad = {m: found for m in sorted(LAB_MODS) if (found := lab_runtime_misuse(m, MODS[m]))}
    assert not bad, f"lab modules reaching past the runtime's public names: {bad}"


def test_the_lab_check_sees_private_imports_and_patching(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import ringcast.queue as q\nfrom ringcast import _protocol\nfrom ringcast.ring import _helper\n"
                 "def f():\n    from ringcast.queue import MessageQueue\n    q.time = None\n")
    assert [b.split(": ", 1)[-1] for b in lab_runtime_misuse("ringcast_lab.x", f)] == [
        "imports the private name ringcast._protocol", "imports the private name ringcast.ring._helper",
        "assigns into a runtime module: q.time"]


def test_a_queue_round_trip_loads_no_lab_module():
    """``import ringcast`` and a message through a queue (writer and reader in one process)
    leave no module of the lab in ``sys.modules``."""
    code = """if True:
        import sys, threading
        from ringcast import MessageQueue
        w = MessageQueue(1, 1, max_chunk_bytes=256, max_chunks=2)
        r = MessageQueue.create_from_handle(w.export_handle(), 0)
        t = threading.Thread(target=r.wait_until_ready, args=(10,))
        t.start(); w.wait_until_ready(10); t.join()
        w.enqueue({"step": 1}); assert r.dequeue(timeout=10) == {"step": 1}
        r.close(); w.close()
        print(sorted(m for m in sys.modules if m.split(".")[0] == "ringcast_lab" or m in ("matplotlib", "numpy", "torch")))
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


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


#: the runtime's layers, bottom up (README.md's layout): a module imports only its own layer's
#: modules and lower ones
LAYERS = [
    ["errors"],
    ["identity", "headroom", "locator", "shm", "pollers"],  # segment
    ["steps", "layout", "atomics", "ring", "pages", "waiting", "endpoint", "arena"],  # protocol
    ["pickling", "framing", "wire", "remote", "sealing", "fanout", "channel"],  # transport
    ["handshake", "observers", "roles", "groups", "lifetime", "compat", "outgoing", "events", "queue"],  # front
    ["torch"],
    [""],  # the package itself: its public names
]


def _layer(mod: str) -> int:
    name = mod.split(".")[1] if "." in mod else ""
    return next(k for k, layer in enumerate(LAYERS) if name in layer)


def test_layers_point_down():
    """Every runtime module is in one layer, and imports nothing of a layer above its own (the
    ring and the endpoint: no ZeroMQ, no pickling, no queue, no torch)."""
    g = _graph()
    assert sorted(m for m in RUNTIME if m.count(".") <= 1) == sorted(
        "ringcast" + (f".{n}" if n else "") for layer in LAYERS for n in layer), "a module without a layer, or a layer without it"
    up = {m: sorted(o for o in g[m] & RUNTIME if _layer(o) > _layer(m)) for m in sorted(RUNTIME)}
    assert not {m: o for m, o in up.items() if o}, up
    assert g["ringcast.steps"] == set(), g["ringcast.steps"]
    assert g["ringcast.identity"] == set(), g["ringcast.identity"]


def test_modules_are_not_too_long():
    files = [*MODS.values(), *sorted((ROOT / "tools").rglob("*.py")), *sorted((ROOT / "tests" / "stateful").glob("*.py")),
             *sorted(PKG.rglob("*.[ch]")), *sorted(LAB.rglob("*.[ch]"))]  # the C code too: each file of a translation unit counts alone
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_tests_are_grouped_by_component():
    """tests/ keeps shared helpers at its top and each test file in its component's folder, each
    folder named in README.md's map, each file name once (docs cite tests by file name)."""
    tests = ROOT / "tests"
    assert not sorted(p.name for p in tests.glob("test_*.py")), "a test file at the top of tests/: move it to its component"
    folders = {p.parent.name for p in tests.glob("*/test_*.py")}
    readme = (ROOT / "README.md").read_text()
    assert not {f for f in folders if f"`{f}/`" not in readme}, "a test folder missing from README.md's map"
    names = [p.name for p in tests.rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_the_tlc_library_imports_nothing_of_the_protocol():
    """ringcast_lab.tlc (the TLC driver: ringcast spec, tools/tlc.py, trace validation) imports only
    itself and the shipped files (ringcast_lab._bundled); the package imports no repository
    script (tools/ ships in no wheel)."""
    g = _graph()
    tlc = {m for m in MODS if m == "ringcast_lab.tlc" or m.startswith("ringcast_lab.tlc.")}
    assert len(tlc) >= 3, tlc
    for m in tlc:
        assert g[m] <= tlc | {"ringcast_lab._bundled"}, (m, g[m])
    bad = [m for m, p in MODS.items() for prefix, _ in _imported(m, p) if prefix.split(".")[0] == "tools"]
    assert not bad, bad


#: the runtime's C extension (one translation unit: the endpoints, which run whole sequences), and
#: the names of its methods; the single steps are the lab's test extension's (ringcast_lab._steps)
PROTOCOL_C = c_unit(PKG / "binding" / "_protocol.c")
C_METHODS = set(re.findall(r'^\s*\{"(\w+)", \(PyCFunction\)', PROTOCOL_C, flags=re.M))
STEPS_C = c_unit(LAB / "steps" / "_steps.c")
STEP_METHODS = set(re.findall(r'^\s*\{"(\w+)", \(PyCFunction\)', STEPS_C, flags=re.M))
#: the extension's private types (``_protocol._WriterSteps``): they exist to be subclassed by the
#: modules that import it (ring.py, endpoint.py)
C_TYPES = set(re.findall(r'"ringcast\._protocol\.(_\w+)"', PROTOCOL_C))


def _ring_steps() -> set[str]:
    """The ring's steps: the ``_writer_*`` / ``_reader_*`` methods of the lab's single-step types."""
    return {n for n in STEP_METHODS if n.startswith(("_writer_", "_reader_"))}


def _wraps_protocol(path: Path) -> bool:
    """Does the module import ringcast._protocol (``from . import _protocol``, and so define its
    methods' names on its classes)?"""
    return any(isinstance(n, ast.ImportFrom) and n.level == 1 and n.module is None and any(a.name == "_protocol" for a in n.names)
               for n in ast.walk(ast.parse(path.read_text())))


def test_the_steps_are_read_from_the_c_code():
    assert {"_writer_claim", "_writer_publish", "_reader_copy", "_reader_ack"} <= _ring_steps()
    assert {"_park_announce", "_notify_load_waiters", "notify", "_park_recheck"} <= STEP_METHODS
    # the runtime's extension has production entry points only: no single step, no EventCount
    assert not {n for n in C_METHODS if n.startswith(("_writer_", "_reader_", "_park_", "_notify_"))} | {"notify"} & C_METHODS
    assert "ringcast._protocol.EventCount" not in PROTOCOL_C and "\"_plant\"" not in PROTOCOL_C
    # waiting and endpoint wrap its types; steps checks that it is built and keeps the hook in it
    assert {m for m, p in MODS.items() if _wraps_protocol(p)} == {"ringcast.waiting", "ringcast.endpoint", "ringcast.steps"}


def _c_step_functions() -> dict[str, str]:
    """{C function: the ring step (method name) it is} from the cursors' method tables."""
    return {fn: name for name, fn in re.findall(r'^\s*\{"(\w+)", \(PyCFunction\)(\w+),', STEPS_C, flags=re.M)
            if name in _ring_steps()}


def _core_step_functions() -> set[str]:
    """The protocol core's step functions: core/rc_steps.c's definitions tagged ``Spec: <Action>``."""
    return {fn for fn, actions in spec_tagged(PKG / "core" / "rc_steps.c").items() if actions}


def test_only_the_core_calls_the_c_steps():
    """A ring step's C function (core/rc_steps.c) is called only by the protocol core (rc_core.c,
    rc_wait.c, and the test build's rc_planted.c): the CPython binding (_protocol*.c) names none
    (tests/protocol/test_endpoint.py checks its calls too), and the core's sequence calls each."""
    fns = _core_step_functions()
    assert {"writer_claim", "writer_publish", "reader_copy", "reader_ack", "reader_check_evicted"} <= fns, fns
    bad = {f"{f.name}: {fn}" for f in sorted((PKG / "binding").glob("_protocol*.c")) for fn in fns if re.search(rf"\b{fn}\b", f.read_text())}
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
    callers = {m for m, p in MODS.items() if _step_calls(p, steps)}
    assert callers == set(), callers


def test_harness_and_trace_programs_drive_the_endpoint():
    """The stateful harness's programs (tests/stateful, except the planted-bug variants) and the
    trace recorder call no ring step: they run the endpoints MessageQueue runs."""
    steps = _ring_steps()
    files = [p for p in sorted((ROOT / "tests" / "stateful").glob("*.py")) if p.name != "variants.py"]
    files += sorted((LAB / "trace").glob("*.py"))
    bad = {str(p.relative_to(ROOT)): sorted(c) for p in files if (c := _step_calls(p, steps))}
    assert not bad, f"ring steps called outside the endpoint: {bad}"
    # one set of child programs (ringcast_lab.trace.child), stepped through pipes by the harness and
    # serialised by a lock by the recorders: nothing else of either runs the protocol's sides
    programs = {"publish", "receive", "enqueue", "dequeue"}
    callers = {str(p.relative_to(ROOT)): sorted(c) for p in files if p.name != "bench_hook.py"
               and (c := programs & {n.attr for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Attribute)})}
    assert callers == {"src/ringcast_lab/trace/child.py": sorted(programs)}, callers


@pytest.mark.parametrize("where", ["src/ringcast", "src/ringcast_lab", "tests/stateful", "tests"])
def test_no_frame_inspection(where):
    files = sorted((ROOT / where).glob("**/*.py"))
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
    package's own modules do (ringcast_lab.trace is one of them: the test above): no ``mq._endpoint``,
    ``run._fail`` from another module. The planted bugs (variants.py) subclass the ring's
    endpoints and the arena's sides and reorder their real steps: they may use the private names
    ringcast.endpoint and ringcast.arena define, nothing else."""
    planted = _private_names("ringcast.endpoint", "ringcast.arena")
    bad = {}
    for p in sorted((ROOT / "tests" / "stateful").glob("*.py")):
        found = foreign_private_access(p.read_text(), planted if p.name == "variants.py" else set())
        if found:
            bad[str(p.relative_to(ROOT))] = found
    assert not bad, f"stateful harness modules touching another module's private names: {bad}"
