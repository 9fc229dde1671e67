"""The torch half is layered (issue 12 item 4, issue 16): every import, counting imports inside
functions, points down this list; ringcast.groups imports neither the queue nor the torch half.
Read from the source (ast), so it needs no torch."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "src" / "ringcast"

# bottom up; a module may import only modules that come before it (and ringcast's core)
TORCH_LAYERS = [
    "errors",
    "flatten",
    "_wire",
    "group",
    "rebuild",
    "tensor_dict",
    "dataclass_broadcast",
    "broadcast_group",
    "rpc",
    "__init__",
]


def _imports(path: Path, package: str) -> set[str]:
    """Absolute names of the ringcast modules ``path`` imports (any depth, any place)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("ringcast"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("ringcast"):
                out.add(mod)
                out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def test_groups_is_below_the_queue_and_the_torch_half():
    names = _imports(PKG / "groups.py", "ringcast")
    bad = sorted(n for n in names if n.startswith(("ringcast.queue", "ringcast.torch")))
    assert not bad, f"ringcast.groups imports {bad}"


@pytest.mark.parametrize("module", TORCH_LAYERS)
def test_torch_modules_import_only_lower_layers(module):
    assert sorted(p.stem for p in (PKG / "torch").glob("*.py")) == sorted(TORCH_LAYERS), "a new module: place it in TORCH_LAYERS"
    names = _imports(PKG / "torch" / f"{module}.py", "ringcast.torch")
    below = set(TORCH_LAYERS[: TORCH_LAYERS.index(module)])
    above = sorted(n for n in names if n.startswith("ringcast.torch.") and n.split(".")[2] in TORCH_LAYERS and n.split(".")[2] not in below)
    assert not above, f"ringcast.torch.{module} imports {above}, which is not below it"


def test_backend_devices_parsing():
    pytest.importorskip("torch")
    from ringcast.torch._wire import _devices_of

    assert _devices_of("gloo") == {"cpu"}
    assert _devices_of("nccl") == {"cuda"}
    assert _devices_of("cpu:gloo,cuda:nccl") == {"cpu", "cuda"}
    assert _devices_of("ucc") == frozenset()  # unknown: nothing refused
