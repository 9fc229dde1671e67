"""Trace validation with TLC lives in :mod:`ringcast.trace.tracecheck` (``ringcast stress
--record-trace`` uses it too); re-exported here.  ``python -m stateful.tracecheck TRACES.json``
(from tests/) still works."""

import sys

from ringcast.trace.tracecheck import *  # noqa: F401,F403
from ringcast.trace.tracecheck import main

if __name__ == "__main__":
    sys.exit(main())
