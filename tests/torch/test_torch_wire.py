"""Which group a tensor travels over, and what is refused before anything is sent (one process;
the backends are stubbed, so NCCL-only groups are checked without GPUs)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import ringcast.torch as rt  # noqa: E402
from ringcast.torch import _wire  # noqa: E402


class FakeGroup:
    def __init__(self, backend: str) -> None:
        self.backend = backend


@pytest.fixture
def backends(monkeypatch):
    monkeypatch.setattr(_wire.dist, "get_backend", lambda g: g.backend)


def test_cpu_tensors_go_over_the_cpu_group(backends):
    gloo = FakeGroup("gloo")
    assert _wire.group_for(torch.ones(1), gloo, None, "x") is gloo
    mixed = FakeGroup("cpu:gloo,cuda:nccl")
    assert _wire.group_for(torch.ones(1), mixed, None, "x") is mixed
    with pytest.raises(rt.BroadcastError, match=r"x is a cpu tensor .* backend is nccl .* pass a gloo group"):
        _wire.group_for(torch.ones(1), FakeGroup("nccl"), None, "x")


def test_device_tensors_need_a_device_group_that_carries_them(backends):
    meta = torch.empty(2, device="meta")  # any non-CPU device stands in for cuda here
    with pytest.raises(rt.BroadcastError, match="no device_group was given"):
        _wire.group_for(meta, FakeGroup("gloo"), None, "t")
    with pytest.raises(rt.BroadcastError, match=r"t is a meta tensor but the device group's backend is gloo"):
        _wire.group_for(meta, FakeGroup("gloo"), FakeGroup("gloo"), "t")
    unknown = FakeGroup("ucc")  # a backend ringcast does not know: not refused
    assert _wire.group_for(meta, FakeGroup("gloo"), unknown, "t") is unknown
    # staged: through host memory over the CPU group, which must carry CPU tensors
    cpu = FakeGroup("gloo")
    assert _wire.group_for(meta, cpu, None, "t", stage=True) is cpu
    with pytest.raises(rt.BroadcastError, match="backend is nccl"):
        _wire.group_for(meta, FakeGroup("nccl"), None, "t", stage=True)


def test_nested_device_tensors_are_found():
    meta = torch.empty(1, device="meta")
    assert _wire.nested_device_tensor([1, "a", {"k": (2, [torch.ones(1)])}], "v") is None
    path, t = _wire.nested_device_tensor({"a": [1, {"b": (meta,)}]}, "v")
    assert path == "v['a'][1]['b'][0]" and t is meta
    assert _wire.nested_device_tensor(list(range(10000)), "v") is None
    assert "put it at the top level" in str(_wire.nested_error((path, t), "put it at the top level"))
