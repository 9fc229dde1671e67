"""The step hook and the clock: one process-wide callback that test harnesses install to watch or stop a
process before each shared-memory access of the protocol. ``None`` in production.

The bottom of the package (it imports nothing of ours but the C extensions, which it checks):
every step of the protocol core (src/ringcast/core: the ring's and the eventcount's steps,
ParkRecheck, the overflow steps; its single tracepoint ``rc_step_hook``, a C function pointer that
``ringcast._protocol`` points at a trampoline to this hook while one is set, NULL otherwise) and
:mod:`ringcast.arena` (the tensor arena's slot steps, spec/Arena.tla) call it, each right before
the access it names, as::

    hook(action, side, index, reader)

* ``action`` - the spec action about to run (``"WriterClaim"``, ``"ReaderAck"``, ``"ParkSleep"``,
  ... one name per TLA+ action of spec/Ring.tla, see docs/protocol.md; ``"ArenaClaim"``, ...
  for spec/Arena.tla);
* ``side`` - ``"writer"`` or the local reader index of the process taking the step;
* ``index`` - the chunk that side is at (its cursor); for an arena step the slot (-1: none);
* ``reader`` - the reader an action acts on for the writer (``WriterClearReadFlag``,
  ``WriterEvict``, ``ArenaClearReleased``), else ``None``.

Everything a harness needs comes as arguments: a hook never inspects its caller's frame. The
stateful harness (tests/stateful/worker.py) reports each call to its controller and blocks until
told to go on; the trace recorder (:mod:`ringcast_lab.trace.serial`) takes a global lock; the
reliability tests hang a process at a chosen step and kill it. In production each step costs
one ``is None`` test, or a NULL test in C (tests/stateful/bench_hook.py measures them).

:data:`hook` is one value, kept by the C steps' module (its tracepoint) and mirrored in this
module's attribute, so that a Python step's check (the arena's) is one attribute read, not a call
into the extension. Every way of setting it goes through this module and sets both, the C side
first (which refuses a value that is neither callable nor None): ``set_step_hook(fn)`` and
assigning ``steps.hook`` (``monkeypatch.setattr(steps, "hook", fn)``); ``get_step_hook()`` and
reading ``steps.hook`` give it back. Nothing else calls ``_protocol.set_hook``.

:data:`clock` is the runtime's clock: every deadline, every spin budget and every no-futex sleep
of a wait reads it (``clock.monotonic()``, ``clock.sleep(seconds)``). It is the :mod:`time` module
in production; a harness with virtual time (the trace recorder, tests/protocol/test_waiting.py) installs
its own with ``set_clock(clock)`` (or by assigning ``steps.clock``), which sets the binding's
copy too (``_protocol.set_clock``, which reads the two methods once). Each endpoint copies the
clock installed when it is built into its interface (``io->now``, ``io->sleep``: the real
clock's C functions when none is installed), so a harness installs its clock before it builds
its endpoints (or queues), and the core then calls the methods, never looks them up.
"""

from __future__ import annotations

import sys
import time
import types

try:  # the package's C code; checked here, at the bottom, so that a broken install says how to fix it
    from . import _atomics, _protocol  # noqa: F401 - _atomics: imported for the check only
except ImportError as e:  # pragma: no cover - a broken install
    raise ImportError(
        f"ringcast's C extensions are not built ({e}): install a C compiler (e.g. apt-get install gcc python3-dev) "
        "and reinstall ringcast (pip install -e . in a checkout) so that ringcast._protocol and ringcast._atomics are built"
    ) from e

__all__ = ["set_step_hook", "get_step_hook", "set_clock", "get_clock"]


#: the installed step hook, or None (read by the Python steps as ``_steps.hook``; the C steps test
#: their own pointer, the same value: assigning it sets both, :class:`_StepsModule`)
hook = _protocol.get_hook()


def set_step_hook(fn) -> None:
    """Install (or, with None, remove) the process-wide step hook. For tests and tracing."""
    sys.modules[__name__].hook = fn


def get_step_hook():
    return hook


#: the runtime's clock (module docstring): the time module, or a harness's virtual one
clock = time


def set_clock(c) -> None:
    """Install ``c`` (an object with ``monotonic()`` and ``sleep(seconds)``; None: the real
    :mod:`time`) as the runtime's clock. For tests and tracing."""
    sys.modules[__name__].clock = time if c is None else c


def get_clock():
    return clock


class _StepsModule(types.ModuleType):
    """This module, whose :data:`hook` is installed in the C steps whenever it is assigned."""

    def __setattr__(self, name: str, value) -> None:
        if name == "hook":
            _protocol.set_hook(value)  # first: a refused value changes neither
        elif name == "clock":
            _protocol.set_clock(value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _StepsModule
