"""Scenarios run on every rank of the pool: ``fn(rank, world, *args)``. Each makes its own queue
and closes it, so the pool stays usable for the next one."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
import torch.distributed as dist

import ringcast.torch as rt
from ringcast import MessageQueue, PayloadError

_groups: dict = {}

MIB = 1024 * 1024


def pg(spec):
    """"world" or a tuple of global ranks (a subgroup, made once and cached on every rank)."""
    if spec == "world":
        return dist.group.WORLD
    if spec not in _groups:
        _groups[spec] = dist.new_group(list(spec), backend="gloo")
    return _groups[spec]


def member(rank, spec) -> bool:
    return spec == "world" or rank in spec


def make_group(spec, writer_rank, **kw) -> rt.BroadcastGroup:
    return rt.BroadcastGroup(pg(spec), writer_rank=writer_rank, max_chunk_bytes=1 * MIB, max_chunks=4, connect_ip="127.0.0.1", timeout=20, **kw)


# -- 1. create_from_process_group ---------------------------------------------------------------
def queue_roles(rank, world, spec, writer_rank, remote_ranks=()):
    """Locality and roles; the handshake is done; objects arrive in order. ``remote_ranks``
    (global) pretend to be on another node (they cannot see the writer's probe)."""
    g_pg = pg(spec)
    if not member(rank, spec):
        return None
    mq = MessageQueue.create_from_process_group(g_pg, 1 * MIB, 4, writer_rank, connect_ip="127.0.0.1", timeout=20, force_remote=rank in remote_ranks)
    try:
        grank = dist.get_rank(g_pg)
        role = "writer" if mq.is_writer else ("local" if mq.is_local_reader else "remote")
        got = []
        for i in range(5):
            got.append(mq.broadcast_object({"i": i, "from": grank} if mq.is_writer else None))
        big = mq.broadcast_object(bytes(range(256)) * 8192 if mq.is_writer else None)  # 2 MiB > chunk: overflow path
        assert big == bytes(range(256)) * 8192
        return (grank, role, got, sorted(mq.local_reader_ranks))
    finally:
        mq.close()


def bad_writer_rank(rank, world):
    with pytest.raises(ValueError, match="writer_rank"):
        rt.create_from_process_group(dist.group.WORLD, MIB, 4, writer_rank=world)
    return True


# -- 2. broadcast_tensor_dict --------------------------------------------------------------------
def sample_dict(seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(6, 5, generator=gen)
    return {
        "f32": torch.randn(3, 4, generator=gen),
        "bf16": torch.randn(7, generator=gen).to(torch.bfloat16),
        "f16": torch.randn(2, 2, generator=gen).half(),
        "bool": torch.rand(9, generator=gen) > 0.5,
        "i64": torch.randint(-(2**40), 2**40, (4,), generator=gen),
        "u8": torch.randint(0, 255, (5,), dtype=torch.uint8, generator=gen),
        "c64": torch.randn(3, dtype=torch.complex64, generator=gen),
        "zero_d": torch.tensor(3.25),
        "zero_d_bool": torch.tensor(True),
        "empty": torch.empty(0, 3),
        "empty_i": torch.empty(2, 0, dtype=torch.int32),
        "noncontig": base.t(),
        "strided": base[::2, 1::2],
        "expanded": torch.arange(3.0).expand(4, 3),
        "str": "hello",
        "int": seed,
        "none": None,
        "nested": {"a": [1, 2, (3, "x")]},
        7: "int key",
    }


def check_equal(got: dict, want: dict) -> None:
    assert list(got) == list(want), (list(got), list(want))
    for k, w in want.items():
        g = got[k]
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor), k
            assert g.dtype == w.dtype and g.shape == w.shape and g.device == w.device, (k, g.dtype, g.shape, w.dtype, w.shape)
            assert torch.equal(g, w), k
        else:
            assert g == w, k


def tensor_dicts(rank, world, spec, writer_rank, rounds=3):
    g_pg = pg(spec)
    if not member(rank, spec):
        return None
    with make_group(spec, writer_rank) as g:
        for seed in range(rounds):
            want = sample_dict(seed)
            got = g.broadcast_tensor_dict(want if g.is_writer else None, src=writer_rank)
            if g.is_writer:
                assert got is want
            check_equal(got, want)
        # the free function, with the queue and the CPU group
        want = sample_dict(99)
        got = rt.broadcast_tensor_dict(want if g.is_writer else None, src=writer_rank, group=g_pg, mq=g.mq)
        check_equal(got, want)
        # a large tensor (8 MiB) and an empty dict
        big = torch.arange(2 * MIB, dtype=torch.float32)
        got = g.broadcast_tensor_dict({"big": big} if g.is_writer else None)
        assert torch.equal(got["big"], big)
        assert g.broadcast_tensor_dict({} if g.is_writer else None) == {}
        return g.rank


def tensor_dict_errors(rank, world, writer_rank):
    with make_group("world", writer_rank) as g:
        wrong = (writer_rank + 1) % world
        # src is not the writer: every rank raises, nobody waits
        with pytest.raises(rt.BroadcastError, match="writer"):
            g.broadcast_tensor_dict({"x": torch.ones(1)}, src=wrong)
        with pytest.raises(rt.BroadcastError, match="writer"):
            rt.broadcast_tensor_dict({"x": torch.ones(1)}, src=wrong, group=dist.group.WORLD, mq=g.mq)
        # the sender passes garbage: it raises TypeError, the receivers SenderError; still in step
        if g.is_writer:
            with pytest.raises(TypeError, match="sends a dict"):
                g.broadcast_tensor_dict([1, 2])
        else:
            with pytest.raises(rt.SenderError, match="sends a dict"):
                g.broadcast_tensor_dict()
        # an unpicklable value: PayloadError on the sender, SenderError on the receivers
        if g.is_writer:
            with pytest.raises(PayloadError):
                g.broadcast_tensor_dict({"f": lambda: 1, "t": torch.ones(2)})
        else:
            with pytest.raises(rt.SenderError):
                g.broadcast_tensor_dict()
        # a sparse tensor cannot travel: TypeError on the sender, SenderError on the receivers
        if g.is_writer:
            with pytest.raises(TypeError, match="dense"):
                g.broadcast_tensor_dict({"s": torch.eye(3).to_sparse()})
        else:
            with pytest.raises(rt.SenderError, match="dense"):
                g.broadcast_tensor_dict()
        # a receiver expecting another kind of message gets a clear error
        if g.is_writer:
            g.broadcast_object("not a tensor dict")
        else:
            with pytest.raises(rt.BroadcastError, match="ringcast.torch"):
                g.broadcast_tensor_dict()
        # the group is still in step
        got = g.broadcast_tensor_dict({"ok": torch.arange(4)} if g.is_writer else None)
        assert torch.equal(got["ok"], torch.arange(4))
        return True


# -- 4. broadcast_dataclass ----------------------------------------------------------------------
@dataclass
class Sampling:
    temperature: float = 1.0
    top_k: dict = field(default_factory=dict)
    seeds: torch.Tensor = field(default_factory=lambda: torch.zeros(4, dtype=torch.int64))


@dataclass(frozen=True)
class Frozen:
    name: str
    weight: torch.Tensor


@dataclass
class Node:
    value: int = 0
    next: "Node | None" = None


@dataclass
class Batch:
    step: int
    input_ids: torch.Tensor
    positions: dict
    sampling: Sampling
    alias: Sampling | None
    frozen: Frozen
    items: list
    empty: dict
    meta: dict
    node: Node
    strided: torch.Tensor


def make_batch(fill: bool, *, shape=(2, 8), drop_key=False, extra_key=False, dtype=torch.int64) -> Batch:
    """``fill`` builds the sender's object; otherwise a shell of the same structure with zeros
    and placeholder leaves. The keyword arguments break the structure on purpose."""
    v = (lambda t: t) if fill else torch.zeros_like
    gen = torch.Generator().manual_seed(5)
    sampling = Sampling(0.7 if fill else 0.0, {1: 5, "x": 2} if fill else {1: 0, "x": 0}, v(torch.tensor([1, 2, 3, 4])))
    positions = {128: v(torch.arange(3)), -1: v(torch.arange(2.0)), "k": "v" if fill else None}
    if drop_key:
        del positions[-1]
    if extra_key:
        positions[999] = 0
    node = Node(1 if fill else 0)
    node.next = Node(2 if fill else 0, node)  # a cycle
    ids = v(torch.randint(0, 1000, (2, 8), generator=gen)).to(dtype).reshape(shape)
    # the shell's tensor is a non-contiguous view (filled through a temporary)
    strided = torch.arange(12.0).reshape(3, 4) if fill else torch.zeros(4, 3).t()
    return Batch(
        step=17 if fill else 0,
        input_ids=ids,
        positions=positions,
        sampling=sampling,
        alias=sampling,  # a shared reference
        frozen=Frozen("w" if fill else "", v(torch.randn(3, generator=gen).to(torch.bfloat16))),
        items=[v(torch.ones(2, 2, dtype=torch.bool)), "leaf" if fill else None, [1, (2, 3)] if fill else [0, None]],
        empty={},
        meta={"a": {"b": {}}},
        node=node,
        strided=strided,
    )


def batch_equal(a: Batch, b: Batch) -> None:
    wa, wb = rt.walk(a), rt.walk(b)
    assert wa.nodes == wb.nodes
    assert wa.values == wb.values
    for (pa, ta), (pb, tb) in zip(wa.tensors, wb.tensors):
        assert pa == pb and torch.equal(ta, tb), pa


def dataclasses_roundtrip(rank, world, spec, writer_rank):
    if not member(rank, spec):
        pg(spec)
        return None
    with make_group(spec, writer_rank) as g:
        want = make_batch(True)
        obj = want if g.is_writer else make_batch(False)
        if not g.is_writer:
            assert not obj.strided.is_contiguous()
            ids_before = obj.input_ids
        out = g.broadcast_dataclass(obj)
        assert out is obj
        batch_equal(out, want)
        if not g.is_writer:
            assert out.input_ids is ids_before  # filled in place
            assert out.alias is out.sampling and out.node.next.next is out.node
        # without the agreement collective, a matching structure works the same
        obj = want if g.is_writer else make_batch(False)
        batch_equal(g.broadcast_dataclass(obj, check=False), want)
        # large tensor in a dataclass
        big = Sampling(0.1, {}, torch.arange(2 * MIB, dtype=torch.int64) if g.is_writer else torch.empty(2 * MIB, dtype=torch.int64))
        rt.broadcast_dataclass(big, g)
        assert torch.equal(big.seeds, torch.arange(2 * MIB))
        return True


def dataclass_mismatches(rank, world, writer_rank):
    with make_group("world", writer_rank) as g:
        bad = (writer_rank + 2) % world  # one receiver is wrong
        results = []
        cases = [
            ({"shape": (4, 4)}, r"input_ids.*shape \[4, 4\]"),
            ({"dtype": torch.int32}, r"input_ids.*torch.int32"),
            ({"drop_key": True}, r"missing path \.positions\[-1\]"),
            ({"extra_key": True}, r"extra path \.positions\[999\]"),
        ]
        for kwargs, pattern in cases:
            obj = make_batch(True) if g.is_writer else make_batch(False, **(kwargs if rank == bad else {}))
            with pytest.raises(rt.StructureMismatchError, match=pattern) as info:
                g.broadcast_dataclass(obj)
            assert f"group rank {bad}:" in str(info.value)
            results.append(str(info.value))
        # a receiver with another class at the root
        obj = make_batch(True) if g.is_writer else (Sampling() if rank == bad else make_batch(False))
        with pytest.raises(rt.StructureMismatchError, match="Sampling"):
            g.broadcast_dataclass(obj)
        # the sender sends a non-dataclass: TypeError there, SenderError elsewhere
        if g.is_writer:
            with pytest.raises(TypeError):
                g.broadcast_dataclass({"a": 1})
        else:
            with pytest.raises(rt.SenderError):
                g.broadcast_dataclass(make_batch(False))
        # still in step
        obj = make_batch(True) if g.is_writer else make_batch(False)
        batch_equal(g.broadcast_dataclass(obj), make_batch(True))
        return results


# -- 5. driver / follower ------------------------------------------------------------------------
class Worker:
    def __init__(self, rank):
        self.rank = rank
        self.log = []

    def add(self, x, y=0):
        self.log.append(("add", x + y))
        return x + y

    def fail_on(self, ranks):
        if self.rank in ranks:
            raise ValueError(f"boom on {self.rank}")
        self.log.append("ok")
        return "ok"

    def tensors(self, group, payload=None):
        got = group.broadcast_tensor_dict(payload)
        self.log.append(("sum", float(got["t"].sum())))


class DriverWorker(Worker):
    def only_on_driver(self):
        return "driver"


def _double(worker, x):
    worker.log.append(("double", 2 * x))
    return 2 * x


def rpc(rank, world, writer_rank):
    with make_group("world", writer_rank) as g:
        w = DriverWorker(rank) if g.is_writer else Worker(rank)
        if g.is_writer:
            d = rt.Driver(g, w)
            assert d.broadcast_call("add", x=1, y=2) == 3
            assert d.broadcast_call("add", driver_kwargs={"x": 10}, x=1) == 10
            assert d.broadcast_call(_double, x=4) == 8
            assert d.collect_errors() == {}
            bad = sorted({(writer_rank + 1) % world, (writer_rank + 3) % world})
            assert d.broadcast_call("fail_on", ranks=bad) == "ok"
            d.broadcast_call("fail_on", ranks=bad)
            errors = d.collect_errors()
            assert sorted(errors) == bad, errors
            for r in bad:
                assert [e.seq for e in errors[r]] == [4, 5]
                e = errors[r][0]
                assert e.rank == r and e.method == "fail_on" and e.exc_type == "ValueError" and f"boom on {r}" in e.message
                assert "Traceback" in e.traceback
            assert d.collect_errors() == {}  # collected once
            with pytest.raises(AttributeError):
                d.broadcast_call("no_such_method")  # fails on the driver before anything is sent
            assert d.broadcast_call("only_on_driver") == "driver"
            with pytest.raises(rt.FollowerFailedError, match="only_on_driver"):
                d.check_errors()
            # the method itself broadcasts: the driver passes the payload to itself only
            with pytest.raises(PayloadError):
                d.broadcast_call("add", x=lambda: 1)
            assert d.collect_errors() != {}  # followers recorded the unsent call
            d.stop()
            d.stop()
            with pytest.raises(rt.BroadcastError, match="stop"):
                d.broadcast_call("add", x=1)
            return ("driver", w.log)
        n = rt.follower_loop(w, g)
        return ("follower", n, w.log)
