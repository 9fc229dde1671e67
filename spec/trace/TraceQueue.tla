----------------------------- MODULE TraceQueue -----------------------------
(***************************************************************************)
(* Trace validation at MessageQueue level: is a recorded run of real       *)
(* MessageQueue processes (parking with real futex sleeps and wakes,       *)
(* overflow over ZeroMQ) a behaviour of spec/Ring.tla?                    *)
(*                                                                         *)
(* A trace (module QTraceData, written by ringcast_lab.trace.tracecheck for    *)
(* tests/stateful and `ringcast stress --record-trace`) is the sequence of *)
(* the code's own step points, in the order the processes took them:      *)
(* [a |-> action name, p |-> process].  Nothing else is taken from the     *)
(* harness: TLC finds the spec's state (program counters included) itself. *)
(* QTraceData holds a batch of traces (Traces) that share the constants;   *)
(* TLC picks each one (t) and follows it; a matched trace makes the        *)
(* invariant Report print <<"matched", t>>.                                *)
(*                                                                         *)
(* Every step point is recorded, the looks (WriterClaim, ReaderLoadWritten,*)
(* ReaderLoadReadFlag) included, and each recorded step is exactly one     *)
(* spec step of its process, or (a failed look of a spinning writer) one   *)
(* stuttering step.  The spec takes a step of its own (Implied) only where *)
(* the code has no step to record, and there it is forced:                 *)
(*   (1) the read-flag load the code skips: ready() does not load the read *)
(*       flag after it loaded written = 0 (pc = "load_r", seen = 0), so   *)
(*       a recorded ReaderLoadReadFlag needs seen = 1;                     *)
(*   (2) WriterSendOverflow of a message that does not overflow (the code  *)
(*       sends nothing; the spec's Order has the step for every message).  *)
(* While a process owes such a step no recorded step is taken, and in each *)
(* state at most one Implied step is enabled, so TLC has no choice in      *)
(* inserting them and what it inserts cannot stand for a recorded step:    *)
(* (1) is enabled only where the recorded ReaderLoadReadFlag is not        *)
(* (seen = 0 vs seen = 1), (2) only for msg \notin Big, where a recorded   *)
(* WriterSendOverflow needs msg \in Big.  What follows a successful        *)
(* re-check is Ring's own ParkRetire: it goes on with the re-check's       *)
(* result (the reader to its copy, the writer to the chunk it claimed), as *)
(* the code's wait returns after its retire.                               *)
(* docs/spec.md, "The MessageQueue trace checker".                         *)
(*                                                                         *)
(* The look policy (lk): the recorder's sides wait with spin = 0 and       *)
(* tight_looks = Looks - 2, so a wait looks exactly Looks times before it  *)
(* parks (the first look, the tight looks, one look of the spin loop), and *)
(* once after each futex sleep (ParkSleep, ParkRetire, look) before it     *)
(* parks again (after a successful re-check's ParkRetire it goes on).     *)
(* The spec leaves the number of looks free (Spin); here a failed look of  *)
(* a side with looks left must look again, one with none left must park,   *)
(* so a look dropped or repeated shows.                                    *)
(***************************************************************************)
EXTENDS MCRing, QTraceData

VARIABLES t, k, lk

tvars == <<vars, t, k, lk>>

Trace == Traces[t]

\* The look policy at a reader's read-flag load (recorded or Implied (1)).
ReaderLook(p) ==
    /\ ReaderLoadReadFlag(p)
    /\ IF rechk[p]
       THEN UNCHANGED lk
       ELSE IF pc'[p] = "copy"
       THEN lk' = [lk EXCEPT ![p] = Looks]
       ELSE IF lk[p] > 1
       THEN pc'[p] = "load_w" /\ lk' = [lk EXCEPT ![p] = @ - 1]
       ELSE pc'[p] = "park_snap" /\ UNCHANGED lk

\* A recorded WriterClaim: the re-check's load, a successful claim, a failed
\* look with looks left (the code looks again: a stuttering step), or the
\* last failed look (the writer parks).
WriterLook ==
    /\ pc[Wr] = "claim"
    /\ IF rechk[Wr]
       THEN WriterClaim /\ UNCHANGED lk
       ELSE IF Claimable
       THEN WriterClaim /\ lk' = [lk EXCEPT ![Wr] = Looks]
       ELSE IF lk[Wr] > 1
       THEN msg <= M /\ UNCHANGED vars /\ lk' = [lk EXCEPT ![Wr] = @ - 1]
       ELSE WriterClaim /\ UNCHANGED lk

Same == UNCHANGED lk

\* The spec step a recorded step of process p stands for.  A ParkRetire after
\* a successful re-check (rechk) ends the wait: the next wait has all its
\* looks; after a sleep the side looks once, then parks again.
Step(a, p) ==
    CASE a = "WriterClaim"         -> p = Wr /\ WriterLook
      [] a = "WriterClearWritten"  -> p = Wr /\ WriterClearWritten /\ Same
      [] a = "WriterWritePayload"  -> p = Wr /\ WriterWritePayload /\ Same
      [] a = "WriterClearReadFlag" -> p = Wr /\ WriterClearReadFlag /\ Same
      [] a = "WriterSendOverflow"  -> p = Wr /\ WriterSendOverflow /\ msg \in Big /\ Same
      [] a = "WriterPublish"       -> p = Wr /\ WriterPublish /\ Same
      [] a = "ReaderLoadWritten"   -> p # Wr /\ ReaderLoadWritten(p) /\ Same
      [] a = "ReaderLoadReadFlag"  -> p # Wr /\ seen[p] = 1 /\ ReaderLook(p)
      [] a = "ReaderCopy"          -> p # Wr /\ ReaderCopy(p) /\ Same
      [] a = "ReaderAck"           -> p # Wr /\ ReaderAck(p) /\ Same
      [] a = "ReaderRecvOverflow"  -> p # Wr /\ ReaderRecvOverflow(p) /\ Same
      [] a = "ParkSnapshot"        -> ParkSnapshot(p) /\ Same
      [] a = "ParkAnnounce"        -> ParkAnnounce(p) /\ Same
      [] a = "ParkRecheck"         -> ParkRecheck(p) /\ Same
      [] a = "ParkSleep"           -> ParkSleep(p) /\ Same
      [] a = "ParkRetire"          -> /\ ParkRetire(p)
                                      /\ lk' = [lk EXCEPT ![p] = IF rechk[p] THEN Looks ELSE 1]
      [] a = "NotifyLoadWaiters"   -> NotifyLoadWaiters(p) /\ Same
      [] a = "NotifyWake"          -> NotifyWake(p) /\ Same
      [] OTHER                     -> FALSE

\* Process p owes a spec step the code does not take: (1), (2) above.
Skipped(p) == p # Wr /\ pc[p] = "load_r" /\ seen[p] = 0
NoSend     == pc[Wr] = "send" /\ msg \notin Big
Owes(p)    == Skipped(p) \/ (p = Wr /\ NoSend)

\* The step p owes (deterministic: see the header).
Implied(p) ==
    \/ Skipped(p) /\ ReaderLook(p)
    \/ p = Wr /\ NoSend /\ WriterSendOverflow /\ Same

TraceInit ==
    /\ Init
    /\ t \in DOMAIN Traces
    /\ k = 0
    /\ lk = [p \in Procs |-> Looks]

TraceNext ==
    /\ UNCHANGED <<xvars, avars, nvars, t>>
    /\ \/ /\ \A q \in Procs : ~Owes(q)
          /\ k < Len(Trace)
          /\ Step(Trace[k + 1].a, Trace[k + 1].p)
          /\ k' = k + 1
       \/ \E q \in Procs : Owes(q) /\ Implied(q) /\ UNCHANGED k

\* The recorded runs run to their end: the writer has sent all M messages,
\* every reader has delivered them and is back at its loop top.  (Without it
\* a trace cut short, or missing the last step of a process, would match.)
RunOver ==
    /\ pc[Wr] = "done"
    /\ \A r \in Readers : Len(recv[r]) = M /\ pc[r] = "load_w"

\* Each matched trace prints <<"matched", t>> once for every distinct state
\* in which it is matched (PrintT is TRUE: this invariant never fails).
Report == (k = Len(Trace) /\ RunOver /\ \A q \in Procs : ~Owes(q)) => PrintT(<<"matched", t>>)
=============================================================================
