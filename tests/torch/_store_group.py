"""A torch-free process group over a ``torch.distributed.TCPStore``, shaped like vLLM's
``StatelessProcessGroup``: ``rank``, ``world_size``, ``broadcast_obj(obj, src)``,
``all_gather_obj(obj)``. Nothing of torch.distributed's process groups is used: the store is a
key-value server, and the objects are pickled into it."""

from __future__ import annotations

import pickle
from datetime import timedelta

from torch.distributed import TCPStore


class StoreGroup:
    def __init__(self, store: TCPStore, rank: int, world_size: int, prefix: str) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.prefix = prefix
        self._bcast = [0] * world_size  # per source: how many broadcasts so far
        self._gather = 0

    @staticmethod
    def master(world_size: int) -> TCPStore:
        """The store's server, on a port the OS picks (``store.port`` says which)."""
        return TCPStore("127.0.0.1", 0, world_size, True, timedelta(seconds=30), wait_for_workers=False)

    @staticmethod
    def client(port: int, world_size: int) -> TCPStore:
        return TCPStore("127.0.0.1", port, world_size, False, timedelta(seconds=30))

    def broadcast_obj(self, obj, src: int):
        key = f"{self.prefix}/bcast/{src}/{self._bcast[src]}"
        self._bcast[src] += 1
        if self.rank == src:
            self.store.set(key, pickle.dumps(obj))
            return obj
        return pickle.loads(self.store.get(key))

    def all_gather_obj(self, obj) -> list:
        n = self._gather
        self._gather += 1
        self.store.set(f"{self.prefix}/gather/{n}/{self.rank}", pickle.dumps(obj))
        return [pickle.loads(self.store.get(f"{self.prefix}/gather/{n}/{r}")) for r in range(self.world_size)]


class MethodGroup:
    """The same group with ``rank()`` and ``size()`` methods instead of attributes."""

    def __init__(self, inner: StoreGroup) -> None:
        self.inner = inner

    def rank(self) -> int:
        return self.inner.rank

    def size(self) -> int:
        return self.inner.world_size

    def broadcast_obj(self, obj, src: int):
        return self.inner.broadcast_obj(obj, src)

    def all_gather_obj(self, obj) -> list:
        return self.inner.all_gather_obj(obj)
