------------------------------ MODULE Broadcast ------------------------------
(***************************************************************************)
(* The abstract service ringcast implements: a broadcast log.  The writer  *)
(* appends messages 1, 2, ..., M; every reader delivers the log in order,  *)
(* each message once.  MCRing checks Ring against this (AbsSafety).        *)
(***************************************************************************)
EXTENDS Naturals, Sequences

CONSTANTS Readers, M

VARIABLES log, got

Init == log = << >> /\ got = [r \in Readers |-> << >>]

Send == /\ Len(log) < M
        /\ log' = Append(log, Len(log) + 1)
        /\ UNCHANGED got

Deliver(r) == /\ Len(got[r]) < Len(log)
              /\ got' = [got EXCEPT ![r] = Append(@, log[Len(got[r]) + 1])]
              /\ UNCHANGED log

Next == Send \/ \E r \in Readers : Deliver(r)

Safety == Init /\ [][Next]_<<log, got>>
=============================================================================
