"""The path walk behind broadcast_dataclass, in one process (no process group needed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

torch = pytest.importorskip("torch")

from ringcast.torch import TensorMetadata, walk  # noqa: E402
from ringcast.torch.dataclass_broadcast import _compare  # noqa: E402


@dataclass
class Inner:
    t: torch.Tensor
    tags: dict = field(default_factory=dict)


@dataclass
class Outer:
    a: Inner
    b: Inner
    items: list
    empty: dict
    back: object = None


def test_paths_refs_cycles_and_empty_dicts():
    inner = Inner(torch.zeros(2, 3), {5: "x", "5": None})
    o = Outer(inner, inner, [inner.t, 1.5, (1, 2)], {})
    o.back = o
    w = walk(o)
    assert w.nodes == {
        "": ("dataclass", f"{Outer.__module__}.Outer"),
        ".a": ("dataclass", f"{Inner.__module__}.Inner"),
        ".a.t": ("tensor", TensorMetadata("cpu", torch.float32, (2, 3))),
        ".a.tags": ("dict",),
        ".a.tags[5]": ("leaf",),
        ".a.tags['5']": ("leaf",),
        ".b": ("ref", ".a"),
        ".items": ("list",),
        ".items[0]": ("ref", ".a.t"),
        ".items[1]": ("leaf",),
        ".items[2]": ("leaf",),
        ".empty": ("dict",),
        ".back": ("ref", ""),
    }
    assert w.values == {".a.tags[5]": "x", ".a.tags['5']": None, ".items[1]": 1.5, ".items[2]": (1, 2)}
    assert [p for p, _ in w.tensors] == [".a.t"]


def test_compare_names_paths():
    a = walk(Inner(torch.zeros(2), {1: 1}))
    b = walk(Inner(torch.zeros(3, dtype=torch.int8), {2: 1}))
    problems = _compare(a.nodes, b.nodes)
    assert any(".t the sender has a cpu tensor torch.float32 of shape [2], this rank has a cpu tensor torch.int8 of shape [3]" in p for p in problems)
    assert "missing path .tags[1] (the sender has a value there)" in problems
    assert "extra path .tags[2] (this rank has a value, the sender has nothing there)" in problems


def test_unsupported_shapes_are_named():
    with pytest.raises(TypeError, match=r"at \.tags\[\(1, 2\)\]|at \.tags: dict keys must be scalars"):
        walk(Inner(torch.zeros(1), {(1, 2): 3}))
    with pytest.raises(TypeError, match=r"at \.tags\['x'\]: a tuple holding tensors"):
        walk(Inner(torch.zeros(1), {"x": (torch.zeros(1),)}))
