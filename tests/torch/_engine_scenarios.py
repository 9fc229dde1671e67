"""Scenarios of issue 16 (the torch half as an engine uses it), run on every rank of the gloo
pool: ``fn(rank, world, *args)``. Each makes its own queues and closes them."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
import torch.distributed as dist

import ringcast.torch as rt
from _store_group import MethodGroup, StoreGroup
from _torch_scenarios import MIB, Sampling, Worker, make_batch, make_group
from ringcast import ClosedError, MessageQueue
from ringcast.groups import queue_for, queue_from_group


# -- 1. follower_loop survives method errors ------------------------------------------------------
@dataclass
class Step:
    ids: torch.Tensor
    n: int = 0


class EngineWorker(Worker):
    def __init__(self, rank, group):
        super().__init__(rank)
        self.group = group

    def mismatch(self, bad_rank):
        """Every rank broadcasts a dataclass; one receiver's shell has another shape."""
        shape = (4,) if self.rank == bad_rank else (2,)
        obj = Step(torch.arange(2)) if self.group.is_writer else Step(torch.zeros(shape, dtype=torch.int64))
        return self.group.broadcast_dataclass(obj).n

    def raise_ringcast(self, kind):
        raise {"broadcast": rt.BroadcastError, "sender": rt.SenderError}[kind](f"{kind} on purpose")

    def queue_fails(self):
        if not self.group.is_writer:
            raise ClosedError("the queue went away (on purpose)")
        return "driver"


def follower_survives(rank, world, writer_rank):
    with make_group("world", writer_rank) as g:
        w = EngineWorker(rank, g)
        bad = (writer_rank + 1) % world
        if not g.is_writer:
            n = rt.follower_loop(w, g)
            return ("follower", n, w.log)
        d = rt.Driver(g, w)
        with pytest.raises(rt.StructureMismatchError, match=f"group rank {bad}"):
            d.broadcast_call("mismatch", bad_rank=bad)
        with pytest.raises(rt.SenderError):
            d.broadcast_call("raise_ringcast", kind="sender")
        with pytest.raises(rt.BroadcastError):
            d.broadcast_call("raise_ringcast", kind="broadcast")
        # the followers still serve: more calls, then results, then the errors
        assert d.broadcast_call("add", x=2, y=3) == 5
        assert d.run_workers("add", 1, y=2) == [3] * world
        errors = d.collect_errors()
        assert sorted(errors) == sorted(set(range(world)) - {writer_rank}), errors
        for r, errs in errors.items():
            assert [e.exc_type for e in errs] == ["StructureMismatchError", "SenderError", "BroadcastError"], errs
            assert f"group rank {bad}" in errs[0].message
        d.stop()
        return ("driver", w.log)


def follower_ends_on_queue_failure(rank, world, writer_rank):
    with make_group("world", writer_rank) as g:
        w = EngineWorker(rank, g)
        if not g.is_writer:
            with pytest.raises(ClosedError, match="on purpose"):
                rt.follower_loop(w, g)
            return "left"
        d = rt.Driver(g, w)
        assert d.broadcast_call("queue_fails") == "driver"
        return "driver"


# -- 2. run_workers: every rank's result, per-call timeout ----------------------------------------
class RpcWorker(Worker):
    def whoami(self, *args, scale=1, **kwargs):
        return (self.rank * scale, args, kwargs)

    def fail_here(self, ranks):
        if self.rank in ranks:
            raise KeyError(f"no key on {self.rank}")
        return self.rank

    def unpicklable(self):
        return (lambda: 1) if self.rank % 2 else self.rank

    def wait_for(self, src, who):
        """``who`` blocks until ``src`` sends it a tensor (so it answers late, deterministically)."""
        if self.rank == who:
            t = torch.zeros(1)
            dist.recv(t, src=src)
            return float(t.item())
        return "quick"


def run_workers_remote(rank, world, writer_rank):
    """One follower joins over TCP; its answers come back over TCP as well (a big one too)."""
    remote = (writer_rank + 1) % world
    with make_group("world", writer_rank, force_remote=rank == remote) as g:
        w = RpcWorker(rank)
        if not g.is_writer:
            return rt.follower_loop(w, g, connect_ip="127.0.0.1")
        d = rt.Driver(g, w)
        got = d.run_workers("whoami")
        assert got == [(r, (), {}) for r in range(world)]
        assert d.run_workers(_big) == [bytes([r]) * (2 * MIB) for r in range(world)]
        d.stop()
        return "driver"


def _big(worker):
    return bytes([worker.rank]) * (2 * MIB)


def _nothing(worker):
    return None


def _rank_and(worker, x):
    return (worker.rank, x)


def run_workers(rank, world, writer_rank):
    with make_group("world", writer_rank) as g:
        w = RpcWorker(rank)
        if not g.is_writer:
            return ("follower", rt.follower_loop(w, g))
        d = rt.Driver(g, w)
        got = d.run_workers("whoami", 1, "a", scale=10, flag=True)
        assert got == [(r * 10, (1, "a"), {"flag": True}) for r in range(world)], got
        assert d.run_workers(_rank_and, 5) == [(r, 5) for r in range(world)]
        assert d.run_workers(_nothing) == [None] * world  # None is an answer, not a missing one
        bad = (writer_rank + 1) % world
        got = d.run_workers("fail_here", [bad])
        for r in range(world):
            if r == bad:
                assert isinstance(got[r], rt.FollowerError) and got[r].exc_type == "KeyError" and got[r].rank == r
            else:
                assert got[r] == r
        # a result that cannot be pickled comes back as that rank's error
        got = d.run_workers("unpicklable")
        for r in range(world):
            if r % 2 and r != writer_rank:
                assert isinstance(got[r], rt.FollowerError) and got[r].exc_type == "PayloadError", got[r]
        # the driver's own failure is raised (after the followers answered)
        with pytest.raises(KeyError, match=f"no key on {writer_rank}"):
            d.run_workers("fail_here", [writer_rank])
        # timeout: rank `slow` cannot answer before the driver's dist.send, which comes after the timeout
        slow = (writer_rank + 2) % world
        with pytest.raises(rt.FollowerTimeoutError) as info:
            d.run_workers("wait_for", dist.get_rank(), slow, timeout=0.5)
        assert slow in info.value.missing  # the others answer in time unless the machine is very slow: not asserted
        assert all(v == "quick" for r, v in enumerate(info.value.results) if r not in info.value.missing)
        dist.send(torch.full((1,), 7.0), dst=slow)
        # the late answer is dropped; the next call gets its own results
        assert d.run_workers("add", 2, 2) == [4] * world
        errors = d.collect_errors()
        assert sorted(errors) == sorted({bad} | {r for r in range(world) if r % 2 and r != writer_rank})
        d.stop()
        with pytest.raises(rt.BroadcastError, match="stop"):
            d.run_workers("add", 1)
        return ("driver", 0)


# -- 3. vLLM's broadcast_tensor_dict shape --------------------------------------------------------
def vllm_tensor_dict(rank, world, writer_rank):
    cpu = dist.new_group(list(range(world)), backend="gloo")
    mq = rt.create_from_process_group(cpu, MIB, 4, writer_rank, connect_ip="127.0.0.1", timeout=20)
    try:
        assert queue_for(cpu, writer_rank) is mq and queue_for(cpu, (writer_rank + 1) % world) is None
        is_src = rank == writer_rank
        want = {"x": torch.arange(6.0).reshape(2, 3), "ids": [1, 2, 3], "nested": [torch.ones(2), {"t": torch.zeros(1)}], "s": "step"}
        # group = the device group, metadata_group = the CPU group whose queue carries the manifest
        got = rt.broadcast_tensor_dict(want if is_src else None, src=writer_rank, group=cpu, metadata_group=cpu)
        assert torch.equal(got["x"], want["x"]) and got["ids"] == [1, 2, 3] and got["s"] == "step"
        assert torch.equal(got["nested"][0], torch.ones(2)) and torch.equal(got["nested"][1]["t"], torch.zeros(1))
        # metadata_group defaults to group; positional as vLLM calls it
        got = rt.broadcast_tensor_dict({"y": torch.ones(3)} if is_src else None, writer_rank, cpu)
        assert torch.equal(got["y"], torch.ones(3))
        # the explicit spelling
        got = rt.broadcast_tensor_dict_with_queue({"z": torch.ones(1)} if is_src else None, writer_rank, cpu, mq)
        assert torch.equal(got["z"], torch.ones(1))
        # a device tensor (meta stands in for cuda here) over a gloo-only device group: refused on every rank
        # before the manifest, and nested device tensors are refused too (they would be pickled)
        for bad in ({"dev": torch.empty(3, device="meta")}, {"n": [torch.empty(2, device="meta")]}):
            if is_src:
                with pytest.raises(rt.BroadcastError, match="meta tensor") as info:
                    rt.broadcast_tensor_dict(bad, src=writer_rank, group=cpu, metadata_group=cpu)
            else:
                with pytest.raises(rt.SenderError, match="meta tensor") as info:
                    rt.broadcast_tensor_dict(None, src=writer_rank, group=cpu, metadata_group=cpu)
            msg = str(info.value)
        # the queue passed where vLLM's 4th argument (metadata_group) goes: a clear TypeError, no collective
        with pytest.raises(TypeError, match="metadata_group"):
            rt.broadcast_tensor_dict({} if is_src else None, writer_rank, cpu, mq)
        # a metadata group without a queue of this writer: every rank says so
        with pytest.raises(ValueError, match="no queue"):
            rt.broadcast_tensor_dict({} if is_src else None, src=(writer_rank + 1) % world, group=cpu, metadata_group=cpu)
        # still in step
        got = rt.broadcast_tensor_dict({"ok": torch.arange(3)} if is_src else None, src=writer_rank, group=cpu, metadata_group=cpu)
        assert torch.equal(got["ok"], torch.arange(3))
        return msg
    finally:
        mq.close()


# -- 4. dynamic structure in broadcast_dataclass --------------------------------------------------
@dataclass
class Request:
    rid: str
    tokens: torch.Tensor


@dataclass
class Sched:
    step: int
    request_ids: list
    positions: dict
    block_table: torch.Tensor
    spec: torch.Tensor | None = None
    sampling: Sampling | None = None
    requests: list = field(default_factory=list)


@dataclass
class Leafy:
    t: tuple


def _sched(step: int) -> Sched:
    n = 1 + step % 3
    return Sched(
        step=step,
        request_ids=[f"r{step}-{i}" for i in range(n)],
        positions={i: torch.full((2,), float(step + i)) for i in range(n)},
        block_table=torch.arange(8).reshape(2, 4) + step,
        spec=torch.arange(n) if step % 2 else None,
        sampling=Sampling(0.5, {"k": step}, torch.arange(4) * step) if step % 3 == 1 else None,
        requests=[Request(f"q{i}", torch.arange(i + 1)) for i in range(n)],
    )


def _same(a, b) -> None:
    wa, wb = rt.walk(a), rt.walk(b)
    assert wa.nodes == wb.nodes and wa.values == wb.values
    assert all(pa == pb and torch.equal(ta, tb) for (pa, ta), (pb, tb) in zip(wa.tensors, wb.tensors))


def dynamic_dataclass(rank, world, writer_rank):
    with make_group("world", writer_rank) as g:
        shell = Sched(0, [], {}, torch.zeros(2, 4, dtype=torch.int64))
        table = shell.block_table
        for step in range(6):
            want = _sched(step)
            out = g.broadcast_dataclass(want if g.is_writer else shell, structure="dynamic")
            if not g.is_writer:
                assert out is shell and shell.block_table is table  # the persistent buffer is filled in place
                _same(shell, want)
        # a receiver's buffer of another shape where the sender has a tensor: every rank raises, nothing moves
        bad = (writer_rank + 1) % world
        if rank == bad:
            shell.block_table = torch.zeros(3, 3, dtype=torch.int64)
        with pytest.raises(rt.StructureMismatchError, match=r"\.block_table.*shape \[3, 3\]"):
            g.broadcast_dataclass(_sched(7) if g.is_writer else shell, structure="dynamic")
        shell.block_table = table
        # one rank in the other mode: every rank raises
        mode = "fixed" if rank == bad else "dynamic"
        with pytest.raises(rt.StructureMismatchError, match="structure="):
            g.broadcast_dataclass(_sched(8) if g.is_writer else shell, structure=mode)
        # still in step; the fixed mode still refuses a changed structure. shell.spec (shape [3] from step 5)
        # would be filled in place, but step 9 has a [1]: None there asks for a new tensor
        shell.spec = None
        g.broadcast_dataclass(_sched(9) if g.is_writer else shell, structure="dynamic")
        if not g.is_writer:
            _same(shell, _sched(9))
        with pytest.raises(rt.StructureMismatchError):
            g.broadcast_dataclass(_sched(10) if g.is_writer else shell)
        # a device tensor nested in a leaf would be pickled: refused on every rank before the manifest
        if g.is_writer:
            with pytest.raises(rt.BroadcastError, match=r"\.t\[1\]\[0\] is a meta tensor nested"):
                g.broadcast_dataclass(Leafy((1, (torch.empty(1, device="meta"),))))
        else:
            with pytest.raises(rt.SenderError, match="meta tensor nested"):
                g.broadcast_dataclass(Leafy(()))
        # a shell built for the fixed mode works in the dynamic mode as well
        obj = make_batch(True) if g.is_writer else make_batch(False)
        g.broadcast_dataclass(obj, structure="dynamic")
        if not g.is_writer:
            _same(obj, make_batch(True))
            assert obj.alias is obj.sampling and obj.node.next.next is obj.node
        return True


# -- 5. duck-typed groups: a torch-free group over a TCP store -----------------------------------
def store_group_queue(rank, world, writer_rank):
    master = StoreGroup.master(world) if rank == 0 else None
    box = [master.port if master else None]
    dist.broadcast_object_list(box, src=0)  # the test's setup only: tell the others the OS-chosen port
    store = master if master else StoreGroup.client(box[0], world)
    sg = StoreGroup(store, rank, world, "t1")
    out = []
    try:
        # vLLM's spelling, with a group that is not torch's
        mq = MessageQueue.create_from_process_group(sg, MIB, 4, writer_rank, connect_ip="127.0.0.1", timeout=20)
        try:
            out.append([mq.broadcast_object(("hi", i) if mq.is_writer else None) for i in range(3)])
            big = mq.broadcast_object(b"x" * (2 * MIB) if mq.is_writer else None)
            assert big == b"x" * (2 * MIB)
        finally:
            mq.close()
        # rank()/size() methods, the layer below the queue called directly, and one remote reader
        mg = MethodGroup(StoreGroup(store, rank, world, "t2"))
        remote = (writer_rank + 1) % world
        mq = queue_from_group(MessageQueue, mg, MIB, 4, writer_rank, connect_ip="127.0.0.1", timeout=20, force_remote=rank == remote)
        try:
            role = "writer" if mq.is_writer else ("local" if mq.is_local_reader else "remote")
            out.append((role, mq.broadcast_object({"r": rank} if mq.is_writer else None)))
        finally:
            mq.close()
        with pytest.raises(TypeError, match="broadcast_obj"):
            rt.create_from_process_group(object(), MIB, 4)
        dist.barrier()  # the test's teardown: nobody stops the store's server before all are done with it
        return out
    finally:
        del store, master
