/* rc_planted.c: the planted bugs of tests/stateful (tests/stateful/variants.py has each one's
 * story and its spec counterpart), compiled only into a test build (-DRINGCAST_TEST_PLANTED:
 * rc_core.c includes this file and consults rc_side.planted at the four points a bug changes).
 * The shipped build has none of this. Each uses the real steps (and so the real tracepoints);
 * peeks are loads that are not steps. */

int rc_reader_wait(rc_reader *rd, double timeout);

static uint8_t
peek(rc_side *s, size_t chunk, size_t extra)
{
    uint8_t *base = s->io->pin(s->io->ctx);
    if (base == NULL)
        return 0;
    uint8_t v = rc_load_u8(base + s->layout->metas[chunk] + extra);
    s->io->unpin(s->io->ctx);
    return v;
}

/* RC_PLANT_SCAN_AHEAD: a failed claim looks at the next chunk instead of waiting */
static int
planted_scan_ahead(rc_writer *w, int *free_)
{
    int rc = writer_claim(w, free_);
    if (rc == RC_OK && !*free_)
        w->s.index = next_chunk(&w->s);
    return rc;
}

/* RC_PLANT_REVERSED: written := 1 BEFORE the read flags are cleared */
static int
planted_reversed(rc_writer *w)
{
    rc_side *s = &w->s;
    size_t idx = s->index;
    int rc;
    RC_F7();
    if ((rc = writer_publish(w)) != RC_OK)
        return rc;
    size_t after = s->index;
    s->index = idx; /* the flags to clear are still idx's */
    for (uint32_t r = 0; r < s->layout->n_reader; r++)
        if (w->live[r] && (rc = writer_clear_read_flag(w, r)) != RC_OK)
            break;
    s->index = after;
    return rc;
}

/* RC_PLANT_SKIP: passes over a written chunk whose own flag is already 1;
 * RC_PLANT_LAPPED: after a good look, thinks itself lapped where it is not and drops the message */
static int
planted_look(rc_reader *rd, int *ready)
{
    rc_side *s = &rd->s;
    int v = 0, rc;
    *ready = 0;
    if ((rc = reader_load_written(rd, &v)) != RC_OK || v != 1)
        return rc;
    if ((rc = reader_load_read_flag(rd, &v)) != RC_OK)
        return rc;
    if (v != 0) {
        if (s->planted == RC_PLANT_SKIP)
            s->index = next_chunk(s);
        return RC_OK;
    }
    RC_F4();
    *ready = 1;
    if (s->planted != RC_PLANT_LAPPED)
        return RC_OK;
    size_t prev = s->index == 0 ? s->layout->max_chunks - 1 : s->index - 1;
    if (prev == s->index || peek(s, s->index, 0) != 0)
        return RC_OK;
    int all_before = 1;
    for (uint32_t q = 0; q < s->layout->n_reader; q++)
        if (q != rd->r)
            all_before &= peek(s, prev, 1 + q) != 0;
    if (all_before)
        return RC_OK;
    *ready = 0; /* the message is lost; the wait goes on at the next chunk */
    if ((rc = reader_ack(rd)) == RC_OK)
        rc = rc_notify(s);
    return rc;
}

/* RC_PLANT_EARLY_ACK: the last reader acks its first message BEFORE copying it, when the writer
 * waits to claim that chunk (ring-level programs only: no overflow marker) */
static int
planted_early_ack(rc_reader *rd, double timeout)
{
    rc_side *s = &rd->s;
    const rc_layout *L = s->layout;
    int rc = rc_reader_wait(rd, timeout);
    if (rc != RC_OK)
        return rc;
    size_t i = s->index, n = next_chunk(s);
    int bite = rd->r == L->n_reader - 1 && L->n_reader > 1 && n != i && peek(s, n, 0) == 1;
    for (uint32_t q = 0; bite && q < L->n_reader; q++)
        bite = peek(s, n, 1 + q) == 0 && (q == rd->r || peek(s, i, 1 + q) == 1);
    s->planted = RC_PLANT_NONE; /* its first message only */
    const uint8_t *data;
    if (bite && (rc = reader_ack(rd)) == RC_OK)
        s->index = i; /* the chunk to copy is still i */
    if (rc == RC_OK && (rc = reader_copy(rd, &data)) == RC_OK) {
        int kind = s->io->copy_out(s->io->ctx, data, L->max_chunk_bytes);
        rc = kind < 0 ? kind : RC_OK;
    }
    if (bite)
        s->index = n;
    else if (rc == RC_OK)
        rc = reader_ack(rd);
    return rc == RC_OK ? rc_notify(s) : rc;
}
