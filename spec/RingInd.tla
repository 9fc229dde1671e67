------------------------------ MODULE RingInd ------------------------------
(***************************************************************************)
(* An inductive invariant of the ring protocol (issue 52): IndInv.        *)
(*                                                                         *)
(* Scope: Ring under sequential consistency (MM = "SC"), no parking, no    *)
(* arena, no remote readers, EvictCheck and FalseSuspect off: the writer   *)
(* and reader steps with their order (Order), the claim rule, torn         *)
(* payloads, the overflow channel (Big, RecvMode, TimeoutAnytime), the     *)
(* abort rule (Abort), dead and evicted readers (CrashSet, Evict,          *)
(* EvictSkipsFlag) and the message numbers (dropped, Pos).  Weak memory    *)
(* stays with the bounded relaxed / TSO models of MCRing and GenMC.        *)
(*                                                                         *)
(* IndInv is written for the writer orders whose steps come as             *)
(* clear_written < payload < clear_flags < publish = last, with "send"     *)
(* (if any) after payload and before clear_flags (the code's order,        *)
(* OrderSendBeforeClear, and OrderCorrect).  It implies the safety         *)
(* properties NoDataRace, NoOverwrite and InOrder of Ring (IndSafety):     *)
(* InOrder is in-order delivery without loss or duplicate, with every      *)
(* overflow marker paired with its own payload.  Each bad variant of the   *)
(* manifest at the SC level breaks a conjunct in one step, or at Init      *)
(* (the must-fail models ind_publish_before_clear, ind_abort_unsent,       *)
(* ind_recv_interrupt; src/ringcast_lab/induction's cti for all 13).       *)
(*                                                                         *)
(* Lamport's method: the models ind_code_n2 and ind_code_nr2 start from    *)
(* every state IndInit enumerates (the states of IndInv, histories up to   *)
(* M, but for evicted readers' FIFOs no run gives them) and check IndInv   *)
(* after every step (IndSpec).  src/ringcast_lab/induction proves the same *)
(* obligations with z3 for every N, NR, M, Big and CrashSet.               *)
(***************************************************************************)
EXTENDS MCRing

Live == Readers \ evicted                \* readers the writer still waits for

\* The current message's payload is complete (it is the last of sent).
PDone == Done("payload")

\* Messages the writer has finished (published); the current one, msg, is
\* the next place: Q + 1.
Q == Len(sent) - (IF PDone THEN 1 ELSE 0)

\* How many chunks chunk c lies behind the writer's chunk w (0 .. N - 1).
Back(c) == IF c <= w THEN w - c ELSE w - c + N

\* The place (1-based, among published messages) of the message chunk c
\* holds from its last publish; < 1: the chunk was never published.  The
\* writer's own chunk holds the message of one lap before.
HP(c) == IF c = w THEN Q + 1 - N ELSE Q + 1 - Back(c)
Old(c) == IF HP(c) >= 1 THEN sent[HP(c)] ELSE 0

\* The writer has cleared reader r's flag of chunk w for the current message.
Cleared(r) == Done("clear_flags") \/ (pc[Wr] = "clear_flags" /\ r < wr)

\* The place whose copy reader r's flag in chunk c acknowledges.
FP(c, r) == IF c = w /\ Cleared(r) THEN Q + 1 ELSE HP(c)

\* Chunks reader r has acknowledged (copied and acked), and how many places
\* the writer is ahead of it.
Acked(r) == ncopied[r] - (IF pc[r] = "ack" THEN 1 ELSE 0)
Dist(r) == Q - Acked(r)

\* The writer is past its claim of chunk w (or the chunk is free anyway).
Passed == wk >= 1 \/ written[w] = 0

\* Reader r has copied an overflow marker whose payload it has not received.
Owes(r) == pc[r] \in {"recv", "owed"} \/ (pc[r] = "ack" /\ mk[r])

\* Places whose overflow payload (if any) is on the socket.
SendTop == Q + (IF Done("send") THEN 1 ELSE 0)

RPcs == {"load_w", "load_r", "copy", "ack", "recv", "owed"}
WPcs == {"claim", "done", "payload_end"} \cup Steps

\* The variables this scope never changes stay at their Init values.
Frozen ==
    /\ sb = [p \in Procs |-> << >>] /\ waiters = [e \in ECs |-> 0]
    /\ moved = [p \in Procs |-> FALSE] /\ annc = [p \in Procs |-> FALSE]
    /\ rechk = [p \in Procs |-> FALSE] /\ win = [r \in Readers |-> {}]
    /\ aw = [s \in Slots |-> 0] /\ arel = [s \in Slots |-> [r \in Readers |-> 0]]
    /\ adata = [s \in Slots |-> 0] /\ aslot = 0 /\ mslot = [m \in Msgs |-> 0]
    /\ views = [r \in Readers |-> {}] /\ vbad = FALSE /\ cp = [r \in Readers |-> 0]
    /\ apend = 0 /\ evw = [r \in Readers |-> 0] /\ cpend = FALSE
    /\ mkn = [r \in Readers |-> 0] /\ rsent = << >> /\ rowed = 0
    /\ pflag = [q \in Procs |-> 0] /\ pcount = [e \in ECs |-> 0] /\ desc = [q \in Procs |-> FALSE]

\* types and the parts of the state this scope does not move
InvTypes ==
    /\ TypeOK /\ Frozen
    /\ \A p \in Procs : pc[p] \in (IF p = Wr THEN WPcs ELSE RPcs)

\* the writer's place in its message: pc is Order's step wk (wk = 0:
\* at the claim, or done after the last message); wr only moves in
\* the flag clears
InvWriter ==
    /\ (pc[Wr] = "done") <=> (msg = M + 1)
    /\ (wk = 0) <=> (pc[Wr] \in {"claim", "done"})
    /\ wk >= 1 => \/ pc[Wr] = Order[wk]
                  \/ pc[Wr] = "payload_end" /\ Order[wk] = "payload" /\ TwoStepPayload
    /\ pc[Wr] # "clear_flags" => wr = 0

\* message numbers: sent is the messages not dropped, increasing; a
\* message's place among them is Pos (the spec's NoOverwrite counts
\* places), the current message's place is Q + 1, and a dropped
\* message never reached sent
InvSent ==
    /\ dropped \subseteq 1 .. msg - 1
    /\ \A p \in 1 .. Len(sent) :
          /\ sent[p] \notin dropped /\ Pos(sent[p]) = p
          /\ sent[p] < msg \/ (p = Len(sent) /\ PDone /\ sent[p] = msg)
    /\ \A p, p2 \in 1 .. Len(sent) : p < p2 => sent[p] < sent[p2]
    /\ PDone => Len(sent) >= 1 /\ sent[Len(sent)] = msg
    /\ Pos(msg) = Q + 1 /\ Q >= 0

\* the order (rule 1): a reader's flag is cleared only after the
\* payload is complete; the overflow payload goes out after it is
\* written (so a reader never copies a marker whose payload is not
\* on the socket: send before clear_flags)
InvOrder ==
    /\ \A r \in Readers : Cleared(r) => PDone
    /\ Done("send") => PDone

\* the written byte: of every other chunk, 1 exactly when it has been
\* published; of the writer's chunk, 1 only before the writer cleared
\* it for the current message (rule 2: publish is the last step)
InvWritten ==
    /\ \A c \in Chunks \ {w} : written[c] = (IF HP(c) >= 1 THEN 1 ELSE 0)
    /\ written[w] = 1 => /\ HP(w) >= 1 /\ ~Done("clear_written")
                         /\ pc[Wr] # "payload_end" /\ ~PDone

\* the payloads: every other chunk holds the message of its last
\* publish; the writer's chunk holds that, or the current message
\* (torn while half written), or what an aborted message left there
\* (a dropped message at the current place, behind written = 0)
InvData ==
    /\ \A c \in Chunks \ {w} : data[c] = Old(c)
    /\ PDone => data[w] = msg
    /\ pc[Wr] = "payload_end" => data[w] = -msg
    /\ ~PDone /\ pc[Wr] # "payload_end" /\ data[w] # Old(w) =>
          /\ written[w] = 0 /\ Abs(data[w]) \in dropped /\ Pos(Abs(data[w])) = Q + 1

\* the read flags (the real gate): reader r's flag in chunk c is 1
\* exactly when r has acknowledged the place the flag stands for; an
\* evicted reader's flags are all 1 (never cleared again)
InvFlags ==
    /\ \A c \in Chunks, r \in Live :
          FP(c, r) >= 1 => (rflag[c][r] = 1 <=> Acked(r) >= FP(c, r))
    /\ \A c \in Chunks, r \in evicted : rflag[c][r] = 1 /\ EvictSkipsFlag

\* the claim rule: past its claim the writer may overwrite chunk w,
\* so every reader it waits for has acknowledged the chunk's message
InvClaim ==
    /\ Passed /\ HP(w) >= 1 => \A r \in Live : Acked(r) >= HP(w)

\* each reader's place: at most N behind the writer, ahead of it only
\* by the current message once its flag is cleared; i is its place's
\* chunk (i = (w - Dist) mod N, written without mod)
InvPlace ==
    /\ \A r \in Live :
          /\ -1 <= Dist(r) /\ Dist(r) <= N
          /\ Dist(r) = -1 => Cleared(r)
          /\ w - Dist(r) - i[r] \in {-N, 0, N}

\* the reader's steps: a reader that loaded written = 1 looks at a
\* chunk that holds a message (or whose flag is cleared); copying and
\* acking, its flag stands for the place it copies (so it is 0, and
\* the writer cannot claim the chunk under it)
InvSteps ==
    /\ \A r \in Live :
          /\ pc[r] = "load_r" /\ seen[r] = 1 => FP(i[r], r) >= 1
          /\ pc[r] \in {"copy", "ack"} => FP(i[r], r) = Acked(r) + 1

\* deliveries: every copied chunk is delivered, but a marker's payload
\* (owed until it arrives); mk marks a marker copied, not yet acked
\* or received; the delivered sequence is a prefix of sent
InvDeliver ==
    /\ \A r \in Live :
          /\ mk[r] => pc[r] \in {"ack", "recv"}
          /\ pc[r] = "recv" => mk[r]
          /\ ncopied[r] <= Len(sent)
          /\ Len(recv[r]) = ncopied[r] - (IF Owes(r) THEN 1 ELSE 0)
          /\ pc[r] = "ack" => ncopied[r] >= 1 /\ (mk[r] <=> sent[ncopied[r]] \in Big)
          /\ Owes(r) => ncopied[r] >= 1 /\ sent[ncopied[r]] \in Big
    /\ \A r \in Readers :
          /\ Len(recv[r]) <= Len(sent)
          /\ \A k \in 1 .. Len(recv[r]) : recv[r][k] = sent[k]
    /\ \A r \in evicted : Len(recv[r]) <= Q

\* the overflow channel (marker pairing): a reader's FIFO holds the
\* overflowing messages of the places after its last delivery, up to
\* the last one sent, in order, each exactly once
InvFifo ==
    /\ \A r \in Live :
          /\ \A k \in 1 .. Len(fifo[r]) :
                \E p \in Len(recv[r]) + 1 .. SendTop : fifo[r][k] = sent[p] /\ sent[p] \in Big
          /\ \A k, k2 \in 1 .. Len(fifo[r]) : k < k2 => fifo[r][k] < fifo[r][k2]
          /\ \A p \in Len(recv[r]) + 1 .. SendTop :
                sent[p] \in Big => \E k \in 1 .. Len(fifo[r]) : fifo[r][k] = sent[p]

\* dead readers: only readers of CrashSet die, only dead ones are
\* evicted (FalseSuspect = {})
InvDead ==
    /\ \A r \in Readers : ~alive[r] => r \in CrashSet
    /\ evicted \subseteq {r \in Readers : ~alive[r]}

IndInv ==
    /\ InvTypes
    /\ InvWriter
    /\ InvSent
    /\ InvOrder
    /\ InvWritten
    /\ InvData
    /\ InvFlags
    /\ InvClaim
    /\ InvPlace
    /\ InvSteps
    /\ InvDeliver
    /\ InvFifo
    /\ InvDead

\* The safety properties IndInv implies (checked as IndInv => IndSafety).
IndSafety == TypeOK /\ NoDataRace /\ NoOverwrite /\ InOrder

\* Lamport's method's initial states: every state of IndInv whose
\* histories are at most M long (every state of IndInv is: sent holds
\* distinct messages of 1 .. M), enumerated so that TLC can prune: each
\* generator below is a superset of what IndInv allows for its variable
\* (recv[r] a prefix of sent, fifo[r] increasing over Big), and IndInv
\* itself is the last conjunct.
SeqsUpTo(S1, n) == UNION {[1 .. k -> S1] : k \in 0 .. n}
Sorted(S1) == CHOOSE f \in [1 .. Cardinality(S1) -> S1] :
                  \A j, k \in 1 .. Cardinality(S1) : j < k => f[j] < f[k]
IndInit ==
    /\ Frozen
    /\ msg \in 1 .. M + 1 /\ dropped \in SUBSET (1 .. msg - 1)
    /\ w \in Chunks /\ wk \in 0 .. Len(Order) /\ wr \in Readers
    /\ \E wpc \in WPcs, rpc \in [Readers -> RPcs] :
          pc = [p \in Procs |-> IF p = Wr THEN wpc ELSE rpc[p]]
    /\ InvWriter
    /\ sent \in SeqsUpTo((1 .. msg) \ dropped, M)
    /\ InvSent /\ InvOrder
    /\ written \in [Chunks -> {0, 1}]
    /\ InvWritten
    /\ data \in [Chunks -> Val]
    /\ InvData
    /\ alive \in [Readers -> BOOLEAN] /\ evicted \in SUBSET Readers
    /\ InvDead
    /\ ncopied \in [Readers -> 0 .. Len(sent)] /\ i \in [Readers -> Chunks]
    /\ InvClaim /\ InvPlace
    /\ rflag \in [Chunks -> [Readers -> {0, 1}]]
    /\ InvFlags
    /\ seen \in [Readers -> {0, 1}] /\ mk \in [Readers -> BOOLEAN]
    /\ InvSteps
    /\ recv \in {[r \in Readers |-> SubSeq(sent, 1, l[r])] : l \in [Readers -> 0 .. Len(sent)]}
    /\ InvDeliver
    /\ fifo \in [Readers -> {Sorted(S1) : S1 \in SUBSET Big}]
    /\ IndInv

\* Lamport's method: from every IndInv state, every step keeps IndInv.
IndSpec == IndInit /\ [][Next]_vars
=============================================================================
