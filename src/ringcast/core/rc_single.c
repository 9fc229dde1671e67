/* rc_single.c: one step of a side alone (rc_step, rc_step_payload), for tests and tools: the lab's
 * test extension (ringcast_lab._steps) calls them; the runtime's binding does not (its entry
 * points run whole sequences). Part of the protocol core: included at the end of rc_core.c when
 * RC_SINGLE_STEPS is defined (the test extension defines it; the runtime's build does not). */

int
rc_step(rc_side *s, rc_action action, int arg, long *out)
{
    int v = 0, rc, writer = s->side == RC_WRITER;
    rc_writer *w = (rc_writer *)s;
    rc_reader *rd = (rc_reader *)s;
    const uint8_t *data;
    *out = 0;
    if ((action == RC_WriterClearReadFlag || action == RC_WriterEvict) && (arg < 0 || (uint32_t)arg >= s->layout->n_reader))
        return fail(s, RC_ERR_STATE);
    switch (writer ? action : RC_N_ACTIONS + action) {
    case RC_WriterClaim: rc = writer_claim(w, &v); break;
    case RC_WriterClearWritten: rc = writer_clear_written(w); break;
    case RC_WriterClearReadFlag: rc = writer_clear_read_flag(w, (uint32_t)arg); break;
    case RC_WriterPublish: rc = writer_publish(w); break;
    case RC_WriterEvict: rc = writer_evict(w, (uint32_t)arg); break;
    case RC_WriterSendOverflow: rc = send_overflow(w); break;
    case RC_ParkRecheck:
    case RC_N_ACTIONS + RC_ParkRecheck: /* its tracepoint, then the side's look */
        if ((rc = trace(s, RC_ParkRecheck, RC_NO_READER)) == RC_OK)
            rc = writer ? writer_ready(s, &v) : reader_ready(s, &v);
        break;
    case RC_N_ACTIONS + RC_ReaderRecvOverflow: rc = recv_overflow(rd); break;
    case RC_N_ACTIONS + RC_ReaderLoadWritten: rc = reader_load_written(rd, &v); break;
    case RC_N_ACTIONS + RC_ReaderLoadReadFlag: rc = reader_load_read_flag(rd, &v); break;
    case RC_N_ACTIONS + RC_ReaderCopy: rc = reader_copy(rd, &data); break;
    case RC_N_ACTIONS + RC_ReaderCheckEvicted: rc = reader_check_evicted(rd, &v); break;
    case RC_N_ACTIONS + RC_ReaderAck: rc = reader_ack(rd); break;
    default: return fail(s, RC_ERR_STATE);
    }
    *out = v;
    return rc;
}

int
rc_step_payload(rc_writer *w, const rc_parts *parts, size_t *written)
{
    return writer_write_payload(w, parts, written);
}
