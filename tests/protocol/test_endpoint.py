"""The endpoints' per-message sequence, which is the protocol core's (src/ringcast/core/rc_core.c)
behind a thin binding (src/ringcast/binding/_protocol_*.c): its arguments, its bad uses, the view it lends
copy_out, exceptions on the way out, and the binding taking no protocol decision. The sequence's
order and its protocol are the spec's and the stateful harness's (tests/stateful); these are the
C functions' own edges."""

from __future__ import annotations

import inspect
import re
import threading
from pathlib import Path

import pytest

from ringcast import steps as steps_mod
from ringcast._protocol import _ReaderEndpoint, _WriterEndpoint
from ringcast.endpoint import Observer, ReaderEndpoint, WriterEndpoint
from ringcast.errors import EvictedError
from ringcast.waiting import WaitPolicy
from ringcast_lab._steps import ReaderSteps, WriterSteps

from test_ring import ring  # noqa: F401  (the fixture: 3 readers, 64 B chunks, 2 chunks)

POLICY = WaitPolicy(spin=0.0, recheck_interval=0.01)


def test_arguments_are_checked_by_name_and_position(ring):
    w, r = WriterEndpoint(ring, POLICY), ReaderEndpoint(ring, 0, POLICY)
    with pytest.raises(TypeError, match="missing required argument 'parts'"):
        w.publish()
    with pytest.raises(TypeError, match="at most 3 positional"):
        w.publish((b"x",), 0, None, True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'timout'"):
        w.publish((b"x",), timout=0)
    with pytest.raises(TypeError, match="multiple values for 'timeout'"):
        w.publish((b"x",), 0, timeout=0)
    with pytest.raises(TypeError, match="missing required argument 'copy_out'"):
        r.receive(timeout=0)
    with pytest.raises(TypeError, match="at most 1 positional"):
        r.wait_ready(0, 1)
    with pytest.raises(TypeError, match=r"claim\(\) got an unexpected keyword argument 'timout'"):
        w.claim(timout=0)
    for timed in (w.claim, r.wait_ready):
        with pytest.raises(ValueError, match="finite number of seconds >= 0, got -1"):
            timed(timeout=-1)
    with pytest.raises(TypeError, match="takes no arguments"):
        w._commit_write(0)
    assert ring.flags(0) == b"\x00\x00\x00\x00" and w.index == 0  # nothing ran
    # the signatures the C methods declare (help(), inspect) are the ones they parse
    assert str(inspect.signature(WriterEndpoint.publish)) == "(self, /, parts, timeout=None, overflow=None, *, split_payload=False, unpublished=None)"
    assert str(inspect.signature(ReaderEndpoint.receive)) == "(self, /, copy_out, timeout=None, deadline=None)"
    with pytest.raises(TypeError, match="at most 3 positional"):
        w.publish((b"x",), None, None, False)  # split_payload is keyword-only, as declared
    w.publish(parts=(b"ab",), timeout=0, overflow=None, split_payload=True, unpublished=None)
    assert r.receive(copy_out=lambda v: bytes(v[:2]), deadline=None, timeout=0) == (b"ab", None)
    r.release()


def test_an_endpoint_is_bound_once_to_its_side(ring):
    w = WriterEndpoint(ring, POLICY)
    with pytest.raises(RuntimeError, match="built once"):
        w._bind(ring.offsets(), -1, ring.reader_liveness, Observer(), w.counters, w.cancel, POLICY, False)
    with pytest.raises(ValueError, match="r=0 for a writer"):
        _WriterEndpoint()._bind(ring.offsets(), 0, ring.reader_liveness, Observer(), w.counters, w.cancel, POLICY, False)


def test_an_endpoint_never_built_from_a_ring_raises():
    for call in (lambda: _WriterEndpoint().publish((b"x",)), _WriterEndpoint().unread_readers, _WriterEndpoint().claim,
                 _WriterEndpoint()._commit_write, _WriterEndpoint()._abort_write, _ReaderEndpoint().wait_ready,
                 _ReaderEndpoint().ready, lambda: _ReaderEndpoint().receive(bytes)):
        with pytest.raises(RuntimeError, match="not bound"):
            call()


def test_the_view_is_released_after_copy_out_and_the_chunk_acked_if_it_raised(ring):
    w, r = WriterEndpoint(ring, POLICY), ReaderEndpoint(ring, 0, POLICY)
    w.publish((b"one",), timeout=0)
    kept = []
    assert r.receive(lambda v: kept.append(v) or "k", timeout=0) == ("k", None)
    with pytest.raises(ValueError, match="released"):
        bytes(kept[0])  # a view kept past the copy is released, as `with view:` releases it
    w.publish((b"two",), timeout=0)

    def bad(view):
        raise KeyError("copy")

    with pytest.raises(KeyError, match="copy"):
        r.receive(bad, timeout=0)
    assert ring.flags(1)[1] == 1 and r.index == 0  # acked and moved on all the same
    r.release()


def test_an_exception_in_the_ack_chains_the_copys(ring):
    w, r = WriterEndpoint(ring, POLICY), ReaderEndpoint(ring, 0, POLICY)
    w.publish((b"x",), timeout=0)

    def hook(action, side, index, reader):
        if action == "ReaderAck":
            raise RuntimeError("at the ack")

    def bad(view):
        raise KeyError("copy")

    steps_mod.set_step_hook(hook)
    try:
        with pytest.raises(RuntimeError, match="at the ack") as info:
            r.receive(bad, timeout=0)
    finally:
        steps_mod.set_step_hook(None)
    assert isinstance(info.value.__context__, KeyError)
    r.release()


def test_a_failing_unpublished_callback_chains_the_abort(ring):
    w = WriterEndpoint(ring, POLICY)

    def hook(action, side, index, reader):
        if action == "WriterWritePayload":
            raise TimeoutError("at the payload")

    def unpublished():
        raise LookupError("in unpublished")

    steps_mod.set_step_hook(hook)
    try:
        with pytest.raises(LookupError, match="in unpublished") as info:
            w.publish((b"x",), timeout=0, unpublished=unpublished)
    finally:
        steps_mod.set_step_hook(None)
    assert isinstance(info.value.__context__, TimeoutError)
    assert ring.flags(0)[0] == 0 and w.index == 0  # dropped: the chunk is still the next one's
    w.publish((b"y",), timeout=0)
    assert ring.flags(0)[0] == 1


SRC = Path(__file__).resolve().parents[2] / "src" / "ringcast"
#: the core's step functions (core/rc_steps.c) and sequence parts: only the core calls them
STEPS = re.compile(r"(?<![\w\".])(writer_(claim|clear_written|write_payload|clear_read_flag|publish|evict)|reader_(load_written|load_read_flag|"
                   r"copy|check_evicted|ack)|rc_notify|claim|clear_and_publish|begin|aborted|side_wait|park|look)\(")


#: the binding's functions that may look a name up: module init, set_clock (installs), _bind
BY_NAME_OK = {"PyInit__protocol", "set_clock", "ep_bind"}
BY_NAME = re.compile(r"\b(PyObject_GetAttrString|PyObject_GetAttr|_PyType_Lookup|PyImport_\w+|PyObject_CallMethod\w*)\(")


def _c_functions(code: str) -> dict[str, str]:
    """{name: body} of the top-level C function definitions in ``code`` (comments removed)."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^(\w+)\([^;{]*?\)\s*\{(.*?)^\}", code, flags=re.S | re.M)}


def test_the_binding_takes_no_protocol_decision():
    """Issue 38: the CPython binding (_protocol*.c) converts, fills the interface and maps errors;
    it calls no ring step itself (only the core orders them: each entry point calls one rc_*
    entry point), and it looks no name up on a per-message or per-wait path (issue 50: by-name
    lookups only at module init and bind). The core includes no CPython header."""
    binding = {p.name: p.read_text() for p in sorted((SRC / "binding").glob("_protocol*.c"))}
    assert "_protocol_sides.c" in binding and "_protocol_endpoint.c" in binding
    looked_up = set()
    for name, text in binding.items():
        code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        assert not STEPS.search(code), (name, STEPS.search(code).group(0))
        funcs = _c_functions(code)
        assert len(funcs) > 3 or name == "_protocol_counters.c", (name, sorted(funcs))
        looked_up |= {f for f, body in funcs.items() if BY_NAME.search(body)}
        assert len(BY_NAME.findall(code)) == sum(len(BY_NAME.findall(b)) for b in funcs.values()), name
    assert looked_up <= BY_NAME_OK, looked_up - BY_NAME_OK
    assert {"PyInit__protocol", "ep_bind"} <= looked_up  # the check reads the functions it means
    for core in sorted((SRC / "core").glob("*.[ch]")):
        assert "Python.h" not in core.read_text(), core.name


def test_the_check_sees_a_step_call():
    """The check above is not vacuous: a binding line calling a step is caught."""
    assert STEPS.search("    int rc = writer_publish(&c->st.w);")
    assert STEPS.search("rc = reader_ack(rd);") and not STEPS.search("rc = rc_reader_receive(&c->st.r, t, d, &m);")


def test_an_abort_after_a_read_flag_is_cleared_finishes_the_message():
    """spec/Ring.tla's FlagOut rule (models abort_code_n1, and abort_code_n1_drop must fail): with
    one chunk, reader 0 loads the old ``written = 1``, the writer clears reader 0's flag of the
    next message and an exception ends the enqueue at the second WriterClearReadFlag. Reader 0
    now loads its cleared flag and takes the chunk as its next message: dropping the message here
    (the old rule) let the next publish claim the chunk and write into it while reader 0 copied.
    The message is finished instead: published, and both readers receive it."""
    from _abort import Interrupt, RaiseAt
    from ringcast.errors import RingTimeoutError
    from ringcast.ring import ShmRingBuffer

    rb = ShmRingBuffer(2, 64, 1)
    w = WriterEndpoint(rb, POLICY)
    r0, r1 = ReaderEndpoint(rb, 0, POLICY), ReaderEndpoint(rb, 1, POLICY)
    try:
        w.publish((b"one",), timeout=0)
        assert r0.receive(lambda v: bytes(v[:3]), timeout=0) == (b"one", None)
        assert r1.receive(lambda v: bytes(v[:3]), timeout=0) == (b"one", None)
        steps0 = ReaderSteps(rb, 0)  # reader 0's single steps (the lab's), at the endpoint's chunk
        steps0.index = r0.index
        assert steps0._reader_load_written() == 1  # message one's written byte, still set
        hook = RaiseAt("WriterClearReadFlag", nth=2)
        with hook.installed(), hook.arm(), pytest.raises(Interrupt):
            w.publish((b"two",), timeout=0)
        assert hook.raised == 1
        assert steps0._reader_load_read_flag() == 0  # reader 0 may take the chunk as message two
        assert rb.flags(0)[0] == 1, "the message was dropped after a reader's flag was cleared"
        with pytest.raises(RingTimeoutError):  # the chunk is the readers' until they read message two
            w.publish((b"six",), timeout=0)
        assert r0.receive(lambda v: bytes(v[:3]), timeout=0) == (b"two", None)
        assert r1.receive(lambda v: bytes(v[:3]), timeout=0) == (b"two", None)
        w.publish((b"three",), timeout=0)
        assert r0.receive(lambda v: bytes(v[:5]), timeout=0) == (b"three", None)
    finally:
        r0.release(), r1.release(), steps0.release()
        rb.close()
        rb.unlink()


def test_a_parked_reader_evicted_by_the_writer_is_gone_in_the_core(ring):
    """The core decides a parked reader's eviction (reader_idle, the one predicate of
    ReaderCheckEvicted): the reader ends gone (RC_R_GONE) and raises EvictedError, now and at every
    later receive; the observer's check_writer is not asked once it is evicted."""
    checks = []

    class Watch(Observer):
        def check_writer(self, ep, waited):
            checks.append(ep.gone)

    r = ReaderEndpoint(ring, 0, POLICY, observer=Watch())
    got = []

    def receive():
        try:
            r.receive(bytes, timeout=20)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            got.append(e)

    t = threading.Thread(target=receive)
    t.start()
    while r.counters.parks == 0:  # parked (spin=0), checked the writer
        t.join(0.001)
    WriterSteps(ring)._writer_evict(0)  # the writer's WriterEvict, no wake-up: the reader's recheck finds it
    t.join(20)
    assert not t.is_alive() and len(got) == 1 and isinstance(got[0], EvictedError), got
    assert "while it waited for a message" in str(got[0])
    assert r.gone and checks and not any(checks)
    with pytest.raises(EvictedError):
        r.receive(bytes, timeout=0)
    r.release()
