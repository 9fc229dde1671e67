"""A pool of 'spawn' processes that form one gloo process group and run scenarios on request.

Starting processes and importing torch is the slow part, so one pool serves many tests: each
``pool.run(fn, *args)`` sends ``fn(rank, world, *args)`` to every rank and collects the results,
with a hard deadline. A rank's exception comes back with its traceback. After any failure or
timeout the pool is killed (its group may be out of step) and the fixture makes a fresh one.
Closing the pool fails if a rank still holds a ringcast segment: a /dev/shm name it made, or a
memfd descriptor or mapping (:func:`_procs.memfd_holdings`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from multiprocessing.connection import wait as _wait_conns

from _procs import memfd_holdings, memfd_leaks

CTX = mp.get_context("spawn")


def _child(rank: int, world: int, store: str, cmd_in, res_out) -> None:
    """One rank: serve ``(fn, args)`` requests from the parent. The channels are one-way OS pipes:
    unlike multiprocessing.Queue they need no named semaphore in /dev/shm, and unlike a duplex
    Pipe they are no sockets (tests/conftest.py counts this process's sockets)."""
    _serve(rank, world, store, cmd_in, res_out)
    res_out.close()


def _serve(rank: int, world: int, store: str, cmd_in, res_out) -> None:
    class _Results:
        @staticmethod
        def put(item):
            res_out.send(item)

    class _Cmds:
        @staticmethod
        def get():
            return cmd_in.recv()

    cmds, results = _Cmds, _Results
    memfds_at_start = memfd_holdings()
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    except BaseException as e:  # noqa: BLE001
        results.put((rank, False, f"init_process_group failed: {e!r}\n{traceback.format_exc()}"))
        return
    results.put((rank, True, "up"))
    while True:
        item = cmds.get()
        if item is None:
            break
        fn, args = item
        try:
            results.put((rank, True, fn(rank, world, *args)))
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            results.put((rank, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    dist.destroy_process_group()
    mine = [n for n in os.listdir("/dev/shm") if n.startswith(f"ringcast_{os.getpid()}_") or n.startswith(f"ringcast-probe-{os.getpid()}-")]
    mine += sorted(memfd_leaks(memfds_at_start))  # memfd segments (the default kind) have no name
    results.put((rank, True, ("bye", mine)))


class PoolBroken(RuntimeError):
    pass


class Pool:
    def __init__(self, world: int, store: str, start_timeout: float = 60.0) -> None:
        self.world = world
        cmd = [CTX.Pipe(duplex=False) for _ in range(world)]  # (child reads, parent writes)
        res = [CTX.Pipe(duplex=False) for _ in range(world)]  # (parent reads, child writes)
        self.conns = [r for r, _ in res]
        self.cmd_conns = [w for _, w in cmd]
        self.procs = [CTX.Process(target=_child, args=(r, world, store, cmd[r][0], res[r][1]), daemon=True) for r in range(world)]
        self.broken = False
        for p in self.procs:
            p.start()
        for (child_in, _), (_, child_out) in zip(cmd, res):
            child_in.close()
            child_out.close()
        try:
            self._collect(start_timeout, "start")
        except BaseException:
            self.kill()
            raise

    def _collect(self, timeout: float, what: str) -> list:
        deadline = time.monotonic() + timeout
        out: dict = {}
        errors: dict = {}
        while len(out) + len(errors) < self.world:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(self.world)) - set(out) - set(errors))
                self.broken = True
                raise PoolBroken(f"{what}: ranks {missing} did not finish within {timeout}s" + self._fmt(errors))
            pending = {c: r for r, c in enumerate(self.conns) if r not in out and r not in errors}
            ready = _wait_conns(list(pending), timeout=min(left, 0.2))
            for c in ready:
                try:
                    rank, ok, value = c.recv()
                except (EOFError, OSError):
                    rank, ok = pending[c], False
                    self.procs[rank].join(1)
                    value = f"the process died (exit code {self.procs[rank].exitcode})"
                    self.broken = True
                (out if ok else errors)[rank] = value
            if errors:  # the others may wait for the failed rank forever: give them a moment only
                deadline = min(deadline, time.monotonic() + 5)
            if not ready:
                dead = [r for r, p in enumerate(self.procs) if r not in out and r not in errors and not p.is_alive()]
                if dead:
                    self.broken = True
                    raise PoolBroken(f"{what}: ranks {dead} died (exit codes {[self.procs[r].exitcode for r in dead]})" + self._fmt(errors))
        if errors:
            self.broken = True
            raise AssertionError(f"{what} failed on ranks {sorted(errors)}" + self._fmt(errors))
        return [out[r] for r in range(self.world)]

    @staticmethod
    def _fmt(errors: dict) -> str:
        return "".join(f"\n--- rank {r} ---\n{v}" for r, v in sorted(errors.items()))

    def run(self, fn, *args, timeout: float = 30.0) -> list:
        """``fn(rank, world, *args)`` on every rank; the list of results by rank."""
        if self.broken:
            raise PoolBroken("the pool is broken")
        for c in self.cmd_conns:
            c.send((fn, args))
        return self._collect(timeout, getattr(fn, "__name__", "scenario"))

    def close(self) -> None:
        leaks = []
        if not self.broken:
            for c in self.cmd_conns:
                c.send(None)
            try:
                for r, bye in enumerate(self._collect(15, "shutdown")):
                    leaks += bye[1]
            except (PoolBroken, AssertionError):
                pass
        self.kill()
        assert not leaks, f"children left shared memory behind (/dev/shm names, memfd descriptors/mappings): {leaks}"

    def kill(self) -> None:
        for p in self.procs:
            p.join(timeout=0 if self.broken else 5)
            if p.is_alive():
                p.kill()
                p.join(5)
        for c in self.conns + self.cmd_conns:
            c.close()
