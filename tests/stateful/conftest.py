"""Fixtures of the stateful harness: one pool of persistent worker processes per test process
(per xdist worker), killed at the end of the session."""

from __future__ import annotations

import pytest

from conftest import _fail_on_new, _open_sockets  # tests/conftest.py

from .pool import Pool


@pytest.fixture(scope="session")
def pool():
    # spawned up front: the per-test descriptor-leak check must not see the pool's pipes appear
    p = Pool(5)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture(autouse=True)
def no_socket_leak(request):
    """tests/conftest.py's check, except for the pool's own pipes: a worker killed on purpose (an
    arena reader dying holding views, arena_run.py) is replaced during the test, and its
    successor's pipes belong to the pool, not to the test."""
    pool = request.getfixturevalue("pool") if "pool" in request.fixturenames else None

    def sockets() -> set[str]:
        mine = set() if pool is None else {str(c.fileno()) for w in pool.workers for c in (w.conn, w.ctrl)}
        return {d for d in _open_sockets() if d.split("->", 1)[0] not in mine}

    yield from _fail_on_new(sockets, "socket/eventfd descriptors")
