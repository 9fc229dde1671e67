"""Dynamic structure for ``broadcast_dataclass(..., structure="dynamic")``: the receiver
rebuilds the sender's structure of this step from the manifest, reusing its shell where it can.

The sender's manifest (path -> node, in traversal order), its leaf values and, per dict and
list, the keys in order / the length, describe the step completely. :class:`Plan` walks them
together with the receiver's shell:

* a dataclass of the same type, a dict, a list in the shell at the same path is reused (its
  identity is kept; its contents are replaced after the tensors arrived); anything else there
  (None, a leaf, another type) is replaced by a new container (a dataclass the shell lacks is
  made with ``cls.__new__`` and its fields set, as pickle does);
* a shell tensor at a tensor path is the in-place target; it must have the sender's dtype,
  shape and device type (otherwise a *problem*: the only structural error of this mode); a
  tensor path without one in the shell gets a fresh ``torch.empty`` on the receiver's device;
* leaves take the sender's values; references (shared objects, cycles) point to what was built
  at the referenced path.

Nothing in the shell changes until :meth:`Plan.commit`, which the caller runs only after every
rank agreed and the tensors arrived.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys

import torch

from ._wire import TensorMetadata
from .flatten import encode_key

__all__ = ["Plan", "type_name", "show", "describe_tensor"]


def type_name(obj) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def show(path: str) -> str:
    return path or "<root>"


def describe_tensor(m: TensorMetadata) -> str:
    return f"a {m.device} tensor {m.dtype} of shape {list(m.size)}"


def _resolve(name: str):
    """The class named ``module.qualname``, or None."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        modname = ".".join(parts[:i])
        mod = sys.modules.get(modname)
        if mod is None:
            try:
                mod = importlib.import_module(modname)
            except ImportError:
                continue
        obj = mod
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj if isinstance(obj, type) and dataclasses.is_dataclass(obj) else None
    return None


class Plan:
    """The receiver's rebuild of one step: ``targets`` (tensors to receive into, in the sender's
    order), ``problems`` (what cannot match), and the deferred changes to the shell."""

    def __init__(self, nodes: dict, values: dict, shapes: dict, shell, device: torch.device) -> None:
        self.nodes, self.values, self.shapes = nodes, values, shapes
        self.device = device
        self.built: dict[str, object] = {}
        self.targets: list[torch.Tensor] = []
        self.problems: list[str] = []
        self._ops: list = []
        self._used: set[int] = set()
        root = nodes.get("")
        if root is None or root[0] != "dataclass":
            self.problems.append("the sender's manifest has no dataclass at the root")
        elif not dataclasses.is_dataclass(shell) or isinstance(shell, type) or type_name(shell) != root[1]:
            self.problems.append(f"at <root> the sender has a {root[1]}, this rank has a {type_name(shell)} (the root is filled in place)")
        else:
            self._build("", shell)

    def _build(self, path: str, shell):
        node = self.nodes.get(path)
        if node is None:
            self.problems.append(f"the sender's manifest lacks {show(path)}")
            return None
        kind = node[0]
        if kind == "ref":
            return self.built.get(node[1])
        if kind == "leaf":
            return self.values.get(path)
        if kind == "tensor":
            return self._tensor(path, node[1], shell)
        if kind == "dict":
            return self._container(path, shell, dict, [(k, f"{path}[{encode_key(k)}]") for k in self.shapes.get(path, ())])
        if kind == "list":
            return self._container(path, shell, list, [(i, f"{path}[{i}]") for i in range(self.shapes.get(path, 0))])
        return self._dataclass(path, node[1], shell)

    def _tensor(self, path: str, meta: TensorMetadata, shell):
        if meta.device not in ("cpu", self.device.type):
            self.problems.append(f"at {show(path)} the sender has {describe_tensor(meta)}, but this rank's device is {self.device}")
        if isinstance(shell, torch.Tensor) and id(shell) not in self._used:
            self._used.add(id(shell))
            mine = TensorMetadata.of(shell)
            if mine != meta:
                self.problems.append(
                    f"at {show(path)} the sender has {describe_tensor(meta)}, this rank's buffer is {describe_tensor(mine)} "
                    "(filled in place: it needs the same dtype, shape and device type; put None there to get a new tensor)"
                )
            t = shell
        else:
            t = torch.empty(meta.size, dtype=meta.dtype, device=torch.device("cpu") if meta.device == "cpu" else self.device)
        self.built[path] = t
        self.targets.append(t)
        return t

    def _container(self, path: str, shell, kind: type, children: list):
        reuse = type(shell) is kind
        out = shell if reuse else kind()
        self.built[path] = out
        if kind is dict:
            items = [(k, self._build(child, shell.get(k) if reuse else None)) for k, child in children]
            if reuse:
                self._ops.append(lambda d=out, items=items: (d.clear(), d.update(items)))
            else:
                out.update(items)
        else:
            items = [self._build(child, shell[i] if reuse and i < len(shell) else None) for i, child in children]
            if reuse:
                self._ops.append(lambda lst=out, items=items: lst.__setitem__(slice(None), items))
            else:
                out.extend(items)
        return out

    def _dataclass(self, path: str, name: str, shell):
        reuse = dataclasses.is_dataclass(shell) and not isinstance(shell, type) and type_name(shell) == name
        if reuse:
            inst = shell
        else:
            cls = _resolve(name)
            if cls is None:
                self.problems.append(f"at {show(path)} the sender has a {name}, which this rank cannot import: give the shell one there")
                return None
            inst = cls.__new__(cls)
        self.built[path] = inst
        for f in dataclasses.fields(inst):
            value = self._build(f"{path}.{f.name}", getattr(shell, f.name, None) if reuse else None)
            if reuse:
                self._ops.append(lambda o=inst, n=f.name, v=value: object.__setattr__(o, n, v))
            else:
                object.__setattr__(inst, f.name, value)  # works for frozen dataclasses too
        return inst

    def commit(self) -> None:
        """Apply the deferred changes to the shell (after the tensors arrived)."""
        for op in self._ops:
            op()
        self._ops = []
