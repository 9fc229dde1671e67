"""ringcast_lab: the lab that proves the ringcast runtime (distribution ``ringcast-lab``).

It sits above the runtime and uses it only through its public names (no ``_``-prefixed module
or attribute of ``ringcast``) and the step hook (:mod:`ringcast.steps`); the runtime never imports
it (tests/package/test_structure.py checks both). Bottom up:

* :mod:`ringcast_lab.tlc` - the TLC driver (finds Java and the jar, runs the models of
  ``spec/models.json``); imports nothing of the runtime.
* :mod:`ringcast_lab.induction` - the inductive invariant's obligations for every ring size and
  reader count, with the z3 SMT solver; imports nothing of the runtime.
* :mod:`ringcast_lab.trace` - trace recording of the real code through the step hook, its replay
  on a reference model and its validation by TLC against the spec.
* :mod:`ringcast_lab.stress` - ``ringcast stress``: scenarios over real processes with a
  PASS/INCONCLUSIVE/FAIL verdict, and the litmus tests of the fences
  (``ringcast_lab._litmus``, C in ``litmus/`` on the runtime's ``core/rc_fences.h``).
* :mod:`ringcast_lab.bench` - ``ringcast bench`` and the second, independent harness.
* :mod:`ringcast_lab.cli` - the ``ringcast`` command.
* ``ringcast_lab._bundled`` - no code of its own: the repository's ``spec/`` and ``stress/``
  folders, shipped in the lab's wheel (lab/setup.py) so the command runs from any directory.
"""
