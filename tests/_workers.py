"""Child-process bodies for the queue tests (importable by 'spawn' children)."""

from __future__ import annotations

import random
import time

from ringcast import MessageQueue


def reader_collect(handle, rank, n, timeout=30.0, delay_every=0, seed=0, opts=None):
    """Join, read ``n`` messages, return them (and the statistics)."""
    rng = random.Random(seed)
    mq = MessageQueue.create_from_handle(handle, rank, **(opts or {}))
    try:
        mq.wait_until_ready(timeout=timeout)
        out = []
        for k in range(n):
            out.append(mq.dequeue(timeout=timeout))
            if delay_every and rng.randrange(delay_every) == 0:
                time.sleep(rng.random() * 1e-3)
        return out, mq.statistics()
    finally:
        mq.close()


def reader_digest(handle, rank, n, timeout=60.0, delay_every=0, seed=0):
    """Like reader_collect but returns a digest (for big runs)."""
    import hashlib

    rng = random.Random(seed)
    mq = MessageQueue.create_from_handle(handle, rank)
    try:
        mq.wait_until_ready(timeout=timeout)
        h = hashlib.blake2b()
        seqs_ok = True
        for k in range(n):
            seq, payload = mq.dequeue(timeout=timeout)
            seqs_ok &= seq == k
            h.update(payload)
            if delay_every and rng.randrange(delay_every) == 0:
                time.sleep(rng.random() * 2e-4)
        return seqs_ok, h.hexdigest(), mq.statistics()
    finally:
        mq.close()


def writer_send(n_reader, n_local, local_ranks, msgs, conn_ip=None, timeout=30.0, handle_out=None, mcb=1024, chunks=4):
    mq = MessageQueue(n_reader, n_local, local_ranks, max_chunk_bytes=mcb, max_chunks=chunks, connect_ip=conn_ip)
    try:
        handle_out.put(mq.export_handle())
        mq.wait_until_ready(timeout=timeout)
        for m in msgs:
            mq.enqueue(m, timeout=timeout)
        return mq.statistics()
    finally:
        mq.close()


def attach_and_exit(handle, rank):
    """Attach as a reader without the handshake, then exit (checks the resource tracker)."""
    mq = MessageQueue.create_from_handle(handle, rank)
    mq.close()
    return True


def reader_idle_cpu(handle, rank, idle_seconds, timeout=60.0):
    """Wait through an idle gap, return (message, cpu seconds used while waiting, stats)."""
    import time as _t

    mq = MessageQueue.create_from_handle(handle, rank)
    try:
        mq.wait_until_ready(timeout=timeout)
        t0 = _t.process_time()
        msg = mq.dequeue(timeout=timeout)
        return msg, _t.process_time() - t0, mq.statistics()
    finally:
        mq.close()


def reader_hold(handle, rank, ready_evt, n_read=0):
    """Join, read n_read messages, signal, then hang forever (the test kills us)."""
    mq = MessageQueue.create_from_handle(handle, rank)
    mq.wait_until_ready(timeout=30)
    for _ in range(n_read):
        mq.dequeue(timeout=30)
    ready_evt.set()
    time.sleep(3600)


def writer_then_hang(handle_q, ready_evt, n_msgs=0):
    mq = MessageQueue(1, 1, max_chunk_bytes=64, max_chunks=2)
    handle_q.put(mq.export_handle())
    mq.wait_until_ready(timeout=30)
    for k in range(n_msgs):
        mq.enqueue(k)
    ready_evt.set()
    time.sleep(3600)


def reader_collect_curve(handle, rank, n, timeout=30.0):
    return reader_collect(handle, rank, n, timeout)


def stop_at_step(action, nth, evt):
    """A step hook that, at the nth occurrence of `action`, signals the parent and hangs until killed."""
    count = [0]

    def hook(a, side, index, reader):
        if a == action:
            count[0] += 1
            if count[0] == nth:
                evt.set()
                time.sleep(3600)

    return hook


def reader_killed_at(handle, rank, action, nth, evt):
    from ringcast.steps import set_step_hook

    mq = MessageQueue.create_from_handle(handle, rank)
    mq.wait_until_ready(timeout=30)
    set_step_hook(stop_at_step(action, nth, evt))
    while True:
        mq.dequeue(timeout=60)


def writer_killed_at(handle_q, action, nth, evt, msgs, mcb=64, chunks=2):
    from ringcast.steps import set_step_hook

    mq = MessageQueue(2, 2, max_chunk_bytes=mcb, max_chunks=chunks)
    handle_q.put(mq.export_handle())
    mq.wait_until_ready(timeout=30)
    set_step_hook(stop_at_step(action, nth, evt))
    for m in msgs:
        mq.enqueue(m, timeout=60)
    evt.set()
    time.sleep(3600)


def low_fd_limit_create(extra_fds):
    """Create a queue under a tiny descriptor limit: it must fail cleanly and leave nothing behind."""
    import os
    import resource

    used = len(os.listdir("/proc/self/fd"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (used + extra_fds, hard))
    try:
        mq = MessageQueue(2, 1, max_chunk_bytes=64, max_chunks=2, connect_ip="127.0.0.1")
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)
    mq.close()
    return None, None


def shutdown_then_close_races(rounds):
    """Another thread parks in dequeue(); this one calls shutdown() and then close(). A step hook
    holds the woken waiter just before ParkRetire (its next touch of the mapping) until close()
    has started, plus a moment: if close() unmapped without waiting for it, ParkRetire's atomic
    add would hit an unmapped page and the process would die with SIGSEGV. Returns how many
    rounds ended with the waiter raising Cancelled."""
    import threading

    from ringcast import Cancelled
    from ringcast.steps import set_step_hook

    closing = threading.Event()

    def hook(action, side, index, reader):
        if action == "ParkRetire" and threading.current_thread().name == "waiter":
            closing.wait(10)
            time.sleep(0.2)  # fault injection: widen the window in which close() runs

    cancelled = 0
    for _ in range(rounds):
        closing.clear()
        w = MessageQueue(1, 1, max_chunk_bytes=64, max_chunks=1)
        r = MessageQueue.create_from_handle(w.export_handle(), 0, spin=0.0, recheck_interval=30.0)
        t = threading.Thread(target=r.wait_until_ready, args=(10,))
        t.start()
        w.wait_until_ready(10)
        t.join()
        box = []

        def body():
            try:
                r.dequeue()
            except Cancelled:
                box.append("cancelled")

        th = threading.Thread(target=body, name="waiter")
        set_step_hook(hook)
        th.start()
        while r.statistics().parks == 0 and th.is_alive():
            time.sleep(0.0005)
        r.shutdown()
        closing.set()
        r.close()
        th.join(10)
        set_step_hook(None)
        cancelled += box == ["cancelled"]
        w.close()
    return cancelled
