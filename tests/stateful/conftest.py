"""Fixtures of the stateful harness: one pool of persistent worker processes per test process
(per xdist worker), killed at the end of the session."""

from __future__ import annotations

import pytest

from .pool import Pool


@pytest.fixture(scope="session")
def pool():
    # spawned up front: the per-test descriptor-leak check must not see the pool's pipes appear
    p = Pool(5)
    try:
        yield p
    finally:
        p.close()
