"""Files the ``ringcast`` command needs, shipped inside the package.

The repository keeps them at its top level (``spec/``, ``stress/``); lab/setup.py maps those
folders to ``ringcast_lab._bundled.spec`` and ``.stress``, in a wheel and in an editable install
alike. Nothing here imports anything: use :func:`path`.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

__all__ = ["path"]


def path(folder: str) -> Path:
    """The shipped folder ``folder`` ("spec" or "stress") as a real directory.

    Raises FileNotFoundError, naming the fix, when the installation lacks it."""
    if folder not in ("spec", "stress"):
        raise ValueError(f"unknown bundled folder {folder!r}: expected 'spec' or 'stress'")
    try:
        p = Path(str(importlib.resources.files(f"{__name__}.{folder}")))
    except ModuleNotFoundError:
        p = None
    if p is not None and p.is_dir():
        return p
    raise FileNotFoundError(
        f"ringcast's {folder}/ folder is not installed with the lab ({__name__}.{folder}); reinstall the lab "
        "from a wheel or a checkout (pip install 'ringcast[stress,spec]' / pip install -e ./lab)")
