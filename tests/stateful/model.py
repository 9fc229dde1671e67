"""The reference model of spec/Ring.tla lives in :mod:`ringcast.trace.model` (``ringcast stress
--record-trace`` uses it too); re-exported here for the harness."""

from ringcast.trace.model import *  # noqa: F401,F403
