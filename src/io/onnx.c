/*
 * onnx.c - an ONNX graph built in memory and saved as a ModelProto
 * (replicator/onnx.h). The graph keeps its own plain arrays (names, nodes,
 * initializers); rp_onnx_save lays protobuf-c's message structs over them
 * (pointing at the values, not copying them) and packs the model straight
 * into the file, so a ResNet-50's 100 MB of weights are never held twice.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "core/file_internal.h"
#include "onnx.pb-c.h"
#include "replicator/onnx.h"
#include "replicator/replicator.h" /* RP_VERSION */

#define ONNX_MAX_DIMS 8

typedef struct onnx_io {
    char *name, *doc;
    int ndim;
    int64_t dims[ONNX_MAX_DIMS];
} onnx_io;

typedef struct onnx_init {
    char *name;
    int ndim;
    int64_t dims[ONNX_MAX_DIMS];
    int dtype; /* IO_ONNX_PB__TENSOR_PROTO__DATA_TYPE__FLOAT or __INT64 */
    void *data;
    size_t nbytes;
    bool weight;
} onnx_init;

typedef struct onnx_node {
    char *op, *out;
    char **in;
    int n_in;
    rp_onnx_attr *attrs; /* names, strings and ints owned here */
    int n_attrs;
} onnx_node;

typedef struct onnx_meta {
    char *key, *value;
} onnx_meta;

struct rp_onnx {
    char *name, *doc;
    rp_status error;
    char **values; /* every value name: inputs, initializers, node outputs */
    int n_values, cap_values;
    onnx_io *inputs, *outputs;
    int n_inputs, cap_inputs, n_outputs, cap_outputs;
    onnx_init *inits;
    int n_inits, cap_inits;
    onnx_node *nodes;
    int n_nodes, cap_nodes;
    onnx_meta *meta;
    int n_meta, cap_meta;
};

/* ---- bookkeeping ------------------------------------------------------------------------------
 */

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Keeps the graph's first error; returns it. */
static rp_status fail(rp_onnx *g, rp_status status)
{
    if (g->error == RP_OK) g->error = status;
    return g->error;
}

static rp_status nomem(rp_onnx *g, const char *what)
{
    return fail(g, RP_ERROR(RP_ERR_NOMEM, "ONNX graph %s: no memory for %s", g->name, what));
}

/* Room for one more element in *arr (of *cap, n used). */
static bool grow(rp_onnx *g, void **arr, int *cap, int n, size_t elem)
{
    if (n < *cap) return true;
    int next = *cap ? 2 * *cap : 16;
    void *p = realloc(*arr, (size_t)next * elem);
    if (!p) {
        nomem(g, "its lists");
        return false;
    }
    *arr = p;
    *cap = next;
    return true;
}

static int find_value(const rp_onnx *g, const char *name)
{
    for (int i = g->n_values - 1; i >= 0; i--)
        if (!strcmp(g->values[i], name)) return i;
    return -1;
}

/* Registers a new value name; returns the graph's copy, or NULL (error kept). */
static const char *new_value(rp_onnx *g, const char *name, const char *what)
{
    if (!name || !*name) {
        fail(g, RP_ERROR(RP_ERR_INVALID, "ONNX graph %s: %s without a name", g->name, what));
        return NULL;
    }
    if (find_value(g, name) >= 0) {
        fail(g, RP_ERROR(RP_ERR_INVALID, "ONNX graph %s: %s \"%s\": the name is already a value",
                         g->name, what, name));
        return NULL;
    }
    if (!grow(g, (void **)&g->values, &g->cap_values, g->n_values, sizeof *g->values)) return NULL;
    char *copy = dup_str(name);
    if (!copy) {
        nomem(g, name);
        return NULL;
    }
    g->values[g->n_values++] = copy;
    return copy;
}

static bool check_shape(rp_onnx *g, const char *name, int ndim, const int64_t *dims, bool symbolic,
                        int min_ndim)
{
    bool ok = ndim >= min_ndim && ndim <= ONNX_MAX_DIMS && (ndim == 0 || dims);
    for (int i = 0; ok && i < ndim; i++)
        ok = dims[i] >= 0 || (symbolic && dims[i] < 0);
    if (!ok)
        fail(g, RP_ERROR(RP_ERR_INVALID,
                         "ONNX graph %s: \"%s\" has a bad shape (%d dimensions; %d to %d, each a "
                         "size >= 0%s)",
                         g->name, name ? name : "(null)", ndim, min_ndim, ONNX_MAX_DIMS,
                         symbolic ? " or the symbolic batch" : ""));
    return ok;
}

/* ---- building ----------------------------------------------------------------------------------
 */

rp_status rp_onnx_create(rp_onnx **out, const char *name)
{
    if (!out || !name || !*name)
        return RP_ERROR(RP_ERR_INVALID, "rp_onnx_create: NULL argument or empty graph name");
    *out = NULL;
    rp_onnx *g = calloc(1, sizeof *g);
    if (!g || !(g->name = dup_str(name))) {
        free(g);
        return RP_ERROR(RP_ERR_NOMEM, "no memory for ONNX graph %s", name);
    }
    *out = g;
    return RP_OK;
}

static void free_io(onnx_io *io, int n)
{
    for (int i = 0; i < n; i++) {
        free(io[i].name);
        free(io[i].doc);
    }
    free(io);
}

void rp_onnx_destroy(rp_onnx *g)
{
    if (!g) return;
    for (int i = 0; i < g->n_nodes; i++) {
        onnx_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            free(n->in[k]);
        for (int k = 0; k < n->n_attrs; k++) {
            free((char *)n->attrs[k].name);
            free((char *)n->attrs[k].s);
            free((int64_t *)n->attrs[k].ints);
        }
        free(n->in);
        free(n->attrs);
        free(n->op);
    }
    for (int i = 0; i < g->n_inits; i++)
        free(g->inits[i].data);
    for (int i = 0; i < g->n_values; i++)
        free(g->values[i]);
    for (int i = 0; i < g->n_meta; i++) {
        free(g->meta[i].key);
        free(g->meta[i].value);
    }
    free_io(g->inputs, g->n_inputs);
    free_io(g->outputs, g->n_outputs);
    free(g->nodes);
    free(g->inits);
    free(g->values);
    free(g->meta);
    free(g->doc);
    free(g->name);
    free(g);
}

rp_status rp_onnx_status(const rp_onnx *g)
{
    return g ? g->error : RP_ERROR(RP_ERR_INVALID, "rp_onnx_status: NULL graph");
}

static bool add_io(rp_onnx *g, onnx_io **list, int *n, int *cap, const char *name, int ndim,
                   const int64_t *dims, const char *doc)
{
    if (!grow(g, (void **)list, cap, *n, sizeof **list)) return false;
    onnx_io *io = &(*list)[*n];
    memset(io, 0, sizeof *io);
    io->name = dup_str(name);
    io->doc = doc ? dup_str(doc) : NULL;
    if (!io->name || (doc && !io->doc)) {
        free(io->name);
        free(io->doc);
        nomem(g, name);
        return false;
    }
    io->ndim = ndim;
    memcpy(io->dims, dims, (size_t)ndim * sizeof *dims);
    (*n)++;
    return true;
}

const char *rp_onnx_input(rp_onnx *g, const char *name, int ndim, const int64_t *dims,
                          const char *doc)
{
    if (!g || g->error != RP_OK || !check_shape(g, name, ndim, dims, true, 1)) return NULL;
    const char *v = new_value(g, name, "input");
    if (!v || !add_io(g, &g->inputs, &g->n_inputs, &g->cap_inputs, v, ndim, dims, doc)) return NULL;
    return v;
}

rp_status rp_onnx_output(rp_onnx *g, const char *value, int ndim, const int64_t *dims,
                         const char *doc)
{
    if (!g) return RP_ERROR(RP_ERR_INVALID, "rp_onnx_output: NULL graph");
    if (g->error != RP_OK) return g->error;
    if (!value || find_value(g, value) < 0)
        return fail(g, RP_ERROR(RP_ERR_INVALID, "ONNX graph %s: output \"%s\" is not a value",
                                g->name, value ? value : "(null)"));
    if (!check_shape(g, value, ndim, dims, true, 1)) return g->error;
    add_io(g, &g->outputs, &g->n_outputs, &g->cap_outputs, value, ndim, dims, doc);
    return g->error;
}

static const char *add_init(rp_onnx *g, const char *name, int ndim, const int64_t *dims,
                            const void *values, size_t elem, int dtype, bool weight)
{
    if (!g || g->error != RP_OK || !check_shape(g, name, ndim, dims, false, 0)) return NULL;
    if (!values) {
        fail(g, RP_ERROR(RP_ERR_INVALID, "ONNX graph %s: initializer \"%s\" without values",
                         g->name, name));
        return NULL;
    }
    size_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= (size_t)dims[i];
    if (!grow(g, (void **)&g->inits, &g->cap_inits, g->n_inits, sizeof *g->inits)) return NULL;
    onnx_init *in = &g->inits[g->n_inits];
    memset(in, 0, sizeof *in);
    in->nbytes = numel * elem;
    in->data = malloc(in->nbytes ? in->nbytes : 1);
    if (!in->data) {
        nomem(g, name);
        return NULL;
    }
    const char *v = new_value(g, name, weight ? "weight" : "constant");
    if (!v) {
        free(in->data);
        return NULL;
    }
    memcpy(in->data, values, in->nbytes);
    in->name = (char *)v; /* the value list owns the string */
    in->ndim = ndim;
    if (ndim > 0) memcpy(in->dims, dims, (size_t)ndim * sizeof *dims);
    in->dtype = dtype;
    in->weight = weight;
    g->n_inits++;
    return v;
}

const char *rp_onnx_weight(rp_onnx *g, const char *name, int ndim, const int64_t *dims,
                           const float *values)
{
    return add_init(g, name, ndim, dims, values, sizeof(float),
                    IO_ONNX_PB__TENSOR_PROTO__DATA_TYPE__FLOAT, true);
}

const char *rp_onnx_const_f32(rp_onnx *g, const char *name, int ndim, const int64_t *dims,
                              const float *values)
{
    return add_init(g, name, ndim, dims, values, sizeof(float),
                    IO_ONNX_PB__TENSOR_PROTO__DATA_TYPE__FLOAT, false);
}

const char *rp_onnx_const_i64(rp_onnx *g, const char *name, int ndim, const int64_t *dims,
                              const int64_t *values)
{
    return add_init(g, name, ndim, dims, values, sizeof(int64_t),
                    IO_ONNX_PB__TENSOR_PROTO__DATA_TYPE__INT64, false);
}

/* Copies attribute a into *d (strings and ints owned by d). */
static bool copy_attr(rp_onnx *g, rp_onnx_attr *d, const rp_onnx_attr *a)
{
    *d = *a;
    d->name = NULL;
    d->s = NULL;
    d->ints = NULL;
    bool ok = a->name &&
              (a->type == RP_ONNX_ATTR_FLOAT || a->type == RP_ONNX_ATTR_INT ||
               (a->type == RP_ONNX_ATTR_STRING && a->s) ||
               (a->type == RP_ONNX_ATTR_INTS && a->n_ints >= 0 && (a->ints || a->n_ints == 0)));
    if (!ok) {
        fail(g, RP_ERROR(RP_ERR_INVALID, "ONNX graph %s: attribute \"%s\" of type %d is malformed",
                         g->name, a->name ? a->name : "(null)", (int)a->type));
        return false;
    }
    d->name = dup_str(a->name);
    if (a->type == RP_ONNX_ATTR_STRING) d->s = dup_str(a->s);
    if (a->type == RP_ONNX_ATTR_INTS) {
        int64_t *ints = malloc((size_t)(a->n_ints ? a->n_ints : 1) * sizeof *ints);
        if (ints) memcpy(ints, a->ints, (size_t)a->n_ints * sizeof *ints);
        d->ints = ints;
    }
    if (!d->name || (a->type == RP_ONNX_ATTR_STRING && !d->s) ||
        (a->type == RP_ONNX_ATTR_INTS && !d->ints)) {
        nomem(g, a->name);
        return false;
    }
    return true;
}

const char *rp_onnx_node(rp_onnx *g, const char *op, const char *name, int n_in,
                         const char *const *in, int n_attrs, const rp_onnx_attr *attrs)
{
    if (!g || g->error != RP_OK) return NULL;
    if (!op || !*op || n_in < 0 || (n_in > 0 && !in) || n_attrs < 0 || (n_attrs > 0 && !attrs)) {
        fail(g, RP_ERROR(RP_ERR_INVALID, "ONNX graph %s: node %s has bad arguments", g->name,
                         op ? op : "(null)"));
        return NULL;
    }
    for (int i = 0; i < n_in; i++) {
        /* A NULL input is the failed result of an earlier call: that error stands. */
        if (!in[i]) {
            fail(g, RP_ERROR(RP_ERR_INVALID, "ONNX graph %s: input %d of %s node is NULL", g->name,
                             i, op));
            return NULL;
        }
        if (*in[i] && find_value(g, in[i]) < 0) {
            fail(g,
                 RP_ERROR(RP_ERR_INVALID, "ONNX graph %s: input \"%s\" of %s node is not a value",
                          g->name, in[i], op));
            return NULL;
        }
    }
    char auto_name[64];
    if (!name) {
        snprintf(auto_name, sizeof auto_name, "%.40s_%d", op, g->n_nodes);
        name = auto_name;
    }
    if (!grow(g, (void **)&g->nodes, &g->cap_nodes, g->n_nodes, sizeof *g->nodes)) return NULL;
    onnx_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = dup_str(op);
    n->in = calloc((size_t)(n_in ? n_in : 1), sizeof *n->in);
    n->attrs = calloc((size_t)(n_attrs ? n_attrs : 1), sizeof *n->attrs);
    bool ok = n->op && n->in && n->attrs;
    if (!ok) nomem(g, op);
    for (int i = 0; ok && i < n_in; i++) {
        n->in[i] = dup_str(in[i]);
        n->n_in++;
        if (!n->in[i]) {
            nomem(g, op);
            ok = false;
        }
    }
    for (int i = 0; ok && i < n_attrs; i++) {
        ok = copy_attr(g, &n->attrs[n->n_attrs], &attrs[i]);
        n->n_attrs++; /* freed whole or in part by destroy either way */
    }
    const char *out = ok ? new_value(g, name, "node output") : NULL;
    n->out = (char *)out;
    g->n_nodes++; /* kept even on failure, for rp_onnx_destroy to free */
    return out;
}

const char *rp_onnx_unary(rp_onnx *g, const char *op, const char *name, const char *x)
{
    return rp_onnx_node(g, op, name, 1, (const char *[]){x}, 0, NULL);
}

const char *rp_onnx_binary(rp_onnx *g, const char *op, const char *name, const char *a,
                           const char *b)
{
    return rp_onnx_node(g, op, name, 2, (const char *[]){a, b}, 0, NULL);
}

rp_status rp_onnx_set_meta(rp_onnx *g, const char *key, const char *value)
{
    if (!g) return RP_ERROR(RP_ERR_INVALID, "rp_onnx_set_meta: NULL graph");
    if (g->error != RP_OK) return g->error;
    if (!key || !*key || !value)
        return fail(g, RP_ERROR(RP_ERR_INVALID, "ONNX graph %s: metadata needs a key and a value",
                                g->name));
    char *v = dup_str(value);
    if (!v) return nomem(g, key);
    for (int i = 0; i < g->n_meta; i++)
        if (!strcmp(g->meta[i].key, key)) {
            free(g->meta[i].value);
            g->meta[i].value = v;
            return RP_OK;
        }
    char *k = dup_str(key);
    if (!k) nomem(g, key);
    if (!k || !grow(g, (void **)&g->meta, &g->cap_meta, g->n_meta, sizeof *g->meta)) {
        free(k);
        free(v);
        return g->error;
    }
    g->meta[g->n_meta++] = (onnx_meta){k, v};
    return RP_OK;
}

rp_status rp_onnx_set_doc(rp_onnx *g, const char *doc)
{
    if (!g) return RP_ERROR(RP_ERR_INVALID, "rp_onnx_set_doc: NULL graph");
    if (g->error != RP_OK) return g->error;
    char *d = doc ? dup_str(doc) : NULL;
    if (doc && !d) return nomem(g, "the description");
    free(g->doc);
    g->doc = d;
    return RP_OK;
}

int rp_onnx_weight_count(const rp_onnx *g)
{
    int n = 0;
    for (int i = 0; g && i < g->n_inits; i++)
        n += g->inits[i].weight;
    return n;
}

int64_t rp_onnx_weight_numel(const rp_onnx *g)
{
    int64_t n = 0;
    for (int i = 0; g && i < g->n_inits; i++)
        if (g->inits[i].weight) n += (int64_t)(g->inits[i].nbytes / sizeof(float));
    return n;
}

/* ---- the layers of nn.h -------------------------------------------------------------------------
 */

float *rp_onnx_read(rp_onnx *g, const rp_checkpoint *ck, const char *name, int ndim,
                    const int64_t *dims)
{
    if (!g || g->error != RP_OK) return NULL;
    if (!ck || !name) {
        fail(g, RP_ERROR(RP_ERR_INVALID, "rp_onnx_read: NULL checkpoint or name"));
        return NULL;
    }
    rp_checkpoint_dtype dtype;
    int have_ndim = 0;
    int64_t have[RP_MAX_DIMS];
    if (!rp_checkpoint_get(ck, name, &dtype, &have_ndim, have)) {
        fail(g, RP_ERROR(RP_ERR_INVALID, "ONNX export: the checkpoint has no tensor %s", name));
        return NULL;
    }
    bool same = have_ndim == ndim;
    int64_t numel = 1;
    for (int i = 0; same && i < ndim; i++) {
        same = have[i] == dims[i];
        numel *= dims[i];
    }
    if (!same) {
        char want_s[96] = "", have_s[96] = "";
        for (int i = 0; i < ndim; i++)
            snprintf(want_s + strlen(want_s), sizeof want_s - strlen(want_s), "%s%lld",
                     i ? "," : "", (long long)dims[i]);
        for (int i = 0; i < have_ndim; i++)
            snprintf(have_s + strlen(have_s), sizeof have_s - strlen(have_s), "%s%lld",
                     i ? "," : "", (long long)have[i]);
        fail(g, RP_ERROR(RP_ERR_SHAPE,
                         "ONNX export: checkpoint tensor %s is [%s], the model's configuration "
                         "makes it [%s]",
                         name, have_s, want_s));
        return NULL;
    }
    float *v = malloc((size_t)(numel ? numel : 1) * sizeof *v);
    if (!v) {
        nomem(g, name);
        return NULL;
    }
    rp_status s = rp_checkpoint_copy_f32(ck, name, v, numel);
    if (s != RP_OK) {
        free(v);
        fail(g, s);
        return NULL;
    }
    return v;
}

/* Reads prefix+layer+"."+leaf of shape dims and adds it as weight layer+"."+leaf. */
static const char *layer_weight(rp_onnx *g, const rp_checkpoint *ck, const char *prefix,
                                const char *layer, const char *leaf, int ndim, const int64_t *dims)
{
    char src[RP_NAME_MAX * 2], dst[RP_NAME_MAX * 2];
    snprintf(src, sizeof src, "%s%s.%s", prefix, layer, leaf);
    snprintf(dst, sizeof dst, "%s.%s", layer, leaf);
    float *v = rp_onnx_read(g, ck, src, ndim, dims);
    const char *name = v ? rp_onnx_weight(g, dst, ndim, dims, v) : NULL;
    free(v);
    return name;
}

const char *rp_onnx_conv2d(rp_onnx *g, const rp_checkpoint *ck, const char *prefix,
                           const char *layer, const char *x, int in, int out, int k, int stride,
                           int pad, bool bias)
{
    if (!g || g->error != RP_OK) return NULL;
    char src[RP_NAME_MAX * 2], dst[RP_NAME_MAX * 2];
    snprintf(src, sizeof src, "%s%s.weight", prefix, layer);
    snprintf(dst, sizeof dst, "%s.weight", layer);
    /* Our [out, kh, kw, in] (NHWC convolution) to ONNX's [out, in, kh, kw]. */
    float *ohwi = rp_onnx_read(g, ck, src, 4, (int64_t[]){out, k, k, in});
    float *oihw = ohwi ? malloc((size_t)out * k * k * in * sizeof *oihw) : NULL;
    if (ohwi && !oihw) nomem(g, src);
    const char *w = NULL;
    if (oihw) {
        for (int o = 0; o < out; o++)
            for (int y = 0; y < k; y++)
                for (int xx = 0; xx < k; xx++)
                    for (int c = 0; c < in; c++)
                        oihw[(((int64_t)o * in + c) * k + y) * k + xx] =
                            ohwi[(((int64_t)o * k + y) * k + xx) * in + c];
        w = rp_onnx_weight(g, dst, 4, (int64_t[]){out, in, k, k}, oihw);
    }
    free(oihw);
    free(ohwi);
    const char *b = bias ? layer_weight(g, ck, prefix, layer, "bias", 1, (int64_t[]){out}) : NULL;
    const int64_t ks[2] = {k, k}, strides[2] = {stride, stride}, pads[4] = {pad, pad, pad, pad};
    const rp_onnx_attr attrs[] = {RP_ONNX_INTS("kernel_shape", 2, ks),
                                  RP_ONNX_INTS("strides", 2, strides),
                                  RP_ONNX_INTS("pads", 4, pads)};
    return rp_onnx_node(g, "Conv", layer, bias ? 3 : 2, (const char *[]){x, w, b}, 3, attrs);
}

const char *rp_onnx_batchnorm(rp_onnx *g, const rp_checkpoint *ck, const char *prefix,
                              const char *layer, const char *x, int c, float eps)
{
    static const char *const leaves[4] = {"weight", "bias", "running_mean", "running_var"};
    const char *in[5] = {x};
    for (int i = 0; i < 4; i++)
        in[i + 1] = layer_weight(g, ck, prefix, layer, leaves[i], 1, (int64_t[]){c});
    const rp_onnx_attr attrs[] = {RP_ONNX_FLOAT("epsilon", eps)};
    return rp_onnx_node(g, "BatchNormalization", layer, 5, in, 1, attrs);
}

const char *rp_onnx_linear(rp_onnx *g, const rp_checkpoint *ck, const char *prefix,
                           const char *layer, const char *x, int in, int out, bool bias)
{
    const char *w = layer_weight(g, ck, prefix, layer, "weight", 2, (int64_t[]){out, in});
    const char *b = bias ? layer_weight(g, ck, prefix, layer, "bias", 1, (int64_t[]){out}) : NULL;
    const rp_onnx_attr attrs[] = {RP_ONNX_INT("transB", 1)};
    return rp_onnx_node(g, "Gemm", layer, bias ? 3 : 2, (const char *[]){x, w, b}, 1, attrs);
}

/* ---- saving -------------------------------------------------------------------------------------
 */

/* protobuf-c's output stream, appending to the file being written. */
typedef struct file_buffer {
    ProtobufCBuffer base;
    core_file_out *out;
} file_buffer;

static void file_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    core_file_out *out = ((file_buffer *)b)->out;
    /* The first failure's errno is kept for core_file_out_check's message. */
    if (len && fwrite(data, 1, len, out->f) != len && !out->err) out->err = errno ? errno : EIO;
}

/* The protobuf-c structs of one save, pointing into the graph. */
typedef struct pb_model {
    IoOnnxPb__ModelProto model;
    IoOnnxPb__OperatorSetIdProto opset, *opsets[1];
    IoOnnxPb__GraphProto graph;
    IoOnnxPb__NodeProto *nodes, **node_ptrs;
    IoOnnxPb__AttributeProto *attrs, **attr_ptrs;
    IoOnnxPb__TensorProto *inits, **init_ptrs;
    IoOnnxPb__ValueInfoProto *ios, **io_ptrs;
    IoOnnxPb__TypeProto *types;
    IoOnnxPb__TypeProto__Tensor *tensor_types;
    IoOnnxPb__TensorShapeProto *shapes;
    IoOnnxPb__TensorShapeProto__Dimension *dims, **dim_ptrs;
    IoOnnxPb__StringStringEntryProto *meta, **meta_ptrs;
} pb_model;

static void pb_free(pb_model *m)
{
    free(m->nodes);
    free(m->node_ptrs);
    free(m->attrs);
    free(m->attr_ptrs);
    free(m->inits);
    free(m->init_ptrs);
    free(m->ios);
    free(m->io_ptrs);
    free(m->types);
    free(m->tensor_types);
    free(m->shapes);
    free(m->dims);
    free(m->dim_ptrs);
    free(m->meta);
    free(m->meta_ptrs);
}

/* Fills *v (with its type, shape and dims from the pools at *k) for graph input or output io. */
static void pb_value_info(pb_model *m, int slot, int *dim_at, const onnx_io *io)
{
    IoOnnxPb__ValueInfoProto *v = &m->ios[slot];
    IoOnnxPb__TypeProto *t = &m->types[slot];
    IoOnnxPb__TypeProto__Tensor *tt = &m->tensor_types[slot];
    IoOnnxPb__TensorShapeProto *s = &m->shapes[slot];
    io_onnx_pb__value_info_proto__init(v);
    io_onnx_pb__type_proto__init(t);
    io_onnx_pb__type_proto__tensor__init(tt);
    io_onnx_pb__tensor_shape_proto__init(s);
    for (int d = 0; d < io->ndim; d++) {
        IoOnnxPb__TensorShapeProto__Dimension *dim = &m->dims[*dim_at];
        io_onnx_pb__tensor_shape_proto__dimension__init(dim);
        if (io->dims[d] < 0) {
            dim->value_case = IO_ONNX_PB__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dim->dim_param = "N";
        } else {
            dim->value_case = IO_ONNX_PB__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dim->dim_value = io->dims[d];
        }
        m->dim_ptrs[*dim_at] = dim;
        (*dim_at)++;
    }
    s->n_dim = (size_t)io->ndim;
    s->dim = &m->dim_ptrs[*dim_at - io->ndim];
    tt->has_elem_type = 1;
    tt->elem_type = IO_ONNX_PB__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt->shape = s;
    t->value_case = IO_ONNX_PB__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    v->name = io->name;
    v->doc_string = io->doc;
    v->type = t;
    m->io_ptrs[slot] = v;
}

static rp_status pb_build(const rp_onnx *g, pb_model *m)
{
    memset(m, 0, sizeof *m);
    int n_attrs = 0, n_ios = g->n_inputs + g->n_outputs, n_dims = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n_attrs += g->nodes[i].n_attrs;
    for (int i = 0; i < g->n_inputs; i++)
        n_dims += g->inputs[i].ndim;
    for (int i = 0; i < g->n_outputs; i++)
        n_dims += g->outputs[i].ndim;
#define POOL(field, count) (m->field = calloc((size_t)(count) + 1, sizeof *m->field))
    if (!POOL(nodes, g->n_nodes) || !POOL(node_ptrs, g->n_nodes) || !POOL(attrs, n_attrs) ||
        !POOL(attr_ptrs, n_attrs) || !POOL(inits, g->n_inits) || !POOL(init_ptrs, g->n_inits) ||
        !POOL(ios, n_ios) || !POOL(io_ptrs, n_ios) || !POOL(types, n_ios) ||
        !POOL(tensor_types, n_ios) || !POOL(shapes, n_ios) || !POOL(dims, n_dims) ||
        !POOL(dim_ptrs, n_dims) || !POOL(meta, g->n_meta) || !POOL(meta_ptrs, g->n_meta))
        return RP_ERROR(RP_ERR_NOMEM, "no memory to save ONNX graph %s", g->name);
#undef POOL
    int a = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const onnx_node *n = &g->nodes[i];
        IoOnnxPb__NodeProto *p = &m->nodes[i];
        io_onnx_pb__node_proto__init(p);
        p->n_input = (size_t)n->n_in;
        p->input = n->in;
        p->n_output = 1;
        p->output = (char **)&n->out;
        p->name = n->out;
        p->op_type = n->op;
        p->n_attribute = (size_t)n->n_attrs;
        p->attribute = &m->attr_ptrs[a];
        for (int k = 0; k < n->n_attrs; k++, a++) {
            const rp_onnx_attr *s = &n->attrs[k];
            IoOnnxPb__AttributeProto *d = &m->attrs[a];
            io_onnx_pb__attribute_proto__init(d);
            d->name = (char *)s->name;
            d->has_type = 1;
            d->type = (IoOnnxPb__AttributeProto__AttributeType)s->type;
            if (s->type == RP_ONNX_ATTR_FLOAT) {
                d->has_f = 1;
                d->f = s->f;
            } else if (s->type == RP_ONNX_ATTR_INT) {
                d->has_i = 1;
                d->i = s->i;
            } else if (s->type == RP_ONNX_ATTR_STRING) {
                d->has_s = 1;
                d->s.len = strlen(s->s);
                d->s.data = (uint8_t *)s->s;
            } else {
                d->n_ints = (size_t)s->n_ints;
                d->ints = (int64_t *)s->ints;
            }
            m->attr_ptrs[a] = d;
        }
        m->node_ptrs[i] = p;
    }
    for (int i = 0; i < g->n_inits; i++) {
        const onnx_init *in = &g->inits[i];
        IoOnnxPb__TensorProto *t = &m->inits[i];
        io_onnx_pb__tensor_proto__init(t);
        t->n_dims = (size_t)in->ndim;
        t->dims = (int64_t *)in->dims;
        t->has_data_type = 1;
        t->data_type = in->dtype;
        t->name = in->name;
        t->has_raw_data = 1;
        t->raw_data.len = in->nbytes;
        t->raw_data.data = in->data;
        m->init_ptrs[i] = t;
    }
    int dim_at = 0;
    for (int i = 0; i < g->n_inputs; i++)
        pb_value_info(m, i, &dim_at, &g->inputs[i]);
    for (int i = 0; i < g->n_outputs; i++)
        pb_value_info(m, g->n_inputs + i, &dim_at, &g->outputs[i]);
    for (int i = 0; i < g->n_meta; i++) {
        io_onnx_pb__string_string_entry_proto__init(&m->meta[i]);
        m->meta[i].key = g->meta[i].key;
        m->meta[i].value = g->meta[i].value;
        m->meta_ptrs[i] = &m->meta[i];
    }
    io_onnx_pb__graph_proto__init(&m->graph);
    m->graph.name = g->name;
    m->graph.n_node = (size_t)g->n_nodes;
    m->graph.node = m->node_ptrs;
    m->graph.n_initializer = (size_t)g->n_inits;
    m->graph.initializer = m->init_ptrs;
    m->graph.n_input = (size_t)g->n_inputs;
    m->graph.input = m->io_ptrs;
    m->graph.n_output = (size_t)g->n_outputs;
    m->graph.output = m->io_ptrs + g->n_inputs;

    io_onnx_pb__operator_set_id_proto__init(&m->opset);
    m->opset.domain = "";
    m->opset.has_version = 1;
    m->opset.version = RP_ONNX_OPSET;
    m->opsets[0] = &m->opset;
    io_onnx_pb__model_proto__init(&m->model);
    m->model.has_ir_version = 1;
    m->model.ir_version = RP_ONNX_IR_VERSION;
    m->model.n_opset_import = 1;
    m->model.opset_import = m->opsets;
    m->model.producer_name = "replicator";
    m->model.producer_version = RP_VERSION;
    m->model.doc_string = g->doc;
    m->model.graph = &m->graph;
    m->model.n_metadata_props = (size_t)g->n_meta;
    m->model.metadata_props = m->meta_ptrs;
    return RP_OK;
}

static rp_status check_saveable(const rp_onnx *g, const char *path, const char *who)
{
    if (!g || !path || !*path) return RP_ERROR(RP_ERR_INVALID, "%s: NULL graph or path", who);
    if (g->error != RP_OK) return g->error;
    if (g->n_inputs < 1 || g->n_outputs < 1)
        return RP_ERROR(RP_ERR_INVALID, "ONNX graph %s has %d inputs and %d outputs; it needs both",
                        g->name, g->n_inputs, g->n_outputs);
    return RP_OK;
}

rp_status rp_onnx_save(const rp_onnx *g, const char *path)
{
    RP_CHECK(check_saveable(g, path, "rp_onnx_save"));
    pb_model m;
    rp_status status = pb_build(g, &m);
    core_file_out out;
    bool open = false;
    if (status != RP_OK) goto cleanup;
    RP_TRY(core_file_out_open(&out, path, "ONNX model"));
    open = true;
    file_buffer fb = {.base = {.append = file_append}, .out = &out};
    io_onnx_pb__model_proto__pack_to_buffer(&m.model, &fb.base);
    RP_TRY(core_file_out_check(&out));
    open = false;
    RP_TRY(core_file_out_commit(&out));
cleanup:
    if (open) core_file_out_abort(&out);
    pb_free(&m);
    return status;
}

rp_status rp_onnx_save_weights(const rp_onnx *g, const char *path, rp_checkpoint_dtype dtype)
{
    RP_CHECK(check_saveable(g, path, "rp_onnx_save_weights"));
    if (dtype != RP_CHECKPOINT_F32 && dtype != RP_CHECKPOINT_BF16)
        return RP_ERROR(RP_ERR_INVALID, "rp_onnx_save_weights: dtype %d; F32 or BF16", (int)dtype);
    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    RP_TRY(rp_checkpoint_create(&ck));
    for (int i = 0; i < g->n_inits; i++) {
        const onnx_init *in = &g->inits[i];
        if (in->weight)
            RP_TRY(rp_checkpoint_add_f32_as(ck, in->name, dtype, in->ndim, in->dims, in->data));
    }
    for (int i = 0; i < g->n_meta; i++)
        RP_TRY(rp_checkpoint_set_meta(ck, g->meta[i].key, g->meta[i].value));
    RP_TRY(rp_checkpoint_save(ck, path));
cleanup:
    rp_checkpoint_destroy(ck);
    return status;
}
