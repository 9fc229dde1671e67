------------------------------- MODULE MCRing -------------------------------
(***************************************************************************)
(* Bounded models of Ring for TLC.  Each spec/*.cfg selects one scenario   *)
(* by assigning the CONSTANTS of Ring; writer step orders are sequences,   *)
(* which a .cfg cannot spell, so they are defined here and chosen with     *)
(* "Order <- OrderCorrect" etc.  spec/models.json lists every scenario     *)
(* with its expected result.                                               *)
(***************************************************************************)
EXTENDS Ring

\* The order the code implements (WriterClaim always comes first).
OrderCorrect == <<"clear_written", "payload", "clear_flags", "publish">>

\* Broken-looking variants of the ring protocol.
\* written set before the read flags are cleared ("reversed"):
OrderPublishBeforeClear == <<"clear_written", "payload", "publish", "clear_flags">>
\* read flags cleared first, before the payload:
OrderClearFlagsFirst    == <<"clear_written", "clear_flags", "payload", "publish">>
\* written set before the payload (flags still cleared after the payload):
OrderPublishBeforePayload == <<"clear_written", "publish", "payload", "clear_flags">>
\* written set and flags cleared before the payload:
OrderPayloadLast        == <<"clear_written", "clear_flags", "publish", "payload">>
\* the written byte is never cleared by the writer:
OrderNoClearWritten     == <<"payload", "clear_flags", "publish">>

\* Overflow: the payload goes out over the socket before / after publish.
OrderSendBeforePublish == <<"clear_written", "payload", "clear_flags", "send", "publish">>
OrderSendAfterPublish  == <<"clear_written", "payload", "clear_flags", "publish", "send">>
\* ... or before the read flags are cleared (then no reader can see the
\* marker before the payload is queued for it):
OrderSendBeforeClear   == <<"clear_written", "payload", "send", "clear_flags", "publish">>
\* ... and the remote (TCP) readers' send after the local publish (queue.py):
OrderRemote == <<"clear_written", "payload", "send", "clear_flags", "publish", "remote">>

\* Refinement of the abstract broadcast log (Broadcast.tla): the log is
\* what the writer has written, a reader's cursor is what it delivered.
\* The bound is N chunks, plus one overflow payload in flight: a reader acks
\* a marker before it receives the payload over the socket.
Cap == IF Big = {} THEN N ELSE N + 1
\* Readers that cannot die; the others leave the abstract service.
Survivors == Readers \ (CrashSet \cup FalseSuspect \cup CloseSet)

BC == INSTANCE Broadcast WITH Readers <- Readers, M <- M, Cap <- Cap,
                               log <- sent, got <- recv
AbsSafety == BC!Safety

BL == INSTANCE Broadcast WITH Readers <- Survivors, M <- M, Cap <- Cap,
                               log <- sent, got <- [r \in Survivors |-> recv[r]]
\* Ring => Broadcast!Spec: bounded buffer and liveness under fairness.
AbsSpec == BL!Spec
=============================================================================
