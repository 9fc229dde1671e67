"""Large payloads through the queue without the pickle.dumps copy (issue 14, item 1): content and
order for bytes, bytearray, PickleBuffer, numpy (contiguous or not), CPU tensors of every dtype
(bf16 and bool included, 0-d and empty), inline, inline with out-of-band buffers and overflow;
the caller may mutate its object as soon as enqueue returns."""

from __future__ import annotations

import pickle
import threading

import pytest

from ringcast import MessageQueue, PayloadError

np = pytest.importorskip("numpy")


def _pair(**kw):
    w = MessageQueue(1, 1, **kw)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    t = threading.Thread(target=r.wait_until_ready, args=(30,))
    t.start()
    w.wait_until_ready(30)
    t.join(30)
    return w, r


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if type(a).__module__ == "torch":
        import torch

        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _payloads():
    big = bytes(range(256)) * 4096  # 1 MiB
    arr = np.arange(300_000, dtype=np.float64)
    return [
        {"blob": big, "meta": list(range(8))},
        bytearray(big[: 70 * 1024]),
        bytearray(b"x" * 100),
        arr,
        arr[::3],  # not contiguous: pickled in band
        np.asfortranarray(np.arange(120_000, dtype=np.int32).reshape(300, 400)),
        np.zeros((0, 3)),
        np.array(7.5),
        {"a": arr[:10], "b": b"y" * 200_000, "c": "z"},
    ]


@pytest.mark.parametrize("mcb", [1 << 20, 8 << 20])  # 1 MiB: the large ones overflow
def test_content_and_order(mcb):
    w, r = _pair(max_chunk_bytes=mcb, max_chunks=4)
    try:
        for obj in _payloads():
            w.enqueue(obj, timeout=10)
            got = r.dequeue(timeout=10)
            assert _same(got, obj), type(obj)
        assert w.statistics().overflows == (2 if mcb == 1 << 20 else 0)
    finally:
        w.close()
        r.close()


def test_pickle_buffer_and_memoryview():
    w, r = _pair(max_chunk_bytes=1 << 20, max_chunks=4)
    try:
        src = bytearray(b"q" * 300_000)
        w.enqueue(pickle.PickleBuffer(src), timeout=10)
        got = r.dequeue(timeout=10)
        assert bytes(memoryview(got)) == bytes(src)
        with pytest.raises(PayloadError, match="cannot pickle memoryview"):
            w.enqueue(memoryview(src), timeout=10)
        w.enqueue("after", timeout=10)
        assert r.dequeue(timeout=10) == "after"
    finally:
        w.close()
        r.close()


@pytest.mark.parametrize("mcb", [1 << 16, 4 << 20])
def test_mutation_after_enqueue(mcb):
    w, r = _pair(max_chunk_bytes=mcb, max_chunks=4)
    try:
        ba = bytearray(b"a" * 200_000)
        arr = np.ones(100_000)
        w.enqueue({"ba": ba, "arr": arr}, timeout=10)
        ba[:] = b"b" * len(ba)
        arr[:] = 2
        got = r.dequeue(timeout=10)
        assert got["ba"] == bytearray(b"a" * 200_000) and (got["arr"] == 1).all()
    finally:
        w.close()
        r.close()


def _tensors():
    import torch

    dts = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
           torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]
    out = []
    for dt in dts:
        base = (torch.arange(70_000) % 7).to(dt)
        out += [base, base.reshape(700, 100).t(), base[0].clone().reshape(()), base[:0]]
    return out


@pytest.mark.parametrize("mcb", [1 << 16, 4 << 20])
def test_tensors_every_dtype(mcb):
    torch = pytest.importorskip("torch")
    w, r = _pair(max_chunk_bytes=mcb, max_chunks=4)
    try:
        for t in _tensors():
            w.enqueue({"t": t}, timeout=10)
            got = r.dequeue(timeout=10)["t"]
            assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t)
        t = torch.ones(100_000)
        w.enqueue(t, timeout=10)
        t.fill_(3)
        assert torch.equal(r.dequeue(timeout=10), torch.ones(100_000))
    finally:
        w.close()
        r.close()


def test_allow_list_reader_takes_tensors():
    torch = pytest.importorskip("torch")
    w = MessageQueue(1, 1)
    r = MessageQueue.create_from_handle(w.export_handle(), 0, allowed_classes=[])
    t = threading.Thread(target=r.wait_until_ready, args=(30,))
    t.start()
    w.wait_until_ready(30)
    t.join(30)
    try:
        w.enqueue({"t": torch.arange(10)}, timeout=10)
        assert torch.equal(r.dequeue(timeout=10)["t"], torch.arange(10))
    finally:
        w.close()
        r.close()


def test_rebuild_tensor_refuses_non_dtypes():
    pytest.importorskip("torch")
    from ringcast.pickling import rebuild_tensor

    with pytest.raises(pickle.UnpicklingError, match="not a torch dtype"):
        rebuild_tensor(bytearray(8), (2,), "load")


def test_overflow_and_remote_arrays_are_private_and_writable():
    """Overflow and remote messages are unpickled on ZeroMQ's received frames (no copy out of
    them): arrays and tensors rebuilt there must still be each reader's own, writable memory,
    with the writer's content, and a reader's writes must not reach another reader."""
    torch = pytest.importorskip("torch")
    w = MessageQueue(2, 1, max_chunk_bytes=1 << 16, max_chunks=4, connect_ip="127.0.0.1")
    rs = [MessageQueue.create_from_handle(w.export_handle(), k) for k in (0, 1)]  # rank 1: remote
    ts = [threading.Thread(target=r.wait_until_ready, args=(30,)) for r in rs]
    for t in ts:
        t.start()
    try:
        w.wait_until_ready(30)
        for t in ts:
            t.join(30)
        msg = {"arr": np.arange(100_000, dtype=np.int64), "t": torch.arange(50_000, dtype=torch.float32)}
        for _ in range(2):
            w.enqueue(msg, timeout=10)
        for r in rs:
            got = [r.dequeue(timeout=10) for _ in range(2)]
            for g in got:
                assert np.array_equal(g["arr"], msg["arr"]) and torch.equal(g["t"], msg["t"])
                assert g["arr"].flags.writeable
            got[0]["arr"][:] = -1
            got[0]["t"].fill_(-1)
            assert np.array_equal(got[1]["arr"], msg["arr"]) and torch.equal(got[1]["t"], msg["t"])
        assert w.statistics().overflows == 2
        assert (msg["arr"] == np.arange(100_000)).all() and (msg["t"] == torch.arange(50_000)).all()
    finally:
        w.close()
        for r in rs:
            r.close()


# -- issue 24: an exception at any writer step never mis-pairs an overflow payload -------------------
# (tests/_abort.py: a step hook raises a BaseException at the writer's step point, once, or twice in a
# row so that the handler finishing the message is interrupted too)

from _abort import RING_STEPS, Interrupt, RaiseAt  # noqa: E402

#: steps after which something of the message has left the process (its overflow payload, or a
#: cleared read flag that a reader holding the old written byte may take: spec FlagOut): it is
#: finished, not dropped
_OUT_OVERFLOW = _OUT_INLINE = {"WriterClearReadFlag", "WriterPublish", "NotifyLoadWaiters"}


@pytest.mark.parametrize("times", [1, 2])
@pytest.mark.parametrize("big", [True, False], ids=["overflow", "inline"])
@pytest.mark.parametrize("action", RING_STEPS)
def test_exception_at_each_writer_step(action, big, times):
    """enqueue(1) raises at ``action``; 2, 3 and 4 go through. Each reader gets exactly the messages
    not dropped, each with its own payload: 1 only if something of it had left the process (its
    overflow payload, or its publish), then 2, 3, 4. Before the fix, an exception after the
    overflow send (WriterClearReadFlag, WriterPublish) dropped the message with its payload
    already on the socket: the reader got 1 for 2's marker, 2 for 3's, 3 for 4's (issue 24)."""
    if action == "WriterSendOverflow" and not big:
        pytest.skip("an inline message has no overflow step")
    mcb = 1 << 16
    w, r = _pair(max_chunk_bytes=mcb, max_chunks=4)

    def msg(k):
        return (k, bytes([k]) * (2 * mcb if big else 100))

    hook = RaiseAt(action, times=times)
    try:
        with hook.installed():
            with hook.arm(), pytest.raises(Interrupt):
                w.enqueue(msg(1), timeout=10)
            assert hook.raised == (times if action in (_OUT_OVERFLOW if big else _OUT_INLINE) else 1)
            for k in (2, 3, 4):
                w.enqueue(msg(k), timeout=10)
        delivered = action in (_OUT_OVERFLOW if big else _OUT_INLINE)
        want = [1, 2, 3, 4] if delivered else [2, 3, 4]
        got = [r.dequeue(timeout=10) for _ in want]
        assert [g[0] for g in got] == want
        assert all(g == msg(g[0]) for g in got)
    finally:
        w.close()
        r.close()


def test_acquire_read_slice_kept_after_the_block_reads_the_reused_chunk():
    """acquire_read's contract (its docstring, issue 24 item 7): the yielded view is released on
    exit, a slice of it is not, and after the block the writer reuses the chunk: the kept slice
    shows the next message. A copy taken inside the block keeps its bytes."""
    w, r = _pair(max_chunk_bytes=4096, max_chunks=1)
    try:
        with w.acquire_write(timeout=10) as view:
            view[:4] = b"AAAA"
        with r.acquire_read(timeout=10) as view:
            kept, copy = view[:4], bytes(view[:4])
        with pytest.raises(ValueError):
            view[:4]  # the view itself is released
        with w.acquire_write(timeout=10) as view:  # the one chunk, reused
            view[:4] = b"BBBB"
        assert copy == b"AAAA" and bytes(kept) == b"BBBB"
        kept.release()
    finally:
        w.close()
        r.close()
