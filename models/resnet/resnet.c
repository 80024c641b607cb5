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

static rp_status block_init(rp_resnet *net, resnet_block *b, const char *prefix, int in, int width,
                            int stride, bool bottleneck)
{
    const rp_resnet_config *cfg = &net->cfg;
    rp_params *p = net->params;
    int out = bottleneck ? 4 * width : width;
    b->bottleneck = bottleneck;
    if (bottleneck) {
        RP_CHECK(conv_bn(p, prefix, 1, &b->conv[0], &b->bn[0], in, width, 1, 1, cfg));
        RP_CHECK(conv_bn(p, prefix, 2, &b->conv[1], &b->bn[1], width, width, 3, stride, cfg));
        RP_CHECK(conv_bn(p, prefix, 3, &b->conv[2], &b->bn[2], width, out, 1, 1, cfg));
    } else {
        RP_CHECK(conv_bn(p, prefix, 1, &b->conv[0], &b->bn[0], in, width, 3, stride, cfg));
        RP_CHECK(conv_bn(p, prefix, 2, &b->conv[1], &b->bn[1], width, width, 3, 1, cfg));
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
    rp_status status = RP_OK;
    rp_resnet *net = rp_calloc(sizeof *net);
    if (!net) return rp_last_status();
    net->cfg = *cfg;
    RP_TRY(rp_params_create(&net->params));

    int stages, counts[4], widths[4];
    bool bottleneck;
    layout(cfg->kind, &stages, counts, widths, &bottleneck);
    int channels = widths[0];
    if (cfg->kind == RP_RESNET20) {
        RP_TRY(conv_bn(net->params, "stem", 0, &net->stem, &net->stem_bn, cfg->in_channels,
                       channels, 3, 1, cfg));
    } else {
        RP_TRY(conv_bn(net->params, "stem", 0, &net->stem, &net->stem_bn, cfg->in_channels,
                       channels, 7, 2, cfg));
        net->stem_pool = true;
    }
    net->stem_bn.p.relu = true;
    for (int s = 0; s < stages; s++) {
        for (int i = 0; i < counts[s]; i++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "stage%d.block%d", s + 1, i);
            int stride = (i == 0 && s > 0) ? 2 : 1;
            resnet_block *b = &net->blocks[net->n_blocks++];
            RP_TRY(block_init(net, b, prefix, channels, widths[s], stride, bottleneck));
            channels = bottleneck ? 4 * widths[s] : widths[s];
        }
    }
    RP_TRY(rp_linear_layer_init(&net->fc, net->params, "fc", channels, cfg->classes, true, false));
    RP_TRY(rp_params_finalize(net->params, seed));
    if (cfg->zero_init_residual) {
        for (int i = 0; i < net->n_blocks; i++) {
            resnet_block *b = &net->blocks[i];
            rp_tensor *gamma = b->bn[b->bottleneck ? 2 : 1].gamma;
            memset(gamma->data, 0, (size_t)gamma->numel * sizeof(float));
        }
    }
    *out = net;
    return RP_OK;
cleanup:
    rp_resnet_destroy(net);
    return status;
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

/*
 * relu(bn(conv(...)) + shortcut): the last batch norm, the addition and the ReLU are one fused op
 * (rp_batch_norm_add), which keeps one tensor where three ops kept three.
 */
static rp_tensor *block_forward(rp_tape *t, const resnet_block *b, rp_tensor *x, bool training,
                                bool recompute)
{
    int n = b->bottleneck ? 3 : 2;
    rp_tensor *y = rp_conv2d_layer_forward(t, &b->conv[0], x);
    for (int i = 0; i < n - 1; i++) {
        rp_tensor *a = rp_batchnorm_layer_forward(t, &b->bn[i], y, training);
        y = rp_conv2d_layer_forward(t, &b->conv[i + 1], a);
        /* The convolution was a's only reader: backward recomputes it from y's batch norm. */
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
    if (x && (x->ndim != 4 || x->shape[3] != net->cfg.in_channels)) {
        char s[64];
        RP_ERROR(RP_ERR_SHAPE, "%s expects NHWC input with %d channels, got %s",
                 rp_resnet_kind_name(net->cfg.kind), net->cfg.in_channels,
                 rp_shape_str(x, s, sizeof s));
        return NULL;
    }
    x = conv_bn_forward(t, &net->stem, &net->stem_bn, x, training); /* ReLU fused into the BN */
    if (net->stem_pool) x = rp_max_pool2d(t, x, (rp_pool_params){3, 2, 1});
    for (int i = 0; i < net->n_blocks; i++)
        x = block_forward(t, &net->blocks[i], x, training, net->cfg.recompute_bn);
    rp_tensor *pooled = rp_global_avg_pool(t, x);
    if (features) *features = pooled;
    return rp_linear_layer_forward(t, &net->fc, pooled);
}
