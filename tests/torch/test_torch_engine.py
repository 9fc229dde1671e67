"""Issue 16: the torch half as an engine uses it (4 gloo ranks; see _engine_scenarios.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import _engine_scenarios as es  # noqa: E402


@pytest.mark.timeout(90)
@pytest.mark.parametrize("writer_rank", [0, 3])
def test_follower_serves_on_after_method_errors(pool4, writer_rank):
    res = pool4.run(es.follower_survives, writer_rank, timeout=60)
    for rank, r in enumerate(res):
        if rank == writer_rank:
            assert r[0] == "driver"
        else:
            # mismatch, sender, broadcast, add, then the run_workers call: all served
            assert r[0] == "follower" and r[1] == 5
            assert r[2] == [("add", 5), ("add", 3)]


@pytest.mark.timeout(90)
def test_follower_loop_ends_on_queue_failure(pool4):
    assert pool4.run(es.follower_ends_on_queue_failure, 1, timeout=60) == ["left", "driver", "left", "left"]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("writer_rank", [0, 2])
def test_run_workers_results_errors_timeout(pool4, writer_rank):
    res = pool4.run(es.run_workers, writer_rank, timeout=60)
    assert res[writer_rank] == ("driver", 0)
    assert all(r[0] == "follower" for i, r in enumerate(res) if i != writer_rank)


@pytest.mark.timeout(90)
def test_run_workers_with_a_remote_follower(pool4):
    assert pool4.run(es.run_workers_remote, 3, timeout=60) == [2, 2, 2, "driver"]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("writer_rank", [0, 1])
def test_vllm_shaped_broadcast_tensor_dict(pool4, writer_rank):
    res = pool4.run(es.vllm_tensor_dict, writer_rank, timeout=60)
    assert all("nested inside a container" in m for m in res), res


@pytest.mark.timeout(90)
@pytest.mark.parametrize("writer_rank", [0, 2])
def test_dynamic_dataclass_structure(pool4, writer_rank):
    assert pool4.run(es.dynamic_dataclass, writer_rank, timeout=60) == [True] * 4


@pytest.mark.timeout(90)
@pytest.mark.parametrize("writer_rank", [0, 3])
def test_torch_free_group_over_tcp_store(pool4, writer_rank):
    res = pool4.run(es.store_group_queue, writer_rank, timeout=60)
    remote = (writer_rank + 1) % 4
    for rank, (objs, (role, got)) in enumerate(res):
        assert objs == [("hi", i) for i in range(3)]
        assert got == {"r": writer_rank}
        assert role == ("writer" if rank == writer_rank else "remote" if rank == remote else "local")
