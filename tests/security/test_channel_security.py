"""The queue's channels admit only its own readers (issue 15): the local overflow socket is a file
in a 0700 directory (other users cannot connect) that the writer removes once the READY
handshake has seen every local reader, and both channels count and serve only subscribers that
present the handle's secret topic (a stray subscriber neither completes the handshake, nor
displaces a real reader, nor receives anything)."""

from __future__ import annotations

import dataclasses
import gc
import errno
import os
import pathlib
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import zmq

from ringcast import HandleError, ImpostorError, MessageQueue, RingTimeoutError
from ringcast import channel

from _clients import Client
from _procs import CTX, Children

MCB = 256  # max_chunk_bytes: the messages with a 1000-byte pad go over the overflow channel
MESSAGES = [{"i": i, "pad": b"x" * (1000 if i % 2 else 10)} for i in range(6)]


def _path(addr: str) -> str:
    assert addr.startswith("ipc://")
    return addr[len("ipc://"):]


def _wait_for(cond, what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"{what} did not happen within {limit}s"
        time.sleep(0.005)


def Stray(addr: str, topic: bytes, handle=None) -> Client:
    """A same-user SUB subscribed to ``topic`` (not the handle's secret; over TCP a DEALER, the
    writer's ROUTER takes no SUB, sending that subscription), whose ZMTP handshake has ended
    before the function returns: ``refused`` False (connected, so its subscription is on its
    way) or True (the writer's TCP socket refused to authenticate it). ``handle``: present the
    handle's credentials, as a holder of the handle would (default: none, as a stranger)."""
    c = Client(addr, handle=handle, kind=zmq.DEALER if addr.startswith("tcp://") else zmq.SUB, subscribe=topic)
    c.refused = not c.connect()
    return c


@pytest.fixture
def short_dir():
    """A fresh directory with a short path (tmp_path under xdist is too long for a socket path
    below it, and the queue would rightly fall back to the temp dir)."""
    d = tempfile.mkdtemp(prefix="rc-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _read_all(readers, n: int):
    """Each reader dequeues ``n`` messages in its own thread; returns (results, threads)."""
    got = [[] for _ in readers]

    def run(r, out):
        for _ in range(n):
            out.append(r.dequeue(timeout=20))

    ts = [threading.Thread(target=run, args=(r, out), daemon=True) for r, out in zip(readers, got)]
    for t in ts:
        t.start()
    return got, ts


def _handshake(w, readers) -> None:
    ts = [threading.Thread(target=r.wait_until_ready, args=(20,), daemon=True) for r in readers]
    for t in ts:
        t.start()
    w.wait_until_ready(20)
    for t in ts:
        t.join(20)
        assert not t.is_alive()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["local", "remote", "remote-insecure"])
def test_stray_subscriber_connected_first_is_not_counted_and_receives_nothing(where):
    """Locally a same-user stray connects but is not admitted; over TCP a stranger (no handle)
    is not even authenticated, with CURVE (the default) or without (remote_insecure: PLAIN)."""
    local = where == "local"
    w = MessageQueue(2, 2 if local else 0, max_chunk_bytes=MCB, max_chunks=2, connect_ip=None if local else "127.0.0.1",
                     remote_insecure=where == "remote-insecure")
    h = w.export_handle()
    addr = h.local_subscribe_addr if local else h.remote_subscribe_addr
    strays = [Stray(addr, b""), Stray(addr, b"not-the-secret"), Stray(addr, h.topic[:-1])]
    assert [s.refused for s in strays] == [not local] * 3
    readers = []
    try:
        # Only strays are connected: the handshake cannot complete (it times out, counting none).
        with pytest.raises(RingTimeoutError, match=r"reader subscriptions \(0/2 so far"):
            w.wait_until_ready(timeout=0.3)
        readers = [MessageQueue.create_from_handle(h, i) for i in range(2)]
        _handshake(w, readers)
        got, ts = _read_all(readers, len(MESSAGES))
        for m in MESSAGES:
            w.enqueue(m, timeout=20)
        for t in ts:
            t.join(30)
            assert not t.is_alive()
        assert got == [MESSAGES, MESSAGES]  # every real reader got every message, in order
        if local:
            assert w.statistics().overflows == 3
        # READY and all six messages have gone out: a stray would have them by now. 200 ms only
        # bounds the wait for something that must never come.
        assert [s.received(200) for s in strays] == [0, 0, 0]
    finally:
        for s in strays:
            s.close()
        for q in (w, *readers):
            q.close()


def child_as_nobody_subscribes(addr: str, topic: bytes, joined, done):
    nobody = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)
    path = _path(addr)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
            raw = "connected"
        except OSError as e:
            raw = errno.errorcode.get(e.errno, str(e.errno))
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic)  # even with the secret: the directory keeps it out
    sub.connect(addr)
    joined.set()
    done.wait(30)
    n = 0
    while sub.poll(200 if n == 0 else 0):
        sub.recv_multipart()
        n += 1
    sub.close(0)
    ctx.term()
    return raw, n


@pytest.mark.timeout(90)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become nobody")
def test_another_user_cannot_connect_to_the_local_channel():
    w = MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2)
    h = w.export_handle()
    readers = []
    try:
        joined, done = CTX.Event(), CTX.Event()
        with Children(timeout=60) as ch:
            ch.start("nobody", child_as_nobody_subscribes, h.local_subscribe_addr, h.topic, joined, done)
            assert joined.wait(30), "the child did not get as far as connecting"
            readers = [MessageQueue.create_from_handle(h, 0)]
            _handshake(w, readers)
            got, ts = _read_all(readers, len(MESSAGES))
            for m in MESSAGES:
                w.enqueue(m, timeout=20)
            ts[0].join(30)
            assert got == [MESSAGES]
            done.set()
            raw, n = ch.wait()["nobody"]
        assert raw == "EACCES", f"another user's connect() to the socket file gave {raw}, not EACCES"
        assert n == 0
    finally:
        for q in (w, *readers):
            q.close()


@pytest.mark.timeout(60)
def test_socket_directory_is_private_and_gone_after_handshake_and_close():
    w = MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2)
    readers = []
    try:
        path = _path(w.export_handle().local_subscribe_addr)
        d = os.path.dirname(path)
        st = os.stat(d)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
        assert stat.S_ISSOCK(os.stat(path).st_mode) and os.listdir(d) == [channel.IPC_SOCKET]
        readers = [MessageQueue.create_from_handle(w.export_handle(), 0)]
        _handshake(w, readers)
        assert not os.path.exists(path) and not os.path.exists(d)  # every local reader is connected
        got, ts = _read_all(readers, len(MESSAGES))
        for m in MESSAGES:  # the overflow channel still works for connected readers
            w.enqueue(m, timeout=20)
        ts[0].join(30)
        assert got == [MESSAGES]
    finally:
        for q in (w, *readers):
            q.close()
    assert not os.path.exists(d)
    # A queue closed before any handshake removes its directory too.
    w2 = MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2)
    d2 = os.path.dirname(_path(w2.export_handle().local_subscribe_addr))
    assert os.path.isdir(d2)
    w2.close()
    assert not os.path.exists(d2)


def test_socket_directory_goes_under_a_usable_xdg_runtime_dir(short_dir, monkeypatch):
    tmp_path = pathlib.Path(short_dir)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2) as w:
        path = _path(w.export_handle().local_subscribe_addr)
        assert os.path.dirname(os.path.dirname(path)) == str(tmp_path)
    assert os.listdir(tmp_path) == []
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))  # unusable: the temp dir
    with MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2) as w:
        path = _path(w.export_handle().local_subscribe_addr)
        assert os.path.dirname(os.path.dirname(path)) == tempfile.gettempdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / ("d" * 100)))  # too long for a socket path
    os.mkdir(tmp_path / ("d" * 100), 0o700)
    with MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2) as w:
        assert not _path(w.export_handle().local_subscribe_addr).startswith(str(tmp_path))
    assert os.listdir(tmp_path / ("d" * 100)) == []


@pytest.mark.timeout(60)
def test_directory_of_a_writer_killed_before_its_handshake_is_swept(short_dir, monkeypatch):
    """SIGKILLed before its handshake, a writer leaves its empty socket directory and socket file
    (documented in docs/reliability.md); the next queue of the same user there removes them."""
    tmp_path = short_dir
    code = (
        "import time\nfrom ringcast import MessageQueue\n"
        "mq = MessageQueue(1, 1, max_chunk_bytes=64, max_chunks=2)\n"
        "print(mq.export_handle().local_subscribe_addr, flush=True)\ntime.sleep(3600)\n"
    )
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        path = _path(proc.stdout.readline().strip())
        assert path.startswith(short_dir + os.sep), path
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    assert os.path.exists(path)  # what a SIGKILL before the handshake leaves
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2) as w:
        assert not os.path.exists(os.path.dirname(path))
        mine = os.path.dirname(_path(w.export_handle().local_subscribe_addr))
        assert os.listdir(tmp_path) == [os.path.basename(mine)]
    # A live writer's directory is never swept (its pid is alive, and it listens).
    with MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2) as a, MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2):
        assert os.path.exists(_path(a.export_handle().local_subscribe_addr))


def test_handle_without_the_secret_is_refused():
    with MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2) as w:
        h = w.export_handle()
        assert isinstance(h.topic, bytes) and len(h.topic) == channel.TOPIC_BYTES
        for bad in (None, b"", h.topic[:-1], "text"):
            with pytest.raises(HandleError, match="subscription secret"):
                MessageQueue.create_from_handle(dataclasses.replace(h, topic=bad), 0)


def test_writer_socket_dropped_without_close_removes_its_directory():
    addr, path = channel.local_address()
    ctx = zmq.Context()
    ts = channel.xpub(ctx, addr, channel.new_topic())
    sock = ts.sock
    try:
        assert os.path.exists(path)
        del ts
        gc.collect()
        assert not os.path.exists(os.path.dirname(path))
    finally:
        sock.close(0)
        ctx.term()


@pytest.mark.timeout(60)
def test_a_subscription_with_the_secret_after_the_handshake_is_served():
    """A remote reader whose TCP connection drops subscribes again when it reconnects: the writer
    admits such a subscription (from a holder of the handle, with the secret) before its next
    message, and sends READY again for it; a stranger is not even authenticated."""
    w = MessageQueue(1, 0, connect_ip="127.0.0.1")
    h = w.export_handle()
    readers, late, stray = [], None, None
    try:
        readers = [MessageQueue.create_from_handle(h, 0)]
        _handshake(w, readers)
        late, stray = Stray(h.remote_subscribe_addr, h.topic, handle=h), Stray(h.remote_subscribe_addr, b"")
        assert (late.refused, stray.refused) == (False, True)
        deadline = time.monotonic() + 20
        i = 0
        while not late.sock.poll(0):  # its subscription reaches the writer at some point
            assert time.monotonic() < deadline, "a subscription with the secret was never admitted"
            w.enqueue(i, timeout=5)
            assert readers[0].dequeue(timeout=5) == i
            i += 1
            late.sock.poll(20)
        assert late.sock.recv_multipart() == [h.topic, b"READY"]  # its own READY, then messages
        assert late.sock.poll(5000)
        frames = late.sock.recv_multipart()
        assert frames[0].startswith(h.topic) and len(frames) == 1  # topic + wire head (ringcast.wire.WIRE_HEAD) + pickle
        w.enqueue("last", timeout=5)
        assert readers[0].dequeue(timeout=5) == "last"
        assert late.sock.poll(5000) and late.sock.recv_multipart()[0].startswith(h.topic)
        assert stray.received(100) == 0
    finally:
        for s in (late, stray):
            if s is not None:
                s.close()
        for q in (w, *readers):
            q.close()


def _can_unshare_mount() -> bool:
    return bool(shutil.which("unshare")) and subprocess.run(
        ["unshare", "--mount", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], capture_output=True).returncode == 0


_MOUNT_NS_READER = """
import base64, os, pickle, sys
from ringcast import MessageQueue
handle = pickle.loads(base64.b64decode(sys.stdin.readline()))
print("SEES", os.path.exists(sys.argv[1]), flush=True)
r = MessageQueue.create_from_handle(handle, rank=0)
r.wait_until_ready(20)
print("GOT", [r.dequeue(timeout=20) for _ in range(int(sys.argv[2]))] == eval(sys.argv[3]), flush=True)
r.close()
"""


@pytest.mark.timeout(90)
@pytest.mark.skipif(not _can_unshare_mount(), reason="needs root and unshare to give a reader its own mount namespace")
def test_local_reader_in_its_own_mount_namespace_reaches_the_socket(short_dir, monkeypatch):
    """A reader in the writer's PID namespace (so it maps the memfd segment: a local reader) but
    with its own mount namespace, where a tmpfs hides the socket's directory, reaches the socket
    through /proc/<writer pid>/root and receives every message, the overflowing ones included."""
    import base64
    import pickle

    monkeypatch.setenv("XDG_RUNTIME_DIR", short_dir)  # the socket goes there, away from the interpreter
    w = MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2)
    try:
        path = _path(w.export_handle().local_subscribe_addr)
        assert os.path.dirname(os.path.dirname(path)) == short_dir
        script = f"mount -t tmpfs tmpfs {short_dir} && exec {sys.executable} -c \"$0\" \"$@\""
        cmd = ["unshare", "--mount", "sh", "-c", script, _MOUNT_NS_READER, path, str(len(MESSAGES)), repr(MESSAGES)]
        with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
            try:
                proc.stdin.write(base64.b64encode(pickle.dumps(w.export_handle())).decode() + "\n")
                proc.stdin.flush()
                w.wait_until_ready(30)
                for m in MESSAGES:
                    w.enqueue(m, timeout=20)
                out, err = proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert "SEES False" in out and "GOT True" in out, out + err
        assert w.statistics().overflows == sum(len(m["pad"]) > MCB for m in MESSAGES)
    finally:
        w.close()


@pytest.mark.timeout(60)
def test_a_stray_sending_data_frames_to_the_local_socket_is_refused_loudly():
    """Issue 35 point 6: a same-user process without the secret that keeps sending data frames
    and subscriptions to the local socket made libzmq's XPUB_MANUAL apply the real reader's
    subscription to the stray's connection: the stray got READY and the overflow payloads, the
    reader timed out (reproduced before this change). Readers' SUBs never send data frames, so the
    writer now refuses to admit any reader once it has seen one: ImpostorError, and the stray
    receives nothing."""
    w = MessageQueue(1, 1, max_chunk_bytes=MCB, max_chunks=2)
    h = w.export_handle()
    stray, r = Client(h.local_subscribe_addr), None
    try:
        assert stray.connect()
        stray.keep_sending((b"junk", b"\x01junk"), 0.0005)
        for _ in range(100):  # until the writer has read a data frame (a subscription after it is counted as ignored)
            with pytest.raises(RingTimeoutError) as e:
                w.wait_until_ready(timeout=0.1)
            if "without the handle's secret ignored" in str(e.value):
                break
        else:
            raise AssertionError("the writer never read the stray's frames")
        r = MessageQueue.create_from_handle(h, 0)
        with pytest.raises(ImpostorError, match="sent data frames to its local socket"):
            w.wait_until_ready(timeout=20)
        stray.stop_sending()
        assert stray.received(200) == 0, "the stray received READY or a payload"
    finally:
        for c in (stray, w, r):  # the stray's close() stops its sender
            if c is not None:
                c.close()
