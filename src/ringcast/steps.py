"""The step hook: one process-wide callback that test harnesses install to watch or stop a
process before each shared-memory access of the protocol. ``None`` in production.

The bottom of the package (it imports nothing): :mod:`ringcast.ring` (the ring's atomic steps),
:mod:`ringcast.waiting` (the eventcount's steps), :mod:`ringcast.endpoint` (the overflow
steps) and :mod:`ringcast.arena` (the tensor arena's slot steps, spec/Arena.tla) call it, each
right before the access it names, as::

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
told to go on; the trace recorder (:mod:`ringcast.trace.serial`) takes a global lock; the
reliability tests hang a process at a chosen step and kill it. In production each step costs
one ``is None`` test (tests/stateful/bench_hook.py measures it).
"""

from __future__ import annotations

__all__ = ["set_step_hook", "get_step_hook"]

#: The installed hook, read by the step methods as ``_steps.hook`` (a module attribute, so that
#: installing it takes effect in every module at once).
hook = None


def set_step_hook(fn) -> None:
    """Install (or, with None, remove) the process-wide step hook. For tests and tracing."""
    global hook
    hook = fn


def get_step_hook():
    return hook
