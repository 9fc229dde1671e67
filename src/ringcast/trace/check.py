"""One recorded ring-level step checked against the spec: :func:`check_step`, used after every
step by the stateful harness (tests/stateful ``RingRun.step``, on the real segment) and by the
replay of a lock-serialised run (:mod:`ringcast.trace.serial`), so the two cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass

from .model import Conformance, RingModel, Violation


@dataclass
class StepRecord:
    """One step a process executed, and what was observed right after it: ``flags[c]`` the flag
    bytes of chunk ``c`` and ``data[c]`` its decoded payload (:func:`ringcast.trace.payload.decode`),
    read back from the segment; ``copied`` the value a ReaderCopy decoded (None otherwise)."""

    p: int
    action: str
    index: int
    extra: object
    flags: list
    data: list
    copied: object = None

    @classmethod
    def of(cls, p: int, action: str, index: int, extra, events: list, flags: list, data: list) -> "StepRecord":
        """The record of a step whose process reported ``events`` (a ReaderCopy's ``("copied", v)``)."""
        copied = [e[1] for e in events if e[0] == "copied"]
        return cls(p, action, index, extra, flags, data, (copied[0] if len(copied) == 1 else copied) if action == "ReaderCopy" else None)


def check_step(model: RingModel, rec: StepRecord, *, cursors: bool = True, trace: list | None = None) -> list:
    """Apply ``rec`` to ``model`` (the spec's action for that process, on that chunk) and check
    the state after it: a copy returns the spec's data, the segment's flags and payloads equal
    the spec's, and the spec's invariants (plus the harness's Cursors, if ``cursors``) hold.
    Returns the spec steps taken (implicit ones included: :meth:`RingModel.step`), also appended
    to ``trace`` as soon as the model takes them (so a trace ends with the step that broke an
    invariant); raises :class:`Conformance` or :class:`Violation`."""
    expect_copy = model.data[model.i[rec.p]] if rec.action == "ReaderCopy" else None
    taken = model.step(rec.p, rec.action, rec.index, rec.extra)
    if trace is not None:
        trace.extend(taken)
    if rec.action == "ReaderCopy" and rec.copied != expect_copy:
        raise Conformance(f"{model.name(rec.p)} copied payload value {rec.copied} but the spec's chunk holds {expect_copy}")
    check_state(model, rec.flags, rec.data, cursors)
    return taken


def check_state(model: RingModel, flags: list, data: list | None = None, cursors: bool = True) -> None:
    """The segment's flag bytes (and decoded payloads, unless ``data`` is None) equal the spec's,
    and the spec's invariants (plus Cursors, if ``cursors``) hold."""
    for c in range(model.N):
        if bytes(flags[c]) != model.flags(c):
            raise Conformance(f"chunk {c} flags in the segment are {bytes(flags[c]).hex()} but the spec's are "
                              f"{model.flags(c).hex()}")
    for c in range(model.N) if data is not None else ():
        if data[c] != model.data[c]:
            raise Conformance(f"chunk {c} payload reads as {data[c]} but the spec's data is {model.data[c]}")
    bad = model.violations(cursors)
    if bad:
        raise Violation("; ".join(bad))


def observe(ring, decode) -> tuple[list, list]:
    """(flags, data) of every chunk of ``ring`` as they are now (``decode``: payload -> spec value)."""
    flags = [bytes(ring.flags(c)) for c in range(ring.max_chunks)]
    data = []
    for c in range(ring.max_chunks):
        with ring.get_data(c) as view:
            data.append(decode(view))
    return flags, data
