"""Trace recording and validation against spec/Ring.tla (test support that ``ringcast stress
--record-trace`` also uses): :mod:`.model` the reference model of the spec and the
check of one step, :mod:`.payload` the self-checking ring-level payloads, :mod:`.child` the child
programs (ring and MessageQueue level, writer and reader) that tests/stateful steps through pipes
and the recorders serialise by a lock, :mod:`.serial` those recorders (both levels),
:mod:`.tracecheck` TLC trace validation. Not imported by ``ringcast`` itself."""
