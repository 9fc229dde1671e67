"""Trace recording and validation against spec/Ring.tla (test support that ``ringcast stress
--record-trace`` also uses): :mod:`.model` the reference model of the spec, :mod:`.payload` the
self-checking ring-level payloads, :mod:`.serial` ring-level runs on real processes serialised by
a global lock in the step hook, :mod:`.queue_serial` MessageQueue-level runs serialised the same
way (parking, overflow), :mod:`.tracecheck` TLC trace validation. Not imported by
``ringcast`` itself."""
