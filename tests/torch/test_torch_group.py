"""Multi-process tests of ringcast.torch on CPU/gloo: a pool of 4 ranks runs each scenario."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("torch")

import _torch_scenarios as sc  # noqa: E402


@pytest.mark.timeout(90)
@pytest.mark.parametrize("writer_rank", [0, 2])
def test_queue_over_world(pool4, writer_rank):
    res = pool4.run(sc.queue_roles, "world", writer_rank)
    for rank, (grank, role, got, local) in enumerate(res):
        assert grank == rank
        assert role == ("writer" if rank == writer_rank else "local")
        assert got == [{"i": i, "from": writer_rank} for i in range(5)]
        assert local == sorted(set(range(4)) - {writer_rank})


@pytest.mark.timeout(90)
@pytest.mark.parametrize("writer_rank", [0, 1])
def test_queue_over_subgroup(pool4, writer_rank):
    res = pool4.run(sc.queue_roles, (1, 3), writer_rank)
    assert res[0] is None and res[2] is None
    roles = {res[1][0]: res[1][1], res[3][0]: res[3][1]}
    assert roles[writer_rank] == "writer" and roles[1 - writer_rank] == "local"
    assert res[1][2] == res[3][2] == [{"i": i, "from": writer_rank} for i in range(5)]


@pytest.mark.timeout(90)
def test_queue_with_a_remote_reader(pool4):
    # global rank 3 cannot see the writer's probe: it joins over TCP
    res = pool4.run(sc.queue_roles, "world", 1, (3,))
    assert [r[1] for r in res] == ["local", "writer", "local", "remote"]
    assert res[1][3] == [0, 2]
    assert all(r[2] == [{"i": i, "from": 1} for i in range(5)] for r in res)


@pytest.mark.timeout(60)
def test_bad_writer_rank(pool4):
    assert pool4.run(sc.bad_writer_rank) == [True] * 4


@pytest.mark.timeout(90)
@pytest.mark.parametrize("spec, writer_rank", [("world", 0), ("world", 3), ((1, 3), 1), ((0, 2, 3), 0)])
def test_broadcast_tensor_dict(pool4, spec, writer_rank):
    res = pool4.run(sc.tensor_dicts, spec, writer_rank, timeout=60)
    members = range(4) if spec == "world" else spec
    assert [r for r in res if r is not None] == list(range(len(members)))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("writer_rank", [0, 1])
def test_broadcast_tensor_dict_errors(pool4, writer_rank):
    assert pool4.run(sc.tensor_dict_errors, writer_rank) == [True] * 4


@pytest.mark.timeout(90)
@pytest.mark.parametrize("spec, writer_rank", [("world", 0), ("world", 2), ((1, 3), 1)])
def test_broadcast_dataclass(pool4, spec, writer_rank):
    res = pool4.run(sc.dataclasses_roundtrip, spec, writer_rank, timeout=60)
    members = range(4) if spec == "world" else spec
    assert [r for i, r in enumerate(res) if i in members] == [True] * len(members)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("writer_rank", [0, 3])
def test_broadcast_dataclass_mismatch(pool4, writer_rank):
    res = pool4.run(sc.dataclass_mismatches, writer_rank, timeout=60)
    # every rank got the same report (but for the rank that saw it)
    same = [[re.sub(r"seen from rank \d", "", m) for m in r] for r in res]
    assert all(r == same[0] for r in same)
    assert len(res[0]) == 4


@pytest.mark.timeout(90)
@pytest.mark.parametrize("writer_rank", [0, 2])
def test_driver_follower(pool4, writer_rank):
    res = pool4.run(sc.rpc, writer_rank, timeout=60)
    driver = res[writer_rank]
    assert driver[0] == "driver"
    for rank, r in enumerate(res):
        if rank == writer_rank:
            continue
        assert r[0] == "follower"
        assert r[1] == 6  # every call that arrived, failed ones included (not the unsent one)
        assert r[2][:3] == [("add", 3), ("add", 1), ("double", 8)]


def test_both_spellings_have_the_same_defaults():
    """``ringcast.torch.create_from_process_group`` is documented as the same call as
    ``MessageQueue.create_from_process_group``; its chunk size defaulted to 10 MiB, the queue's to
    24 MiB (DEFAULT_MAX_CHUNK_BYTES). A BroadcastGroup's queue has the same defaults too."""
    import inspect

    import ringcast.torch as rt
    from ringcast import MessageQueue

    def defaults(fn):
        return {n: p.default for n, p in inspect.signature(fn).parameters.items() if n in ("max_chunk_bytes", "max_chunks", "writer_rank")}

    assert defaults(rt.create_from_process_group) == defaults(MessageQueue.create_from_process_group)
    assert defaults(rt.BroadcastGroup.__init__) == defaults(MessageQueue.create_from_process_group)
    assert len(defaults(rt.create_from_process_group)) == 3
