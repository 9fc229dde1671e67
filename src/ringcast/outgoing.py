"""One enqueue's message from its framing to its last remote frame: the writer's abort rule.

:class:`OutgoingMessage` is the transaction ``MessageQueue.enqueue`` runs for every message that
needs more than the inline fast path (out-of-band buffers, an overflow, remote readers). Its
docstring states the whole rule; the protocol core's half of it (drop or owe, once the publish
has begun) is ``aborted()`` in core/rc_core.c, which calls back :meth:`OutgoingMessage.drop`.
"""

from __future__ import annotations

from .framing import MARK_INLINE, frame
from .wire import SNDMORE

__all__ = ["OutgoingMessage"]


class OutgoingMessage:
    """One message on its way out, and what an exception on that way undoes.

    The steps, in the order :meth:`commit` and :meth:`send` take them; each may raise (a
    timeout, ``shutdown()``'s Cancelled, a ShmSpaceError, a signal handler's exception):

    1. *frame* (:func:`~ringcast.framing.frame`): the chunk's bytes, an overflow's wire frames,
       and large buffers placed in tensor-arena slots (``slots``, this object as its
       ``placement``);
    2. *reserve*: the pages of the chunk the publish will write (``RingPages.reserve_next``);
    3. *wire*: the frames for remote readers (``wire``; sealed, for aes-gcm), owed from now on;
    4. *publish*: the writer endpoint's sequence, WriterClaim .. WriterPublish. The protocol core
       decides an exception there: while nothing of the message has left the process (no read
       flag cleared, no overflow payload sent) it is dropped and the core calls :meth:`drop`
       (its ``unpublished`` callback); otherwise it stays owed and the next publish finishes it
       first (docs/spec.md, "Writer aborts"; spec/Ring.tla ``Droppable``);
    5. *send* (:meth:`send`): the remote frames, resumable where an exception stopped them.

    The rule: a message is dropped whole or delivered whole. An exception before the publish let
    anything out drops it: its arena slots are given back (no reader can map them), its remote
    send is cancelled, so no reader, local or remote, ever gets it. Once the publish let
    something out the message is the readers': the slots stay taken (readers map them;
    spec/Arena.tla ``arena_unplace_published``) and the remote send stays owed until
    :meth:`send` finishes it (the queue's next enqueue sends it first), so remote readers get
    what local ones get, in the same order.
    """

    __slots__ = ("arena", "slots", "wire", "sent")

    def __init__(self, arena) -> None:
        self.arena = arena  # the writer's tensor arena, or None
        self.slots = None  # the arena slots the message fills, until it is published or dropped
        self.wire = None  # its frames for remote readers (None: none, or cancelled)
        self.sent = 0  # how many of them the socket took

    def commit(self, ep, pages, parts: list, main_len: int, bufs: list, size: int, timeout: float | None, *,
               max_chunk_bytes: int, outbox, remote: bool, sealer) -> bool:
        """Steps 1-4 for the pickle ``parts`` (``main_len`` bytes, out-of-band ``bufs``, ``size``
        bytes in all): to local readers through writer endpoint ``ep`` (None: none) and the
        writer's ``pages``, and, if ``remote``, its wire frames made ready for :meth:`send`.
        Returns whether it overflowed its chunk. Raises what a step raised, having dropped the
        message if nothing of it is out."""
        overflow, published = None, False
        try:
            if ep is None:
                chunk = None
            elif not bufs and main_len < max_chunk_bytes:
                chunk = (MARK_INLINE, *parts)
            else:
                chunk, overflow = frame(parts, main_len, bufs, size, max_chunk_bytes, outbox,
                                        None if self.arena is None else self)
            if ep is not None and (n := sum(p.nbytes if type(p) is memoryview else len(p) for p in chunk)) > pages.floor:
                pages.reserve_next(ep, n)
            if remote:  # aes-gcm: sealed now, from the caller's buffers (the seal is their copy)
                wire = overflow if overflow is not None else outbox.frames(parts, main_len, bufs, size, lend=sealer is not None)
                self.wire = wire if sealer is None else sealer.seal(wire)
            if ep is not None:
                published = True  # from here on the core decides (it calls drop if nothing is out)
                ep.publish(chunk, timeout, overflow, unpublished=self.drop)
        except BaseException:
            if not published:
                self.drop()
            raise
        self.slots = None  # published: the readers' now
        return overflow is not None

    def send(self, send) -> None:
        """Step 5: send the wire frames not sent yet with ``send(frame, flags, copy=True)`` (a
        :class:`~ringcast.fanout.PeerSocket`'s: it sends the topic and the frames to each remote
        reader once it has the last frame); nothing if the message was dropped. Each is counted
        as soon as the socket took it, so an exception leaves the rest to the next call: the
        multipart message goes on where it stopped, never restarts or interleaves with the next
        (the socket finishes a message cut short when it is handed the same last frame again).
        This holds for an exception anywhere but between ZeroMQ taking a frame and the count: that
        frame then goes out twice, and remote readers refuse that torn message (its head counts
        its frames) with a PayloadError and go on with the next."""
        wire = self.wire
        if wire is None:
            return
        last = len(wire) - 1
        while self.sent <= last:
            k = self.sent
            send(wire[k], SNDMORE if k < last else 0, copy=True)
            self.sent = k + 1

    def drop(self) -> None:
        """The message will never be published: give its arena slots back (once) and cancel its
        remote send."""
        self.wire = None
        slots, self.slots = self.slots, None
        if slots is not None:
            self.arena.unplace(slots)
