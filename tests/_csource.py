"""The text of a C translation unit of the package: a ``.c`` file with the ``#include "x.c"`` files
beside it expanded in place (``_protocol.c`` includes ``_protocol_side.c``, ``_protocol_counters.c``
and ``_protocol_endpoint.c``, and ``core/rc_core.c``, which includes the core's parts). Headers (``.h``) stay as they are: they hold no step."""

from __future__ import annotations

import re
from pathlib import Path

_INCLUDE = re.compile(r'^#include "([\w/.]+\.c)"$', flags=re.M)


def c_unit(path: Path) -> str:
    return _INCLUDE.sub(lambda m: c_unit(path.parent / m.group(1)), path.read_text())
