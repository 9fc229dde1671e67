"""A process group of threads in one process, for ringcast.groups without torch.distributed:
the group protocol is duck-typed (``rank``, ``world_size``, ``broadcast_obj``,
``all_gather_obj``)."""

from __future__ import annotations

import threading

__all__ = ["ThreadGroup", "run_group"]


class _Shared:
    def __init__(self, n: int) -> None:
        self.n = n
        self.barrier = threading.Barrier(n, timeout=30)
        self.slots: list = [None] * n


class ThreadGroup:
    """Member ``rank`` of a group of ``n`` threads; each collective is two barrier rounds."""

    def __init__(self, shared: _Shared, rank: int) -> None:
        self.shared, self.rank, self.world_size = shared, rank, shared.n

    def all_gather_obj(self, obj) -> list:
        self.shared.slots[self.rank] = obj
        self.shared.barrier.wait()
        out = list(self.shared.slots)
        self.shared.barrier.wait()
        return out

    def broadcast_obj(self, obj, src: int):
        return self.all_gather_obj(obj if self.rank == src else None)[src]


def run_group(n: int, fn) -> list:
    """Run ``fn(group)`` in ``n`` threads, one per member; their results in rank order (the first
    member's exception is raised, after every member has ended or 60 s passed)."""
    shared = _Shared(n)
    out: list = [None] * n
    errors: list = []

    def body(r):
        try:
            out[r] = fn(ThreadGroup(shared, r))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            shared.barrier.abort()

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a member did not finish"
    if errors:
        raise errors[0]
    return out
