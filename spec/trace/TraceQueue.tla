----------------------------- MODULE TraceQueue -----------------------------
(***************************************************************************)
(* Trace validation at MessageQueue level: is a recorded run of real       *)
(* MessageQueue processes (parking with real futex sleeps and wakes,       *)
(* overflow over ZeroMQ) a behaviour of spec/Ring.tla?                     *)
(*                                                                         *)
(* The trace (module QTraceData, written by ringcast.trace.tracecheck for *)
(* tests/stateful and `ringcast stress --record-trace`) is the sequence of *)
(* the code's own step points, in the order the processes took them:      *)
(* [a |-> action name, p |-> process].  Nothing else is taken from         *)
(* the harness: TLC finds the spec's state (program counters included)     *)
(* itself.  Each recorded step must be that process's spec action of the  *)
(* same name; between recorded steps the spec may take the steps the code  *)
(* has no step point for:                                                  *)
(*   - ring loads the code skips: its ready() does not load the read flag  *)
(*     when written is not 1, and after a successful re-check it returns   *)
(*     without looking again, where the spec's ParkRetire looks again;     *)
(*   - WriterSendOverflow of a message that does not overflow (the code    *)
(*     sends nothing, the spec's Order has the step for every message).    *)
(* A failed WriterClaim that does not park (the code's spin) is a          *)
(* stuttering step, and further WriterWritePayload steps of one message    *)
(* (the queue writes a payload in parts) stutter too.                      *)
(*                                                                         *)
(* The check: TraceMatched (k = Len(Trace)) must be reachable, so the cfg  *)
(* lists NotMatched as an invariant and the test expects exactly that      *)
(* invariant to be violated; Ring's invariants hold on every state.        *)
(***************************************************************************)
EXTENDS MCRing, QTraceData

VARIABLES k

tvars == <<vars, k>>

\* The spec action a recorded step of process p stands for.
Step(a, p) ==
    CASE a = "WriterClaim"         -> WriterClaim \/ (~rechk[Wr] /\ ~Claimable /\ UNCHANGED vars)
      [] a = "WriterClearWritten"  -> WriterClearWritten
      [] a = "WriterWritePayload"  -> \/ WriterWritePayload
                                      \/ /\ wk > 1 /\ Order[wk - 1] = "payload"
                                         /\ pc[Wr] = Order[wk] /\ UNCHANGED vars
      [] a = "WriterClearReadFlag" -> WriterClearReadFlag
      [] a = "WriterSendOverflow"  -> WriterSendOverflow /\ msg \in Big
      [] a = "WriterPublish"       -> WriterPublish
      [] a = "ReaderLoadWritten"   -> ReaderLoadWritten(p)
      [] a = "ReaderLoadReadFlag"  -> ReaderLoadReadFlag(p)
      [] a = "ReaderCopy"          -> ReaderCopy(p)
      [] a = "ReaderAck"           -> ReaderAck(p)
      [] a = "ReaderRecvOverflow"  -> ReaderRecvOverflow(p)
      [] a = "ParkSnapshot"        -> ParkSnapshot(p)
      [] a = "ParkAnnounce"        -> ParkAnnounce(p)
      [] a = "ParkRecheck"         -> ParkRecheck(p)
      [] a = "ParkSleep"           -> ParkSleep(p)
      [] a = "ParkRetire"          -> ParkRetire(p)
      [] a = "NotifyLoadWaiters"   -> NotifyLoadWaiters(p)
      [] a = "NotifyWake"          -> NotifyWake(p)
      [] OTHER                     -> FALSE

\* Spec steps without a step point in the code (see above).
Hidden ==
    /\ \/ \E r \in Readers : ReaderLoadWritten(r) \/ ReaderLoadReadFlag(r)
       \/ WriterClaim
       \/ WriterSendOverflow /\ msg \notin Big
    /\ UNCHANGED <<xvars, avars>>

TraceInit == Init /\ k = 0

TraceNext ==
    \/ /\ k < Len(Trace)
       /\ Step(Trace[k + 1].a, Trace[k + 1].p)
       /\ UNCHANGED <<xvars, avars>>
       /\ k' = k + 1
    \/ Hidden /\ UNCHANGED k

\* Violated exactly when the whole trace is matched (the witness TLC prints).
NotMatched == k < Len(Trace)
=============================================================================
