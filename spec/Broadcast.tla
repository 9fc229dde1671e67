------------------------------ MODULE Broadcast ------------------------------
(***************************************************************************)
(* The abstract service ringcast implements: a bounded broadcast log.     *)
(*                                                                         *)
(* The writer appends messages 1, 2, ..., M to the log; every reader       *)
(* delivers the log in order, each message once.  The buffer is bounded:   *)
(* the writer is at most Cap messages ahead of the slowest reader (Cap is  *)
(* the ring's N chunks, plus the one overflow payload a reader may still   *)
(* be receiving after it acknowledged the marker).  Spec adds fairness:    *)
(* every message is eventually delivered to every reader, and the writer   *)
(* is never blocked forever while the readers keep reading (it sends       *)
(* whenever the bound allows it).                                          *)
(*                                                                         *)
(* MCRing checks Ring against it under the refinement mapping              *)
(*   log <- sent (payloads the writer wrote), got <- recv (what each       *)
(*   reader delivered), Readers <- the readers that cannot die:            *)
(*   AbsSpec (this Spec, safety and liveness) and AbsSafety (Safety: the   *)
(*   unbounded log without fairness, for models where readers die).        *)
(***************************************************************************)
EXTENDS Naturals, Sequences

CONSTANTS Readers, M, Cap

VARIABLES log, got

v == <<log, got>>

Init == log = << >> /\ got = [r \in Readers |-> << >>]

\* The writer appends the next message (any distance ahead of the readers).
Append1 == /\ Len(log) < M
           /\ log' = Append(log, Len(log) + 1)
           /\ UNCHANGED got

\* ... only while it is less than Cap messages ahead of every reader.
Send == /\ \A r \in Readers : Len(log) - Len(got[r]) < Cap
        /\ Append1

Deliver(r) == /\ Len(got[r]) < Len(log)
              /\ got' = [got EXCEPT ![r] = Append(@, log[Len(got[r]) + 1])]
              /\ UNCHANGED log

Next == Send \/ \E r \in Readers : Deliver(r)

Fairness == /\ WF_v(Send)
            /\ \A r \in Readers : WF_v(Deliver(r))

Spec == Init /\ [][Next]_v /\ Fairness

\* The bound as a state predicate (implied by Spec).
Bounded == \A r \in Readers : Len(log) - Len(got[r]) <= Cap

\* Safety of the log alone: no bound, no liveness.
Safety == Init /\ [][Append1 \/ \E r \in Readers : Deliver(r)]_v
=============================================================================
