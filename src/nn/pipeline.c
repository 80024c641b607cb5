/*
 * pipeline.c - pipeline schedules (GPipe and 1F1B) over the point-to-point
 * tape ops. See nn.h for the contract: the schedules, why they cannot
 * deadlock, the 1/M seeding and how failures reach every stage.
 *
 * It sits in nn because it drives tapes (tensor) over a communicator (comm)
 * and nothing above; the runtime hands it the pipe axis's communicator.
 *
 * Messages on the channel from stage i to i + 1, per micro-batch m (tag m):
 * a header of RP_PIPE_HEADER int32s (ndim, then the shape padded with 1s),
 * then the activation (rp_tensor_send). On the channel back, the gradient
 * of that activation (the backward of stage i + 1's rp_tensor_recv). Both
 * channels carry micro-batches in order 0..M-1 on both schedules.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "replicator/nn.h"

#define RP_PIPE_HEADER (1 + RP_MAX_DIMS)

struct rp_pipeline {
    rp_comm *comm;
    rp_pipe_schedule schedule;
    int micro;       /* M */
    int stage, size; /* i, P */
    int n_tapes;     /* in-flight micro-batches at most; micro-batch m uses tapes[m % n_tapes] */
    rp_tape **tapes;
    rp_tensor **out; /* [M]: the token of the send (stage < P-1) or the loss (last stage) */
    /* the current run */
    rp_pipe_stage_fn fn;
    void *ctx;
    const rp_tensor *input;
    double loss_sum;
};

const char *rp_pipe_schedule_name(rp_pipe_schedule schedule)
{
    switch (schedule) {
    case RP_PIPE_GPIPE:
        return "gpipe";
    case RP_PIPE_1F1B:
        return "1f1b";
    }
    return "unknown";
}

/* Warm-up forwards of 1F1B on this stage: min(P - i - 1, M). */
static int warmup(const rp_pipeline *p)
{
    int w = p->size - p->stage - 1;
    return w < p->micro ? w : p->micro;
}

rp_status rp_pipeline_create(rp_pipeline **pipeline, rp_comm *comm, rp_pipe_schedule schedule,
                             int micro_batches)
{
    if (!pipeline) return RP_ERROR(RP_ERR_INVALID, "rp_pipeline_create: pipeline is NULL");
    *pipeline = NULL;
    if (!comm) return RP_ERROR(RP_ERR_INVALID, "rp_pipeline_create: comm is NULL");
    if (schedule != RP_PIPE_GPIPE && schedule != RP_PIPE_1F1B)
        return RP_ERROR(RP_ERR_INVALID, "rp_pipeline_create: unknown schedule %d", (int)schedule);
    if (micro_batches < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_pipeline_create: micro_batches is %d (must be >= 1)",
                        micro_batches);
    rp_status status = RP_OK;
    rp_pipeline *p = rp_calloc(sizeof *p);
    if (!p) return rp_last_status();
    p->comm = comm;
    p->schedule = schedule;
    p->micro = micro_batches;
    p->stage = rp_comm_rank(comm);
    p->size = rp_comm_size(comm);
    p->n_tapes = schedule == RP_PIPE_GPIPE ? p->micro : warmup(p) + 1;
    if (p->n_tapes > p->micro) p->n_tapes = p->micro;
    p->tapes = rp_calloc((size_t)p->n_tapes * sizeof *p->tapes);
    p->out = rp_calloc((size_t)p->micro * sizeof *p->out);
    if (!p->tapes || !p->out) {
        status = rp_last_status();
        goto cleanup;
    }
    for (int k = 0; k < p->n_tapes; k++)
        RP_TRY(rp_tape_create(&p->tapes[k], (size_t)1 << 20)); /* grows as needed */
    *pipeline = p;
    return RP_OK;
cleanup:
    rp_pipeline_destroy(p);
    return status;
}

void rp_pipeline_destroy(rp_pipeline *p)
{
    if (!p) return;
    for (int k = 0; p->tapes && k < p->n_tapes; k++)
        rp_tape_destroy(p->tapes[k]);
    rp_free(p->tapes);
    rp_free(p->out);
    rp_free(p);
}

/* The micro-batch's input on stage 0: rows [m*b, (m+1)*b) of the batch, a leaf on t (a copy
 * from storage to storage: the batch is never read on the host). */
static rp_tensor *micro_input(rp_pipeline *p, rp_tape *t, int m)
{
    const rp_tensor *in = p->input;
    int shape[RP_MAX_DIMS];
    memcpy(shape, in->shape, sizeof shape);
    shape[0] = in->shape[0] / p->micro;
    int64_t per = in->numel / p->micro;
    rp_tensor *x = rp_tensor_new(t, in->ndim, shape);
    if (x)
        kernels_active()->mem_copy(x->data, in->data + (int64_t)m * per,
                                   (size_t)per * sizeof(float));
    return x;
}

/* The activation of micro-batch m from stage i - 1: its shape header, then the tensor. */
static rp_tensor *receive_activation(rp_pipeline *p, rp_tape *t, int m)
{
    int32_t hdr[RP_PIPE_HEADER];
    if (rp_comm_recv(p->comm, hdr, RP_PIPE_HEADER, RP_I32, p->stage - 1, m) != RP_OK) return NULL;
    int ndim = hdr[0], shape[RP_MAX_DIMS];
    if (ndim < 0 || ndim > RP_MAX_DIMS) {
        RP_ERROR(RP_ERR_FORMAT, "the shape header from stage %d has ndim %d (must be 0..%d)",
                 p->stage - 1, ndim, RP_MAX_DIMS);
        return NULL;
    }
    for (int d = 0; d < ndim; d++) {
        shape[d] = hdr[1 + d];
        if (shape[d] < 1) {
            RP_ERROR(RP_ERR_FORMAT, "the shape header from stage %d has dimension %d = %d",
                     p->stage - 1, d, shape[d]);
            return NULL;
        }
    }
    if (rp_shape_numel(ndim, shape) < 0) {
        RP_ERROR(RP_ERR_FORMAT, "the shape header from stage %d holds too many elements",
                 p->stage - 1);
        return NULL;
    }
    return rp_tensor_recv(t, p->comm, ndim, shape, p->stage - 1, m);
}

/* F(m): reset its tape, get its input, run the stage, send the result on (or keep the loss). */
static rp_status forward(rp_pipeline *p, int m)
{
    rp_tape *t = p->tapes[m % p->n_tapes];
    rp_tape_reset(t);
    rp_tape_set_recording(t, true);
    rp_tensor *x = p->stage == 0 ? micro_input(p, t, m) : receive_activation(p, t, m);
    if (!x) return rp_last_status();
    rp_tensor *y = p->fn(t, x, m, p->ctx);
    if (!y) {
        rp_status st = rp_last_status();
        return st != RP_OK ? st : RP_ERROR(RP_ERR_INVALID, "the stage function returned NULL");
    }
    if (p->stage == p->size - 1) {
        if (y->numel != 1) {
            char buf[64];
            return RP_ERROR(RP_ERR_SHAPE, "the last stage must return a scalar loss, got shape %s",
                            rp_shape_str(y, buf, sizeof buf));
        }
        p->out[m] = y;
        p->loss_sum += (double)rp_item(y);
        return RP_OK;
    }
    int32_t hdr[RP_PIPE_HEADER] = {y->ndim, 1, 1, 1, 1};
    for (int d = 0; d < y->ndim; d++)
        hdr[1 + d] = y->shape[d];
    RP_CHECK(rp_comm_send(p->comm, hdr, RP_PIPE_HEADER, RP_I32, p->stage + 1, m));
    p->out[m] = rp_tensor_send(t, p->comm, y, p->stage + 1, m);
    return p->out[m] ? RP_OK : rp_last_status();
}

/* B(m): back-propagate the micro-batch's tape from its loss (seeded 1/M) or its send's token,
 * which receives the gradient from stage i + 1; the receive's backward sends one to i - 1. */
static rp_status backward(rp_pipeline *p, int m)
{
    rp_tape *t = p->tapes[m % p->n_tapes];
    rp_status st;
    if (p->stage == p->size - 1) {
        float seed = 1.0f / (float)p->micro;
        st = rp_backward_from(t, p->out[m], &seed);
    } else {
        st = rp_backward(t, p->out[m]);
    }
    p->out[m] = NULL;
    return st;
}

/* Runs op(m) and, on failure, rewrites the error as "pipeline stage i of P (...): <error>". */
static rp_status step(rp_pipeline *p, bool fwd, int m)
{
    rp_status st = fwd ? forward(p, m) : backward(p, m);
    if (st == RP_OK) return RP_OK;
    char inner[1024];
    snprintf(inner, sizeof inner, "%s", rp_last_error());
    return RP_ERROR(st, "pipeline stage %d of %d (%s, %s of micro-batch %d of %d): %s", p->stage,
                    p->size, rp_pipe_schedule_name(p->schedule), fwd ? "forward" : "backward", m,
                    p->micro, inner);
}

static rp_status run_gpipe(rp_pipeline *p)
{
    for (int m = 0; m < p->micro; m++)
        RP_CHECK(step(p, true, m));
    for (int m = 0; m < p->micro; m++)
        RP_CHECK(step(p, false, m));
    return RP_OK;
}

static rp_status run_1f1b(rp_pipeline *p)
{
    int w = warmup(p);
    for (int m = 0; m < w; m++)
        RP_CHECK(step(p, true, m));
    for (int k = 0; k < p->micro - w; k++) {
        RP_CHECK(step(p, true, w + k));
        RP_CHECK(step(p, false, k));
    }
    for (int m = p->micro - w; m < p->micro; m++)
        RP_CHECK(step(p, false, m));
    return RP_OK;
}

static rp_status check_input(const rp_pipeline *p, const rp_tensor *input)
{
    if (p->stage != 0) return RP_OK;
    if (!input || !input->data)
        return RP_ERROR(RP_ERR_INVALID, "pipeline stage 0 of %d: the input batch is NULL", p->size);
    if (input->ndim < 1 || input->shape[0] % p->micro != 0) {
        char buf[64];
        return RP_ERROR(RP_ERR_SHAPE,
                        "pipeline stage 0 of %d: the input batch %s does not split into %d "
                        "equal micro-batches along dim 0",
                        p->size, rp_shape_str(input, buf, sizeof buf), p->micro);
    }
    return RP_OK;
}

rp_status rp_pipeline_run(rp_pipeline *p, rp_pipe_stage_fn stage, void *ctx, const rp_tensor *input,
                          float *loss)
{
    if (loss) *loss = NAN;
    if (!p) return RP_ERROR(RP_ERR_INVALID, "rp_pipeline_run: pipeline is NULL");
    rp_status st =
        stage ? check_input(p, input)
              : RP_ERROR(RP_ERR_INVALID, "pipeline stage %d of %d: the stage function is NULL",
                         p->stage, p->size);
    if (st == RP_OK) {
        p->fn = stage;
        p->ctx = ctx;
        p->input = input;
        p->loss_sum = 0;
        st = p->schedule == RP_PIPE_GPIPE ? run_gpipe(p) : run_1f1b(p);
    }
    /* Tapes that did not run backward still count uses of the parameters: let them go. */
    for (int k = 0; k < p->n_tapes; k++)
        rp_tape_reset(p->tapes[k]);
    memset(p->out, 0, (size_t)p->micro * sizeof *p->out);
    p->input = NULL;
    if (st != RP_OK) {
        /* Neighbours waiting for this stage fail at once with this message, and the broken
         * communicator carries it to the rest (comm.h). The reason keeps the head of it. */
        char reason[1024];
        snprintf(reason, sizeof reason, "%s", rp_last_error());
        rp_comm_leave(p->comm, st, reason);
        return rp_error_set(st, NULL, 0, "%s", reason); /* as it is: no second file:line */
    }
    if (loss && p->stage == p->size - 1) *loss = (float)(p->loss_sum / p->micro);
    return RP_OK;
}

int rp_pipeline_tapes(const rp_pipeline *p)
{
    return p ? p->n_tapes : 0;
}

size_t rp_pipeline_live_peak(const rp_pipeline *p)
{
    size_t sum = 0;
    for (int k = 0; p && k < p->n_tapes; k++)
        sum += rp_arena_get_stats(rp_tape_storage(p->tapes[k])).live_peak;
    return sum;
}
