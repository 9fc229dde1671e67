"""Fixtures of the torch tests: a module-wide pool of gloo ranks (see _torch_pool.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from _torch_pool import Pool  # noqa: E402


class _PoolHolder:
    def __init__(self, tmp_path_factory, world: int) -> None:
        self.factory = tmp_path_factory
        self.world = world
        self.pool: Pool | None = None
        self.n = 0

    def get(self) -> Pool:
        if self.pool is None or self.pool.broken:
            if self.pool is not None:
                self.pool.kill()
            self.n += 1
            store = self.factory.mktemp(f"store{self.n}") / "filestore"
            self.pool = Pool(self.world, str(store))
        return self.pool

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


@pytest.fixture(scope="session")
def _pool4(tmp_path_factory):
    holder = _PoolHolder(tmp_path_factory, 4)
    yield holder
    holder.close()


@pytest.fixture
def pool4(_pool4) -> Pool:
    """Four gloo ranks (world size 4), shared by the tests; replaced after a failure."""
    return _pool4.get()
