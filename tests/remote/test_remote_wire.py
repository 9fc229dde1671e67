"""Remote (TCP) readers and overflow payloads on the wire (issue 42; issue 37 points 4 and 5).

The copy-at-enqueue guarantee: a caller may change its object as soon as ``enqueue`` returns, and
every reader still gets the values it had at ``enqueue`` time. For a remote reader that is a
property of what the writer hands ZeroMQ: a frame that still aliases the caller's memory (vLLM's
``copy=False``) goes out whenever ZeroMQ's I/O thread gets to it. The test makes "later"
certain rather than likely: the reader is a child process stopped with SIGSTOP before the message
is sent, behind a filler larger than every kernel and ZeroMQ buffer between the two, so the
message is still queued in the writer when the caller mutates its objects; the control runs the
same scenario with a raw ``copy=False`` send and must see the mutation (so the scenario can fail).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading

import pytest
import zmq

from ringcast import MessageQueue

#: larger than loopback's TCP send + receive buffers (tcp_wmem / tcp_rmem maxima, a few MiB each)
FILLER = 48 << 20
BIG = 1 << 20
_TIMEOUT = 60


def _child_queue(handle, rank, count, want_torch, conn):
    if want_torch:
        import torch  # noqa: F401 - imported before the messages arrive (rebuild_tensor)
    r = MessageQueue.create_from_handle(handle, rank)
    r.wait_until_ready(_TIMEOUT)
    conn.send("ready")
    out = []
    for _ in range(count):
        m = r.dequeue(timeout=_TIMEOUT)
        out.append(len(m) if isinstance(m, bytes) else _summary(m))
    conn.send(out)
    r.close()


def _child_raw(addr, conn):
    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.RCVHWM, 0)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(addr)
    conn.send("ready")
    out = []
    for _ in range(2):
        if not s.poll(_TIMEOUT * 1000):
            break
        out.append(s.recv())
    conn.send([len(out[0]), bytes(out[1][:8])] if len(out) == 2 else out)
    s.close(0)
    ctx.term()


def _summary(m: dict) -> dict:
    """The first and last bytes of each value (a tensor as its first and last element)."""
    out = {}
    for k, v in m.items():
        if type(v).__module__ == "torch":
            out[k] = (float(v[0]), float(v[-1]))
        else:
            out[k] = (bytes(v[:4]), bytes(v[-4:]))
    return out


class _Stopped:
    """A spawned reader child, stopped (SIGSTOP) between ``stop()`` and ``cont()``; killed at exit."""

    def __init__(self, target, args):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.p = ctx.Process(target=target, args=(*args, child), daemon=True)
        self.p.start()
        child.close()

    def recv(self):
        if not self.conn.poll(_TIMEOUT):
            raise AssertionError(f"the reader child sent nothing in {_TIMEOUT} s (alive: {self.p.is_alive()})")
        return self.conn.recv()

    def stop(self):
        os.kill(self.p.pid, signal.SIGSTOP)

    def cont(self):
        os.kill(self.p.pid, signal.SIGCONT)

    def close(self):
        if self.p.is_alive():
            self.cont()
            self.p.join(10)
        if self.p.is_alive():
            self.p.kill()
            self.p.join(5)
        self.conn.close()


@pytest.mark.timeout(120)
def test_control_a_zero_copy_send_shows_the_mutation():
    """The scenario's control: a raw ZeroMQ send with ``copy=False`` (what vLLM does) of a
    bytearray mutated after the send returns delivers the mutated bytes. Without this, the test
    below could pass for want of a queued message."""
    ctx = zmq.Context()
    pub = ctx.socket(zmq.XPUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    child = _Stopped(_child_raw, (f"tcp://127.0.0.1:{port}",))
    try:
        assert child.recv() == "ready"
        assert pub.poll(_TIMEOUT * 1000) and pub.recv() == b"\x01"  # its subscription: it is connected
        child.stop()
        ba = bytearray(b"a" * BIG)
        pub.send(b"f" * FILLER, copy=False)
        pub.send(ba, copy=False)
        ba[:] = b"b" * BIG
        child.cont()
        assert child.recv() == [FILLER, b"b" * 8]
    finally:
        child.close()
        pub.close(0)
        ctx.term()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["curve", "insecure", "aes-gcm", "mixed"])
def test_remote_reader_gets_the_values_at_enqueue_time(mode):
    """A bytearray (out of band), a small bytearray (in the pickle) and, if torch is importable, a
    CPU tensor are changed right after ``enqueue`` returns, while the message is still queued for
    a stopped remote reader: the reader gets the values of enqueue time, then the next message's.
    ``mixed``: a local reader too, on 1 MiB chunks, so the message also overflows (the overflow
    payload and the remote frames come from the same copy)."""
    try:
        import torch
    except ImportError:
        torch = None
    n_local = 1 if mode == "mixed" else 0
    w = MessageQueue(1 + n_local, n_local, max_chunk_bytes=BIG, max_chunks=4, connect_ip="127.0.0.1",
                     remote_security={"insecure": "insecure", "aes-gcm": "aes-gcm"}.get(mode))
    local = MessageQueue.create_from_handle(w.export_handle(), 0) if n_local else None
    child = _Stopped(_child_queue, (w.export_handle(), n_local, 3, torch is not None))
    t = threading.Thread(target=local.wait_until_ready, args=(_TIMEOUT,)) if local else None
    try:
        if t:
            t.start()
        w.wait_until_ready(_TIMEOUT)
        assert child.recv() == "ready"
        child.stop()
        ba, small = bytearray(b"a" * BIG), bytearray(b"s" * 100)
        msg = {"ba": ba, "small": small}
        if torch is not None:
            msg["t"] = torch.full((BIG // 4,), 1.0)
        w.enqueue(b"f" * FILLER, timeout=_TIMEOUT)
        w.enqueue(msg, timeout=_TIMEOUT)
        ba[:] = b"b" * BIG
        small[:] = b"z" * 100
        if torch is not None:
            msg["t"].fill_(2.0)
        w.enqueue(msg, timeout=_TIMEOUT)
        ba[:] = b"c" * BIG
        child.cont()
        want = [{"ba": (c * 4, c * 4), "small": (s * 4, s * 4), **({"t": (x, x)} if torch is not None else {})}
                for c, s, x in ((b"a", b"s", 1.0), (b"b", b"z", 2.0))]
        assert child.recv() == [FILLER, *want]
        if local is not None:
            got = [local.dequeue(timeout=_TIMEOUT) for _ in range(3)]
            assert [len(got[0]), *map(_summary, got[1:])] == [FILLER, *want]
    finally:
        child.close()
        if t:
            t.join(_TIMEOUT)
        w.close()
        if local is not None:
            local.close()


def _faulting_writer(n, conn):
    """A writer in a process whose malloc maps every block of 128 KiB or more afresh
    (MALLOC_MMAP_THRESHOLD_ set by the parent: the allocator's worst state, made certain): sends
    ``n`` 2 MiB messages (overflowing 1 MiB chunks, and to a remote reader), each after the
    parent's ack, and reports the minor page faults of each ``enqueue``."""
    import resource

    w = MessageQueue(2, 1, max_chunk_bytes=1 << 20, max_chunks=4, connect_ip="127.0.0.1", remote_insecure=True)
    try:
        conn.send(w.export_handle())
        w.wait_until_ready(_TIMEOUT)
        payload = os.urandom(2 << 20)
        faults = []
        for k in range(n):
            if not conn.poll(_TIMEOUT):
                raise TimeoutError("no ack from the parent")
            conn.recv()
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            w.enqueue((k, payload), timeout=_TIMEOUT)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        conn.recv()
        conn.send(faults)
    finally:
        w.close()


@pytest.mark.timeout(180)
def test_no_page_faults_per_enqueue_in_the_allocators_worst_state(monkeypatch):
    """Issue 42: a 2 MiB message that overflows to a local reader and goes to a remote one maps
    no fresh memory per ``enqueue`` once the writer's wire buffers exist, whatever the allocator
    does (here it maps every large block afresh: 512 faults per 2 MiB). Before, the pickle's
    join and ZeroMQ's two copies cost over 1,000 faults a message. Faults are counted, not
    timed; the median of 20 messages after 10 unmeasured ones."""
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", str(128 * 1024))
    ctx = mp.get_context("spawn")
    conn, child = ctx.Pipe()
    p = ctx.Process(target=_faulting_writer, args=(30, child), daemon=True)
    p.start()
    child.close()
    readers = []
    try:
        assert conn.poll(_TIMEOUT), "the writer child sent no handle"
        h = conn.recv()
        readers = [MessageQueue.create_from_handle(h, k) for k in (0, 1)]
        ts = [threading.Thread(target=r.wait_until_ready, args=(_TIMEOUT,)) for r in readers]
        [t.start() for t in ts]
        [t.join(_TIMEOUT) for t in ts]
        for k in range(30):
            conn.send("go")
            for r in readers:
                got = r.dequeue(timeout=_TIMEOUT)
                assert got[0] == k and len(got[1]) == 2 << 20
        conn.send("done")
        assert conn.poll(_TIMEOUT)
        faults = conn.recv()[10:]
        assert sorted(faults)[len(faults) // 2] < 64, faults
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join(5)
        conn.close()
        for r in readers:
            r.close()
