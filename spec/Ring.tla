-------------------------------- MODULE Ring --------------------------------
(***************************************************************************)
(* ringcast: single-writer / multi-reader shared-memory broadcast ring.    *)
(*                                                                         *)
(* One segment: N chunks of payload plus, per chunk, one "written" byte    *)
(* and one "read" byte per reader.  One writer process, readers 0..NR-1.   *)
(* Every action below is ONE non-atomic step of the implementation and is  *)
(* tagged with the function it models:                                     *)
(*     \* file.py::Class._method   or   \* core/rc_steps.c::function       *)
(* (the ring's and the eventcount's steps are C functions of the protocol  *)
(* core, src/ringcast/core/, each under a "Spec: <Action>" comment;        *)
(* tests/proofs/test_spec.py checks that they exist).  Actions                    *)
(* that model the hardware or the environment (store-buffer drains, the    *)
(* end of a finite run) carry no such tag.                                 *)
(*                                                                         *)
(* The same module covers four layers, switched by CONSTANTS (see the      *)
(* MC*.tla / *.cfg files and spec/README.md):                              *)
(*   - the ring protocol and its broken variants (Order, SkipReader,       *)
(*     InitWritten / InitRead),                                            *)
(*   - the overflow channel (Big, SendOverflow position, RecvMode),        *)
(*   - the memory model (MM = "SC" | "TSO" | "RELAXED", fences F2..F7),    *)
(*   - the two eventcounts of the parking protocol (Parking, Recheck,      *)
(*     F6W, F6N),                                                          *)
(*   - reader death and eviction (CrashSet, Evict, EvictSkipsFlag),        *)
(*   - an exception ending the writer's enqueue mid-message (Abort),       *)
(*   - the tensor arena's slots (S, AFP, AF5, AF1, CloseSet; arena.py): a  *)
(*     message's payload names the slot its buffer was copied into,       *)
(*   - the timed wake of a parked side (Timed) and a live reader judged    *)
(*     dead (FalseSuspect; EvictCheck: the reader checks its eviction      *)
(*     before it returns a copy, as ReaderEndpoint.receive does; F8),     *)
(*   - load buffering at the claim (LoadBuffering, F1), the overflow       *)
(*     receive interrupted (RecvInt) and remote readers (Remote),          *)
(*   - the descriptor wait (Pollers, RecheckPoll, PollCountFirst;        *)
(*     core/rc_poll.c): readers that wait in an event loop on a descriptor *)
(*     the writer signals, and (WriterPolls, ConsumedWait) the writer      *)
(*     waiting on its own descriptor for a free chunk or for every reader  *)
(*     done, signalled by the readers' notifies.                           *)
(***************************************************************************)
EXTENDS Naturals, Integers, Sequences, FiniteSets, TLC

CONSTANTS
    N,              \* number of chunks (max_chunks)
    NR,             \* number of readers
    M,              \* number of messages the writer sends (bound)
    Order,          \* writer steps after WriterClaim, a sequence over Steps
    SkipReader,     \* broken reader: advances when written=1 and own flag=1
    InitWritten,    \* initial value of every written byte (0 = zero-filled)
    InitRead,       \* initial value of every read byte    (0 = zero-filled)
    TwoStepPayload, \* payload store is non-atomic (a torn value is visible)
    Big,            \* messages (subset of 1..M) that overflow (marker byte 1)
    RecvMode,       \* reader overflow receive: "block" | "owed" | "giveup"
    TimeoutAnytime, \* a receive may time out although the payload is queued
    MM,             \* memory model: "SC" | "TSO" | "RELAXED"
    F2, F3, F4, F5, F6W, F6N, F7,  \* fences (TRUE = present), see README
    F1,             \* the writer's claim fence after its flag loads
                    \*   (WriterClaim); acts only with LoadBuffering
    F8,             \* the reader's fence after the copy, before
                    \*   ReaderCheckEvicted's load of its evicted word
    LoadBuffering,  \* RELAXED: a load whose branch guards later stores may
                    \*   return after those stores are visible (the control
                    \*   dependency is not honoured), unless a fence (F1, AF1)
                    \*   stands between them.  Arm and POWER keep the
                    \*   dependency; the C abstract machine does not promise it
    Parking,        \* waiters really sleep on the eventcount (no spinning)
    Recheck,        \* the eventcount waiter re-checks after announcing
    Spin,           \* with Parking: a failed look may be repeated before
                    \*   parking (the code's spin phase; trace validation)
    CrashSet,       \* readers that may die (SIGKILL) at any step
    Evict,          \* the writer evicts a dead reader it waits for
    EvictSkipsFlag, \* after eviction the writer no longer clears its flag
    Abort,          \* an exception may end the writer's enqueue mid-message:
                    \*   "none" | "code" (the code's rule since issue 37:
                    \*   drop the message only while nothing of it left the
                    \*   process and no read flag of its chunk is cleared:
                    \*   FlagOut; else finish it) | "unsent" (issue 24's
                    \*   rule: drop while nothing left the process, flags
                    \*   cleared or not) | "drop" (always drop it: before 24)
    S,              \* tensor arena slots (0: no arena); every message has one
                    \*   large buffer, placed in a free slot or sent inline
    AFP, AF5,       \* arena fences: before the slot's written := 1
                    \*   (ArenaPublish; not in the code), before released_r := 1
                    \*   (ArenaRelease)
    AF1,            \* the arena claim's fence after its flag loads
                    \*   (ArenaClaim); without it, on RELAXED, the claim's
                    \*   loads may return after the slot's stores are visible
                    \*   (load buffering: the control dependency is not
                    \*   honoured, as the C abstract machine does not promise)
    CloseSet,       \* readers that may close their queue (ArenaReader.close)
                    \*   between messages and then read no more
    Timed,          \* with Parking: a sleep may end by its recheck_interval
                    \*   cap (ParkTimeout), no wake needed
    FalseSuspect,   \* live readers the writer's liveness check may judge
                    \*   dead (another PID namespace): evicted while alive
    EvictCheck,     \* a reader loads its evicted word after the copy and
                    \*   drops the copy if set (the code: ReaderEndpoint.receive)
    RecvInt,        \* an exception may interrupt the reader's overflow
                    \*   receive after the payload left the socket, before the
                    \*   reader's bookkeeping (owed) is cleared: "none" |
                    \*   "unsafe" (the next receive takes the next payload for
                    \*   the old marker) | "seq" (markers and payloads carry
                    \*   the message's number; a payload whose number is not
                    \*   the marker's is refused: the reader raises, "refused")
    Remote,         \* remote (TCP) readers: "none" | "owed" (the send after
                    \*   publish, Order's "remote" step; an exception there
                    \*   leaves it owed, the next publish sends it first) |
                    \*   "unowed" (an exception there loses it: before 37)
    Pollers,        \* readers that wait on a descriptor in an event loop
                    \*   (core/rc_poll.c's descriptor wait) instead of parking
                    \*   on the eventcount; with Parking (the writer notifies)
    RecheckPoll,    \* a poller looks again after arming (PollRecheck)
    PollCountFirst, \* PollArm increments the armed pollers' count before it
                    \*   sets its flag (and undoes the increment if the flag
                    \*   was set): core/rc_poll.c as shipped; FALSE: the flag
                    \*   first, then the count if the flag was 0 (the code
                    \*   of 9ca9df0, which lost a wake-up: poll_flag_first_nr2)
    WriterPolls,    \* the writer waits on its descriptor in an event loop
                    \*   (rc_writer_poll: enqueue_async) instead of parking
                    \*   when its chunk is not free; the readers' notifies
                    \*   after their acks load writer_pollers and signal it
    ConsumedWait    \* with WriterPolls: after its last message the writer
                    \*   waits on its descriptor until every reader has
                    \*   acked the last published chunk
                    \*   (rc_writer_poll_consumed: wait_consumed_async)

Chunks  == 0 .. N - 1
Readers == 0 .. NR - 1
Wr      == NR                   \* process id of the writer
Procs   == 0 .. NR              \* readers and the writer
Msgs    == 1 .. M
Slots   == 1 .. S
Steps   == {"clear_written", "payload", "clear_flags", "publish", "send", "remote"}

ASSUME /\ N \in Nat \ {0} /\ NR \in Nat \ {0} /\ M \in Nat
       /\ Order \in Seq(Steps) /\ Len(Order) > 0
       /\ \A a, b \in 1 .. Len(Order) : Order[a] = Order[b] => a = b
       /\ InitWritten \in {0, 1} /\ InitRead \in {0, 1}
       /\ Big \subseteq Msgs
       /\ RecvMode \in {"block", "owed", "giveup"}
       /\ MM \in {"SC", "TSO", "RELAXED"}
       /\ \A b \in {SkipReader, TwoStepPayload, TimeoutAnytime, F2, F3,
                    F4, F5, F6W, F6N, F7, Parking, Recheck, Spin, Evict,
                    EvictSkipsFlag} : b \in BOOLEAN
       /\ CrashSet \subseteq 0 .. NR - 1
       /\ FalseSuspect # {} => MM # "TSO"
       /\ Abort \in {"none", "code", "unsent", "drop"}
       /\ S \in Nat /\ (S > 0 => Abort = "none" /\ Big = {})
       /\ \A b \in {AFP, AF5, AF1, Timed, EvictCheck, F1, F8, LoadBuffering} : b \in BOOLEAN
       /\ RecvInt \in {"none", "unsafe", "seq"} /\ Remote \in {"none", "owed", "unowed"}
       /\ Remote # "none" => ~Parking /\ S = 0
       /\ ("remote" \in {Order[k] : k \in 1 .. Len(Order)}) <=> Remote # "none"
       /\ CloseSet \subseteq Readers
       /\ FalseSuspect \subseteq Readers /\ (FalseSuspect # {} => Evict)
       /\ Pollers \subseteq Readers /\ RecheckPoll \in BOOLEAN /\ PollCountFirst \in BOOLEAN
       /\ Pollers # {} => Parking /\ ~Spin
       /\ WriterPolls \in BOOLEAN /\ ConsumedWait \in BOOLEAN
       \* the writer's descriptor wait is modelled with the readers parking or
       \* polling (they notify after their acks), without eviction (the poll
       \* round's idle check), aborts, the arena or remote readers
       /\ WriterPolls => Parking /\ ~Spin /\ ~Evict /\ Abort = "none" /\ S = 0
       /\ ConsumedWait => WriterPolls

(* Shared-memory addresses: <<kind, chunk, reader>>.                       *)
WAddr(c)    == <<"W", c, -1>>     \* written byte of chunk c
RAddr(c, r) == <<"R", c, r>>      \* read byte of reader r in chunk c
DAddr(c)    == <<"D", c, -1>>     \* payload of chunk c
AWAddr(s)   == <<"AW", s, -1>>    \* arena: written byte of slot s
ARAddr(s, r) == <<"AR", s, r>>    \* arena: released byte of reader r in slot s
ADAddr(s)   == <<"AD", s, -1>>    \* arena: the bytes of slot s
EVAddr(r)   == <<"E", r, -1>>     \* reader r's state word (evicted) in the reader table

(* Payload values: 0 = zero-filled memory, m = message m, -m = message m   *)
(* half written (torn).  Byte 0 of a payload is the overflow marker, which *)
(* is 1 exactly for the messages in Big.                                   *)
Marker(v) == IF v \in Big THEN 1 ELSE 0
Abs(v)    == IF v < 0 THEN -v ELSE v

VARIABLES
    written,   \* [Chunks -> {0,1}]              memory: written bytes
    rflag,     \* [Chunks -> [Readers -> {0,1}]] memory: read bytes
    data,      \* [Chunks -> Int]                memory: payloads
    sb,        \* [Procs -> Seq(<<addr, value>>)] store buffers (TSO/RELAXED)
    pc,        \* [Procs -> STRING]              program counters
    w,         \* writer's chunk index
    msg,       \* number of the message the writer is sending
    wk,        \* index into Order of the writer's current step (0 = claim)
    wr,        \* next reader whose read byte WriterClearReadFlag clears
    i,         \* [Readers -> Chunks]            readers' chunk indices
    seen,      \* [Readers -> {0,1}]             written byte as last loaded
    mk,        \* [Readers -> BOOLEAN]           copied an overflow marker
    win,       \* [Readers -> SUBSET Int]  payload values an early (hoisted)
               \*   load may return (RELAXED without F4 only)
    ncopied,   \* [Readers -> Nat]               chunks copied so far
    recv,      \* [Readers -> Seq(Int)]  history: what each reader delivered
    sent,      \* Seq(Msgs)              history: payloads the writer wrote
    fifo,      \* [Readers -> Seq(Msgs)]  overflow channel (ZeroMQ PUB/SUB)
    waiters,   \* [ECs -> Nat] waiter count of each eventcount: "R" (readers
               \*   park on write_seq, the writer notifies) and "W" (the writer
               \*   parks on read_seq, readers notify), as in waiting.py/ring.py
    moved,     \* [Procs -> BOOLEAN] the sequence word (futex word) p parks on
               \*   has changed since p's ParkSnapshot.  The word only
               \*   grows and is only compared for equality, so this bit is an
               \*   exact abstraction of "seq # snapshot" (keeps the model finite)
    annc,      \* [Procs -> BOOLEAN] p's ParkAnnounce increment is executed but
               \*   not yet visible to other processes (RELAXED without F6W:
               \*   the RMW is ldaxr/stlxr, not a full fence)
    rechk,     \* [Procs -> BOOLEAN] p is re-checking after ParkAnnounce: its
               \*   next ring load steps (WriterClaim, or ReaderLoadWritten and
               \*   ReaderLoadReadFlag) are ParkRecheck's loads, as in the code;
               \*   after a re-check that found the ring ready it stays set
               \*   until ParkRetire, which goes on with that result
    alive,     \* [Readers -> BOOLEAN] the reader's process exists
    evicted,   \* SUBSET Readers: readers the writer has evicted
    dropped,   \* SUBSET Msgs: messages whose enqueue an exception ended
               \*   before they were published (WriterAbort; no reader
               \*   may deliver them)
    aw,        \* [Slots -> {0,1}]              memory: arena written bytes
    arel,      \* [Slots -> [Readers -> {0,1}]] memory: arena released bytes
    adata,     \* [Slots -> 0..M]               memory: the message a slot holds
    aslot,     \* the slot the writer is filling (0: none)
    mslot,     \* [Msgs -> 0..S] the slot message m's payload names (0: inline;
               \*   set by ArenaPublish, before the chunk is written)
    views,     \* [Readers -> SUBSET (Slots \X Msgs \X ViewSt)]: reader r's
               \*   live views <<slot, message, state>>
    vbad,      \* a view's read returned bytes of another message (history)
    cp,        \* [Readers -> Int] with EvictCheck: the value copied, not
               \*   yet delivered (0: none)
    apend,     \* the slot of an arena claim whose flag loads have not
               \*   returned yet (0: none; RELAXED without AF1 only)
    evw,       \* [Readers -> {0,1}] memory: each reader's state word, 1 =
               \*   evicted (stored only where a live reader loads it:
               \*   FalseSuspect # {}; else the writer's knowledge, evicted)
    cpend,     \* the ring claim's flag loads have not returned yet
               \*   (RELAXED, LoadBuffering without F1 only)
    mkn,       \* [Readers -> 0..M] with RecvInt = "seq": the number of the
               \*   marker the reader copied (0: none)
    rsent,     \* Seq(Msgs): what the writer sent its remote readers (TCP,
               \*   reliable and in order: what each remote reader receives)
    rowed,     \* with Remote = "owed": a published message whose remote
               \*   send an exception cut short (0: none)
    pflag,     \* [Procs -> {0,1}] memory: p's poll flag (1: armed; the
               \*   writer's at Wr; only RMWs touch it: seq_cst exchanges)
    pcount,    \* [ECs -> Int] memory: the armed pollers' counts, "R" the
               \*   readers' (reader_pollers), "W" the writer's
               \*   (writer_pollers), indexed like waiters by EC(p) (kept by
               \*   whoever flips a flag; it may wrap below 0 for a moment)
    desc       \* [Procs -> BOOLEAN] p's descriptor is readable (its
               \*   wake pipe holds a byte: signalled since its last drain)

amem   == <<aw, arel, adata, evw>>
mem    == <<written, rflag, data, amem>>
wvars  == <<w, msg, wk, wr>>
rvars  == <<i, seen, mk, win, ncopied>>
hvars  == <<recv, sent>>
pvars  == <<pflag, pcount, desc>>
evars  == <<waiters, moved, annc, rechk, pvars>>
xvars  == <<alive, evicted, dropped>>
avars  == <<aslot, mslot, views, vbad, cp, apend>>
nvars  == <<cpend, mkn, rsent, rowed>>
vars   == <<mem, sb, pc, wvars, rvars, hvars, fifo, evars, xvars, avars, nvars>>

\* A view is "held" (alive, its bytes not read yet), "read" (read, not yet
\* released) or "late" (RELAXED without AF5: its release store is issued
\* while its read is still to be performed).
ViewSt == {"held", "read", "late"}

-----------------------------------------------------------------------------
(***************************** memory model *******************************)
(* SC: a store goes straight to memory.  TSO and RELAXED: a store goes to  *)
(* the storing process's buffer; Drain moves an entry to memory.  TSO      *)
(* drains in FIFO order; RELAXED may drain any entry whose address has no  *)
(* older entry (stores to different addresses become visible out of       *)
(* order).  A load returns the newest own buffered store to the address,   *)
(* else memory.  A release/full fence is modelled as "own buffer empty".   *)
(* RELAXED also lets the reader's payload load be hoisted above its flag   *)
(* loads when F4 is missing (win), lets its ack store become visible       *)
(* before the copy when F5 is missing, and makes the ParkAnnounce RMW      *)
(* non-fencing when F6W (a full fence after it) is missing: its increment  *)
(* may become visible after the recheck's loads (annc, DrainAnnounce).  On *)
(* TSO a locked RMW is a full fence, so F6W changes nothing there.         *)

WinOn      == MM = "RELAXED" /\ ~F4
EarlyAck   == MM = "RELAXED" /\ ~F5
LateAnnc   == MM = "RELAXED" /\ ~F6W
\* The reader's state word is memory (a store, a load) where a live reader
\* loads it: only a reader judged dead while alive (FalseSuspect) does.
EvMem      == FalseSuspect # {}
\* RELAXED without F8: ReaderCheckEvicted's load may be satisfied before the
\* copy's loads (after F4, which the copy follows): "copy_chk".  (Only where
\* the word is memory: elsewhere no live reader finds itself evicted.)
EarlyCheck == MM = "RELAXED" /\ ~F8 /\ EvictCheck /\ EvMem
\* RELAXED with load buffering and no F1: the claim's flag loads may return
\* after the writer's next stores are visible (cpend, WriterClaimLoads).
LateRingClaim == MM = "RELAXED" /\ LoadBuffering /\ ~F1

\* The two eventcounts: EC(p) is the one p parks on, NEC(p) the one p
\* notifies after its publish (writer) or ack (reader).
ECs    == {"R", "W"}
EC(p)  == IF p = Wr THEN "W" ELSE "R"
NEC(p) == IF p = Wr THEN "R" ELSE "W"

\* p waits on a descriptor (core/rc_poll.c), not on the eventcount.
Polls(p) == IF p = Wr THEN WriterPolls ELSE p \in Pollers


MemVal(a) == CASE a[1] = "W" -> written[a[2]]
               [] a[1] = "R" -> rflag[a[2]][a[3]]
               [] a[1] = "D" -> data[a[2]]
               [] a[1] = "AW" -> aw[a[2]]
               [] a[1] = "AR" -> arel[a[2]][a[3]]
               [] a[1] = "AD" -> adata[a[2]]
               [] a[1] = "E" -> evw[a[2]]

Load(p, a) ==
    LET pend == SelectSeq(sb[p], LAMBDA e : e[1] = a)
    IN  IF pend # << >> THEN pend[Len(pend)][2] ELSE MemVal(a)

BufEmpty(p) == sb[p] = << >>

\* A payload value reaching memory is added to the hoisting window of every
\* reader that is between its load of written and its copy of that chunk.
WinAdd(c, v) ==
    IF WinOn
    THEN win' = [r \in Readers |->
                   IF /\ i[r] = c
                      /\ \/ pc[r] \in {"load_r", "copy", "copy_chk"}
                         \/ pc[r] \in {"park_retire", "poll_disarm"} /\ rechk[r]
                   THEN win[r] \cup {v} ELSE win[r]]
    ELSE UNCHANGED win

\* Apply a store to memory (primes written, rflag, data, the arena's memory
\* and win).
Apply(a, v) ==
    /\ written' = IF a[1] = "W" THEN [written EXCEPT ![a[2]] = v] ELSE written
    /\ rflag'   = IF a[1] = "R" THEN [rflag EXCEPT ![a[2]][a[3]] = v] ELSE rflag
    /\ data'    = IF a[1] = "D" THEN [data EXCEPT ![a[2]] = v] ELSE data
    /\ aw'      = IF a[1] = "AW" THEN [aw EXCEPT ![a[2]] = v] ELSE aw
    /\ arel'    = IF a[1] = "AR" THEN [arel EXCEPT ![a[2]][a[3]] = v] ELSE arel
    /\ adata'   = IF a[1] = "AD" THEN [adata EXCEPT ![a[2]] = v] ELSE adata
    /\ evw'     = IF a[1] = "E" THEN [evw EXCEPT ![a[2]] = v] ELSE evw
    /\ IF a[1] = "D" THEN WinAdd(a[2], v) ELSE UNCHANGED win

\* Process p stores v at a (primes written, rflag, data, win, sb).
Store(p, a, v) ==
    IF MM = "SC"
    THEN Apply(a, v) /\ UNCHANGED sb
    ELSE /\ sb' = [sb EXCEPT ![p] = Append(@, <<a, v>>)]
         /\ UNCHANGED <<written, rflag, data, amem, win>>

RemoveAt(s, k) == SubSeq(s, 1, k - 1) \o SubSeq(s, k + 1, Len(s))

\* Hardware: one buffered store of p becomes visible (no code counterpart).
DrainStore(p) ==
    \E k \in 1 .. Len(sb[p]) :
        /\ MM = "TSO" => k = 1
        /\ \A j \in 1 .. k - 1 : sb[p][j][1] # sb[p][k][1]
        /\ Apply(sb[p][k][1], sb[p][k][2])
        /\ sb' = [sb EXCEPT ![p] = RemoveAt(@, k)]
        /\ UNCHANGED <<pc, wvars, i, seen, mk, ncopied, hvars, fifo, evars>>

\* Hardware: p's ParkAnnounce increment (a poller's: PollArm's second RMW,
\* the count's increment or, with PollCountFirst, the flag's set) becomes
\* visible (LateAnnc only).
DrainAnnounce(p) ==
    /\ annc[p]
    /\ annc' = [annc EXCEPT ![p] = FALSE]
    /\ IF ~Polls(p)
       THEN waiters' = [waiters EXCEPT ![EC(p)] = @ + 1] /\ UNCHANGED <<pcount, pflag>>
       ELSE IF PollCountFirst
       THEN pflag' = [pflag EXCEPT ![p] = 1] /\ UNCHANGED <<waiters, pcount>>
       ELSE pcount' = [pcount EXCEPT ![EC(p)] = @ + 1] /\ UNCHANGED <<waiters, pflag>>
    /\ UNCHANGED <<mem, sb, pc, wvars, rvars, hvars, fifo, moved, rechk, desc>>

Drain(p) == DrainStore(p) \/ DrainAnnounce(p)

-----------------------------------------------------------------------------
(****************************** ring conditions ****************************)

\* WriterClaim's test: chunk never written / reclaimed, or read by everyone.
Claimable == Load(Wr, WAddr(w)) = 0 \/ \A r \in Readers : Load(Wr, RAddr(w, r)) = 1

\* A reader's test: written and not yet read by this reader.
ReaderReady(r) == Load(r, WAddr(i[r])) = 1 /\ Load(r, RAddr(i[r], r)) = 0

Ready(p) == IF p = Wr THEN Claimable ELSE ReaderReady(p)

\* Where the writer starts a message: the arena's placement comes first.
WTop == IF S > 0 THEN "a_claim" ELSE "claim"

\* The writer's look: for a free chunk (WriterClaim), or after its last
\* message, with ConsumedWait, for every reader done (WriterConsumed).
WLook == IF msg > M THEN "consumed" ELSE "claim"
\* Where the writer ends: "done", or after the consumed wait.
WEnd == IF ConsumedWait THEN "consumed" ELSE "done"

\* Where a process continues after parking / after notifying.
LoopTop(p) == IF p = Wr THEN WLook ELSE "load_w"
AfterNotify(p) == IF p = Wr THEN (IF msg > M THEN WEnd ELSE WTop)
                  ELSE (IF mk[p] THEN "recv" ELSE "load_w")

-----------------------------------------------------------------------------
(********************************* writer **********************************)

\* Fences in front of the first store of the current step.
WNeedDrain ==
    \/ F2 /\ wk > 1 /\ Order[wk - 1] = "clear_written" /\ pc[Wr] # "payload_end"
                    /\ (pc[Wr] = "clear_flags" => wr = 0)
    \/ F3 /\ pc[Wr] = "publish"
    \/ F7 /\ pc[Wr] = "clear_flags" /\ wr = 0
WFenceOK == WNeedDrain => BufEmpty(Wr)

\* Go on with the next step of Order; after the last one the message is
\* done: advance to the next chunk (and notify when waiters really sleep).
WNextStep ==
    IF wk < Len(Order)
    THEN /\ wk' = wk + 1
         /\ pc' = [pc EXCEPT ![Wr] = Order[wk + 1]]
         /\ UNCHANGED <<w, msg>>
    ELSE /\ wk' = 0
         /\ w' = (w + 1) % N
         /\ msg' = msg + 1
         /\ pc' = [pc EXCEPT ![Wr] = IF Parking THEN "notify_load"
                                     ELSE IF msg + 1 > M THEN "done" ELSE WTop]

\* With WriterPolls the writer waits on its descriptor (rc_writer_poll):
\* a failed look goes to PollDrain, the re-check (PollRecheck's load) to
\* PollDisarm or the sleep.
WRetire == IF WriterPolls THEN "poll_disarm" ELSE "park_retire"
WSleep  == IF WriterPolls THEN "poll_sleep" ELSE "park_sleep"
WWait   == IF WriterPolls THEN "poll_drain" ELSE "park_snap"

\* core/rc_steps.c::writer_claim
WriterClaim ==
    /\ pc[Wr] = "claim"
    /\ msg <= M /\ rowed = 0
    /\ IF rechk[Wr]           \* ParkRecheck's (PollRecheck's) load: retire
                              \* (disarm) and go on, or sleep
       THEN /\ pc' = [pc EXCEPT ![Wr] = IF Claimable THEN WRetire ELSE WSleep]
            /\ rechk' = [rechk EXCEPT ![Wr] = Claimable]
            /\ UNCHANGED <<wk, wr>>
       ELSE IF Claimable
       THEN /\ wk' = 1 /\ wr' = 0
            /\ pc' = [pc EXCEPT ![Wr] = Order[1]]
            /\ UNCHANGED rechk
       ELSE /\ Parking        \* without parking the writer keeps spinning here
            /\ pc' = [pc EXCEPT ![Wr] = WWait]
            /\ UNCHANGED <<wk, wr, rechk>>
    /\ UNCHANGED <<mem, sb, w, msg, rvars, hvars, fifo, waiters, moved, annc, pvars>>

\* LateRingClaim (RELAXED, LoadBuffering, no F1): the claim's flag loads have
\* not returned when the writer goes on with its stores (load buffering: the
\* branch's control dependency not honoured, no fence after the loads), so
\* it goes on with a chunk that is not claimable yet; WriterClaimLoads lets
\* the loads return, seeing every read flag 1.  They return before the
\* writer's first read-flag clear (the same addresses: WriterClearReadFlag
\* waits for them), a subset of the machine's behaviours that is enough:
\* the written byte's and the payload's stores may be visible before them.
\* A late claim whose loads would see a flag 0 never happened (a behaviour
\* stuck here is not the machine's; the invariants hold only outside it).
\* (the hardware's side of WriterClaim: no code counterpart)
WriterClaimLate ==
    /\ LateRingClaim /\ pc[Wr] = "claim" /\ ~rechk[Wr]
    /\ msg <= M /\ rowed = 0 /\ ~Claimable
    /\ cpend' = TRUE
    /\ wk' = 1 /\ wr' = 0
    /\ pc' = [pc EXCEPT ![Wr] = Order[1]]
    /\ UNCHANGED <<mem, sb, w, msg, rvars, hvars, fifo, evars, mkn, rsent, rowed>>

\* Hardware (LateRingClaim only): the late claim's flag loads return, and
\* they see every read flag of the chunk 1.
WriterClaimLoads ==
    /\ cpend
    /\ \A r \in Readers : Load(Wr, RAddr(w, r)) = 1
    /\ cpend' = FALSE
    /\ UNCHANGED <<mem, sb, pc, wvars, rvars, hvars, fifo, evars, mkn, rsent, rowed>>

\* core/rc_steps.c::writer_clear_written
WriterClearWritten ==
    /\ pc[Wr] = "clear_written"
    /\ WFenceOK
    /\ Store(Wr, WAddr(w), 0)
    /\ WNextStep
    /\ UNCHANGED <<wr, i, seen, mk, ncopied, hvars, fifo, evars>>

\* core/rc_steps.c::writer_write_payload
WriterWritePayload ==
    \/ /\ pc[Wr] = "payload"
       /\ WFenceOK
       /\ IF TwoStepPayload
          THEN /\ Store(Wr, DAddr(w), -msg)        \* first half: torn
               /\ pc' = [pc EXCEPT ![Wr] = "payload_end"]
               /\ UNCHANGED <<w, msg, wk, sent>>
          ELSE /\ Store(Wr, DAddr(w), msg)
               /\ sent' = Append(sent, msg)
               /\ WNextStep
       /\ UNCHANGED <<wr, i, seen, mk, ncopied, recv, fifo, evars>>
    \/ /\ pc[Wr] = "payload_end"                    \* second half: complete
       /\ Store(Wr, DAddr(w), msg)
       /\ sent' = Append(sent, msg)
       /\ WNextStep
       /\ UNCHANGED <<wr, i, seen, mk, ncopied, recv, fifo, evars>>

\* core/rc_steps.c::writer_clear_read_flag
WriterClearReadFlag ==
    /\ pc[Wr] = "clear_flags"
    /\ WFenceOK /\ ~cpend
    /\ IF EvictSkipsFlag /\ wr \in evicted        \* an evicted reader's flag
       THEN UNCHANGED <<written, rflag, data, amem, win, sb>>   \* stays 1
       ELSE Store(Wr, RAddr(w, wr), 0)            \* one reader byte per step
    /\ IF wr + 1 < NR
       THEN wr' = wr + 1 /\ UNCHANGED <<pc, w, msg, wk>>
       ELSE wr' = 0 /\ WNextStep
    /\ UNCHANGED <<i, seen, mk, ncopied, hvars, fifo, evars>>

\* The writer, waiting for chunk w, finds a reader dead (the endpoint's dead-peer
\* check, abstracted as an oracle: ~alive[r], or a live reader of FalseSuspect
\* judged dead) and evicts it: marks every chunk read by it, and from now on
\* leaves its flag alone.  Without parking the writer checks while it spins
\* at its claim; with parking it checks where the code calls on_idle
\* (endpoint.py WriterEndpoint._idle): at the top of each round of the park loop,
\* after a failed look (pc = "park_snap"), and only the readers that have not
\* read chunk w (unread_readers()).  On TSO and RELAXED the flag stores go
\* through the writer's store buffer, chunk by chunk; there only dead readers
\* are evicted (FalseSuspect is SC only), so no reader loads the eviction (the
\* reader table's word: evicted is the writer's own knowledge, live_readers)
\* and the flags set are loaded by the writer alone.
\* core/rc_steps.c::writer_evict
WriterEvict ==
    /\ Evict
    /\ msg <= M /\ ~Claimable
    /\ IF Parking THEN pc[Wr] = "park_snap" ELSE pc[Wr] = "claim"
    /\ \E r \in Readers :
          /\ ~alive[r] \/ r \in FalseSuspect
          /\ r \notin evicted
          /\ Parking => Load(Wr, RAddr(w, r)) = 0
          \* the state word first (EvMem: a live reader may load it), then the flags
          /\ IF MM = "SC"
             THEN /\ rflag' = [c \in Chunks |-> [rflag[c] EXCEPT ![r] = 1]] /\ UNCHANGED sb
                  /\ evw' = IF EvMem THEN [evw EXCEPT ![r] = 1] ELSE evw
             ELSE /\ sb' = [sb EXCEPT ![Wr] = @ \o (IF EvMem THEN <<<<EVAddr(r), 1>>>> ELSE << >>)
                                             \o [k \in 1 .. N |-> <<RAddr(k - 1, r), 1>>]]
                  /\ UNCHANGED <<rflag, evw>>
          /\ evicted' = evicted \cup {r}
    /\ UNCHANGED <<written, data, aw, arel, adata, pc, wvars, rvars, hvars, fifo, evars, alive, dropped>>

\* Environment: reader r's process dies (SIGKILL) wherever it is; it never
\* takes another step (no code counterpart).
ReaderCrash(r) ==
    /\ r \in CrashSet /\ alive[r]
    /\ alive' = [alive EXCEPT ![r] = FALSE]
    /\ views' = [views EXCEPT ![r] = {}]       \* its views die with it
    /\ UNCHANGED <<mem, sb, pc, wvars, rvars, hvars, fifo, evars, evicted, dropped,
                   aslot, mslot, vbad, cp, apend, nvars>>

\* core/rc_core.c::send_overflow
WriterSendOverflow ==
    /\ pc[Wr] = "send"
    /\ fifo' = IF msg \in Big
               THEN [r \in Readers |-> Append(fifo[r], msg)]
               ELSE fifo
    /\ WNextStep
    /\ UNCHANGED <<mem, sb, wr, rvars, hvars, evars>>

\* core/rc_steps.c::writer_publish
WriterPublish ==
    /\ pc[Wr] = "publish"
    /\ WFenceOK
    /\ Store(Wr, WAddr(w), 1)
    /\ WNextStep
    /\ UNCHANGED <<wr, i, seen, mk, ncopied, hvars, fifo, evars>>

\* Step s of Order is behind the writer (for the current message).
Done(s) == \E k \in 1 .. wk - 1 : Order[k] = s

\* The current message's overflow payload is on the socket: it overflows and
\* its "send" step is behind the writer.
PayloadOut == msg \in Big /\ Done("send")

\* A read flag of the current message's chunk is cleared (FlagOut): a
\* WriterClearReadFlag of this message stored a 0 (an evicted reader's step
\* with EvictSkipsFlag stores nothing).  From here a reader that loaded the
\* chunk's old written = 1 may pass its check and copy the chunk.
FlagOut ==
    LET upto == IF Done("clear_flags") THEN NR
                ELSE IF pc[Wr] = "clear_flags" THEN wr ELSE 0
    IN  \E r \in 0 .. upto - 1 : ~(EvictSkipsFlag /\ r \in evicted)

\* The rule that decides whether an exception may drop the current message.
Droppable ==
    CASE Abort = "drop"   -> TRUE
      [] Abort = "unsent" -> ~PayloadOut /\ ~Done("publish")
      [] Abort = "code"   -> ~PayloadOut /\ ~Done("publish") /\ ~FlagOut
      [] OTHER            -> FALSE

\* An exception ends the writer's enqueue where it stands: a timeout or
\* shutdown() while it waits for a chunk (the wait loop raises at its top,
\* after ParkRetire: pc = "claim"), or an exception from a signal handler
\* (KeyboardInterrupt) or from the step hook at any writer step (the code's
\* step points; the park steps' exceptions are not modelled).  The message
\* is dropped: the writer goes on with the next one at the same chunk (it is
\* writable: written = 0, or still free), and no reader may deliver it.
\*   "drop": the old code: dropped at every step, also after its payload
\*     went out on the socket (an orphan the next marker pairs with: the
\*     must-fail model abort_drop_after_send), and a published message's
\*     NotifyLoadWaiters/NotifyWake is skipped.
\*   "unsent": issue 24's rule: dropped only while nothing of it left the
\*     process.  Once its payload is out (PayloadOut) or it is published,
\*     the exception handler finishes it (clear flags, publish, notify), and
\*     if the handler is interrupted too, the next publish finishes it
\*     first: the writer's own steps, later, so no action here.  Unsafe: a
\*     read flag already cleared lets a reader that loaded the old written
\*     = 1 copy the chunk while the next message is written into it (the
\*     must-fail model abort_unsent_n1: NoDataRace).
\*   "code": endpoint.py::WriterEndpoint.publish since issue 37: as
\*     "unsent", and once a read flag is cleared (FlagOut) it is finished
\*     too.
\* (no code counterpart: the exception's path through endpoint.py)
WriterAbort ==
    /\ Abort # "none" /\ ~cpend
    /\ \/ /\ msg <= M
          /\ \/ pc[Wr] = "claim" /\ ~rechk[Wr]
             \/ pc[Wr] \in (Steps \ {"remote"}) \cup {"payload_end"} /\ Droppable
          /\ msg' = msg + 1
          /\ dropped' = dropped \cup {msg}
          /\ sent' = IF sent # << >> /\ sent[Len(sent)] = msg
                     THEN SubSeq(sent, 1, Len(sent) - 1) ELSE sent
          /\ pc' = [pc EXCEPT ![Wr] = IF msg + 1 > M THEN "done" ELSE WTop]
       \/ /\ Abort = "drop" /\ pc[Wr] \in {"notify_load", "notify_wake"}
          /\ pc' = [pc EXCEPT ![Wr] = AfterNotify(Wr)]
          /\ UNCHANGED <<msg, dropped, sent>>
    /\ wk' = 0 /\ wr' = 0
    /\ UNCHANGED <<mem, sb, w, rvars, recv, fifo, evars, alive, evicted, nvars>>

\* Remote readers (Remote # "none"): the writer sends each published message
\* on the TCP socket (queue.py::MessageQueue.enqueue, after the local publish
\* and wake; here the step after WriterPublish: the remote models do not park).
\* (no step point: queue.py's remote_socket.send_multipart)
WriterRemoteSend ==
    /\ pc[Wr] = "remote"
    /\ rsent' = Append(rsent, msg)
    /\ WNextStep
    /\ UNCHANGED <<mem, sb, wr, rvars, hvars, fifo, evars, cpend, mkn, rowed>>

\* An exception ends the enqueue at its remote send (the message is
\* published: it is not dropped).  "owed": the send is left owed (rowed) and
\* the next publish sends it first (WriterRemoteOwed); "unowed": it is lost.
WriterRemoteAbort ==
    /\ Abort # "none" /\ pc[Wr] = "remote"
    /\ rowed' = IF Remote = "owed" THEN msg ELSE 0
    /\ wk' = 0 /\ w' = (w + 1) % N /\ msg' = msg + 1
    /\ pc' = [pc EXCEPT ![Wr] = IF msg + 1 > M THEN "done" ELSE WTop]
    /\ UNCHANGED <<mem, sb, wr, rvars, hvars, fifo, evars, cpend, mkn, rsent>>

\* The next publish first sends the remote message an exception left owed
\* (an exception in here leaves it owed: WriterAbort at the claim).
WriterRemoteOwed ==
    /\ pc[Wr] = "claim" /\ ~rechk[Wr] /\ rowed # 0 /\ msg <= M
    /\ rsent' = Append(rsent, rowed)
    /\ rowed' = 0
    /\ UNCHANGED <<mem, sb, pc, wvars, rvars, hvars, fifo, evars, cpend, mkn>>

-----------------------------------------------------------------------------
(********************************* readers *********************************)

\* core/rc_steps.c::reader_load_written
ReaderLoadWritten(r) ==
    /\ pc[r] = "load_w"
    /\ seen' = [seen EXCEPT ![r] = Load(r, WAddr(i[r]))]
    /\ win'  = IF WinOn THEN [win EXCEPT ![r] = {data[i[r]]}] ELSE win
    /\ pc'   = [pc EXCEPT ![r] = "load_r"]
    /\ UNCHANGED <<mem, sb, wvars, i, mk, ncopied, hvars, fifo, evars>>

\* core/rc_steps.c::reader_load_read_flag
ReaderLoadReadFlag(r) ==
    /\ pc[r] = "load_r"
    /\ LET f == Load(r, RAddr(i[r], r)) IN
       IF rechk[r]          \* ParkRecheck's (PollRecheck's) second load: retire
                            \* (disarm) and go on, or sleep
       THEN /\ pc' = [pc EXCEPT ![r] =
                        IF r \in Pollers
                        THEN IF seen[r] = 1 /\ f = 0 THEN "poll_disarm" ELSE "poll_sleep"
                        ELSE IF seen[r] = 1 /\ f = 0 THEN "park_retire" ELSE "park_sleep"]
            /\ rechk' = [rechk EXCEPT ![r] = seen[r] = 1 /\ f = 0]
            /\ UNCHANGED i
       ELSE /\ UNCHANGED rechk
            /\ IF seen[r] = 1 /\ f = 0
               THEN pc' = [pc EXCEPT ![r] = "copy"] /\ UNCHANGED i
               ELSE IF SkipReader /\ seen[r] = 1 /\ f = 1
               THEN /\ i'  = [i EXCEPT ![r] = (@ + 1) % N]  \* broken: skip chunk
                    /\ pc' = [pc EXCEPT ![r] = "load_w"]
               ELSE /\ \E nxt \in IF ~Parking THEN {"load_w"}
                                   ELSE IF r \in Pollers THEN {"poll_drain"}
                                   ELSE IF Spin THEN {"park_snap", "load_w"}
                                   ELSE {"park_snap"} :
                          pc' = [pc EXCEPT ![r] = nxt]
                    /\ UNCHANGED i
    /\ UNCHANGED <<mem, sb, wvars, seen, mk, win, ncopied, hvars, fifo, waiters, moved, annc, pvars>>

\* Deliver a copied payload value (an overflow marker delivers later).  A
\* message whose buffer is in an arena slot becomes a view of that slot: the
\* payload names it (mslot: what the writer put in the chunk).
Deliver(r, v) ==
    /\ ncopied' = [ncopied EXCEPT ![r] = @ + 1]
    /\ IF Marker(v) = 1
       THEN /\ mk' = [mk EXCEPT ![r] = TRUE] /\ UNCHANGED recv
            /\ mkn' = IF RecvInt = "seq" THEN [mkn EXCEPT ![r] = v] ELSE mkn
       ELSE recv' = [recv EXCEPT ![r] = Append(@, v)] /\ UNCHANGED <<mk, mkn>>
    /\ views' = IF v \in Msgs /\ S > 0 /\ mslot[v] > 0
                THEN [views EXCEPT ![r] = @ \cup {<<mslot[v], v, "held">>}]
                ELSE views

\* Reader r finds itself evicted: its state word (where a live reader loads
\* it, EvMem), else the writer's own record.
Evd(r) == IF EvMem THEN Load(r, EVAddr(r)) = 1 ELSE r \in evicted

AfterAck(r) == IF Parking THEN "notify_load" ELSE AfterNotify(r)

\* With EvictCheck the copy is kept (cp) until ReaderCheckEvicted.
\* core/rc_steps.c::reader_copy
ReaderCopy(r) ==
    /\ pc[r] \in {"copy", "copy_late", "copy_chk"}
    /\ \E v \in (IF WinOn THEN win[r] ELSE {}) \cup {data[i[r]]} :
          IF EvictCheck /\ pc[r] # "copy_chk"
          THEN cp' = [cp EXCEPT ![r] = v] /\ UNCHANGED <<ncopied, mk, recv, views, mkn>>
          ELSE Deliver(r, v) /\ UNCHANGED cp
    /\ IF pc[r] \in {"copy", "copy_chk"}
       THEN pc' = [pc EXCEPT ![r] = IF EvictCheck /\ pc[r] = "copy" THEN "check" ELSE "ack"]
            /\ UNCHANGED i
       ELSE /\ i' = [i EXCEPT ![r] = (@ + 1) % N]    \* acked already
            /\ pc' = [pc EXCEPT ![r] = AfterAck(r)]
    /\ UNCHANGED <<mem, sb, wvars, seen, win, sent, fifo, evars, aslot, mslot, vbad, apend,
                   cpend, rsent, rowed>>

\* EvictCheck (the code): after the copy and before it is returned, the
\* reader loads its state word in the reader table; if the writer evicted
\* it, the copy is dropped and EvictedError raised (the reader reads no
\* more).  core/rc_steps.c::reader_check_evicted, called by
\* ReaderEndpoint.receive after copy_out and before the ack.  On relaxed
\* memory it needs a fence between the copy and the load (F8): without it
\* (EarlyCheck) the load may come first, from "copy" to "copy_chk", and the
\* copy after it.  The word is loaded from memory where a live reader may
\* be evicted (EvMem), else the writer's record stands for it.
ReaderCheckEvicted(r) ==
    /\ \/ pc[r] = "check"
       \/ pc[r] = "copy" /\ EarlyCheck     \* RELAXED, no F8: the load first
    /\ IF Evd(r)
       THEN /\ pc' = [pc EXCEPT ![r] = "gone"]
            /\ UNCHANGED <<ncopied, mk, recv, views, mkn>>
       ELSE IF pc[r] = "copy"
       THEN /\ pc' = [pc EXCEPT ![r] = "copy_chk"]
            /\ UNCHANGED <<ncopied, mk, recv, views, mkn>>
       ELSE /\ Deliver(r, cp[r])
            /\ pc' = [pc EXCEPT ![r] = "ack"]
    /\ cp' = [cp EXCEPT ![r] = 0]
    /\ UNCHANGED <<mem, sb, wvars, i, seen, win, sent, fifo, evars, aslot, mslot, vbad, apend,
                   cpend, rsent, rowed>>

\* A parked reader's on_idle (endpoint.py ReaderEndpoint._idle, at the top of
\* each round of the park loop) finds itself evicted and raises EvictedError: it
\* reads no more (its views stay alive).
ReaderQuit(r) ==
    /\ pc[r] = "park_snap" /\ Evd(r)
    /\ pc' = [pc EXCEPT ![r] = "gone"]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, evars, avars, nvars>>

\* core/rc_steps.c::reader_ack
ReaderAck(r) ==
    \/ /\ pc[r] = "ack"
       /\ F5 => BufEmpty(r)
       /\ Store(r, RAddr(i[r], r), 1)
       /\ i'  = [i EXCEPT ![r] = (@ + 1) % N]
       /\ pc' = [pc EXCEPT ![r] = AfterAck(r)]
       /\ UNCHANGED <<wvars, seen, mk, ncopied, hvars, fifo, evars>>
    \/ /\ pc[r] = "copy" /\ EarlyAck   \* RELAXED, no F5: ack before the copy
       /\ Store(r, RAddr(i[r], r), 1)
       /\ pc' = [pc EXCEPT ![r] = "copy_late"]
       /\ UNCHANGED <<wvars, i, seen, mk, ncopied, hvars, fifo, evars>>

\* core/rc_core.c::recv_overflow
ReaderRecvOverflow(r) ==
    /\ pc[r] \in {"recv", "owed"}
    /\ \/ /\ fifo[r] # << >>                    \* receive the payload
          /\ RecvInt = "seq" => Head(fifo[r]) = mkn[r]
          /\ recv' = [recv EXCEPT ![r] = Append(@, Head(fifo[r]))]
          /\ fifo' = [fifo EXCEPT ![r] = Tail(@)]
          /\ mk'   = [mk EXCEPT ![r] = FALSE]
          /\ pc'   = [pc EXCEPT ![r] = "load_w"]
          /\ mkn'  = IF RecvInt = "seq" THEN [mkn EXCEPT ![r] = 0] ELSE mkn
       \/ /\ fifo[r] # << >> /\ RecvInt # "none"  \* interrupted: the payload left
          /\ fifo' = [fifo EXCEPT ![r] = Tail(@)]  \* the socket, owed is still set
          /\ pc'   = [pc EXCEPT ![r] = "owed"]
          /\ mk'   = [mk EXCEPT ![r] = FALSE]
          /\ UNCHANGED <<recv, mkn>>
       \/ /\ fifo[r] # << >> /\ RecvInt = "seq"   \* a payload not the marker's:
          /\ Head(fifo[r]) # mkn[r]                \* refused, the reader raises
          /\ fifo' = [fifo EXCEPT ![r] = Tail(@)]
          /\ pc'   = [pc EXCEPT ![r] = "refused"]
          /\ UNCHANGED <<recv, mk, mkn>>
       \/ /\ pc[r] = "recv"                     \* the receive times out
          /\ RecvMode # "block"
          /\ TimeoutAnytime \/ fifo[r] = << >>
          /\ mk' = [mk EXCEPT ![r] = FALSE]
          /\ pc' = [pc EXCEPT ![r] = IF RecvMode = "owed"
                                     THEN "owed"      \* payload still owed
                                     ELSE "load_w"]   \* broken: gives up
          /\ UNCHANGED <<recv, fifo, mkn>>
    /\ UNCHANGED <<mem, sb, wvars, i, seen, win, ncopied, sent, evars, cpend, rsent, rowed>>

-----------------------------------------------------------------------------
(************************* eventcount (waiting.py) *************************)

\* The code's on_idle runs at the park loop's top before the snapshot, so it
\* is not skipped: the writer evicts a dead reader it waits for, an evicted
\* reader raises (WriterEvict, ReaderQuit come first).
OnIdleDue(p) ==
    IF p = Wr
    THEN Evict /\ Parking /\ \E r \in Readers : ~alive[r] /\ r \notin evicted /\ Load(Wr, RAddr(w, r)) = 0
    ELSE Evd(p)

\* core/rc_wait.c::rc_park_snapshot
ParkSnapshot(p) ==
    /\ pc[p] = "park_snap"
    /\ ~OnIdleDue(p)
    /\ moved' = [moved EXCEPT ![p] = FALSE]          \* s := seq
    /\ pc' = [pc EXCEPT ![p] = "park_announce"]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, waiters, annc, rechk, pvars>>

\* core/rc_wait.c::rc_park_announce
ParkAnnounce(p) ==
    /\ pc[p] = "park_announce"
    /\ BufEmpty(p)          \* atomic RMW: release, own earlier stores first
    /\ IF LateAnnc          \* RELAXED, no F6W: the increment lands later
       THEN annc' = [annc EXCEPT ![p] = TRUE] /\ UNCHANGED waiters
       ELSE waiters' = [waiters EXCEPT ![EC(p)] = @ + 1] /\ UNCHANGED annc
    /\ pc' = [pc EXCEPT ![p] = IF Recheck THEN "park_recheck" ELSE "park_sleep"]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, moved, rechk, pvars>>

\* The re-check is the side's own ring load steps (the code calls its
\* ready(): WriterClaim, or ReaderLoadWritten then ReaderLoadReadFlag, and
\* the reader's F4, which is in ready()), flagged by rechk: the last of them
\* goes on to ParkRetire (rechk kept: ready) or ParkSleep.
\* Its loads may run before the increment is visible (LateAnnc); with F6W
\* the fence after the RMW waits for it.
\* core/rc_wait.c::park
ParkRecheck(p) ==
    /\ pc[p] = "park_recheck"
    /\ MM = "RELAXED" /\ F6W => ~annc[p]
    /\ rechk' = [rechk EXCEPT ![p] = TRUE]
    /\ pc' = [pc EXCEPT ![p] = LoopTop(p)]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, waiters, moved, annc, pvars>>

\* core/rc_wait.c::rc_park_sleep
ParkSleep(p) ==
    /\ pc[p] = "park_sleep"
    /\ moved[p]             \* futex_wait blocks while seq = snapshot
    /\ pc' = [pc EXCEPT ![p] = "park_retire"]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, evars>>

\* Timed: the sleep ends by its cap (futex_wait's timeout, recheck_interval
\* in Waiter.wait, which _park_sleep returns as TIMED_OUT), woken or not.
\* It is a step of the sleeping side, so the side's weak fairness makes it
\* happen: a side parked for good wakes up, re-checks, and (at the park
\* loop's top) runs its on_idle (the writer's dead-reader check, the
\* reader's eviction check).  Without Timed a lost wake-up is a deadlock,
\* which the parking models need to see.
ParkTimeout(p) ==
    /\ Timed /\ pc[p] = "park_sleep"
    /\ pc' = [pc EXCEPT ![p] = "park_retire"]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, evars>>

\* The decrement is ordered after the increment (same word).  After a
\* re-check that found the ring ready (rechk) the code's wait returns
\* (Waiter.wait: the finally that retires, then return) and the side goes on
\* with the re-check's result, as after a successful look: the reader to its
\* copy (ReaderLoadReadFlag's "copy": the loads and F4 are behind it), the
\* writer to the chunk it claimed (WriterClaim's success).  After a sleep,
\* a timeout (or a cancelled wait) it looks again (LoopTop).
\* core/rc_wait.c::rc_park_retire
ParkRetire(p) ==
    /\ pc[p] = "park_retire"
    /\ ~annc[p]
    /\ waiters' = [waiters EXCEPT ![EC(p)] = @ - 1]
    /\ IF rechk[p] /\ p = Wr
       THEN /\ wk' = 1 /\ wr' = 0
            /\ pc' = [pc EXCEPT ![p] = Order[1]]
       ELSE /\ pc' = [pc EXCEPT ![p] = IF rechk[p] THEN "copy" ELSE LoopTop(p)]
            /\ UNCHANGED <<wk, wr>>
    /\ rechk' = [rechk EXCEPT ![p] = FALSE]
    /\ moved' = [moved EXCEPT ![p] = FALSE]      \* normalisation only
    /\ UNCHANGED <<mem, sb, w, msg, rvars, hvars, fifo, annc, pvars>>

\* After the same fence rc_notify loads the armed pollers' count too (the
\* descriptor wait: the writer's, of reader_pollers, pcount["R"]; a
\* reader's, after its ack, of writer_pollers, pcount["W"], which only a
\* writer of WriterPolls moves); the two loads are one step.
\* core/rc_wait.c::rc_notify_load_waiters
NotifyLoadWaiters(p) ==
    /\ pc[p] = "notify_load"
    /\ F6N => BufEmpty(p)   \* full fence: publish/ack store before this load
    /\ LET sig == pcount[NEC(p)] # 0 IN
       pc' = [pc EXCEPT ![p] = IF waiters[NEC(p)] > 0
                               THEN IF sig THEN "notify_wake_poll" ELSE "notify_wake"
                               ELSE IF sig THEN "notify_signal" ELSE AfterNotify(p)]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, evars>>

\* core/rc_wait.c::rc_notify_wake
NotifyWake(p) ==
    /\ pc[p] \in {"notify_wake", "notify_wake_poll"}
    \* seq += 1 on the other side's word; futex wake all.  (moved is
    \* normalised to FALSE for processes that are not between ParkSnapshot
    \* and ParkRetire: it is unused there.)
    /\ moved' = [q \in Procs |->
                   IF EC(q) = NEC(p) /\ ~Polls(q)
                   THEN \/ pc[q] \in {"park_announce", "park_recheck", "park_sleep"}
                        \/ rechk[q] /\ pc[q] # "park_retire"
                   ELSE moved[q]]
    /\ pc' = [pc EXCEPT ![p] = IF pc[p] = "notify_wake_poll" THEN "notify_signal"
                                ELSE AfterNotify(p)]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, waiters, annc, rechk, pvars>>

-----------------------------------------------------------------------------
(********************** descriptor wait (core/rc_poll.c) ********************)
(* A reader of Pollers waits in an event loop, not on the eventcount: after *)
(* a failed look it drains its descriptor (PollDrain), arms its poll flag   *)
(* (PollArm: the armed pollers' count += 1, then flag := 1 by an exchange,  *)
(* the increment undone if it was 1, two RMWs; then F6W), looks again       *)
(* (PollRecheck: the look's own load steps, flagged by rechk) and, not      *)
(* ready, sleeps until its descriptor is readable (PollWake); ready, it     *)
(* disarms (PollDisarm) and copies.  The writer's notify loads the count    *)
(* after F6N (in NotifyLoadWaiters) and, if it is not 0, clears each armed  *)
(* flag by an exchange, decrements the count and signals that reader's     *)
(* descriptor (NotifySignal, one reader per step).  No lost wake-up:        *)
(* NoLostPoll.  RELAXED without F6W: the arm's second RMW may become        *)
(* visible after the re-check's loads (annc, DrainAnnounce), as             *)
(* ParkAnnounce's increment.                                                *)
(*                                                                         *)
(* WriterPolls: the writer waits the same way (rc_writer_poll, through     *)
(* writer_round and poll_round: enqueue_async), with the same steps on its *)
(* own flag (pflag[Wr]) and count (writer_pollers, pcount["W"]): a failed  *)
(* WriterClaim drains, arms, re-checks (WriterClaim's load, rechk), and    *)
(* sleeps or disarms and goes on with the chunk.  Each reader's notify     *)
(* after its ack loads writer_pollers after F6N and, if it is not 0,       *)
(* clears the writer's flag and signals it (NotifySignal(r)).  With        *)
(* ConsumedWait the writer, after its last message, waits so for every     *)
(* reader done with the last published chunk (rc_writer_poll_consumed:    *)
(* its look WriterConsumed).  No lost wake-up: NoLostWriterPoll.           *)

AfterArm == IF RecheckPoll THEN "poll_recheck" ELSE "poll_sleep"

\* The next round drains the descriptor before it arms (events.py's _sync:
\* pipe.drain(), then the core's round), so a signal after the drain leaves
\* it readable.  (The code drains before the round's look; no signal can
\* come between that look and the arm, the flag being 0 there.)
\* (no step point: ringcast/pollers.py's wake pipe, drained by events.py)
PollDrain(p) ==
    /\ pc[p] = "poll_drain"
    /\ desc' = [desc EXCEPT ![p] = FALSE]
    /\ pc' = [pc EXCEPT ![p] = "poll_arm"]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, waiters, moved, annc, rechk, pflag, pcount>>

\* Two RMWs (seq_cst: release, own earlier stores first), each a step, then
\* the fence F6W.  The code (PollCountFirst): the count's increment, then
\* the flag's exchange ("poll_flag"; if the flag was already 1, the
\* increment undone), so that the count is never below the number of armed
\* flags.  ~PollCountFirst (the code of 9ca9df0): the flag's exchange, then,
\* if it was 0, the count's increment ("poll_count"); a notify's clear of the
\* flag between the two decrements the count before this increment, and the
\* count may then read 0 while another poller is armed
\* (poll_flag_first_nr2's counterexample).  Without F6W (LateAnnc) the
\* second RMW becomes visible late (DrainAnnounce).  The count is p's side's
\* (pcount[EC(p)]: reader_pollers, or the writer's writer_pollers).
\* core/rc_poll.c::poll_arm
PollArm(p) ==
    /\ \/ /\ pc[p] = "poll_arm" /\ ~PollCountFirst
          /\ BufEmpty(p)
          /\ pflag' = [pflag EXCEPT ![p] = 1]
          /\ pc' = [pc EXCEPT ![p] = IF pflag[p] = 0 THEN "poll_count" ELSE AfterArm]
          /\ UNCHANGED <<pcount, annc>>
       \/ /\ pc[p] = "poll_count"
          /\ IF LateAnnc          \* RELAXED, no F6W: the increment lands later
             THEN annc' = [annc EXCEPT ![p] = TRUE] /\ UNCHANGED pcount
             ELSE pcount' = [pcount EXCEPT ![EC(p)] = @ + 1] /\ UNCHANGED annc
          /\ pc' = [pc EXCEPT ![p] = AfterArm]
          /\ UNCHANGED pflag
       \/ /\ pc[p] = "poll_arm" /\ PollCountFirst
          /\ BufEmpty(p)
          /\ pcount' = [pcount EXCEPT ![EC(p)] = @ + 1]
          /\ pc' = [pc EXCEPT ![p] = "poll_flag"]
          /\ UNCHANGED <<pflag, annc>>
       \/ /\ pc[p] = "poll_flag"
          /\ IF pflag[p] = 1       \* armed already: undo the increment
             THEN pcount' = [pcount EXCEPT ![EC(p)] = @ - 1] /\ UNCHANGED <<pflag, annc>>
             ELSE IF LateAnnc      \* RELAXED, no F6W: the flag's store lands later
             THEN annc' = [annc EXCEPT ![p] = TRUE] /\ UNCHANGED <<pflag, pcount>>
             ELSE pflag' = [pflag EXCEPT ![p] = 1] /\ UNCHANGED <<pcount, annc>>
          /\ pc' = [pc EXCEPT ![p] = AfterArm]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, waiters, moved, rechk, desc>>

\* The re-check is the side's look (a reader's ReaderLoadWritten,
\* ReaderLoadReadFlag, F4; the writer's WriterClaim, or WriterConsumed),
\* flagged by rechk: its last load goes on to PollDisarm (ready) or to the
\* sleep.  With F6W its loads wait for the arm's second RMW (LateAnnc).
\* core/rc_poll.c::poll_round
PollRecheck(p) ==
    /\ pc[p] = "poll_recheck"
    /\ MM = "RELAXED" /\ F6W => ~annc[p]
    /\ rechk' = [rechk EXCEPT ![p] = TRUE]
    /\ pc' = [pc EXCEPT ![p] = LoopTop(p)]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, waiters, moved, annc, pvars>>

\* The re-check found its side ready: flag := 0 (an exchange) and, if it was
\* still 1, the count -= 1 (ordered after the increment: the same word).  A
\* reader goes on to its copy (the loads and F4 are behind it); the writer
\* to the chunk it found free (enqueue_async's enqueue, whose claim finds it
\* free again: only the writer makes a free chunk busy), or, at the end of
\* the consumed wait, to "done".
\* core/rc_poll.c::poll_disarm
PollDisarm(p) ==
    /\ pc[p] = "poll_disarm" /\ ~annc[p]
    /\ pflag' = [pflag EXCEPT ![p] = 0]
    /\ pcount' = IF pflag[p] = 1 THEN [pcount EXCEPT ![EC(p)] = @ - 1] ELSE pcount
    /\ rechk' = [rechk EXCEPT ![p] = FALSE]
    /\ IF p = Wr /\ msg <= M
       THEN /\ wk' = 1 /\ wr' = 0
            /\ pc' = [pc EXCEPT ![p] = Order[1]]
       ELSE /\ pc' = [pc EXCEPT ![p] = IF p = Wr THEN "done" ELSE "copy"]
            /\ UNCHANGED <<wk, wr>>
    /\ UNCHANGED <<mem, sb, w, msg, rvars, hvars, fifo, waiters, moved, annc, desc>>

\* The event loop sleeps on the descriptor until it is readable, then the
\* side looks (its next round; no timeout: a lost wake-up is a poller
\* asleep for good, NoLostPoll, NoLostWriterPoll).
\* (no step point: the event loop's select / epoll / add_reader)
PollWake(p) ==
    /\ pc[p] = "poll_sleep" /\ desc[p]
    /\ pc' = [pc EXCEPT ![p] = LoopTop(p)]
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, evars>>

\* The consumed wait's look (ConsumedWait, after the last message): the last
\* published chunk is not written, or every (not evicted) reader has acked
\* it; readers ack in order, so every reader is done with every message.
\* Ready: "done"; not: the descriptor wait (PollDrain).  As the re-check
\* (rechk): PollDisarm or the sleep.
\* (no step point: core/rc_poll.c's writer_consumed, rc_writer_unread's scan)
LastChunk == (w + N - 1) % N
ConsumedLook == \/ Load(Wr, WAddr(LastChunk)) = 0
                \/ \A r \in Readers \ evicted : Load(Wr, RAddr(LastChunk, r)) = 1
WriterConsumed ==
    /\ pc[Wr] = "consumed"
    /\ IF rechk[Wr]
       THEN /\ pc' = [pc EXCEPT ![Wr] = IF ConsumedLook THEN "poll_disarm" ELSE "poll_sleep"]
            /\ rechk' = [rechk EXCEPT ![Wr] = ConsumedLook]
       ELSE /\ pc' = [pc EXCEPT ![Wr] = IF ConsumedLook THEN "done" ELSE "poll_drain"]
            /\ UNCHANGED rechk
    /\ UNCHANGED <<mem, sb, wvars, rvars, hvars, fifo, waiters, moved, annc, pvars>>

\* The notifier's signal: the writer's, one reader (wr, 0 at a notify) per
\* step; a reader's, after its ack, of the writer (WriterPolls).  An armed
\* flag is cleared by an exchange (an RMW: the notifier's buffer drains
\* first), the count of its side decremented and the poller's descriptor
\* made readable.
\* core/rc_poll.c::notify_signal
NotifySignal(p) ==
    /\ pc[p] = "notify_signal"
    /\ LET q == IF p = Wr THEN wr ELSE Wr IN
       IF pflag[q] = 1
       THEN /\ BufEmpty(p)
            /\ pflag' = [pflag EXCEPT ![q] = 0]
            /\ pcount' = [pcount EXCEPT ![EC(q)] = @ - 1]
            /\ desc' = [desc EXCEPT ![q] = TRUE]
       ELSE UNCHANGED pvars
    /\ IF p # Wr
       THEN pc' = [pc EXCEPT ![p] = AfterNotify(p)] /\ UNCHANGED wr
       ELSE IF wr + 1 < NR
       THEN wr' = wr + 1 /\ UNCHANGED pc
       ELSE wr' = 0 /\ pc' = [pc EXCEPT ![Wr] = AfterNotify(Wr)]
    /\ UNCHANGED <<mem, sb, w, msg, wk, rvars, hvars, fifo, waiters, moved, annc, rechk>>

Poll(p) == PollDrain(p) \/ PollArm(p) \/ PollRecheck(p) \/ PollDisarm(p) \/ PollWake(p)

-----------------------------------------------------------------------------
(************************* tensor arena (arena.py) *************************)
(* S > 0: every message has one large buffer.  Before the ring's claim the *)
(* writer places it (ArenaWriter.place): a free slot (written 0, or        *)
(* released by every reader), written := 0, the bytes, released_r := 0    *)
(* for each ring-live reader (not evicted: arena.writer_arena passes the   *)
(* ring cursor's live_readers), written := 1 (no fence: AFP is not in the *)
(* code); with no free slot the dead holders' flags are taken back         *)
(* (ArenaReclaimDead) or the buffer                                        *)
(* goes inline (ArenaFallback).  The ring chunk then names the slot.  A    *)
(* reader that copies the chunk holds a view of the slot until the user    *)
(* drops it: ViewRead (the user's reads), ArenaRelease (fence AF5,         *)
(* released_r := 1).                                                       *)

\* The writer's test (ArenaWriter._arena_claim): all flags loaded as one step,
\* as WriterClaim's (the flags it waits for only go 0 -> 1 while it waits).
AFree(s) == Load(Wr, AWAddr(s)) = 0 \/ \A r \in Readers : Load(Wr, ARAddr(s, r)) = 1

\* Readers holding a slot that the liveness check calls dead (eviction's
\* oracle: dead, or a live reader of FalseSuspect), as the writer loads the flags.
DeadHolders == {r \in Readers : (~alive[r] \/ r \in FalseSuspect)
                               /\ \E s \in Slots : Load(Wr, AWAddr(s)) = 1 /\ Load(Wr, ARAddr(s, r)) = 0}

WUnchanged0 == UNCHANGED <<w, msg, wk, i, seen, mk, ncopied, hvars, fifo, evars, views, vbad, cp>>
WUnchanged == WUnchanged0 /\ UNCHANGED apend

\* RELAXED with LoadBuffering, without AF1: the claim's loads may return
\* after its later stores are visible (no fence, and the branch's control
\* dependency not honoured).
LateClaim == MM = "RELAXED" /\ LoadBuffering /\ ~AF1

\* LateClaim: the writer may go on with a slot that is not free yet, its loads
\* still to return (apend); ArenaClaimLoads below lets them return free.
\* arena.py::ArenaWriter._arena_claim
ArenaClaim ==
    /\ pc[Wr] = "a_claim"
    /\ \E s \in Slots :
          /\ aslot' = s
          /\ \/ AFree(s) /\ UNCHANGED apend
             \/ LateClaim /\ ~AFree(s) /\ apend' = s
    /\ pc' = [pc EXCEPT ![Wr] = "a_clear_written"]
    /\ UNCHANGED <<mem, sb, wr, win, mslot>> /\ WUnchanged0

\* Hardware (LateClaim only; no code counterpart): the late claim's loads
\* return, and they see the slot free: every reader's release is in memory.
\* They return before the writer's first released_r := 0 (ArenaClearReleased
\* waits for them), a subset of the machine's behaviours that is enough: the
\* slot's clear-written and bytes may be visible before them.  A late claim
\* whose loads would see the slot busy never happened (a behaviour stuck here
\* is not one of the machine's; the invariants hold only outside it).
ArenaClaimLoads ==
    /\ apend # 0
    /\ \A r \in Readers : arel[apend][r] = 1
    /\ apend' = 0
    /\ UNCHANGED <<mem, sb, pc, wr, win, aslot, mslot>> /\ WUnchanged0

\* arena.py::ArenaWriter._arena_reclaim_dead
ArenaReclaimDead ==
    /\ pc[Wr] = "a_claim" /\ Evict
    /\ \A s \in Slots : ~AFree(s)
    /\ DeadHolders # {}
    /\ IF MM = "SC"
       THEN /\ arel' = [s \in Slots |-> [r \in Readers |-> IF r \in DeadHolders THEN 1 ELSE arel[s][r]]]
            /\ UNCHANGED sb
       ELSE /\ sb' = [sb EXCEPT ![Wr] = @ \o SelectSeq(
                         [k \in 1 .. NR * S |-> <<ARAddr(((k - 1) % S) + 1, (k - 1) \div S), 1>>],
                         LAMBDA e : e[1][3] \in DeadHolders)]
            /\ UNCHANGED arel
    /\ UNCHANGED <<written, rflag, data, aw, adata, evw, pc, wr, win, aslot, mslot>> /\ WUnchanged

\* arena.py::ArenaWriter._arena_fallback
ArenaFallback ==
    /\ pc[Wr] = "a_claim"
    /\ \A s \in Slots : ~AFree(s)
    /\ ~(Evict /\ DeadHolders # {})
    /\ pc' = [pc EXCEPT ![Wr] = "claim"]
    /\ UNCHANGED <<mem, sb, wr, win, aslot, mslot>> /\ WUnchanged

\* arena.py::ArenaWriter._arena_clear_written
ArenaClearWritten ==
    /\ pc[Wr] = "a_clear_written"
    /\ Store(Wr, AWAddr(aslot), 0)
    /\ pc' = [pc EXCEPT ![Wr] = "a_write"]
    /\ UNCHANGED <<wr, aslot, mslot>> /\ WUnchanged

\* arena.py::ArenaWriter._arena_write
ArenaWrite ==
    /\ pc[Wr] = "a_write"
    /\ Store(Wr, ADAddr(aslot), msg)
    /\ pc' = [pc EXCEPT ![Wr] = "a_clear_released"]
    /\ UNCHANGED <<wr, aslot, mslot>> /\ WUnchanged

\* One reader per step; an evicted reader's flag is left alone (the code
\* clears only ring-live readers', where Arena.tla clears every reader's).
\* arena.py::ArenaWriter._arena_clear_released
ArenaClearReleased ==
    /\ pc[Wr] = "a_clear_released" /\ apend = 0
    /\ IF wr \in evicted
       THEN UNCHANGED <<mem, win, sb>>
       ELSE Store(Wr, ARAddr(aslot, wr), 0)
    /\ IF wr + 1 < NR
       THEN wr' = wr + 1 /\ UNCHANGED pc
       ELSE wr' = 0 /\ pc' = [pc EXCEPT ![Wr] = "a_publish"]
    /\ UNCHANGED <<aslot, mslot>> /\ WUnchanged

\* AFP: the slot's bytes and cleared flags before its written := 1.  The
\* ring chunk naming the slot is written after this step (mslot), and the
\* ring's F7 (F3 on the first lap) orders them before it: the code has no
\* AFP (the code models are ok without it; no model can fail without it: no
\* reader loads a slot's written byte, docs/spec.md).
\* arena.py::ArenaWriter._arena_publish
ArenaPublish ==
    /\ pc[Wr] = "a_publish"
    /\ AFP => BufEmpty(Wr)
    /\ Store(Wr, AWAddr(aslot), 1)
    /\ mslot' = [mslot EXCEPT ![msg] = aslot]
    /\ aslot' = 0
    /\ pc' = [pc EXCEPT ![Wr] = "claim"]
    /\ UNCHANGED wr /\ WUnchanged

ArenaWriterStep == ArenaClaim \/ ArenaReclaimDead \/ ArenaFallback \/ ArenaClearWritten
                   \/ ArenaWrite \/ ArenaClearReleased \/ ArenaPublish \/ ArenaClaimLoads

RUnchanged == UNCHANGED <<wvars, i, seen, mk, ncopied, hvars, fifo, evars, aslot, mslot, cp, apend>>

\* The user's code reads a view's bytes (numpy / torch over the slot; no code
\* counterpart).  The read returns the memory (or, for a late view, whatever
\* the slot holds by then).
ViewRead(r) ==
    /\ \E v \in views[r] :
          /\ v[3] \in {"held", "late"}
          /\ vbad' = (vbad \/ Load(r, ADAddr(v[1])) # v[2])
          /\ views' = [views EXCEPT ![r] = (@ \ {v}) \cup
                          (IF v[3] = "held" THEN {<<v[1], v[2], "read">>} ELSE {})]
    /\ UNCHANGED <<mem, sb, pc, win>> /\ RUnchanged

\* The view's last user is gone: the finalizer's fence AF5, released_r := 1.
\* RELAXED without AF5: the store may become visible before the view's
\* reads are performed (they were issued before it): "late".
\* arena.py::ArenaReader._arena_release
ArenaRelease(r) ==
    /\ \E v \in views[r] :
          \/ /\ v[3] = "read"
             /\ AF5 => BufEmpty(r)
             /\ Store(r, ARAddr(v[1], r), 1)
             /\ views' = [views EXCEPT ![r] = @ \ {v}]
          \/ /\ v[3] = "held" /\ MM = "RELAXED" /\ ~AF5
             /\ Store(r, ARAddr(v[1], r), 1)
             /\ views' = [views EXCEPT ![r] = (@ \ {v}) \cup {<<v[1], v[2], "late">>}]
    /\ UNCHANGED <<pc, vbad>> /\ RUnchanged

\* (arena.py ArenaReader.close) Reader r closes its queue between messages:
\* released_r := 1 in every slot it holds no live view of, no fence; it
\* reads no more.  (Its ring flags stay: the writer waits for it until its
\* process is gone; models with CloseSet check safety only.)
ReaderClose(r) ==
    /\ r \in CloseSet /\ pc[r] = "load_w" /\ ~rechk[r]
    /\ LET held(s) == \E v \in views[r] : v[1] = s /\ v[3] # "late"
           free == SelectSeq([k \in 1 .. S |-> k], LAMBDA s : ~held(s))
       IN IF MM = "SC"
          THEN /\ arel' = [s \in Slots |-> IF held(s) THEN arel[s] ELSE [arel[s] EXCEPT ![r] = 1]]
               /\ UNCHANGED <<written, rflag, data, aw, adata, evw, win, sb>>
          ELSE /\ sb' = [sb EXCEPT ![r] = @ \o [k \in 1 .. Len(free) |-> <<ARAddr(free[k], r), 1>>]]
               /\ UNCHANGED <<mem, win>>
    /\ pc' = [pc EXCEPT ![r] = "closed"]
    /\ UNCHANGED <<views, vbad>> /\ RUnchanged

-----------------------------------------------------------------------------
(********************************* system **********************************)

AllDelivered == \A r \in Readers : alive[r] /\ r \notin evicted /\ r \notin CloseSet
                                     => Len(recv[r]) = M - Cardinality(dropped)

\* End of the bounded run (no code counterpart): lets a finished model
\* stutter so that TLC's deadlock check only reports real hangs.
Finished == pc[Wr] = "done" /\ AllDelivered /\ UNCHANGED vars

Park(p) == ParkSnapshot(p) \/ ParkAnnounce(p) \/ ParkRecheck(p)
           \/ ParkSleep(p) \/ ParkTimeout(p) \/ ParkRetire(p)
           \/ NotifyLoadWaiters(p) \/ NotifyWake(p)

WriterStep == \/ /\ \/ WriterClaim \/ WriterClearWritten \/ WriterWritePayload
                    \/ WriterClearReadFlag \/ WriterSendOverflow \/ WriterPublish
                    \/ Park(Wr) \/ NotifySignal(Wr) \/ Poll(Wr) \/ WriterConsumed
                 /\ UNCHANGED <<xvars, avars, nvars>>
              \/ /\ \/ WriterClaimLate \/ WriterClaimLoads
                    \/ WriterRemoteSend \/ WriterRemoteAbort \/ WriterRemoteOwed
                 /\ UNCHANGED <<xvars, avars>>
              \/ WriterEvict /\ UNCHANGED <<avars, nvars>>
              \/ WriterAbort /\ UNCHANGED avars
              \/ ArenaWriterStep /\ UNCHANGED <<xvars, nvars>>

\* A dead reader takes no step.
ReaderStep(r) == /\ alive[r]
                 /\ \/ /\ \/ ReaderLoadWritten(r) \/ ReaderLoadReadFlag(r)
                          \/ ReaderAck(r) \/ Park(r) \/ Poll(r) \/ NotifySignal(r)
                       /\ UNCHANGED <<avars, nvars>>
                    \/ ReaderCopy(r) \/ ReaderCheckEvicted(r) \/ ReaderQuit(r)
                 /\ UNCHANGED xvars

ReaderRecv(r) == alive[r] /\ ReaderRecvOverflow(r) /\ UNCHANGED <<xvars, avars>>

\* What the user's code does with a reader's views (no fairness: a view may
\* live for ever), and the reader closing its queue.
ReaderArena(r) == /\ alive[r]
                  /\ ViewRead(r) \/ ArenaRelease(r) \/ ReaderClose(r)
                  /\ UNCHANGED <<xvars, nvars>>

Init ==
    /\ written = [c \in Chunks |-> InitWritten]
    /\ rflag   = [c \in Chunks |-> [r \in Readers |-> InitRead]]
    /\ data    = [c \in Chunks |-> 0]
    /\ sb      = [p \in Procs |-> << >>]
    /\ pc      = [p \in Procs |-> IF p = Wr THEN (IF M = 0 THEN "done" ELSE WTop)
                                 ELSE "load_w"]
    /\ w = 0 /\ msg = 1 /\ wk = 0 /\ wr = 0
    /\ i       = [r \in Readers |-> 0]
    /\ seen    = [r \in Readers |-> 0]
    /\ mk      = [r \in Readers |-> FALSE]
    /\ win     = [r \in Readers |-> {}]
    /\ ncopied = [r \in Readers |-> 0]
    /\ recv    = [r \in Readers |-> << >>]
    /\ sent    = << >>
    /\ fifo    = [r \in Readers |-> << >>]
    /\ waiters = [e \in ECs |-> 0]
    /\ moved   = [p \in Procs |-> FALSE]
    /\ annc    = [p \in Procs |-> FALSE]
    /\ rechk   = [p \in Procs |-> FALSE]
    /\ alive   = [r \in Readers |-> TRUE]
    /\ evicted = {}
    /\ dropped = {}
    /\ aw      = [s \in Slots |-> 0]
    /\ arel    = [s \in Slots |-> [r \in Readers |-> 0]]
    /\ adata   = [s \in Slots |-> 0]
    /\ aslot   = 0
    /\ mslot   = [m \in Msgs |-> 0]
    /\ views   = [r \in Readers |-> {}]
    /\ vbad    = FALSE
    /\ cp      = [r \in Readers |-> 0]
    /\ apend   = 0
    /\ evw     = [r \in Readers |-> 0]
    /\ cpend   = FALSE
    /\ mkn     = [r \in Readers |-> 0]
    /\ rsent   = << >>
    /\ rowed   = 0
    /\ pflag   = [p \in Procs |-> 0]
    /\ pcount  = [e \in ECs |-> 0]
    /\ desc    = [p \in Procs |-> FALSE]

Next ==
    \/ WriterStep
    \/ \E r \in Readers : ReaderStep(r) \/ ReaderRecv(r) \/ ReaderCrash(r)
    \/ \E r \in Readers : ReaderArena(r)
    \/ \E p \in Procs : Drain(p) /\ UNCHANGED <<xvars, avars, nvars>>
    \/ Finished

Fairness ==
    /\ WF_vars(WriterStep)
    /\ \A r \in Readers : WF_vars(ReaderStep(r)) /\ WF_vars(ReaderRecv(r))
    /\ \A p \in Procs : WF_vars(Drain(p) /\ UNCHANGED <<xvars, avars, nvars>>)

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(******************************* properties ********************************)

PcVals == {"claim", "done", "payload_end", "load_w", "load_r", "copy",
           "copy_late", "ack", "recv", "owed", "park_snap", "park_announce",
           "park_recheck", "park_sleep", "park_retire", "notify_load",
           "notify_wake", "a_claim", "a_clear_written", "a_write",
           "a_clear_released", "a_publish", "check", "gone", "closed",
           "copy_chk", "refused", "poll_drain", "poll_arm", "poll_count", "poll_flag",
           "poll_recheck", "poll_disarm", "poll_sleep", "notify_wake_poll",
           "notify_signal", "consumed"} \cup Steps
Val  == -M .. M

TypeOK ==
    /\ written \in [Chunks -> {0, 1}]
    /\ rflag \in [Chunks -> [Readers -> {0, 1}]]
    /\ data \in [Chunks -> Val]
    /\ \A p \in Procs : \A k \in 1 .. Len(sb[p]) :
           sb[p][k][1][1] \in {"W", "R", "D", "AW", "AR", "AD", "E"} /\ sb[p][k][2] \in Val
    /\ pc \in [Procs -> PcVals]
    /\ w \in Chunks /\ msg \in 1 .. M + 1 /\ wk \in 0 .. Len(Order)
    /\ wr \in Readers
    /\ i \in [Readers -> Chunks] /\ seen \in [Readers -> {0, 1}]
    /\ mk \in [Readers -> BOOLEAN] /\ win \in [Readers -> SUBSET Val]
    /\ ncopied \in [Readers -> Nat]
    /\ \A r \in Readers : recv[r] \in Seq(Val)
    /\ sent \in Seq(Msgs)
    /\ \A r \in Readers : fifo[r] \in Seq(Msgs)
    /\ waiters \in [ECs -> 0 .. NR]
    /\ moved \in [Procs -> BOOLEAN] /\ annc \in [Procs -> BOOLEAN]
    /\ rechk \in [Procs -> BOOLEAN]
    /\ alive \in [Readers -> BOOLEAN] /\ evicted \subseteq Readers
    /\ dropped \subseteq Msgs
    /\ aw \in [Slots -> {0, 1}] /\ arel \in [Slots -> [Readers -> {0, 1}]]
    /\ adata \in [Slots -> 0 .. M] /\ aslot \in 0 .. S /\ mslot \in [Msgs -> 0 .. S]
    /\ views \in [Readers -> SUBSET (Slots \X Msgs \X ViewSt)]
    /\ vbad \in BOOLEAN /\ cp \in [Readers -> Val] /\ apend \in 0 .. S
    /\ evw \in [Readers -> {0, 1}] /\ cpend \in BOOLEAN /\ mkn \in [Readers -> 0 .. M]
    /\ rsent \in Seq(Msgs) /\ rowed \in 0 .. M
    /\ pflag \in [Procs -> {0, 1}] /\ pcount \in [ECs -> -NR .. NR]
    /\ desc \in [Procs -> BOOLEAN]

\* Index of the payload step in Order (0 if absent).
PayIdx == IF \E k \in 1 .. Len(Order) : Order[k] = "payload"
          THEN CHOOSE k \in 1 .. Len(Order) : Order[k] = "payload" ELSE 0

\* The writer owns chunk c for writing: it has claimed c and its payload
\* is not yet completely in memory.
WriterWriting(c) ==
    \/ w = c /\ 1 <= wk /\ wk <= PayIdx
    \/ \E k \in 1 .. Len(sb[Wr]) : sb[Wr][k][1] = DAddr(c)

\* No data race: no (live, not evicted) reader copies a chunk the writer is
\* writing.  (An evicted reader's copy may race: what it delivers is InOrder's.)
NoDataRace ==
    ~cpend => \A r \in Readers : alive[r] /\ r \notin evicted /\ pc[r] \in {"copy", "copy_late", "copy_chk"}
                                 => ~WriterWriting(i[r])

\* The place of message m among the messages the writer publishes (those an
\* exception dropped take no chunk).
Pos(m) == m - Cardinality({d \in dropped : d < m})

\* No chunk is overwritten before every reader copied its previous message.
NoOverwrite ==
    ~cpend => \A c \in Chunks, r \in Readers \ evicted :
        data[c] # 0 => ncopied[r] >= Pos(Abs(data[c])) - N

IsPrefix(s, t) == Len(s) <= Len(t) /\ SubSeq(t, 1, Len(s)) = s

\* Every reader receives exactly the writer's sequence, in order: no loss,
\* no duplicate, no torn or stale payload, overflow payloads paired with
\* their own marker.
InOrder == ~cpend => \A r \in Readers : IsPrefix(recv[r], sent)

\* Remote readers: what the writer sent on the TCP socket (what every remote
\* reader receives, in order) is a prefix of the writer's sequence: no
\* message lost, none twice, none out of order.
RemoteInOrder == IsPrefix(rsent, sent)

\* Liveness: every message is eventually delivered to every reader (that
\* cannot die), and the writer gets every message out (every message an
\* exception did not drop: published + dropped <= M, so this length is
\* reached only once the writer has decided every message).
Delivered == \A r \in Readers \ (CrashSet \cup FalseSuspect \cup CloseSet) :
                 <>(Len(recv[r]) = M - Cardinality(dropped))
WriterDone == <>(pc[Wr] = "done")

\* No lost wake-up of a poller: a poller asleep on a descriptor that is not
\* readable has no message ready for it in memory, unless the writer is
\* between its publish and the end of its notify (which will signal it).
\* A poller asleep with its message published and every notify done would
\* wait for the next message's notify (for ever after the last one): the
\* descriptor wait's lost wake-up, which the deadlock check also sees.
Notifying == pc[Wr] \in {"notify_load", "notify_wake", "notify_wake_poll", "notify_signal"}
NoLostPoll ==
    \A r \in Pollers :
        pc[r] = "poll_sleep" /\ ~desc[r] /\ ~Notifying
            => ~(written[i[r]] = 1 /\ rflag[i[r]][r] = 0)

\* The same for the writer (WriterPolls): asleep on a descriptor that is not
\* readable, the chunk it waits for is not free in memory (for the consumed
\* wait: the last published chunk not acked by every reader), unless a
\* reader is between its ack and the end of its notify (which will signal
\* it; "copy_late": RELAXED without F5, the ack visible before the copy).
RNotifying == \E r \in Readers :
                  pc[r] \in {"copy_late", "notify_load", "notify_wake", "notify_wake_poll", "notify_signal"}
WReadyMem == LET c == IF msg > M THEN LastChunk ELSE w
             IN  written[c] = 0 \/ \A r \in Readers \ evicted : rflag[c][r] = 1
NoLostWriterPoll ==
    WriterPolls /\ pc[Wr] = "poll_sleep" /\ ~desc[Wr] /\ ~RNotifying => ~WReadyMem

\* The consumed wait returns only once every reader has copied every
\* message (ConsumedWait: the writer is "done" after it).
Drained ==
    ConsumedWait /\ pc[Wr] = "done"
        => \A r \in Readers \ evicted : alive[r] => ncopied[r] = M - Cardinality(dropped)

\* The arena: the writer never claims a slot a live view is on, and a view's
\* slot holds the view's message (for a view not yet read) with no store of
\* the writer to it pending.  (Not while a late claim's loads are out: that
\* state is the machine's only if they return free, ArenaClaimLoads.)
ViewsIntact ==
    apend = 0 => \A r \in Readers : alive[r] => \A v \in views[r] :
        /\ aslot # v[1]
        /\ v[3] # "read" => /\ adata[v[1]] = v[2]
                            /\ \A k \in 1 .. Len(sb[Wr]) : sb[Wr][k][1] # ADAddr(v[1])

\* The abstract property: a view never sees bytes of another message (what
\* the user's code reads through a view is the message it was built for).
ViewOwnBytes == apend = 0 => ~vbad

=============================================================================
