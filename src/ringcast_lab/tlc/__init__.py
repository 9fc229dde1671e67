"""The TLC library: run ringcast's TLA+ models and read what TLC says (standard library only).

:mod:`.find` finds the pinned ``tla2tools.jar`` and a Java runtime; :mod:`.models` reads
``spec/models.json``, the one source of the models' configurations, and renders a model's ``.cfg``;
:mod:`.run` builds TLC's command lines, rewrites a ``.cfg`` and parses TLC's output; :mod:`.cli` is the driver's
command line (``ringcast spec``; ``tools/tlc.py`` is a thin wrapper over it). Used by the CLI and
by trace validation (:mod:`ringcast_lab.trace.tracecheck`); imports nothing of the protocol, and
reads the spec shipped with the package (``ringcast_lab._bundled``) unless given another folder.
"""
