"""Issue 35 point 2: a holder of the handle cannot grow the writer without bound. The attacker (a
child process holding the handle, so it passes CURVE or PLAIN) floods the writer's TCP socket
with distinct 256-byte subscriptions, then subscribes with the secret, from every client socket
type a remote channel could accept (XSUB and DEALER); a real remote reader is served meanwhile.
Before: libzmq's XPUB put every subscription in its trie (20,000 of them: +236 MiB) and the
attacker, subscribed at last, received the queue's messages."""

from __future__ import annotations

import logging
import time

import pytest
import zmq

from _clients import joined_pair
from _procs import CTX, Children

N_SUBS = 20_000
SUB_BYTES = 256
RSS_BOUND_MIB = 32  # a 20,000-subscription trie is ~240 MiB; the channel needs ~1 MiB
MODES = [pytest.param(False, id="curve-default"), pytest.param(True, id="remote_insecure")]


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _flood(handle, n: int, size: int, received, stop) -> dict:
    """The attacker: on an XSUB and a DEALER (whichever the writer's socket takes), ``n``
    distinct subscriptions of ``size`` bytes, then one with the secret topic (the messages'
    topic frame); sets ``received`` on its first message; returns what each socket got once
    ``stop`` is set (60 s at most)."""
    from ringcast import remote

    topic = handle.topic if handle.remote_curve_keys is not None else remote.wire_topic(handle.topic)
    ctx = zmq.Context()
    socks = {}
    try:
        for kind in ("XSUB", "DEALER"):
            s = socks[kind] = ctx.socket(getattr(zmq, kind))
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 0)  # queue everything here: the writer takes what it will
            remote.credentials(s, handle.topic, handle.remote_curve_keys)
            s.connect(handle.remote_subscribe_addr)
        for i in range(n):
            sub = b"\x01" + i.to_bytes(8, "big") * (size // 8)
            for s in socks.values():
                s.send(sub, zmq.NOBLOCK)
        for s in socks.values():
            s.send(b"\x01" + topic, zmq.NOBLOCK)
        got = dict.fromkeys(socks, 0)
        poller = zmq.Poller()
        for s in socks.values():
            poller.register(s, zmq.POLLIN)
        end = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < end:
            for s, _ in poller.poll(50):
                s.recv_multipart()
                got[next(k for k, v in socks.items() if v is s)] += 1
                received.set()
        return got
    finally:
        for s in socks.values():
            s.close(0)
        ctx.term()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("insecure", MODES)
def test_a_holders_subscription_flood_is_dropped_and_costs_the_writer_little(insecure, caplog):
    """The writer serves the real reader every message throughout, drops the flooding connection
    (and logs it) instead of keeping its subscriptions: RSS growth under RSS_BOUND_MIB, and the
    attacker's subscription with the secret, sent after the flood, gets it nothing."""
    w, r = joined_pair(connect_ip="127.0.0.1", remote_insecure=insecure)
    received, stop = CTX.Event(), CTX.Event()
    try:
        with caplog.at_level(logging.WARNING, logger="ringcast"), Children(timeout=120) as ch:
            for i in range(20):  # warm up: the allocator's and ZeroMQ's steady state
                w.enqueue(i, timeout=10)
                assert r.dequeue(timeout=10) == i
            before = _rss_mib()
            ch.start("attacker", _flood, w.export_handle(), N_SUBS, SUB_BYTES, received, stop)
            deadline, i = time.monotonic() + 90, 0
            dropped = []
            while not (received.is_set() or dropped):
                assert time.monotonic() < deadline, "the writer neither dropped the attacker nor served it within 90 s"
                w.enqueue(("m", i), timeout=10)
                assert r.dequeue(timeout=10) == ("m", i)  # the real reader gets every message, in order
                i += 1
                dropped = [rec for rec in caplog.records if "dropped" in rec.getMessage()]
            grown = _rss_mib() - before
            stop.set()
            got = ch.wait()["attacker"]
        for k in range(5):  # still served after the attacker left
            w.enqueue(("after", k), timeout=10)
            assert r.dequeue(timeout=10) == ("after", k)
    finally:
        stop.set()
        r.close()
        w.close()
    assert grown < RSS_BOUND_MIB, f"the writer grew by {grown:.1f} MiB under {N_SUBS} subscriptions of {SUB_BYTES} B"
    assert got == {"XSUB": 0, "DEALER": 0}, f"the flooding holder of the handle was served: {got}"
    assert dropped and "subscription" in dropped[0].getMessage()


class _Router:
    """A stand-in for the writer's ROUTER: upstream messages ``[routing id, frame]`` from
    ``peers`` (routing ids, cycled) without end; sends recorded."""

    def __init__(self, peers, frame: bytes = b"\x01junk") -> None:
        self.peers, self.frame, self.received, self.sent = peers, frame, 0, []

    def getsockopt(self, opt):
        return zmq.POLLIN

    def recv_multipart(self, copy=True):
        self.received += 1
        assert self.received < 100_000, "the writer drained an endless backlog inside one send"
        return [zmq.Frame(self.peers[self.received % len(self.peers)]), zmq.Frame(self.frame)]

    def send(self, data, flags=0, copy=True):
        self.sent.append(bytes(data))


def test_one_send_handles_a_bounded_number_of_upstream_messages_on_the_remote_socket():
    """As the local socket's (test_hostile.py): an enqueue looks at most READMIT_BATCH upstream
    messages of the remote socket, whatever is waiting."""
    from ringcast import fanout

    router = _Router([b"\x00peer1"])
    ps = fanout.PeerSocket(router, b"t" * 16)
    ps.readmit = True
    ps.send(b"message")
    assert router.received == fanout.READMIT_BATCH


def test_a_connection_over_the_cap_is_dropped_once_and_its_messages_ignored(caplog):
    """A connection that sends more than PEER_MESSAGES_MAX upstream messages is dropped (logged
    once), even after it was admitted: it is served no more, and its subscription with the topic
    afterwards admits nothing. Another connection is admitted by its one subscription."""
    from ringcast import fanout

    topic = b"t" * 16
    router = _Router([b"\x00bad"], frame=b"\x01" + topic)
    ps = fanout.PeerSocket(router, topic)
    with caplog.at_level(logging.WARNING, logger="ringcast"):
        verdicts = [ps.admit(ps.recv_multipart()) for _ in range(3 * fanout.PEER_MESSAGES_MAX)]
    assert verdicts[0] is True  # its first subscription admits it
    assert verdicts[1:fanout.PEER_MESSAGES_MAX] == [None] * (fanout.PEER_MESSAGES_MAX - 1)  # repeats count for nothing
    assert verdicts[fanout.PEER_MESSAGES_MAX:] == [False] * (2 * fanout.PEER_MESSAGES_MAX)  # dropped
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 1
    router.peers = [b"\x00good"]
    assert ps.admit(ps.recv_multipart()) is True
    router.sent.clear()
    ps.send(b"m")
    assert router.sent == [b"\x00good", topic + b"m"]  # to the admitted connection only (a bytes first frame: the topic in front)


def test_the_writer_tracks_a_bounded_number_of_connections():
    """Counters for connections that were not admitted are kept for at most PEERS_TRACKED of them
    (a holder of the handle opening connections without end costs the writer bounded memory)."""
    from ringcast import fanout

    router = _Router([i.to_bytes(5, "big") for i in range(3 * fanout.PEERS_TRACKED)])
    ps = fanout.PeerSocket(router, b"t" * 16)
    for _ in range(3 * fanout.PEERS_TRACKED):
        ps.admit(ps.recv_multipart())
    assert len(ps._others) == fanout.PEERS_TRACKED and not ps._served
