/*
 * replicator/onnx.h - writing ONNX models: a graph of operators over named
 * values, built node by node and saved in one call (src/io/onnx.c), for
 * `replicator export --format onnx` and any other program that hands a
 * trained network to another runtime (OpenCV's dnn module, ONNX Runtime).
 *
 * What is written: ONNX IR version 7 with the default operator set (ai.onnx)
 * at version 13 (RP_ONNX_OPSET), the lowest pair in which every operator the
 * exporters use has its current form; ONNX 1.8 and later read it. Values are
 * f32 tensors (int64 for shape constants); every weight is an initializer,
 * stored as raw little-endian bytes; inputs and outputs are typed and may
 * have one symbolic size (the batch, named "N"). The bytes are packed by
 * protobuf-c from proto/onnx.proto, a subset of ONNX's own schema with its
 * field numbers.
 *
 *     rp_onnx *g;
 *     rp_onnx_create(&g, "mlp");
 *     const char *x = rp_onnx_input(g, "x", 2, (int64_t[]){-1, 784}, NULL);
 *     x = rp_onnx_linear(g, ck, "param/", "fc0", x, 784, 512, true);
 *     x = rp_onnx_unary(g, "Relu", NULL, x);
 *     x = rp_onnx_linear(g, ck, "param/", "fc1", x, 512, 10, true);
 *     rp_onnx_output(g, x, 2, (int64_t[]){-1, 10}, "logits");
 *     rp_status s = rp_onnx_save(g, "model.onnx");   // the first error of any call above
 *     rp_onnx_destroy(g);
 *
 * Errors are sticky: the first call that fails records its error in the
 * graph (and rp_last_error()) and returns NULL or its status; every later
 * call on that graph does nothing and returns NULL or that status again,
 * and rp_onnx_save / rp_onnx_save_weights return it without writing. So an
 * exporter chains its calls and checks once, at the save (or with
 * rp_onnx_status). Value names are what the functions return: a node's
 * output is named `name` when given (it must be new to the graph) or
 * "<op>_<k>" otherwise; the strings are owned by the graph and live until
 * rp_onnx_destroy.
 *
 * Thread-safety: a graph is used by one thread at a time; different graphs
 * are independent.
 */
#ifndef REPLICATOR_ONNX_H
#define REPLICATOR_ONNX_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "io.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RP_ONNX_OPSET      13 /* ai.onnx operator set version */
#define RP_ONNX_IR_VERSION 7  /* the IR version that goes with opset 13 (ONNX 1.8) */

typedef struct rp_onnx rp_onnx;

/*
 * An empty graph named `name` (copied). Errors: RP_ERR_INVALID (NULL or
 * empty), RP_ERR_NOMEM; *g is then NULL.
 */
RP_API rp_status rp_onnx_create(rp_onnx **g, const char *name);
/* Frees the graph and every name and value it holds. NULL: no-op. */
RP_API void rp_onnx_destroy(rp_onnx *g);
/* The graph's first error, RP_OK while none (RP_ERR_INVALID for NULL). */
RP_API rp_status rp_onnx_status(const rp_onnx *g);

/*
 * A float graph input `name` of shape dims[0..ndim) (1 <= ndim <= 8; a
 * negative size is the symbolic batch "N"), described by `doc` (may be
 * NULL). Returns the name to use as a node input.
 */
RP_API const char *rp_onnx_input(rp_onnx *g, const char *name, int ndim, const int64_t *dims,
                                 const char *doc);
/*
 * Makes value `value` (a node's output) a float graph output of the given
 * shape, described by `doc` (may be NULL). Errors: RP_ERR_INVALID (no such
 * value, a bad shape).
 */
RP_API rp_status rp_onnx_output(rp_onnx *g, const char *value, int ndim, const int64_t *dims,
                                const char *doc);

/*
 * Initializers, their values copied. A weight is a value of the network
 * (what rp_onnx_save_weights writes); a constant is the graph's own (a
 * shape, an epsilon, the ones of a normalisation). ndim 0 is a scalar.
 * Errors: RP_ERR_INVALID (a name already in the graph, a bad shape),
 * RP_ERR_NOMEM.
 */
RP_API const char *rp_onnx_weight(rp_onnx *g, const char *name, int ndim, const int64_t *dims,
                                  const float *values);
RP_API const char *rp_onnx_const_f32(rp_onnx *g, const char *name, int ndim, const int64_t *dims,
                                     const float *values);
RP_API const char *rp_onnx_const_i64(rp_onnx *g, const char *name, int ndim, const int64_t *dims,
                                     const int64_t *values);

/* A node attribute. Build them with the macros below. */
typedef enum {
    RP_ONNX_ATTR_FLOAT = 1,
    RP_ONNX_ATTR_INT = 2,
    RP_ONNX_ATTR_STRING = 3,
    RP_ONNX_ATTR_INTS = 7,
} rp_onnx_attr_type; /* the values are AttributeProto.AttributeType's */

typedef struct rp_onnx_attr {
    const char *name;
    rp_onnx_attr_type type;
    float f;
    int64_t i;
    const char *s;
    const int64_t *ints; /* n_ints values */
    int n_ints;
} rp_onnx_attr;

#define RP_ONNX_FLOAT(n, v)  ((rp_onnx_attr){.name = (n), .type = RP_ONNX_ATTR_FLOAT, .f = (v)})
#define RP_ONNX_INT(n, v)    ((rp_onnx_attr){.name = (n), .type = RP_ONNX_ATTR_INT, .i = (v)})
#define RP_ONNX_STRING(n, v) ((rp_onnx_attr){.name = (n), .type = RP_ONNX_ATTR_STRING, .s = (v)})
#define RP_ONNX_INTS(n, count, v)                                                                  \
    ((rp_onnx_attr){.name = (n), .type = RP_ONNX_ATTR_INTS, .ints = (v), .n_ints = (count)})

/*
 * A node of operator `op` (an ai.onnx operator, e.g. "Conv") over the values
 * in[0..n_in) ("" for an optional input left out) with attrs[0..n_attrs)
 * (copied), and one output, named `name` or "<op>_<k>" when NULL. Returns
 * the output's name. The operator's own rules (arity, attribute names) are
 * not checked here: onnx.checker is the judge (docs/export.md). Errors:
 * RP_ERR_INVALID (an input that is not a value of the graph, an output name
 * already used), RP_ERR_NOMEM.
 */
RP_API const char *rp_onnx_node(rp_onnx *g, const char *op, const char *name, int n_in,
                                const char *const *in, int n_attrs, const rp_onnx_attr *attrs);
/* One-input and two-input nodes without attributes ("Relu", "Tanh"; "Add", "Mul", ...). */
RP_API const char *rp_onnx_unary(rp_onnx *g, const char *op, const char *name, const char *x);
RP_API const char *rp_onnx_binary(rp_onnx *g, const char *op, const char *name, const char *a,
                                  const char *b);

/*
 * Layers of nn.h as ONNX nodes on NCHW values, their weights read from
 * checkpoint `ck` under `prefix` + `layer` ("param/" + "stem.conv0": the
 * tensors "param/stem.conv0.weight", ...) and added as weights named
 * `layer` + ".weight" and so on, in ONNX's layouts:
 *  - rp_onnx_conv2d: rp_conv2d_layer (weight [out,k,k,in], bias [out])
 *    as Conv with weight [out,in,k,k] (permuted), stride, symmetric pad;
 *  - rp_onnx_batchnorm: rp_batchnorm_layer in evaluation mode (running
 *    statistics) as BatchNormalization, epsilon eps;
 *  - rp_onnx_linear: rp_linear_layer (weight [out,in], bias [out]) as Gemm
 *    with transB = 1 on x [N,in].
 * The sizes given are what the checkpoint must hold. Errors: RP_ERR_SHAPE
 * naming the tensor whose shape (or presence) differs, the checkpoint's
 * (RP_ERR_INVALID for a tensor missing or not float), RP_ERR_NOMEM.
 */
RP_API const char *rp_onnx_conv2d(rp_onnx *g, const rp_checkpoint *ck, const char *prefix,
                                  const char *layer, const char *x, int in, int out, int k,
                                  int stride, int pad, bool bias);
RP_API const char *rp_onnx_batchnorm(rp_onnx *g, const rp_checkpoint *ck, const char *prefix,
                                     const char *layer, const char *x, int c, float eps);
RP_API const char *rp_onnx_linear(rp_onnx *g, const rp_checkpoint *ck, const char *prefix,
                                  const char *layer, const char *x, int in, int out, bool bias);

/*
 * Reads float tensor `name` of ck, which must have shape dims[0..ndim),
 * into a new block (free() it). NULL on error: RP_ERR_SHAPE naming the
 * tensor and both shapes, RP_ERR_INVALID for a tensor that is missing or
 * not float, RP_ERR_NOMEM; the graph keeps the error. For exporters that
 * rearrange values before adding them (rp_onnx_weight).
 */
RP_API float *rp_onnx_read(rp_onnx *g, const rp_checkpoint *ck, const char *name, int ndim,
                           const int64_t *dims);

/* Sets the model's metadata entry `key` (metadata_props; both copied; a key set twice keeps the
 * last value). */
RP_API rp_status rp_onnx_set_meta(rp_onnx *g, const char *key, const char *value);
/* The model's description (doc_string; copied). */
RP_API rp_status rp_onnx_set_doc(rp_onnx *g, const char *doc);

/* The number of weights added and their values in all. */
RP_API int rp_onnx_weight_count(const rp_onnx *g);
RP_API int64_t rp_onnx_weight_numel(const rp_onnx *g);

/*
 * Writes the model to `path`, atomically (a temporary file renamed over
 * it, as checkpoints are): ModelProto with ir_version RP_ONNX_IR_VERSION,
 * opset_import {"" : RP_ONNX_OPSET}, producer "replicator" and its
 * version, the graph and the metadata. The graph must have at least one
 * input and one output. Errors: the graph's first error; RP_ERR_INVALID (no
 * input or output), RP_ERR_IO naming the path, RP_ERR_NOMEM. On error the
 * file at `path` is unchanged.
 */
RP_API rp_status rp_onnx_save(const rp_onnx *g, const char *path);

/*
 * Writes the graph's weights (not its constants) to `path` as a
 * safetensors file (rp_checkpoint_save: atomic, the checkpoint layout of
 * io.h), under their ONNX names and in ONNX's layouts, as `dtype`
 * (RP_CHECKPOINT_F32 or RP_CHECKPOINT_BF16, rounded to nearest even), with
 * the graph's metadata. Errors: as rp_onnx_save's; RP_ERR_INVALID for
 * another dtype.
 */
RP_API rp_status rp_onnx_save_weights(const rp_onnx *g, const char *path,
                                      rp_checkpoint_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
