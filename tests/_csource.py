"""The text of a C translation unit of the package: a ``.c`` file with the ``#include "x.c"`` files
beside it expanded in place (``_protocol.c`` includes ``_protocol_side.c``, ``_protocol_counters.c``
and ``_protocol_endpoint.c``, and ``core/rc_core.c``, which includes the core's parts). Headers (``.h``) stay as they are: they hold no step.

:func:`spec_tagged` reads which spec actions a core file's functions take (their ``Spec:`` comments)."""

from __future__ import annotations

import re
from pathlib import Path

_INCLUDE = re.compile(r'^#include "([\w/.]+\.c)"$', flags=re.M)


def c_unit(path: Path) -> str:
    return _INCLUDE.sub(lambda m: c_unit(path.parent / m.group(1)), path.read_text())


#: ``/* Spec: WriterClaim``, ``/* Spec, without a step point: ReaderCheckEvicted``
_SPEC_TAG = re.compile(r"/\*\s*Spec\b[^:*]*: ([A-Z]\w+)")


def spec_tagged(path: Path) -> dict[str, set[str]]:
    """{C function: the spec actions its ``/* Spec: <Action>`` comments name} of a file of the
    protocol core: a comment at the top level tags the next definition, one inside a body its
    function; a definition without any maps to the empty set."""
    out: dict[str, set[str]] = {}
    pending: set[str] = set()
    fn = None
    for line in path.read_text().splitlines():
        if (m := re.match(r"^(\w+)\(", line)):
            fn = m.group(1)
            out.setdefault(fn, set()).update(pending)
            pending = set()
        tags = set(_SPEC_TAG.findall(line))
        if tags and (line.startswith("/*") or fn is None):
            pending |= tags
        elif tags:
            out[fn] |= tags
    return out
