------------------------------- MODULE Arena -------------------------------
(***************************************************************************)
(* The tensor arena (src/ringcast/arena.py): large buffers copied once     *)
(* into a slot of a second segment, read by every local reader as a view   *)
(* of the slot.  Slot flags are the ring's four states:                    *)
(*   written = 0               writable (fresh, or being filled)           *)
(*   written = 1, released 0.. published: readers hold it (or will)       *)
(*   written = 1, released 1..1 released by all: the writer may reuse it   *)
(* A reader releases its flag when the LAST object using its view dies     *)
(* (a finalizer on the view), which may be long after it dequeued the      *)
(* message: DropView below happens at any later time.                      *)
(*                                                                         *)
(* The ring itself is abstracted to a FIFO log of messages (Ring.tla       *)
(* proves the ring delivers every message in order); a message names the   *)
(* slot holding its buffer, or 0 for the normal path (the writer found no   *)
(* free slot: ArenaFallback; the writer never waits for the arena).        *)
(*                                                                         *)
(* Switches:                                                               *)
(*   ReleaseAtDequeue  the broken design: a reader releases its flag when  *)
(*                     it dequeues, while its view is still alive          *)
(*   CrashSet          readers that may die (holding views; they never     *)
(*                     release)                                            *)
(*   Evict             the writer, finding no free slot, treats dead       *)
(*                     readers' flags as released (ArenaReclaimDead)       *)
(*   Abort             an exception may end the writer's enqueue:          *)
(*                     "none"; "code" (arena.py: the slots are given back  *)
(*                     only while the ring chunk naming them is not        *)
(*                     published); "unplace" (the code before issue 24:    *)
(*                     also after the ring publish, e.g. a                 *)
(*                     KeyboardInterrupt in the wake-up that follows it)   *)
(*   MM                memory model; only "SC" is modelled here: the code  *)
(*                     orders the slot's stores before the ring's publish  *)
(*                     with the ring's fences (F7, F3), and the reader's   *)
(*                     reads before its release with a fence (as F5)       *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS NR, S, M, MM, CrashSet, Evict, ReleaseAtDequeue, Abort

ASSUME MM = "SC" /\ Abort \in {"none", "code", "unplace"}

Readers == 0 .. NR - 1
Slots == 1 .. S

VARIABLES
    written,    \* written[s] \in {0, 1}
    released,   \* released[s][r] \in {0, 1}
    data,       \* data[s]: the message whose bytes slot s holds (0: none)
    wpc,        \* the writer's step for the current message
    slot,       \* the slot being filled (0: none)
    msg,        \* the message being sent (1 .. M; M + 1: done)
    log,        \* the ring: <<slot, message>> of each published message
                \*   (slot 0: the normal path)
    got,        \* got[r]: messages reader r has dequeued
    views,      \* views[r]: the <<slot, message>> views alive in reader r
    alive,      \* alive[r]
    badFallback \* a fallback happened although every busy slot was held by dead readers only

vars == <<written, released, data, wpc, slot, msg, log, got, views, alive, badFallback>>

Free(s) == written[s] = 0 \/ \A r \in Readers : released[s][r] = 1
DeadHolders(s) == {r \in Readers : ~alive[r] /\ released[s][r] = 0}
OnlyDeadHold(s) == written[s] = 1 /\ \A r \in Readers : released[s][r] = 0 => ~alive[r]

Init ==
    /\ written = [s \in Slots |-> 0]
    /\ released = [s \in Slots |-> [r \in Readers |-> 0]]
    /\ data = [s \in Slots |-> 0]
    /\ wpc = "claim"
    /\ slot = 0
    /\ msg = 1
    /\ log = <<>>
    /\ got = [r \in Readers |-> 0]
    /\ views = [r \in Readers |-> {}]
    /\ alive = [r \in Readers |-> TRUE]
    /\ badFallback = FALSE

\* arena.py::ArenaWriter._arena_claim
ArenaClaim ==
    /\ wpc = "claim" /\ msg <= M
    /\ \E s \in Slots :
        /\ Free(s)
        /\ slot' = s
        /\ wpc' = "clear_written"
    /\ UNCHANGED <<written, released, data, msg, log, got, views, alive, badFallback>>

\* No free slot: the message takes the normal path (counted in statistics()).
\* arena.py::ArenaWriter._arena_fallback
ArenaFallback ==
    /\ wpc = "claim" /\ msg <= M
    /\ \A s \in Slots : ~Free(s)
    /\ ~(Evict /\ \E s \in Slots : DeadHolders(s) # {})
    /\ badFallback' = (badFallback \/ \A s \in Slots : OnlyDeadHold(s))
    /\ log' = Append(log, <<0, msg>>)
    /\ msg' = msg + 1
    /\ UNCHANGED <<written, released, data, wpc, slot, got, views, alive>>

\* arena.py::ArenaWriter._arena_reclaim_dead
ArenaReclaimDead ==
    /\ wpc = "claim" /\ msg <= M /\ Evict
    /\ \A s \in Slots : ~Free(s)
    /\ \E s \in Slots : DeadHolders(s) # {}
    /\ released' = [s \in Slots |-> [r \in Readers |-> IF alive[r] THEN released[s][r] ELSE 1]]
    /\ UNCHANGED <<written, data, wpc, slot, msg, log, got, views, alive, badFallback>>

\* arena.py::ArenaWriter._arena_clear_written
ArenaClearWritten ==
    /\ wpc = "clear_written"
    /\ written' = [written EXCEPT ![slot] = 0]
    /\ wpc' = "write"
    /\ UNCHANGED <<released, data, slot, msg, log, got, views, alive, badFallback>>

\* arena.py::ArenaWriter._arena_write
ArenaWrite ==
    /\ wpc = "write"
    /\ data' = [data EXCEPT ![slot] = msg]
    /\ wpc' = "clear_released"
    /\ UNCHANGED <<written, released, slot, msg, log, got, views, alive, badFallback>>

\* arena.py::ArenaWriter._arena_clear_released
ArenaClearReleased ==
    /\ wpc = "clear_released"
    /\ released' = [released EXCEPT ![slot] = [r \in Readers |-> 0]]
    /\ wpc' = "publish"
    /\ UNCHANGED <<written, data, slot, msg, log, got, views, alive, badFallback>>

\* arena.py::ArenaWriter._arena_publish
ArenaPublish ==
    /\ wpc = "publish"
    /\ written' = [written EXCEPT ![slot] = 1]
    /\ wpc' = "send"
    /\ UNCHANGED <<released, data, slot, msg, log, got, views, alive, badFallback>>

\* The ring message naming the slot is published after the slot (framing.py, marker 3).
\* With Abort, the wake-up that follows the ring's publish (NotifyLoadWaiters) is a
\* step of its own: an exception may come there.
RingSend ==
    /\ wpc = "send"
    /\ log' = Append(log, <<slot, msg>>)
    /\ msg' = msg + 1
    /\ wpc' = IF Abort = "none" THEN "claim" ELSE "notify"
    /\ slot' = IF Abort = "none" THEN 0 ELSE slot
    /\ UNCHANGED <<written, released, data, views, got, alive, badFallback>>

\* endpoint.py's NotifyLoadWaiters after the ring publish (only with Abort).
RingNotify ==
    /\ wpc = "notify"
    /\ wpc' = "claim"
    /\ slot' = 0
    /\ UNCHANGED <<written, released, data, msg, log, got, views, alive, badFallback>>

\* An exception ends the enqueue at the writer's current step (the step hook's or a
\* signal handler's, or a timeout / shutdown() in the ring's claim: wpc = "send").
\* Before the ring chunk naming the slot is published, the message is dropped and its
\* slot given back (ArenaWriter.place's and WriterEndpoint.publish's handlers call
\* unplace: released := 1 for every reader); after it ("notify") the message is out:
\* "code" keeps the slot taken, "unplace" gives it back all the same.
\* (no code counterpart: the exception's path through arena.py and endpoint.py)
WriterAbort ==
    /\ Abort # "none"
    /\ \/ /\ msg <= M
          /\ wpc \in {"claim", "clear_written", "write", "clear_released", "publish", "send"}
          /\ msg' = msg + 1
          /\ released' = IF slot = 0 THEN released
                         ELSE [released EXCEPT ![slot] = [r \in Readers |-> 1]]
       \/ /\ wpc = "notify"
          /\ released' = IF Abort = "unplace"
                         THEN [released EXCEPT ![slot] = [r \in Readers |-> 1]]
                         ELSE released
          /\ UNCHANGED msg
    /\ wpc' = "claim"
    /\ slot' = 0
    /\ UNCHANGED <<written, data, log, got, views, alive, badFallback>>

\* Reader r dequeues the next message; an arena message becomes a view of its slot.
Dequeue(r) ==
    /\ alive[r] /\ got[r] < Len(log)
    /\ LET m == got[r] + 1
           s == log[m][1]
       IN /\ got' = [got EXCEPT ![r] = m]
          /\ views' = IF s = 0 THEN views ELSE [views EXCEPT ![r] = @ \cup {log[m]}]
          /\ released' = IF s # 0 /\ ReleaseAtDequeue
                         THEN [released EXCEPT ![s][r] = 1] ELSE released
    /\ UNCHANGED <<written, data, wpc, slot, msg, log, alive, badFallback>>

\* arena.py::ArenaReader._arena_release
ArenaRelease(r) ==
    /\ alive[r]
    /\ \E v \in views[r] :
        /\ views' = [views EXCEPT ![r] = @ \ {v}]
        /\ released' = IF ReleaseAtDequeue THEN released ELSE [released EXCEPT ![v[1]][r] = 1]
    /\ UNCHANGED <<written, data, wpc, slot, msg, log, got, alive, badFallback>>

\* A reader in CrashSet dies (SIGKILL): its views vanish, its flags stay as they are.
Crash(r) ==
    /\ r \in CrashSet /\ alive[r]
    /\ alive' = [alive EXCEPT ![r] = FALSE]
    /\ views' = [views EXCEPT ![r] = {}]
    /\ UNCHANGED <<written, released, data, wpc, slot, msg, log, got, badFallback>>

Done ==
    /\ msg > M /\ wpc = "claim"
    /\ \A r \in Readers : ~alive[r] \/ (got[r] = Len(log) /\ views[r] = {})
    /\ UNCHANGED vars

Next ==
    \/ ArenaClaim \/ ArenaFallback \/ ArenaReclaimDead \/ ArenaClearWritten \/ ArenaWrite
    \/ ArenaClearReleased \/ ArenaPublish \/ RingSend \/ RingNotify \/ WriterAbort
    \/ \E r \in Readers : Dequeue(r) \/ ArenaRelease(r) \/ Crash(r)
    \/ Done

Spec == Init /\ [][Next]_vars /\ WF_vars(ArenaClaim \/ ArenaFallback \/ ArenaReclaimDead \/ ArenaClearWritten
                                     \/ ArenaWrite \/ ArenaClearReleased \/ ArenaPublish \/ RingSend
                                     \/ RingNotify \/ WriterAbort)

TypeOK ==
    /\ written \in [Slots -> {0, 1}]
    /\ released \in [Slots -> [Readers -> {0, 1}]]
    /\ data \in [Slots -> 0 .. M]
    /\ msg \in 1 .. M + 1
    /\ slot \in 0 .. S

\* A live view always shows its own message: the writer never refills a slot a view lives on.
NoOverwrite == \A r \in Readers : \A v \in views[r] : data[v[1]] = v[2] /\ ~(wpc = "write" /\ slot = v[1])

\* Dead readers never make the writer fall back while their slots are all it lacks.
NoDeadLeak == ~badFallback

\* The writer never waits for the arena: it sends every message.
WriterDone == <>(msg > M)
=============================================================================
