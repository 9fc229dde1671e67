"""Test builds of ringcast._protocol: the same sources (src/ringcast/binding/_protocol.c and the protocol
core it includes) compiled with test-only ``-D`` switches, loaded beside the real module, and the
Python modules over it (waiting, endpoint) recompiled on that build, so that its endpoint
classes run the test build's core. setup.py never passes these switches; each build says which it
has (``TRACEPOINTS``, ``PLANTED``).

* ``RINGCAST_NO_TRACEPOINTS``: every tracepoint compiled out (bench_hook.py: what they cost);
* ``RINGCAST_TEST_PLANTED``: the planted bugs of core/rc_planted.c, chosen per endpoint with
  the lab's test extension, ``ringcast_lab._steps._plant(endpoint, name)`` (variants.py).

A build is compiled once per process, in a scratch directory removed once it is loaded."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
import sysconfig
import tempfile
import types
from pathlib import Path

PROTOCOL_C = Path(__file__).resolve().parents[2] / "src" / "ringcast" / "binding" / "_protocol.c"
_builds: dict[tuple, types.ModuleType] = {}


def protocol_build(*defines: str) -> types.ModuleType:
    """ringcast._protocol compiled from the checkout with ``-D<define>`` for each of ``defines``
    (once per process; loaded under its own file, so the real module is untouched)."""
    key = tuple(sorted(defines))
    if key not in _builds:
        with tempfile.TemporaryDirectory(prefix="ringcast-build-") as tmp:  # loaded, the file can go
            out = Path(tmp) / ("_protocol" + sysconfig.get_config_var("EXT_SUFFIX"))
            cmd = ["cc", "-O2", "-shared", "-fPIC", *(f"-D{d}" for d in key), "-I", sysconfig.get_paths()["include"],
                   "-o", str(out), str(PROTOCOL_C)]
            subprocess.run(cmd, check=True, capture_output=True, timeout=300)
            spec = importlib.util.spec_from_file_location("ringcast._protocol", out)
            real = sys.modules["ringcast._protocol"]
            try:
                mod = importlib.util.module_from_spec(spec)  # a single-phase extension: it also
                spec.loader.exec_module(mod)                 # registers itself in sys.modules
            finally:
                sys.modules["ringcast._protocol"] = real
        _builds[key] = mod
    return _builds[key]


def module_on(mod, build, replace: dict | None = None, transform=None) -> dict:
    """``mod`` (ringcast.waiting, .endpoint ...) recompiled with ``build`` as its
    ``_protocol`` (``from . import _protocol`` is dropped and the name given); ``replace``
    overrides names it imported, ``transform`` (an ast.NodeTransformer) edits it first. Its
    namespace."""
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(mod)))

    class DropImport(ast.NodeTransformer):
        def visit_ImportFrom(self, node):
            return None if node.level == 1 and [a.name for a in node.names] == ["_protocol"] else node

    if transform is not None:
        tree = transform.visit(tree)
    tree = ast.fix_missing_locations(DropImport().visit(tree))
    name = f"ringcast._{mod.__name__.rsplit('.', 1)[1]}_test_build"
    m = types.ModuleType(name)
    m.__package__, m.__file__ = "ringcast", mod.__file__
    m.__dict__["_protocol"] = build
    sys.modules[name] = m  # dataclasses look their module up while the class is built
    try:
        exec(compile(tree, mod.__file__ + " (test build)", "exec"), m.__dict__)
    finally:
        del sys.modules[name]
    m.__dict__.update(replace or {})
    return m.__dict__


def endpoints_on(build) -> dict:
    """ringcast.endpoint's namespace recompiled on ``build``, over waiting recompiled on it."""
    wns = module_on(importlib.import_module("ringcast.waiting"), build)
    names = {k: wns[k] for k in ("Counters", "Cancel", "WaitPolicy")}
    return module_on(importlib.import_module("ringcast.endpoint"), build, names)


def forward_hook(build) -> None:
    """The test build's tracepoints call the real module's step hook (ringcast.steps), whatever it
    is when they run: the harness installs its hook through the real module."""
    from ringcast import _protocol

    def forward(action, side, index, reader):
        h = _protocol.get_hook()
        if h is not None:
            h(action, side, index, reader)

    build.set_hook(forward)
