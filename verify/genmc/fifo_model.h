/* fifo_model.h: the overflow channel (a ZeroMQ XPUB over ipc), as the verify/genmc/ harnesses
 * model it: one FIFO per reader, every frame delivered once and in order, a send happens-before
 * the receive that takes it (the socket's own synchronisation: the kernel's). The writer's
 * WriterSendOverflow (io->send_overflow) appends the message in flight (h_sending) to each
 * reader's FIFO; ReaderRecvOverflow (io->recv_overflow) waits for the next frame (a spin loop
 * GenMC turns into an assume; --check-liveness reports a receive that never completes) and
 * checks it is the payload of the marker just acked (each marker paired with its own payload). */
#ifndef RC_FIFO_MODEL_H
#define RC_FIFO_MODEL_H

static uint32_t h_sending;                  /* the writer's message in flight (writer only) */
static uint32_t h_fifo[N_READERS][M + 1];   /* frames: plain, published by h_fifo_len's release */
static uint32_t h_fifo_len[N_READERS];
static int h_fifo_taken[N_READERS];         /* reader r's next frame (reader r only) */

static int
h_send_overflow(void *ctx)
{
    (void)ctx;
    for (int r = 0; r < N_READERS; r++) {
        uint32_t n = __atomic_load_n(&h_fifo_len[r], __ATOMIC_RELAXED);
        assert(n < M + 1);
        h_fifo[r][n] = h_sending;
        __atomic_store_n(&h_fifo_len[r], n + 1, __ATOMIC_RELEASE);
    }
    return RC_OK;
}

static int
h_recv_overflow(void *ctx)
{
    h_ctx *c = (h_ctx *)ctx;
    int r = c->side, k = h_fifo_taken[r];
    while (__atomic_load_n(&h_fifo_len[r], __ATOMIC_ACQUIRE) <= (uint32_t)k)
        ; /* blocked until the frame arrives */
    uint32_t v = h_fifo[r][k];
    h_fifo_taken[r] = k + 1;
    assert(v == c->marker_of); /* the marker's own payload */
    assert(c->n_got < M);
    c->got[c->n_got++] = v;
    return RC_OK;
}
#endif
