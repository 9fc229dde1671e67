"""z3 proofs of spec/RingInd.tla's inductive invariant IndInv for every ring size (issue 52).

* ``ring``: Ring.tla's transition relation, action by action, in the scope of RingInd.tla
  (SC, no parking, no arena, no remote readers), and its states printed in the spec's terms;
* ``invariant``: IndInv (conjunct by conjunct) and the safety properties it implies;
* ``quant``: the quantifiers, z3's or (``ground``, numeral sizes) expanded;
* ``obligations``: Init => IndInv, IndInv /\\ Next => IndInv', IndInv => safety, for symbolic
  sizes, with the instantiation hints they need;
* ``cti``: non-vacuity witnesses and the bad variants' counterexamples to induction (small sizes);
* ``models``: the manifest's models in this scope (spec/models.json, as ring.Config switches);
* ``bmc``: the transcription checked against TLC's distinct-state counts.

Imports the standard library, z3 and ringcast_lab.tlc.models (the manifest).
``python -m ringcast_lab.induction`` runs it all.
"""
