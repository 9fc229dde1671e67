"""Files the ``ringcast`` command needs, shipped inside the package.

The repository keeps them at its top level (``spec/``, ``stress/``, ``tools/``); setup.py maps
those folders to ``ringcast._bundled.spec``, ``.stress`` and ``.tools``, in a wheel and in an
editable install alike. Nothing here imports anything: use :func:`path`.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

__all__ = ["path"]


def path(folder: str) -> Path:
    """The shipped folder ``folder`` ("spec", "stress" or "tools") as a real directory.

    Raises FileNotFoundError, naming the fix, when the installation lacks it."""
    if folder not in ("spec", "stress", "tools"):
        raise ValueError(f"unknown bundled folder {folder!r}: expected 'spec', 'stress' or 'tools'")
    try:
        p = Path(str(importlib.resources.files(f"{__name__}.{folder}")))
    except ModuleNotFoundError:
        p = None
    if p is not None and p.is_dir():
        return p
    raise FileNotFoundError(
        f"ringcast's {folder}/ folder is not installed with the package ({__name__}.{folder}); "
        "reinstall ringcast from a wheel or a checkout (pip install ringcast / pip install -e .)")
