/*
 * layers_tp.c - tensor-parallel layers (Megatron-LM): column- and
 * row-parallel linear layers and convolutions, the gather/scatter regions
 * along the last axis, and the class-parallel softmax cross-entropy. See
 * nn.h for the convention (replicated and split tensors, the loss counted
 * once) and each layer's contract.
 *
 * The layers are compositions: rp_copy_to_group and rp_reduce_from_group
 * (tensor.h) around the plain rp_linear and rp_conv2d, so their gradients
 * come from those ops' rules; a row split's partial product is summed in
 * its own storage (rp_reduce_from_group_inplace: nothing else reads it, and
 * the product's backward reads its inputs only), so it costs no second
 * full-size tensor. The regions along the last axis and the loss
 * are rp_custom ops, because no existing op moves a slice of the last axis
 * (rp_tensor_all_gather stacks along a new leading axis) and the loss's
 * gradient needs the global maximum and sum that its forward reduces.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "replicator/nn.h"

/* "<prefix>.<leaf>" into buf; an error if it does not fit. */
static rp_status tp_name(char *buf, const char *prefix, const char *leaf)
{
    int n = snprintf(buf, RP_NAME_MAX, "%s.%s", prefix, leaf);
    if (n < 0 || n >= RP_NAME_MAX)
        return RP_ERROR(RP_ERR_INVALID, "layer name \"%s.%s\" is longer than %d characters", prefix,
                        leaf, RP_NAME_MAX - 1);
    return RP_OK;
}

/*
 * Copies member `rank`'s slice along `axis` between a dense tensor and its
 * shard: into the shard (place false, rp_tp_shard_copy) or back into its
 * place in the dense tensor (place true, rp_tp_shard_place).
 */
static rp_status shard_move(const char *who, float *shard, float *dense, int ndim,
                            const int *dense_shape, int axis, int rank, int size, bool place)
{
    if (!shard || !dense || !dense_shape)
        return RP_ERROR(RP_ERR_INVALID, "%s: shard, dense and shape must not be NULL", who);
    if (ndim < 1 || ndim > RP_MAX_DIMS || axis < 0 || axis >= ndim)
        return RP_ERROR(RP_ERR_INVALID, "%s: axis %d of a %d-dim tensor", who, axis, ndim);
    if (size < 1 || rank < 0 || rank >= size)
        return RP_ERROR(RP_ERR_INVALID, "%s: rank %d is not in [0, %d)", who, rank, size);
    for (int i = 0; i < ndim; i++)
        if (dense_shape[i] < 1)
            return RP_ERROR(RP_ERR_INVALID, "%s: dimension %d is %d", who, i, dense_shape[i]);
    if (dense_shape[axis] % size != 0)
        return RP_ERROR(RP_ERR_SHAPE, "%s: dimension %d (%d) does not split evenly over %d members",
                        who, axis, dense_shape[axis], size);
    int64_t outer = 1, inner = 1, d = dense_shape[axis], k = d / size;
    for (int i = 0; i < axis; i++)
        outer *= dense_shape[i];
    for (int i = axis + 1; i < ndim; i++)
        inner *= dense_shape[i];
    size_t bytes = (size_t)(k * inner) * sizeof(float);
    for (int64_t o = 0; o < outer; o++) {
        float *s = shard + o * k * inner, *dn = dense + (o * d + rank * k) * inner;
        if (place)
            memcpy(dn, s, bytes);
        else
            memcpy(s, dn, bytes);
    }
    return RP_OK;
}

rp_status rp_tp_shard_copy(float *shard, const float *dense, int ndim, const int *dense_shape,
                           int axis, int rank, int size)
{
    /* dense is only read when place is false. */
    return shard_move("rp_tp_shard_copy", shard, (float *)dense, ndim, dense_shape, axis, rank,
                      size, false);
}

rp_status rp_tp_shard_place(float *dense, const float *shard, int ndim, const int *dense_shape,
                            int axis, int rank, int size)
{
    /* shard is only read when place is true. */
    return shard_move("rp_tp_shard_place", (float *)shard, dense, ndim, dense_shape, axis, rank,
                      size, true);
}

/* ---- the regions along the last axis ------------------------------------------------- */

/* What rp_tp_gather and rp_tp_scatter keep for their backward. */
typedef struct tp_last_ctx {
    rp_comm *comm;
    int rank, size;
    int64_t rows; /* product of every dimension but the last */
    int64_t k;    /* the last dimension of one member's slice */
    float *buf; /* [size, rows, k]: the gathered slices, rank-major as the all-gather leaves them */
} tp_last_ctx;

/* out [rows, size*k] from buf [size, rows, k] (+= when add). */
static void interleave(float *out, const float *buf, const tp_last_ctx *c, bool add)
{
    for (int s = 0; s < c->size; s++)
        for (int64_t r = 0; r < c->rows; r++) {
            float *dst = out + (r * c->size + s) * c->k;
            const float *src = buf + (s * c->rows + r) * c->k;
            if (add)
                for (int64_t j = 0; j < c->k; j++)
                    dst[j] += src[j];
            else
                memcpy(dst, src, (size_t)c->k * sizeof(float));
        }
}

/* dst [rows, k] (+= when add) from this member's columns of src [rows, size*k]. */
static void own_slice(float *dst, const float *src, const tp_last_ctx *c, bool add)
{
    for (int64_t r = 0; r < c->rows; r++) {
        const float *from = src + (r * c->size + c->rank) * c->k;
        if (add)
            for (int64_t j = 0; j < c->k; j++)
                dst[r * c->k + j] += from[j];
        else
            memcpy(dst + r * c->k, from, (size_t)c->k * sizeof(float));
    }
}

static rp_status gather_fwd(void *ctx, rp_tensor *out, rp_tensor *const *in, int n)
{
    tp_last_ctx *c = ctx;
    (void)n;
    RP_CHECK(rp_comm_all_gather(c->comm, in[0]->data, c->buf, c->rows * c->k, RP_F32));
    interleave(out->data, c->buf, c, false);
    return RP_OK;
}

/* dy is replicated (the same on every member): the input's gradient is its own slice. */
static rp_status gather_bwd(void *ctx, const rp_tensor *out, const float *dout,
                            rp_tensor *const *in, float *const *din, int n)
{
    (void)out, (void)in, (void)n;
    if (din[0]) own_slice(din[0], dout, ctx, true);
    return RP_OK;
}

static rp_status scatter_fwd(void *ctx, rp_tensor *out, rp_tensor *const *in, int n)
{
    (void)n;
    own_slice(out->data, in[0]->data, ctx, false);
    return RP_OK;
}

/* The replicated input's gradient is every member's slice gradient, side by side. */
static rp_status scatter_bwd(void *ctx, const rp_tensor *out, const float *dout,
                             rp_tensor *const *in, float *const *din, int n)
{
    tp_last_ctx *c = ctx;
    (void)out, (void)in, (void)n;
    RP_CHECK(rp_comm_all_gather(c->comm, dout, c->buf, c->rows * c->k, RP_F32));
    if (din[0]) interleave(din[0], c->buf, c, true);
    return RP_OK;
}

static const rp_custom_op tp_gather_op = {"rp_tp_gather", gather_fwd, gather_bwd};
static const rp_custom_op tp_scatter_op = {"rp_tp_scatter", scatter_fwd, scatter_bwd};

/* The context of a region over x's last axis, whose slice is k wide; NULL on error. */
static tp_last_ctx *last_ctx(rp_tape *t, rp_comm *comm, const rp_tensor *x, int64_t k,
                             bool need_buf)
{
    tp_last_ctx *c = rp_arena_alloc(rp_tape_arena(t), sizeof *c);
    RP_PROPAGATE_NULL(c);
    c->comm = comm;
    c->rank = rp_comm_rank(comm);
    c->size = rp_comm_size(comm);
    c->rows = x->numel / x->shape[x->ndim - 1];
    c->k = k;
    c->buf = NULL;
    if (need_buf) {
        c->buf = rp_arena_alloc(rp_tape_arena(t), (size_t)(c->size * c->rows * k) * sizeof(float));
        RP_PROPAGATE_NULL(c->buf);
    }
    return c;
}

static bool check_region(rp_tape *t, rp_comm *comm, const rp_tensor *x, const char *who)
{
    if (!t || !comm) {
        RP_ERROR(RP_ERR_INVALID, "%s: %s is NULL", who, t ? "the communicator" : "the tape");
        return false;
    }
    if (x->ndim < 1) {
        RP_ERROR(RP_ERR_SHAPE, "%s: a scalar has no last axis to split", who);
        return false;
    }
    return true;
}

rp_tensor *rp_tp_gather(rp_tape *t, rp_comm *comm, rp_tensor *x)
{
    RP_PROPAGATE_NULL(x);
    if (!check_region(t, comm, x, "rp_tp_gather")) return NULL;
    int last = x->shape[x->ndim - 1];
    tp_last_ctx *c = last_ctx(t, comm, x, last, true);
    RP_PROPAGATE_NULL(c);
    int shape[RP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = last * c->size;
    return rp_custom(t, &tp_gather_op, c, &x, 1, x->ndim, shape);
}

rp_tensor *rp_tp_scatter(rp_tape *t, rp_comm *comm, rp_tensor *x)
{
    RP_PROPAGATE_NULL(x);
    if (!check_region(t, comm, x, "rp_tp_scatter")) return NULL;
    int last = x->shape[x->ndim - 1], size = rp_comm_size(comm);
    if (last % size != 0) {
        char sx[64];
        RP_ERROR(RP_ERR_SHAPE,
                 "rp_tp_scatter: the last dimension of %s (%d) does not split evenly over %d "
                 "members",
                 rp_shape_str(x, sx, sizeof sx), last, size);
        return NULL;
    }
    tp_last_ctx *c = last_ctx(t, comm, x, last / size, rp_tape_recording(t));
    RP_PROPAGATE_NULL(c);
    int shape[RP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = last / size;
    return rp_custom(t, &tp_scatter_op, c, &x, 1, x->ndim, shape);
}

/* ---- linear and convolution ---------------------------------------------------------- */

/* The group, the split and the divisibility every tensor-parallel layer needs. */
static rp_status check_layer(const char *who, const char *name, rp_comm *comm, rp_tp_split split,
                             int in, int out)
{
    if (!comm) return RP_ERROR(RP_ERR_INVALID, "%s \"%s\": the communicator is NULL", who, name);
    if (split != RP_TP_COLUMN && split != RP_TP_ROW)
        return RP_ERROR(RP_ERR_INVALID, "%s \"%s\": split %d is not RP_TP_COLUMN or RP_TP_ROW", who,
                        name, (int)split);
    int m = rp_comm_size(comm);
    if (split == RP_TP_COLUMN && out % m != 0)
        return RP_ERROR(RP_ERR_SHAPE,
                        "%s \"%s\": %d output features do not split evenly over %d members "
                        "(column split)",
                        who, name, out, m);
    if (split == RP_TP_ROW && in % m != 0)
        return RP_ERROR(RP_ERR_SHAPE,
                        "%s \"%s\": %d input features do not split evenly over %d members "
                        "(row split)",
                        who, name, in, m);
    return RP_OK;
}

/*
 * Declares the weight (dense shape `wshape`, split on axis 0 for columns and
 * on the last axis for rows) and the bias [out] (split for columns,
 * replicated for rows).
 */
static rp_status add_tp_params(rp_tensor **w, rp_tensor **b, rp_params *p, const char *name,
                               rp_tp_split split, int rank, int size, int ndim, const int *wshape,
                               rp_init wi, bool bias)
{
    char full[RP_NAME_MAX];
    RP_CHECK(tp_name(full, name, "weight"));
    int axis = split == RP_TP_COLUMN ? 0 : ndim - 1;
    *w = rp_params_add_shard(p, full, ndim, wshape, wi, true, axis, rank, size);
    if (!*w) return rp_last_status();
    *b = NULL;
    if (!bias) return RP_OK;
    RP_CHECK(tp_name(full, name, "bias"));
    rp_init zeros = {RP_INIT_ZEROS, 0, 0, 0};
    int out = wshape[0];
    *b = split == RP_TP_COLUMN ? rp_params_add_shard(p, full, 1, &out, zeros, true, 0, rank, size)
                               : rp_params_add(p, full, 1, &out, zeros, true);
    return *b ? RP_OK : rp_last_status();
}

rp_status rp_tp_linear_layer_init(rp_tp_linear_layer *l, rp_params *params, const char *name,
                                  rp_comm *comm, rp_tp_split split, int in, int out, bool bias,
                                  bool he)
{
    if (!l || !params || !name || in < 1 || out < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_tp_linear_layer_init: bad arguments (in %d, out %d)",
                        in, out);
    RP_CHECK(check_layer("rp_tp_linear_layer_init", name, comm, split, in, out));
    *l = (rp_tp_linear_layer){.in = in,
                              .out = out,
                              .split = split,
                              .comm = comm,
                              .rank = rp_comm_rank(comm),
                              .size = rp_comm_size(comm),
                              .gather_output = false,
                              .input_is_parallel = true};
    rp_init wi = {he ? RP_INIT_HE_NORMAL : RP_INIT_GLOROT_UNIFORM, 0.0f, in, out};
    return add_tp_params(&l->w, &l->b, params, name, split, l->rank, l->size, 2, (int[]){out, in},
                         wi, bias);
}

/* Whether x is `ndim`-D with `want` features last; RP_ERR_SHAPE naming the layer and x if not. */
static bool check_input(const rp_tensor *x, int ndim, int want, const char *who, const rp_tensor *w)
{
    if (x->ndim == ndim && x->shape[ndim - 1] == want) return true;
    char sx[64];
    RP_ERROR(RP_ERR_SHAPE, "%s (%s): input %s must be %d-D with %d features in its last axis", who,
             w->name, rp_shape_str(x, sx, sizeof sx), ndim, want);
    return false;
}

/* The input a row layer multiplies: this member's slice of x's last axis. */
static rp_tensor *row_input(rp_tape *t, rp_comm *comm, rp_tensor *x, int ndim, int in, int size,
                            bool parallel, const char *who, const rp_tensor *w)
{
    if (!check_input(x, ndim, parallel ? in / size : in, who, w)) return NULL;
    return parallel ? x : rp_tp_scatter(t, comm, x);
}

rp_tensor *rp_tp_linear_layer_forward(rp_tape *t, const rp_tp_linear_layer *l, rp_tensor *x)
{
    RP_PROPAGATE_NULL(x);
    const char *who = "rp_tp_linear_layer_forward";
    if (!t || !l || !l->w) {
        RP_ERROR(RP_ERR_INVALID, "%s: a NULL tape or an uninitialised layer", who);
        return NULL;
    }
    if (l->split == RP_TP_COLUMN) {
        if (!check_input(x, 2, l->in, who, l->w)) return NULL;
        rp_tensor *y = rp_linear(t, rp_copy_to_group(t, l->comm, x), l->w, l->b);
        return l->gather_output ? rp_tp_gather(t, l->comm, y) : y;
    }
    rp_tensor *xr = row_input(t, l->comm, x, 2, l->in, l->size, l->input_is_parallel, who, l->w);
    rp_tensor *y = rp_reduce_from_group_inplace(t, l->comm, rp_linear(t, xr, l->w, NULL));
    return l->b ? rp_add(t, y, l->b) : y;
}

rp_status rp_tp_conv2d_layer_init(rp_tp_conv2d_layer *l, rp_params *params, const char *name,
                                  rp_comm *comm, rp_tp_split split, int in, int out, int k,
                                  int stride, int pad, bool bias)
{
    if (!l || !params || !name || in < 1 || out < 1 || k < 1 || stride < 1 || pad < 0)
        return RP_ERROR(
            RP_ERR_INVALID,
            "rp_tp_conv2d_layer_init: bad arguments (in %d, out %d, k %d, stride %d, pad %d)", in,
            out, k, stride, pad);
    RP_CHECK(check_layer("rp_tp_conv2d_layer_init", name, comm, split, in, out));
    *l = (rp_tp_conv2d_layer){.in = in,
                              .out = out,
                              .k = k,
                              .p = {stride, pad},
                              .split = split,
                              .comm = comm,
                              .rank = rp_comm_rank(comm),
                              .size = rp_comm_size(comm),
                              .gather_output = false,
                              .input_is_parallel = true};
    rp_init wi = {RP_INIT_HE_NORMAL, 0.0f, k * k * in, k * k * out};
    return add_tp_params(&l->w, &l->b, params, name, split, l->rank, l->size, 4,
                         (int[]){out, k, k, in}, wi, bias);
}

rp_tensor *rp_tp_conv2d_layer_forward(rp_tape *t, const rp_tp_conv2d_layer *l, rp_tensor *x)
{
    RP_PROPAGATE_NULL(x);
    const char *who = "rp_tp_conv2d_layer_forward";
    if (!t || !l || !l->w) {
        RP_ERROR(RP_ERR_INVALID, "%s: a NULL tape or an uninitialised layer", who);
        return NULL;
    }
    if (l->split == RP_TP_COLUMN) {
        if (!check_input(x, 4, l->in, who, l->w)) return NULL;
        rp_tensor *y = rp_conv2d(t, rp_copy_to_group(t, l->comm, x), l->w, l->b, l->p);
        return l->gather_output ? rp_tp_gather(t, l->comm, y) : y;
    }
    rp_tensor *xr = row_input(t, l->comm, x, 4, l->in, l->size, l->input_is_parallel, who, l->w);
    rp_tensor *y = rp_reduce_from_group_inplace(t, l->comm, rp_conv2d(t, xr, l->w, NULL, l->p));
    return l->b ? rp_add(t, y, l->b) : y;
}

/* ---- class-parallel softmax cross-entropy -------------------------------------------- */

typedef struct tp_xent_ctx {
    rp_comm *comm;
    int rank, size;
    int n, k, classes; /* rows, this member's classes, all classes */
    int32_t *labels;   /* [n], a copy */
    float *probs;      /* [n, k]: this member's softmax, for the backward */
    float *maxes;      /* [n + 5]: row maxima and the agreement checks, all-reduced MAX */
    double *sums;      /* [2n]: sum of exp(z - max) and the target logit per row, all-reduced SUM */
} tp_xent_ctx;

/* A 24-bit checksum of the labels (exact in a float), to see that members agree on them. */
static float labels_checksum(const int32_t *labels, int n)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)labels[i];
        h *= 16777619u;
    }
    return (float)((h ^ (h >> 24)) & 0xffffffu);
}

static rp_status xent_fwd(void *ctx, rp_tensor *out, rp_tensor *const *in, int n_in)
{
    tp_xent_ctx *c = ctx;
    const float *z = in[0]->data;
    int n = c->n, k = c->k;
    (void)n_in;
    /* The first all-reduce carries, beside the row maxima, what members must agree on. */
    int bad = -1;
    for (int i = 0; i < n && bad < 0; i++)
        if (c->labels[i] < 0 || c->labels[i] >= c->classes) bad = i;
    for (int i = 0; i < n; i++) {
        const float *row = z + (int64_t)i * k;
        float mx = row[0];
        for (int j = 1; j < k; j++)
            mx = row[j] > mx ? row[j] : mx;
        c->maxes[i] = mx;
    }
    float sum = labels_checksum(c->labels, n);
    c->maxes[n] = (float)k;
    c->maxes[n + 1] = -(float)k;
    c->maxes[n + 2] = bad >= 0 ? 1.0f : 0.0f;
    c->maxes[n + 3] = sum;
    c->maxes[n + 4] = -sum;
    RP_CHECK(rp_comm_all_reduce(c->comm, c->maxes, c->maxes, n + 5, RP_F32, RP_MAX));
    int widest = (int)c->maxes[n], narrowest = (int)-c->maxes[n + 1];
    if (widest != narrowest)
        return RP_ERROR(RP_ERR_SHAPE,
                        "rp_tp_softmax_cross_entropy: the members' logits hold from %d to %d "
                        "classes each (member %d: %d); every member must hold classes/M = %d/%d",
                        narrowest, widest, c->rank, k, c->classes, c->size);
    if (k * c->size != c->classes)
        return RP_ERROR(RP_ERR_SHAPE,
                        "rp_tp_softmax_cross_entropy: %d members with %d classes each do not "
                        "make the %d classes",
                        c->size, k, c->classes);
    if (bad >= 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_tp_softmax_cross_entropy: label %d is %d, outside the %d classes", bad,
                        (int)c->labels[bad], c->classes);
    if (c->maxes[n + 2] != 0.0f)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_tp_softmax_cross_entropy: another member of the group has a label "
                        "outside the %d classes",
                        c->classes);
    if (c->maxes[n + 3] != -c->maxes[n + 4])
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_tp_softmax_cross_entropy: the members' labels differ (member %d's "
                        "checksum %.0f); every member must pass the same labels",
                        c->rank, (double)sum);
    int first = c->rank * k;
    for (int i = 0; i < n; i++) {
        const float *row = z + (int64_t)i * k;
        double s = 0;
        for (int j = 0; j < k; j++)
            s += exp((double)row[j] - c->maxes[i]);
        int own = c->labels[i] - first;
        c->sums[i] = s;
        c->sums[n + i] = own >= 0 && own < k ? (double)row[own] : 0.0;
    }
    RP_CHECK(rp_comm_all_reduce(c->comm, c->sums, c->sums, 2 * n, RP_F64, RP_SUM));
    double total = 0;
    for (int i = 0; i < n; i++) {
        double lse = c->maxes[i] + log(c->sums[i]);
        const float *row = z + (int64_t)i * k;
        float *p = c->probs + (int64_t)i * k;
        for (int j = 0; j < k; j++)
            p[j] = (float)exp((double)row[j] - lse);
        total += lse - c->sums[n + i];
    }
    out->data[0] = (float)(total / n);
    return RP_OK;
}

/* d/dz of the mean loss: (softmax - onehot) / N on this member's classes; no collective. */
static rp_status xent_bwd(void *ctx, const rp_tensor *out, const float *dout, rp_tensor *const *in,
                          float *const *din, int n_in)
{
    tp_xent_ctx *c = ctx;
    (void)out, (void)in, (void)n_in;
    if (!din[0]) return RP_OK;
    float scale = dout[0] / (float)c->n;
    int first = c->rank * c->k;
    for (int i = 0; i < c->n; i++)
        for (int j = 0; j < c->k; j++) {
            int64_t e = (int64_t)i * c->k + j;
            double onehot = c->labels[i] == first + j ? 1.0 : 0.0;
            din[0][e] += (float)(scale * (c->probs[e] - onehot));
        }
    return RP_OK;
}

static const rp_custom_op tp_xent_op = {"rp_tp_softmax_cross_entropy", xent_fwd, xent_bwd};

rp_tensor *rp_tp_softmax_cross_entropy(rp_tape *t, rp_comm *comm, rp_tensor *logits,
                                       const int32_t *labels, int classes)
{
    RP_PROPAGATE_NULL(logits);
    const char *who = "rp_tp_softmax_cross_entropy";
    if (!t || !comm || !labels || classes < 1) {
        RP_ERROR(RP_ERR_INVALID, "%s: bad arguments (tape %p, comm %p, labels %p, classes %d)", who,
                 (void *)t, (void *)comm, (const void *)labels, classes);
        return NULL;
    }
    if (logits->ndim != 2) {
        char sl[64];
        RP_ERROR(RP_ERR_SHAPE, "%s: logits must be [N, classes/M], got %s", who,
                 rp_shape_str(logits, sl, sizeof sl));
        return NULL;
    }
    rp_arena *a = rp_tape_arena(t);
    tp_xent_ctx *c = rp_arena_alloc(a, sizeof *c);
    RP_PROPAGATE_NULL(c);
    *c = (tp_xent_ctx){.comm = comm,
                       .rank = rp_comm_rank(comm),
                       .size = rp_comm_size(comm),
                       .n = logits->shape[0],
                       .k = logits->shape[1],
                       .classes = classes};
    c->labels = rp_arena_alloc(a, (size_t)c->n * sizeof(int32_t));
    c->probs = rp_arena_alloc(a, (size_t)logits->numel * sizeof(float));
    c->maxes = rp_arena_alloc(a, (size_t)(c->n + 5) * sizeof(float));
    c->sums = rp_arena_alloc(a, (size_t)(2 * c->n) * sizeof(double));
    if (!c->labels || !c->probs || !c->maxes || !c->sums) return NULL;
    memcpy(c->labels, labels, (size_t)c->n * sizeof(int32_t));
    return rp_custom(t, &tp_xent_op, c, &logits, 1, 0, NULL);
}
