/*
 * resnet.c - ResNet-20/18/50 from the public layers. A block is a small
 * struct of layers; the network is a stem, an array of blocks and a head.
 */
#include <stdio.h>
#include <string.h>

#include "models/resnet/resnet.h"

#define MAX_BLOCKS 16

typedef struct resnet_block {
    bool bottleneck;
    rp_conv2d_layer conv[3];
    /* Tensor parallelism: convolution i is tp_conv[i] (column or row) when split[i]. */
    rp_tp_conv2d_layer tp_conv[3];
    bool split[3];
    rp_batchnorm_layer bn[3];
    bool project;
    rp_conv2d_layer proj;
    rp_batchnorm_layer proj_bn;
} resnet_block;

struct rp_resnet {
    rp_resnet_config cfg;
    rp_params *params;
    rp_conv2d_layer stem;
    rp_batchnorm_layer stem_bn;
    bool stem_pool; /* ImageNet stem: 3x3/2 max pool after the 7x7/2 convolution */
    resnet_block blocks[MAX_BLOCKS];
    int n_blocks;
    rp_linear_layer fc;
    int first, last; /* the units built and run: [first, last) */
};

rp_resnet_config rp_resnet_config_default(rp_resnet_kind kind)
{
    rp_resnet_config c = {.kind = kind,
                          .in_channels = 3,
                          .classes = kind == RP_RESNET20 ? 10 : 1000,
                          .recompute_bn = true};
    return c;
}

bool rp_resnet_kind_parse(const char *name, rp_resnet_kind *kind)
{
    static const struct {
        const char *name;
        rp_resnet_kind kind;
    } table[] = {{"resnet20", RP_RESNET20}, {"resnet18", RP_RESNET18}, {"resnet50", RP_RESNET50}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (!strcmp(name, table[i].name)) {
            *kind = table[i].kind;
            return true;
        }
    }
    return false;
}

const char *rp_resnet_kind_name(rp_resnet_kind kind)
{
    return kind == RP_RESNET20 ? "resnet20" : kind == RP_RESNET18 ? "resnet18" : "resnet50";
}

/* conv + bn named "<prefix>.conv<i>" / "<prefix>.bn<i>". */
static rp_status conv_bn(rp_params *p, const char *prefix, int i, rp_conv2d_layer *conv,
                         rp_batchnorm_layer *bn, int in, int out, int k, int stride,
                         const rp_resnet_config *cfg)
{
    char name[RP_NAME_MAX + 16]; /* prefixes are short; the layer rejects a name too long */
    snprintf(name, sizeof name, "%.40s.conv%d", prefix, i);
    RP_CHECK(rp_conv2d_layer_init(conv, p, name, in, out, k, stride, k / 2, false));
    snprintf(name, sizeof name, "%.40s.bn%d", prefix, i);
    RP_CHECK(rp_batchnorm_layer_init(bn, p, name, out));
    bn->p.comm = cfg->bn_comm;
    bn->p.reduce = cfg->bn_reduce;
    bn->p.reduce_ctx = cfg->bn_reduce_ctx;
    return RP_OK;
}

/* The tensor-parallel degree T of a configuration: 1 without tp_comm. */
static int tp_size(const rp_resnet_config *cfg)
{
    return cfg->tp_comm ? rp_comm_size(cfg->tp_comm) : 1;
}

/*
 * conv_bn's tensor-parallel form, the convolution split over cfg->tp_comm: a column split's batch
 * norm covers this member's out/T channels (per-channel statistics need no collective; its
 * constant initial values are the dense ones' slice, and its tensors are marked as the slice),
 * a row split's the reduced, replicated out.
 */
static rp_status tp_conv_bn(rp_params *p, const char *prefix, int i, rp_tp_conv2d_layer *conv,
                            rp_batchnorm_layer *bn, int in, int out, int k, int stride,
                            rp_tp_split split, const rp_resnet_config *cfg)
{
    char name[RP_NAME_MAX + 16];
    snprintf(name, sizeof name, "%.40s.conv%d", prefix, i);
    RP_CHECK(rp_tp_conv2d_layer_init(conv, p, name, cfg->tp_comm, split, in, out, k, stride, k / 2,
                                     false));
    snprintf(name, sizeof name, "%.40s.bn%d", prefix, i);
    RP_CHECK(
        rp_batchnorm_layer_init(bn, p, name, split == RP_TP_COLUMN ? out / tp_size(cfg) : out));
    bn->p.comm = cfg->bn_comm;
    bn->p.reduce = cfg->bn_reduce;
    bn->p.reduce_ctx = cfg->bn_reduce_ctx;
    if (split != RP_TP_COLUMN) return RP_OK;
    /* Marked as slices of the dense channels, so that a checkpoint places them. */
    int T = tp_size(cfg), rank = rp_comm_rank(cfg->tp_comm);
    const rp_tensor *bt[] = {bn->gamma, bn->beta, bn->running_mean, bn->running_var};
    for (size_t j = 0; j < sizeof bt / sizeof *bt; j++)
        RP_CHECK(rp_params_mark_shard(p, bt[j], 0, rank, T));
    return RP_OK;
}

/*
 * Convolution i of a block with its batch norm: dense, or split as `split` when tensor-parallel.
 */
static rp_status block_conv_bn(rp_resnet *net, resnet_block *b, const char *prefix, int i, int in,
                               int out, int k, int stride, bool tp, rp_tp_split split)
{
    b->split[i] = tp;
    if (tp)
        return tp_conv_bn(net->params, prefix, i + 1, &b->tp_conv[i], &b->bn[i], in, out, k, stride,
                          split, &net->cfg);
    return conv_bn(net->params, prefix, i + 1, &b->conv[i], &b->bn[i], in, out, k, stride,
                   &net->cfg);
}

/*
 * A block, dense or (T > 1) split Megatron-style so that it costs one all-reduce forward (the row
 * convolution's) and one backward (at the column convolution's input): basic blocks split conv1 by
 * columns and conv2 by rows; bottlenecks keep the 1x1 conv1 replicated and split conv2 by columns
 * and conv3 by rows. Splitting conv1 as well would leave two split convolutions in a row, which
 * needs a second collective (an all-gather between them); replicating it costs its FLOPs on every
 * member, about a quarter of a bottleneck's (4w^2 of 4w^2 + 9w^2 + 4w^2 per pixel at stride 1).
 */
static rp_status block_init(rp_resnet *net, resnet_block *b, const char *prefix, int in, int width,
                            int stride, bool bottleneck)
{
    const rp_resnet_config *cfg = &net->cfg;
    rp_params *p = net->params;
    int out = bottleneck ? 4 * width : width;
    bool tp = tp_size(cfg) > 1;
    b->bottleneck = bottleneck;
    if (bottleneck) {
        RP_CHECK(block_conv_bn(net, b, prefix, 0, in, width, 1, 1, false, RP_TP_COLUMN));
        RP_CHECK(block_conv_bn(net, b, prefix, 1, width, width, 3, stride, tp, RP_TP_COLUMN));
        RP_CHECK(block_conv_bn(net, b, prefix, 2, width, out, 1, 1, tp, RP_TP_ROW));
    } else {
        RP_CHECK(block_conv_bn(net, b, prefix, 0, in, width, 3, stride, tp, RP_TP_COLUMN));
        RP_CHECK(block_conv_bn(net, b, prefix, 1, width, width, 3, 1, tp, RP_TP_ROW));
    }
    /* Every BN but the block's last is followed by a ReLU: fuse it. */
    for (int i = 0; i + 1 < (bottleneck ? 3 : 2); i++)
        b->bn[i].p.relu = true;
    b->project = stride != 1 || in != out;
    if (b->project) {
        char name[48];
        snprintf(name, sizeof name, "%.30s.shortcut", prefix);
        RP_CHECK(conv_bn(p, name, 0, &b->proj, &b->proj_bn, in, out, 1, stride, cfg));
    }
    return RP_OK;
}

/* Stage widths and block counts of each kind. */
static void layout(rp_resnet_kind kind, int *stages, int counts[4], int widths[4], bool *bottleneck)
{
    static const int r20[4] = {3, 3, 3, 0}, r18[4] = {2, 2, 2, 2}, r50[4] = {3, 4, 6, 3};
    static const int w20[4] = {16, 32, 64, 0}, wimg[4] = {64, 128, 256, 512};
    *stages = kind == RP_RESNET20 ? 3 : 4;
    memcpy(counts, kind == RP_RESNET20 ? r20 : kind == RP_RESNET18 ? r18 : r50, sizeof r20);
    memcpy(widths, kind == RP_RESNET20 ? w20 : wimg, sizeof w20);
    *bottleneck = kind == RP_RESNET50;
}

/* The kind's unit count: the stem, the blocks and the head. */
int rp_resnet_units(rp_resnet_kind kind)
{
    int stages, counts[4], widths[4];
    bool bottleneck;
    if (kind < RP_RESNET20 || kind > RP_RESNET50) return 0;
    layout(kind, &stages, counts, widths, &bottleneck);
    int blocks = 0;
    for (int s = 0; s < stages; s++)
        blocks += counts[s];
    return blocks + 2;
}

/*
 * One block of the chain as the layout lays it out: its input channels, width, stride and output
 * channels. Block b counts from 0 (unit b + 1).
 */
typedef struct block_shape {
    char prefix[32];
    int in, width, stride, out;
} block_shape;

static int block_shapes(rp_resnet_kind kind, int stem_channels, block_shape *out, bool *bottleneck)
{
    int stages, counts[4], widths[4], n = 0, channels = stem_channels;
    layout(kind, &stages, counts, widths, bottleneck);
    for (int s = 0; s < stages; s++) {
        for (int i = 0; i < counts[s]; i++) {
            block_shape *b = &out[n++];
            snprintf(b->prefix, sizeof b->prefix, "stage%d.block%d", s + 1, i);
            b->in = channels;
            b->width = widths[s];
            b->stride = (i == 0 && s > 0) ? 2 : 1;
            b->out = *bottleneck ? 4 * widths[s] : widths[s];
            channels = b->out;
        }
    }
    return n;
}

static int conv_out(int x, int k, int stride, int pad)
{
    return (x + 2 * pad - k) / stride + 1;
}

/* A valid unit range: [first, last) inside the chain, last 0 meaning its end. */
static rp_status unit_range(const rp_resnet_config *cfg, int *first, int *last)
{
    int units = rp_resnet_units(cfg->kind);
    *first = cfg->first_unit;
    *last = cfg->last_unit ? cfg->last_unit : units;
    if (*first < 0 || *first >= *last || *last > units)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_resnet_create: units [%d, %d) are not a range of %s's %d units",
                        cfg->first_unit, cfg->last_unit, rp_resnet_kind_name(cfg->kind), units);
    return RP_OK;
}

/* A block's last batch norm's gamma, the one zero_init_residual zeroes (NULL if not held here). */
static rp_tensor *residual_gamma(const resnet_block *b)
{
    return b->bn[b->bottleneck ? 2 : 1].gamma;
}

rp_status rp_resnet_create(rp_resnet **out, const rp_resnet_config *cfg, uint64_t seed)
{
    if (!out || !cfg || cfg->in_channels < 1 || cfg->classes < 1 || cfg->kind < RP_RESNET20 ||
        cfg->kind > RP_RESNET50)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_resnet_create: bad configuration (in_channels %d, "
                        "classes %d)",
                        cfg ? cfg->in_channels : -1, cfg ? cfg->classes : -1);
    if (cfg->bn_comm && cfg->bn_reduce)
        return RP_ERROR(RP_ERR_INVALID, "rp_resnet_create: both bn_comm and bn_reduce are set; "
                                        "cross-replica batch norm takes one (bn_comm)");
    int first, last;
    RP_CHECK(unit_range(cfg, &first, &last));
    rp_status status = RP_OK;
    rp_resnet *net = rp_calloc(sizeof *net);
    if (!net) return rp_last_status();
    net->cfg = *cfg;
    net->first = first;
    net->last = last;
    RP_TRY(rp_params_create(&net->params));

    bool imagenet = cfg->kind != RP_RESNET20;
    int stem_channels = imagenet ? 64 : 16;
    block_shape shapes[MAX_BLOCKS];
    bool bottleneck;
    net->n_blocks = block_shapes(cfg->kind, stem_channels, shapes, &bottleneck);
    if (first == 0) {
        RP_TRY(conv_bn(net->params, "stem", 0, &net->stem, &net->stem_bn, cfg->in_channels,
                       stem_channels, imagenet ? 7 : 3, imagenet ? 2 : 1, cfg));
        net->stem_bn.p.relu = true;
    }
    net->stem_pool = imagenet;
    for (int i = 0; i < net->n_blocks; i++) {
        if (i + 1 < first || i + 1 >= last) continue;
        const block_shape *b = &shapes[i];
        RP_TRY(block_init(net, &net->blocks[i], b->prefix, b->in, b->width, b->stride, bottleneck));
    }
    if (last == net->n_blocks + 2)
        RP_TRY(rp_linear_layer_init(&net->fc, net->params, "fc", shapes[net->n_blocks - 1].out,
                                    cfg->classes, true, false));
    RP_TRY(rp_params_finalize(net->params, seed));
    if (cfg->zero_init_residual) {
        /* Zeros written from the host: the values are the kernel table's storage. */
        int64_t most = 0;
        for (int i = 0; i < net->n_blocks; i++) {
            const rp_tensor *gamma = residual_gamma(&net->blocks[i]);
            if (gamma && gamma->numel > most) most = gamma->numel;
        }
        float *zeros = rp_calloc((size_t)(most + 1) * sizeof(float));
        if (!zeros) {
            status = rp_last_status();
            goto cleanup;
        }
        for (int i = 0; i < net->n_blocks && status == RP_OK; i++) {
            rp_tensor *gamma = residual_gamma(&net->blocks[i]);
            if (gamma) status = rp_tensor_write(gamma, zeros, gamma->numel);
        }
        rp_free(zeros);
        if (status != RP_OK) goto cleanup;
    }
    *out = net;
    return RP_OK;
cleanup:
    rp_resnet_destroy(net);
    return status;
}

rp_status rp_resnet_unit_info_get(const rp_resnet_config *cfg, int h, int w, int unit,
                                  rp_resnet_unit_info *info)
{
    if (!cfg || !info || cfg->kind < RP_RESNET20 || cfg->kind > RP_RESNET50 || h < 1 || w < 1 ||
        cfg->in_channels < 1 || cfg->classes < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_resnet_unit_info_get: bad arguments (%d x %d images)",
                        h, w);
    int units = rp_resnet_units(cfg->kind);
    if (unit < 0 || unit >= units)
        return RP_ERROR(RP_ERR_INVALID, "rp_resnet_unit_info_get: unit %d; %s has units 0 to %d",
                        unit, rp_resnet_kind_name(cfg->kind), units - 1);
    bool imagenet = cfg->kind != RP_RESNET20;
    int stem_channels = imagenet ? 64 : 16;
    block_shape shapes[MAX_BLOCKS];
    bool bottleneck;
    int n_blocks = block_shapes(cfg->kind, stem_channels, shapes, &bottleneck);
    memset(info, 0, sizeof *info);
    /* Walk the chain up to the unit, tracking the spatial size. */
    int k = imagenet ? 7 : 3, stride = imagenet ? 2 : 1;
    int oh = conv_out(h, k, stride, k / 2), ow = conv_out(w, k, stride, k / 2);
    if (unit == 0) {
        snprintf(info->name, sizeof info->name, "stem");
        info->params = (int64_t)k * k * cfg->in_channels * stem_channels + 2 * stem_channels;
        info->buffers = 2 * stem_channels;
        info->flops = 2.0 * oh * ow * k * k * cfg->in_channels * stem_channels;
    }
    if (imagenet) {
        oh = conv_out(oh, 3, 2, 1);
        ow = conv_out(ow, 3, 2, 1);
    }
    info->out_h = oh;
    info->out_w = ow;
    info->out_c = stem_channels;
    for (int i = 0; i < n_blocks && i + 1 <= unit; i++) {
        const block_shape *b = &shapes[i];
        int ih = oh, iw = ow;
        oh = conv_out(ih, 3, b->stride, 1);
        ow = conv_out(iw, 3, b->stride, 1);
        if (i + 1 < unit) continue;
        snprintf(info->name, sizeof info->name, "%.31s", b->prefix);
        /* (in, out, k, spatial size of the output) of each convolution */
        int convs[4][4], n = 0;
        if (bottleneck) {
            memcpy(convs[n++], (int[]){b->in, b->width, 1, 0}, sizeof convs[0]);
            memcpy(convs[n++], (int[]){b->width, b->width, 3, 1}, sizeof convs[0]);
            memcpy(convs[n++], (int[]){b->width, b->out, 1, 1}, sizeof convs[0]);
        } else {
            memcpy(convs[n++], (int[]){b->in, b->width, 3, 1}, sizeof convs[0]);
            memcpy(convs[n++], (int[]){b->width, b->out, 3, 1}, sizeof convs[0]);
        }
        if (b->stride != 1 || b->in != b->out)
            memcpy(convs[n++], (int[]){b->in, b->out, 1, 1}, sizeof convs[0]);
        for (int c = 0; c < n; c++) {
            /* convs[c][3]: 0 at the input's size (a bottleneck's first 1x1), 1 at the output's */
            double pixels = convs[c][3] ? (double)oh * ow : (double)ih * iw;
            info->params +=
                (int64_t)convs[c][2] * convs[c][2] * convs[c][0] * convs[c][1] + 2 * convs[c][1];
            info->buffers += 2 * convs[c][1];
            info->flops += 2.0 * pixels * convs[c][2] * convs[c][2] * convs[c][0] * convs[c][1];
        }
        info->out_h = oh;
        info->out_w = ow;
        info->out_c = b->out;
    }
    if (unit == n_blocks + 1) {
        int c = shapes[n_blocks - 1].out;
        snprintf(info->name, sizeof info->name, "head");
        info->params = (int64_t)c * cfg->classes + cfg->classes;
        info->flops = 2.0 * c * cfg->classes + (double)oh * ow * c;
        info->out_h = info->out_w = 1;
        info->out_c = cfg->classes;
    }
    return RP_OK;
}

rp_status rp_resnet_partition(const rp_resnet_config *cfg, int h, int w, int stages, int *bounds)
{
    if (!cfg || !bounds) return RP_ERROR(RP_ERR_INVALID, "rp_resnet_partition: NULL argument");
    int units = rp_resnet_units(cfg->kind);
    if (stages < 1 || stages > units)
        return RP_ERROR(RP_ERR_INVALID,
                        "cannot cut %s into %d stages: it has %d units (the stem, %d blocks, the "
                        "head), so 1 to %d stages",
                        rp_resnet_kind_name(cfg->kind), stages, units, units - 2, units);
    double cost[MAX_BLOCKS + 2], prefix[MAX_BLOCKS + 3] = {0};
    for (int u = 0; u < units; u++) {
        rp_resnet_unit_info info;
        RP_CHECK(rp_resnet_unit_info_get(cfg, h, w, u, &info));
        cost[u] = info.flops;
        prefix[u + 1] = prefix[u] + cost[u];
    }
    /*
     * best[s][u]: the smallest largest-stage cost of cutting units [0, u) into s stages; the
     * chain is short (at most 18 units), so the full table is cheap.
     */
    double best[MAX_BLOCKS + 3][MAX_BLOCKS + 3];
    int cut[MAX_BLOCKS + 3][MAX_BLOCKS + 3];
    for (int u = 1; u <= units; u++) {
        best[1][u] = prefix[u];
        cut[1][u] = 0;
    }
    for (int s = 2; s <= stages; s++) {
        for (int u = s; u <= units; u++) {
            best[s][u] = -1;
            for (int v = s - 1; v < u; v++) {
                double here = prefix[u] - prefix[v],
                       worst = best[s - 1][v] > here ? best[s - 1][v] : here;
                if (best[s][u] < 0 || worst < best[s][u]) {
                    best[s][u] = worst;
                    cut[s][u] = v;
                }
            }
        }
    }
    bounds[stages] = units;
    for (int s = stages; s >= 1; s--)
        bounds[s - 1] = cut[s][bounds[s]];
    return RP_OK;
}

void rp_resnet_destroy(rp_resnet *net)
{
    if (!net) return;
    rp_params_destroy(net->params);
    rp_free(net);
}

rp_params *rp_resnet_params(const rp_resnet *net)
{
    return net->params;
}

static rp_tensor *conv_bn_forward(rp_tape *t, const rp_conv2d_layer *conv,
                                  const rp_batchnorm_layer *bn, rp_tensor *x, bool training)
{
    return rp_batchnorm_layer_forward(t, bn, rp_conv2d_layer_forward(t, conv, x), training);
}

/* Convolution i of a block, dense or tensor-parallel. */
static rp_tensor *block_conv(rp_tape *t, const resnet_block *b, int i, rp_tensor *x)
{
    return b->split[i] ? rp_tp_conv2d_layer_forward(t, &b->tp_conv[i], x)
                       : rp_conv2d_layer_forward(t, &b->conv[i], x);
}

/*
 * relu(bn(conv(...)) + shortcut): the last batch norm, the addition and the ReLU are one fused op
 * (rp_batch_norm_add), which keeps one tensor where three ops kept three.
 */
static rp_tensor *block_forward(rp_tape *t, const resnet_block *b, rp_tensor *x, bool training,
                                bool recompute)
{
    int n = b->bottleneck ? 3 : 2;
    rp_tensor *y = block_conv(t, b, 0, x);
    for (int i = 0; i < n - 1; i++) {
        rp_tensor *a = rp_batchnorm_layer_forward(t, &b->bn[i], y, training);
        y = block_conv(t, b, i + 1, a);
        /* The convolution was a's only reader (a column split's through a view of a, which
           rp_tape_drop follows): backward recomputes a from its batch norm. */
        if (recompute && y && a->node >= 0 && rp_tape_drop(t, a) != RP_OK) return NULL;
    }
    rp_tensor *shortcut = b->project ? conv_bn_forward(t, &b->proj, &b->proj_bn, x, training) : x;
    return rp_batchnorm_layer_forward_add(t, &b->bn[n - 1], y, shortcut, true, training);
}

rp_tensor *rp_resnet_forward(rp_tape *t, const rp_resnet *net, rp_tensor *x, bool training)
{
    return rp_resnet_forward_features(t, net, x, training, NULL);
}

rp_tensor *rp_resnet_forward_features(rp_tape *t, const rp_resnet *net, rp_tensor *x, bool training,
                                      rp_tensor **features)
{
    if (features) *features = NULL;
    if (x && net->first == 0 && (x->ndim != 4 || x->shape[3] != net->cfg.in_channels)) {
        char s[64];
        RP_ERROR(RP_ERR_SHAPE, "%s expects NHWC input with %d channels, got %s",
                 rp_resnet_kind_name(net->cfg.kind), net->cfg.in_channels,
                 rp_shape_str(x, s, sizeof s));
        return NULL;
    }
    if (net->first == 0) {
        x = conv_bn_forward(t, &net->stem, &net->stem_bn, x, training); /* ReLU fused in the BN */
        if (net->stem_pool) x = rp_max_pool2d(t, x, (rp_pool_params){3, 2, 1});
    }
    for (int i = 0; i < net->n_blocks; i++)
        if (i + 1 >= net->first && i + 1 < net->last)
            x = block_forward(t, &net->blocks[i], x, training, net->cfg.recompute_bn);
    if (net->last < net->n_blocks + 2) return x;
    rp_tensor *pooled = rp_global_avg_pool(t, x);
    if (features) *features = pooled;
    return rp_linear_layer_forward(t, &net->fc, pooled);
}

int rp_resnet_tp_size(const rp_resnet *net)
{
    return net ? tp_size(&net->cfg) : 1;
}

/* ---- dense tensors for checkpoints ------------------------------------------------------------
 */

/*
 * How this member holds the dense tensor d as s: *axis -1 for replicated (the same shape), else
 * the axis along which s is d's slice over T members. RP_ERR_SHAPE naming d otherwise.
 */
static rp_status held_as(const rp_tensor *d, const rp_tensor *s, int T, const char *who, int *axis)
{
    char sd[64], ss[64];
    if (!s)
        return RP_ERROR(RP_ERR_SHAPE, "%s: the network has no tensor \"%s\" (dense %s)", who,
                        d->name, rp_shape_str(d, sd, sizeof sd));
    int n = 0;
    *axis = -1;
    if (s->ndim == d->ndim)
        for (int i = 0; i < d->ndim; i++)
            if (s->shape[i] != d->shape[i]) {
                n++;
                *axis = i;
            }
    if (s->ndim == d->ndim && (n == 0 || (n == 1 && s->shape[*axis] * T == d->shape[*axis])))
        return RP_OK;
    return RP_ERROR(RP_ERR_SHAPE,
                    "%s: tensor \"%s\" is %s in the dense list and %s in the network, neither the "
                    "same shape nor its slice over %d members along one axis",
                    who, d->name, rp_shape_str(d, sd, sizeof sd), rp_shape_str(s, ss, sizeof ss),
                    T);
}

/*
 * Moves `blocks` host copies of blocks laid out as a list's value block (state false: every
 * tensor's values, one block) or as its trainable part (state true: optimizer state, one block
 * per slot) between this member's shards (`shard`, laid out as the network's list) and the dense
 * tensors (`dense_host`, laid out as `dense`): gather all-gathers split tensors over tp_comm and
 * places the slices, scatter copies this member's slice. Every tensor is checked before the
 * first collective, so members given the same wrong list fail together (with blocks 0, only the
 * checks: the buffers may be NULL).
 */
static rp_status move_dense(const rp_resnet *net, const rp_params *dense, float *shard,
                            float *dense_host, bool state, int blocks, bool gather, const char *who)
{
    const rp_params *np = net->params;
    int T = tp_size(&net->cfg), rank = net->cfg.tp_comm ? rp_comm_rank(net->cfg.tp_comm) : 0;
    int count = state ? rp_params_trainable_count(dense) : rp_params_count(dense);
    int have = state ? rp_params_trainable_count(np) : rp_params_count(np);
    if (count != have)
        return RP_ERROR(RP_ERR_SHAPE, "%s: the dense list has %d %s, the network %d", who, count,
                        state ? "trainable parameters" : "tensors", have);
    int64_t gather_numel = 0;
    for (int i = 0; i < count; i++) {
        const rp_tensor *d = rp_params_at(dense, i);
        const rp_tensor *s = rp_params_find(np, d->name);
        int axis;
        RP_CHECK(held_as(d, s, T, who, &axis));
        if (state && s->index >= rp_params_trainable_count(np))
            return RP_ERROR(RP_ERR_SHAPE,
                            "%s: \"%s\" is trainable in the dense list, not in the "
                            "network",
                            who, d->name);
        if (axis >= 0 && s->numel * T > gather_numel) gather_numel = s->numel * T;
    }
    float *buf = NULL;
    if (gather && gather_numel > 0) {
        buf = rp_calloc((size_t)gather_numel * sizeof(float));
        if (!buf) return rp_last_status();
    }
    rp_status status = RP_OK;
    int64_t s_stride = rp_params_trainable_numel(np), d_stride = rp_params_trainable_numel(dense);
    for (int k = 0; k < blocks; k++) {
        for (int i = 0; i < count; i++) {
            const rp_tensor *d = rp_params_at(dense, i);
            const rp_tensor *s = rp_params_find(np, d->name);
            float *sp = shard + k * s_stride + rp_params_offset(np, s->index);
            float *dp = dense_host + k * d_stride + rp_params_offset(dense, i);
            int axis;
            RP_TRY(held_as(d, s, T, who, &axis));
            if (axis < 0) {
                if (gather)
                    memcpy(dp, sp, (size_t)d->numel * sizeof(float));
                else
                    memcpy(sp, dp, (size_t)d->numel * sizeof(float));
            } else if (!gather) {
                RP_TRY(rp_tp_shard_copy(sp, dp, d->ndim, d->shape, axis, rank, T));
            } else {
                RP_TRY(rp_comm_all_gather(net->cfg.tp_comm, sp, buf, s->numel, RP_F32));
                for (int r = 0; r < T; r++)
                    RP_TRY(
                        rp_tp_shard_place(dp, buf + r * s->numel, d->ndim, d->shape, axis, r, T));
            }
        }
    }
cleanup:
    rp_free(buf);
    return status;
}

/* The values of both lists through host copies: the blocks are the kernel table's storage. */
static rp_status move_values(const rp_resnet *net, const rp_params *dense, bool gather,
                             const char *who)
{
    if (!net || !dense)
        return RP_ERROR(RP_ERR_INVALID, "%s: bad arguments (net %p, dense %p)", who,
                        (const void *)net, (const void *)dense);
    rp_params *np = net->params;
    int64_t ns = rp_params_numel(np), nd = rp_params_numel(dense);
    float *shard = rp_alloc((size_t)ns * sizeof(float)), *dh = rp_alloc((size_t)nd * sizeof(float));
    rp_status status = RP_OK;
    if (!shard || !dh) {
        status = rp_last_status();
        goto cleanup;
    }
    RP_TRY(rp_params_read_values(np, shard));
    RP_TRY(rp_params_read_values(dense, dh));
    RP_TRY(move_dense(net, dense, shard, dh, false, 1, gather, who));
    /* dense is the caller's to fill when gathering (a const list is only ever read). */
    RP_TRY(gather ? rp_params_write_values((rp_params *)dense, dh)
                  : rp_params_write_values(np, shard));
cleanup:
    rp_free(dh);
    rp_free(shard);
    return status;
}

rp_status rp_resnet_gather_dense(const rp_resnet *net, rp_params *dense)
{
    return move_values(net, dense, true, "rp_resnet_gather_dense");
}

rp_status rp_resnet_scatter_dense(rp_resnet *net, const rp_params *dense)
{
    return move_values(net, dense, false, "rp_resnet_scatter_dense");
}

/*
 * Optimizer state goes through checkpoints in memory: rp_checkpoint_add_optimizer gives an
 * optimizer's state as host tensors "slot<k>/<name>" (and "steps"), and
 * rp_checkpoint_read_optimizer puts such tensors back (taking its range's part in a sharded
 * optimizer, and a member's slab of a split tensor, so scattering is one read). Gathering goes
 * through host blocks laid out as move_dense wants.
 */

/* The slots of ck's state of `params` into host[slots x trainable numel]. */
static rp_status state_to_host(const rp_checkpoint *ck, const rp_params *params, int slots,
                               float *host)
{
    int64_t stride = rp_params_trainable_numel(params);
    for (int k = 0; k < slots; k++)
        for (int i = 0; i < rp_params_trainable_count(params); i++) {
            const rp_tensor *t = rp_params_at(params, i);
            char name[RP_NAME_MAX + 32];
            snprintf(name, sizeof name, "slot%d/%s", k, t->name);
            RP_CHECK(rp_checkpoint_copy_f32(
                ck, name, host + k * stride + rp_params_offset(params, i), t->numel));
        }
    return RP_OK;
}

/* host[slots x trainable numel] and `steps` as the state tensors of `params`, added to ck. */
static rp_status host_to_state(rp_checkpoint *ck, const rp_params *params, int slots,
                               const float *host, int64_t steps)
{
    int64_t stride = rp_params_trainable_numel(params);
    for (int k = 0; k < slots; k++)
        for (int i = 0; i < rp_params_trainable_count(params); i++) {
            const rp_tensor *t = rp_params_at(params, i);
            char name[RP_NAME_MAX + 32];
            snprintf(name, sizeof name, "slot%d/%s", k, t->name);
            int64_t shape[RP_MAX_DIMS];
            for (int d = 0; d < t->ndim; d++)
                shape[d] = t->shape[d];
            RP_CHECK(rp_checkpoint_add_f32(ck, name, t->ndim, shape,
                                           host + k * stride + rp_params_offset(params, i)));
        }
    return rp_checkpoint_add_i64(ck, "steps", 1, &steps);
}

static rp_status move_state(const rp_resnet *net, const rp_optimizer *from, rp_optimizer *to,
                            const rp_params *dense, bool gather, const char *who)
{
    if (!net || !dense || !from || !to)
        return RP_ERROR(RP_ERR_INVALID, "%s: bad arguments (net %p, dense %p, optimizers %p, %p)",
                        who, (const void *)net, (const void *)dense, (const void *)from,
                        (const void *)to);
    const rp_params *np = net->params;
    rp_checkpoint *in = NULL, *out = NULL;
    float *shard = NULL, *dh = NULL;
    rp_status status = RP_OK;
    RP_TRY(rp_checkpoint_create(&in));
    RP_TRY(rp_checkpoint_add_optimizer(in, from, gather ? np : dense, ""));
    if (!gather) {
        /* Every tensor checked against the network first (no block moves), then each member
           reads its slices of the dense state (rp_checkpoint_read_optimizer takes a split
           tensor's slab). */
        RP_TRY(move_dense(net, dense, NULL, NULL, true, 0, false, who));
        RP_TRY(rp_checkpoint_read_optimizer(in, to, np, ""));
        goto cleanup;
    }
    int slots = rp_optim_slots(rp_optimizer_config(from));
    int64_t ns = rp_params_trainable_numel(np), nd = rp_params_trainable_numel(dense);
    shard = rp_calloc((size_t)(slots * ns + 1) * sizeof(float));
    dh = rp_calloc((size_t)(slots * nd + 1) * sizeof(float));
    if (!shard || !dh) {
        status = rp_last_status();
        goto cleanup;
    }
    int64_t n = 0;
    const int64_t *steps = rp_checkpoint_get_i64(in, "steps", &n);
    if (!steps || n != 1) {
        status = RP_ERROR(RP_ERR_INVALID, "%s: the optimizer's state has no step count", who);
        goto cleanup;
    }
    RP_TRY(state_to_host(in, np, slots, shard));
    RP_TRY(move_dense(net, dense, shard, dh, true, slots, true, who));
    RP_TRY(rp_checkpoint_create(&out));
    RP_TRY(host_to_state(out, dense, slots, dh, steps[0]));
    RP_TRY(rp_checkpoint_read_optimizer(out, to, dense, ""));
cleanup:
    rp_checkpoint_destroy(out);
    rp_checkpoint_destroy(in);
    rp_free(dh);
    rp_free(shard);
    return status;
}

rp_status rp_resnet_gather_state(const rp_resnet *net, const rp_optimizer *shard_opt,
                                 const rp_params *dense, rp_optimizer *dense_opt)
{
    return move_state(net, shard_opt, dense_opt, dense, true, "rp_resnet_gather_state");
}

rp_status rp_resnet_scatter_state(const rp_resnet *net, rp_optimizer *shard_opt,
                                  const rp_params *dense, const rp_optimizer *dense_opt)
{
    return move_state(net, dense_opt, shard_opt, dense, false, "rp_resnet_scatter_state");
}
