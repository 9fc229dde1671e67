"""Issue 35 point 3: a refused connection attempt costs the writer little Python. libzmq hands
every PLAIN attempt to the ZAP handler, Python code in a thread of the writer; pyzmq's
ThreadAuthenticator ran 356 Python function calls per refusal (~1,200 refusals a second took
half a core, tools/bench_subscriptions.py --refused). The count is deterministic where the time
is not: each attempt here waits for its own refusal, so every request is handled alone."""

from __future__ import annotations

import threading

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from _clients import joined_pair

CALLS_PER_REFUSAL_MAX = 100  # ringcast.remote.ZapHandler: ~42 (pyzmq's poll, recv and send wrappers included)
ATTEMPTS = 20
_END = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL


def _attempt(ctx, addr: str) -> int:
    """One PLAIN connection with a wrong password; the ZMTP event that ended its handshake."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt_string(zmq.PLAIN_USERNAME, "ringcast")
    s.setsockopt_string(zmq.PLAIN_PASSWORD, "not-the-password")
    mon = s.get_monitor_socket()
    try:
        s.connect(addr)
        while mon.poll(10_000):
            event = recv_monitor_message(mon)["event"]
            if event & _END:
                return event
        raise AssertionError(f"no end of the handshake within 10 s ({addr})")
    finally:
        s.disable_monitor()
        mon.close(0)
        s.close(0)


@pytest.mark.timeout(120)
def test_a_refused_plain_attempt_costs_the_writer_few_python_calls():
    calls = [0]
    main = threading.main_thread()

    def count(frame, event, arg):
        if event == "call" and threading.current_thread() is not main:
            calls[0] += 1

    threading.setprofile(count)  # threads started from now on: the writer's ZAP handler's
    try:
        w, r = joined_pair(connect_ip="127.0.0.1", remote_insecure=True)
    finally:
        threading.setprofile(None)
    ctx = zmq.Context()
    try:
        addr = w.export_handle().remote_subscribe_addr
        assert _attempt(ctx, addr) == zmq.EVENT_HANDSHAKE_FAILED_AUTH  # warm: first-use imports, caches
        calls[0] = 0
        outcomes = {_attempt(ctx, addr) for _ in range(ATTEMPTS)}
        per_refusal = calls[0] / ATTEMPTS
        w.enqueue("still served", timeout=10)
        assert r.dequeue(timeout=10) == "still served"
    finally:
        ctx.term()
        r.close()
        w.close()
    assert outcomes == {zmq.EVENT_HANDSHAKE_FAILED_AUTH}
    assert per_refusal <= CALLS_PER_REFUSAL_MAX, f"{per_refusal:.0f} Python calls in the writer per refused attempt"
