"""Clients of a writer's sockets that are not its readers: strays, strangers and misbehaving
holders of the handle, for the channel security tests."""

from __future__ import annotations

import threading

import zmq
from zmq.utils.monitor import recv_monitor_message

from ringcast import channel


class Client:
    """A client of a writer's socket that is not one of its readers: an XSUB (or a SUB subscribed
    to ``subscribe``, or a DEALER, the socket type the writer's TCP ROUTER talks to, which sends
    ``b"\x01" + subscribe`` once connected), over TCP with or without the handle's credentials.
    Its ZMTP events are monitored for its whole life (one monitor per socket)."""

    def __init__(self, addr: str, handle=None, kind=zmq.XSUB, subscribe: bytes | None = None) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(kind)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.subscribe = subscribe if kind == zmq.DEALER else None
        if subscribe is not None and kind != zmq.DEALER:
            self.sock.setsockopt(zmq.SUBSCRIBE, subscribe)
        if handle is not None and addr.startswith("tcp://"):
            channel.credentials(self.sock, handle.topic, handle.remote_curve_keys)
        self.addr = addr
        self.mon = self.sock.get_monitor_socket()  # for the socket's lifetime (one monitor per socket)

    def event(self, wanted: int) -> int:
        """The first monitor event in ``wanted`` (10 s at most, else an assertion)."""
        while self.mon.poll(10_000):
            e = recv_monitor_message(self.mon)["event"]
            if e & wanted:
                return e
        raise AssertionError(f"no monitor event in {wanted!r} within 10 s ({self.addr})")

    def connect(self) -> bool:
        """Connect; True if the writer authenticated us (ZMTP handshake succeeded)."""
        self.sock.connect(self.addr)
        if self.subscribe is not None:
            self.sock.send(b"\x01" + self.subscribe, zmq.NOBLOCK)
        end = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        return self.event(end) == zmq.EVENT_HANDSHAKE_SUCCEEDED

    def received(self, wait_ms: int) -> int:
        n = 0
        while self.sock.poll(wait_ms if n == 0 else 0):
            self.sock.recv_multipart()
            n += 1
        return n

    def keep_sending(self, frames, pause: float) -> None:
        """Send ``frames`` (never blocking), one round every ``pause`` seconds, in a thread, until
        :meth:`stop_sending` (or :meth:`close`)."""
        self._stop = threading.Event()

        def run():
            while not self._stop.is_set():
                for f in frames:
                    try:
                        self.sock.send(f, zmq.NOBLOCK)
                    except zmq.Again:
                        pass
                self._stop.wait(pause)

        self._sender = threading.Thread(target=run, daemon=True)
        self._sender.start()

    def stop_sending(self) -> None:
        if getattr(self, "_sender", None) is not None:
            self._stop.set()
            self._sender.join(10)
            self._sender = None

    def close(self) -> None:
        self.stop_sending()
        self.sock.disable_monitor()
        self.mon.close(0)
        self.sock.close(0)
        self.ctx.term()


def joined_pair(**writer_kwargs):
    """A one-reader queue (``MessageQueue(1, n_local_reader, **writer_kwargs)``, n_local_reader 0
    unless given) and its reader, past the READY handshake: ``(writer, reader)``."""
    from ringcast import MessageQueue

    w = MessageQueue(1, writer_kwargs.pop("n_local_reader", 0), **writer_kwargs)
    r = None
    try:
        r = MessageQueue.create_from_handle(w.export_handle(), 0)
        ready = threading.Thread(target=r.wait_until_ready, args=(20,), daemon=True)
        ready.start()
        w.wait_until_ready(20)
        ready.join(20)
        assert not ready.is_alive()
    except BaseException:
        for q in (w, r):
            if q is not None:
                q.close()
        raise
    return w, r
