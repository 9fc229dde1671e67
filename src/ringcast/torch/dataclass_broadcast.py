"""Path-based broadcast of dataclass trees into receivers' pre-built shells.

The sender walks its object; every node gets a path (``.field`` for dataclass fields,
``[repr(key)]`` for dict keys, ``[i]`` for list items; the root is ``""``). The walk yields

* a *structural manifest*: path -> node kind (dataclass type, dict, list, tensor metadata, leaf,
  or a reference to an earlier path for shared objects and cycles), in traversal order;
* the *values*: path -> each non-tensor leaf;
* the tensors, in traversal order.

Phase 1 sends manifest and values through the queue. Each receiver walks its own shell the same
way and compares: any missing or extra path, other container type, or tensor of another
dtype/shape/device is a mismatch. With ``check=True`` (default) all ranks then agree (one
all_reduce on the CPU group): if any rank found a mismatch, every rank raises
:class:`StructureMismatchError` naming the ranks and paths, and *no* tensor is broadcast, so the
group stays in step. Phase 2 broadcasts each tensor straight into the receiver's tensor (through a
temporary for non-contiguous shell tensors) and assigns the leaves in place.

With ``structure="dynamic"`` the manifest also carries each dict's keys and each list's length,
and receivers rebuild the sender's structure of this step (None vs value, list lengths, dict
keys) instead of requiring the shell to match it; see :mod:`ringcast.torch.rebuild`.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist

from ._wire import TensorMetadata, broadcast_tensors, check_sendable, group_for, nested_device_tensor, nested_error, recv, send, send_error
from .errors import StructureMismatchError
from .flatten import encode_key
from .group import GroupBase
from .rebuild import Plan, describe_tensor, show as _show, type_name as _type_name

__all__ = ["broadcast_dataclass", "walk"]

_KIND = "dataclass"
_MAX_REPORTED = 8


_STRUCTURES = ("fixed", "dynamic")


def _child(path: str, attr: str) -> str:
    return f"{path}.{attr}"


class _Walk:
    """One traversal: ``nodes`` path -> descriptor, ``values`` path -> leaf, ``tensors`` (path,
    tensor) in order, ``setters`` path -> (container, key, how) for leaves and tensors,
    ``shapes`` path -> the keys (a dict) or the length (a list)."""

    def __init__(self, root) -> None:
        self.nodes: dict[str, tuple] = {}
        self.values: dict[str, object] = {}
        self.tensors: list[tuple[str, torch.Tensor]] = []
        self.setters: dict[str, tuple] = {}
        self.shapes: dict[str, object] = {}
        self._seen: dict[int, str] = {}
        self._visit(root, "", None)

    def _visit(self, obj, path: str, setter) -> None:
        is_tensor = isinstance(obj, torch.Tensor)
        is_dc = dataclasses.is_dataclass(obj) and not isinstance(obj, type)
        if is_tensor or is_dc or type(obj) in (dict, list):
            first = self._seen.get(id(obj))
            if first is not None:
                self.nodes[path] = ("ref", first)
                return
            self._seen[id(obj)] = path
        if is_tensor:
            self.nodes[path] = ("tensor", TensorMetadata.of(obj))
            self.tensors.append((path, obj))
            self.setters[path] = setter
        elif is_dc:
            self.nodes[path] = ("dataclass", _type_name(obj))
            for f in dataclasses.fields(obj):
                self._visit(getattr(obj, f.name), _child(path, f.name), (obj, f.name, "attr"))
        elif type(obj) is dict:
            self.nodes[path] = ("dict",)
            self.shapes[path] = list(obj)
            for k, v in obj.items():
                try:
                    text = encode_key(k)
                except TypeError as e:
                    raise TypeError(f"at {_show(path)}: {e}") from None
                self._visit(v, f"{path}[{text}]", (obj, k, "item"))
        elif type(obj) is list:
            self.nodes[path] = ("list",)
            self.shapes[path] = len(obj)
            for i, v in enumerate(obj):
                self._visit(v, f"{path}[{i}]", (obj, i, "item"))
        else:
            if type(obj) is tuple and any(isinstance(x, torch.Tensor) for x in obj):
                raise TypeError(f"at {_show(path)}: a tuple holding tensors cannot be filled in place; use a list")
            self.nodes[path] = ("leaf",)
            self.values[path] = obj
            self.setters[path] = setter


def walk(obj) -> _Walk:
    """The traversal used by :func:`broadcast_dataclass` (exposed for debugging: ``walk(x).nodes``)."""
    return _Walk(obj)


def _describe(node: tuple) -> str:
    kind = node[0]
    if kind == "tensor":
        return describe_tensor(node[1])
    if kind == "dataclass":
        return f"a {node[1]}"
    if kind == "ref":
        return f"a reference to {_show(node[1])}"
    return {"dict": "a dict", "list": "a list", "leaf": "a value"}[kind]


def _compare(sent: dict, mine: dict) -> list[str]:
    problems = []
    for path, node in sent.items():
        have = mine.get(path)
        if have is None:
            problems.append(f"missing path {_show(path)} (the sender has {_describe(node)} there)")
        elif have != node:
            problems.append(f"at {_show(path)} the sender has {_describe(node)}, this rank has {_describe(have)}")
    for path, node in mine.items():
        if path not in sent:
            problems.append(f"extra path {_show(path)} (this rank has {_describe(node)}, the sender has nothing there)")
    return problems


def _agree(g: GroupBase, problems: list[str]) -> None:
    flag = torch.tensor([1 if problems else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=g.cpu_group)
    if flag.item():
        reports: list = [None] * g.world_size
        dist.all_gather_object(reports, problems, group=g.cpu_group)
        raise _mismatch({r: p for r, p in enumerate(reports) if p}, g.rank)


def _mismatch(by_rank: dict[int, list[str]], me: int) -> StructureMismatchError:
    lines = []
    for r, probs in sorted(by_rank.items()):
        more = f" (and {len(probs) - _MAX_REPORTED} more)" if len(probs) > _MAX_REPORTED else ""
        lines.append(f"  group rank {r}: " + "; ".join(probs[:_MAX_REPORTED]) + more)
    return StructureMismatchError(
        f"broadcast_dataclass: the receivers' shells do not match the sender's structure (seen from rank {me}); "
        "no tensor was broadcast:\n" + "\n".join(lines)
    )


def _assign(setter, value) -> None:
    container, key, how = setter
    if how == "attr":
        object.__setattr__(container, key, value)  # works for frozen dataclasses too
    else:
        container[key] = value


def _receive_into(g: GroupBase, targets: list, src_global: int) -> None:
    """Phase 2 on a receiver: tensors in the sender's order, straight into ``targets`` where
    they are contiguous, through a temporary elsewhere."""
    direct, copies = [], []
    for t in targets:
        if t.is_contiguous():
            direct.append(t)
        else:
            tmp = torch.empty(t.shape, dtype=t.dtype, device=t.device)
            direct.append(tmp)
            copies.append((t, tmp))
    broadcast_tensors(direct, src_global, g.cpu_group, g.device_group, stage=g.stage)
    with torch.no_grad():
        for t, tmp in copies:
            t.copy_(tmp)


def _broadcast_dataclass(g: GroupBase, obj, src: int, check: bool, structure: str = "fixed"):
    if structure not in _STRUCTURES:
        raise ValueError(f"structure must be one of {_STRUCTURES}, got {structure!r}")
    if g.mq is None:
        return obj
    dynamic = structure == "dynamic"
    src_global = g.ranks[src]
    if g.rank == src:
        try:
            if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
                raise TypeError(f"broadcast_dataclass() sends a dataclass instance, got {type(obj).__name__}")
            w = _Walk(obj)
            tensors = []
            for path, t in w.tensors:
                check_sendable(t, _show(path))
                group_for(t, g.cpu_group, g.device_group, _show(path), g.stage)
                tensors.append(t.contiguous())
            for path, v in w.values.items():
                found = nested_device_tensor(v, _show(path))
                if found is not None:
                    raise nested_error(found, "hold it in a list, a dict or a dataclass field")
        except Exception as e:
            send_error(g.mq, _KIND, e)
            raise
        send(g.mq, _KIND, (w.nodes, w.values, w.shapes if dynamic else None))
        if check:
            _agree(g, [])
        broadcast_tensors(tensors, src_global, g.cpu_group, g.device_group, stage=g.stage)
        return obj
    nodes, values, shapes = recv(g.mq, _KIND)
    plan = mine = None
    if (shapes is not None) != dynamic:
        problems = [f"the sender broadcast with structure={'dynamic' if shapes is not None else 'fixed'!r}, this rank with {structure!r}"]
    elif dynamic:
        plan = Plan(nodes, values, shapes, obj, g.device)
        problems = plan.problems
    else:
        try:
            mine = _Walk(obj)
            problems = _compare(nodes, mine.nodes)
        except TypeError as e:
            problems = [f"this rank's shell cannot be walked: {e}"]
    if check:
        _agree(g, problems)
    elif problems:
        raise _mismatch({g.rank: problems}, g.rank)
    if plan is not None:
        _receive_into(g, plan.targets, src_global)
        plan.commit()
        return obj
    own = dict(mine.tensors)
    _receive_into(g, [own[path] for path, node in nodes.items() if node[0] == "tensor"], src_global)
    for path, value in values.items():
        _assign(mine.setters[path], value)
    return obj


def broadcast_dataclass(obj, group: GroupBase, src: int | None = None, *, check: bool = True, structure: str = "fixed"):
    """Broadcast the writer's dataclass tree into every receiver's shell ``obj``, in place;
    returns ``obj``.

    ``structure="fixed"`` (default): the shell has the sender's structure (same dict keys, list
    lengths, None where the sender has None) with tensors pre-allocated with the same
    dtype/shape/device: every tensor is filled in place (what CUDA graphs need).
    ``structure="dynamic"``: the sender's structure of this step wins: receivers rebuild it
    (fields switching between None and a value, lists changing length, dicts gaining or losing
    keys); shell tensors at the sender's tensor paths are still filled in place and must match,
    other tensors are allocated. Every rank passes the same ``structure``.

    ``check=True`` adds one small all_reduce so that a mismatching receiver makes *every* rank
    raise :class:`StructureMismatchError` before any tensor moves. With ``check=False`` only the
    mismatching receiver raises; the sender and the other receivers then block in the tensor
    broadcasts (until the process group's timeout): the group is broken and must be rebuilt.
    """
    return _broadcast_dataclass(group, obj, group.check_src(src), check, structure)
