"""z3 proofs of spec/RingInd.tla's inductive invariant IndInv for every ring size (issue 52).

* ``ring``: Ring.tla's transition relation, action by action, in the scope of RingInd.tla
  (SC, no parking, no arena, no remote readers);
* ``invariant``: IndInv (conjunct by conjunct) and the safety properties it implies;
* ``obligations``: Init => IndInv, IndInv /\\ Next => IndInv', IndInv => safety, non-vacuity,
  and the known-bad variants' counterexamples to induction;
* ``bmc``: the transcription checked against TLC's distinct-state counts.

Imports only the standard library and z3.  ``python -m ringcast_lab.induction`` runs it all.
"""
