"""The writer's abort rule, step by step (ringcast.outgoing.OutgoingMessage): an exception at each
step of a message's way out either drops the message whole (arena slots given back, remote send
cancelled) or leaves it whole (slots kept, remote send owed and resumable), and which one depends
only on whether the publish let something out (the protocol core's decision, which it reports
by calling ``unpublished``). The collaborators are stand-ins that record what was done to them
and raise where a test says; the end-to-end paths (real rings, arenas and sockets, an exception
at every step point of the writer) are tests/protocol/test_endpoint.py's, tests/segment/test_arena.py's and
tests/remote/test_wire_exceptions.py's."""

from __future__ import annotations

import pickle

import pytest

from ringcast.errors import ShmSpaceError
from ringcast.framing import Pickler
from ringcast.outgoing import OutgoingMessage
from ringcast.wire import Outbox

MCB = 1024  # the chunk's max_chunk_bytes: a 4 KiB buffer goes to the arena or overflows


class Boom(BaseException):
    """A signal handler's exception, say: not an Exception."""


class Arena:
    min_bytes = 1024

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.placed, self.given_back = fail, [], []

    def place(self, bufs, sizes):
        slots = [0 if n >= self.min_bytes else -1 for n in sizes]
        self.placed.append(slots)
        if self.fail:
            raise Boom("arena placement")
        return slots

    def unplace(self, slots) -> None:
        self.given_back.append(slots)


class Pages:
    floor = 0

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def reserve_next(self, ep, n: int) -> None:
        if self.fail:
            raise ShmSpaceError(f"no room for {n} bytes")


class Sealer:
    def seal(self, wire):
        raise Boom("seal")


class Endpoint:
    """A writer endpoint whose publish raises as the core would: ``dropped`` (nothing of the
    message out: the core calls ``unpublished`` first), ``owed`` (something out: it does not), or
    not at all."""

    def __init__(self, raises: str | None = None) -> None:
        self.raises, self.published = raises, []

    def publish(self, chunk, timeout, overflow, unpublished) -> None:
        if self.raises == "dropped":
            unpublished()
            raise Boom("publish, nothing out")
        if self.raises == "owed":
            raise Boom("publish, the read flags cleared")
        self.published.append(chunk)


def _message():
    return Pickler().dump({"x": pickle.PickleBuffer(bytearray(4096))})


def _commit(msg, ep=None, pages=None, remote=True, sealer=None):
    parts, main_len, bufs, size = _message()
    outbox = Outbox()
    outbox.seq = 1
    return msg.commit(Endpoint() if ep is None else ep, pages or Pages(), parts, main_len, bufs, size, None,
                      max_chunk_bytes=MCB, outbox=outbox, remote=remote, sealer=sealer)


def test_published_message_keeps_its_slots_and_owes_its_remote_send():
    arena, ep = Arena(), Endpoint()
    msg = OutgoingMessage(arena)
    assert _commit(msg, ep) is False  # in the arena: no overflow
    assert ep.published and arena.given_back == [] and msg.slots is None and msg.wire is not None
    sent = []
    msg.send(lambda f, flags, copy: sent.append(flags))
    assert len(sent) == len(msg.wire) and sent[-1] == 0 and msg.sent == len(sent)


def test_abort_in_the_arena_placement_gives_the_slots_back():
    arena = Arena(fail=True)
    msg = OutgoingMessage(arena)
    with pytest.raises(Boom, match="arena"):
        _commit(msg)
    assert arena.given_back == [] and msg.slots is None and msg.wire is None  # nothing was placed


def test_abort_at_the_page_reservation_drops_the_message():
    arena = Arena()
    msg = OutgoingMessage(arena)
    with pytest.raises(ShmSpaceError):
        _commit(msg, pages=Pages(fail=True))
    assert arena.given_back == arena.placed == [[0]] and msg.wire is None


def test_abort_in_the_seal_drops_the_message():
    arena = Arena()
    msg = OutgoingMessage(arena)
    with pytest.raises(Boom, match="seal"):
        _commit(msg, sealer=Sealer())
    assert arena.given_back == [[0]] and msg.wire is None
    msg.send(lambda *a, **k: pytest.fail("a dropped message sends nothing"))


def test_abort_in_the_publish_with_nothing_out_drops_the_message():
    arena = Arena()
    msg = OutgoingMessage(arena)
    with pytest.raises(Boom, match="nothing out"):
        _commit(msg, Endpoint("dropped"))
    assert arena.given_back == [[0]] and msg.slots is None and msg.wire is None


def test_abort_in_the_publish_with_something_out_keeps_the_message():
    """The core owes the message to the next publish: its slots are the readers' (they may map
    them) and its remote send stays owed."""
    arena = Arena()
    msg = OutgoingMessage(arena)
    with pytest.raises(Boom, match="read flags"):
        _commit(msg, Endpoint("owed"))
    assert arena.given_back == [] and msg.slots == [0] and msg.wire is not None


def test_abort_in_the_remote_send_resumes_where_it_stopped():
    msg = OutgoingMessage(None)
    _commit(msg)
    n = len(msg.wire)
    assert n >= 2, msg.wire
    sent = []

    def send_once_then_fail(f, flags, copy):
        if sent:
            raise Boom("send")
        sent.append(f)

    with pytest.raises(Boom, match="send"):
        msg.send(send_once_then_fail)
    assert msg.sent == 1
    rest = []
    msg.send(lambda f, flags, copy: rest.append(f))
    assert sent + rest == list(msg.wire) and msg.sent == n


def test_a_message_to_remote_readers_only_never_touches_ring_or_arena():
    msg = OutgoingMessage(None)
    parts, main_len, bufs, size = _message()
    outbox = Outbox()
    outbox.seq = 1
    assert msg.commit(None, None, parts, main_len, bufs, size, None, max_chunk_bytes=0, outbox=outbox, remote=True,
                      sealer=None) is False
    assert msg.wire is not None and msg.slots is None
