/*
 * test_onnx.c - the ONNX writer (replicator/onnx.h):
 *
 *  - a small graph saved and unpacked with protobuf-c from proto/onnx.proto (ONNX's field
 *    numbers): IR version, opset, producer, inputs with the symbolic batch, initializers' raw
 *    bytes, nodes' inputs, outputs and attributes of every type, metadata;
 *  - errors are sticky: an input that is not a value, a name used twice, NULL results passed on;
 *    every later call returns NULL or the first error, and the save writes nothing;
 *  - rp_onnx_conv2d permutes a checkpoint's [out, k, k, in] weight to [out, in, k, k] (each value
 *    at its place), and a checkpoint tensor of another shape is refused naming it and both shapes;
 *  - rp_onnx_save_weights writes the weights, not the constants, under their ONNX names.
 * The whole format is checked by onnx.checker and OpenCV in tests/cli_onnx.sh.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onnx.pb-c.h"

static IoOnnxPb__ModelProto *load(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    IoOnnxPb__ModelProto *m = io_onnx_pb__model_proto__unpack(NULL, n, buf);
    assert_non_null(m);
    return m;
}

static void test_graph_round_trip(void **unused)
{
    (void)unused;
    rp_onnx *g = NULL;
    assert_int_equal(rp_onnx_create(&g, "tiny"), RP_OK);
    const char *x = rp_onnx_input(g, "x", 2, (int64_t[]){-1, 3}, "the input");
    const float w[6] = {1, 2, 3, 4, 5, 6};
    const char *wt = rp_onnx_weight(g, "fc.weight", 2, (int64_t[]){2, 3}, w);
    const int64_t shape[2] = {-1, 2};
    const char *s = rp_onnx_const_i64(g, "shape", 1, (int64_t[]){2}, shape);
    const int64_t perm[2] = {1, 0};
    const rp_onnx_attr attrs[] = {RP_ONNX_INT("transB", 1), RP_ONNX_FLOAT("alpha", 0.5f),
                                  RP_ONNX_STRING("note", "hi"), RP_ONNX_INTS("perm", 2, perm)};
    const char *y = rp_onnx_node(g, "Gemm", "fc", 2, (const char *[]){x, wt}, 4, attrs);
    assert_string_equal(y, "fc");
    y = rp_onnx_binary(g, "Reshape", NULL, y, s);
    assert_string_equal(y, "Reshape_1"); /* "<op>_<k>" when unnamed */
    assert_int_equal(rp_onnx_output(g, y, 2, (int64_t[]){-1, 2}, "out"), RP_OK);
    assert_int_equal(rp_onnx_set_meta(g, "k", "v1"), RP_OK);
    assert_int_equal(rp_onnx_set_meta(g, "k", "v2"), RP_OK);
    assert_int_equal(rp_onnx_weight_count(g), 1);
    assert_int_equal(rp_onnx_weight_numel(g), 6);
    char path[128];
    snprintf(path, sizeof path, "%s/tiny.onnx", tu_tmpdir());
    assert_int_equal(rp_onnx_save(g, path), RP_OK);
    rp_onnx_destroy(g);

    IoOnnxPb__ModelProto *m = load(path);
    assert_int_equal(m->ir_version, RP_ONNX_IR_VERSION);
    assert_int_equal(m->n_opset_import, 1);
    assert_string_equal(m->opset_import[0]->domain, "");
    assert_int_equal(m->opset_import[0]->version, 13);
    assert_string_equal(m->producer_name, "replicator");
    assert_int_equal(m->n_metadata_props, 1);
    assert_string_equal(m->metadata_props[0]->value, "v2");
    const IoOnnxPb__GraphProto *gp = m->graph;
    assert_string_equal(gp->name, "tiny");
    assert_int_equal(gp->n_input, 1);
    const IoOnnxPb__TensorShapeProto *sh = gp->input[0]->type->tensor_type->shape;
    assert_int_equal(gp->input[0]->type->tensor_type->elem_type, 1);
    assert_int_equal(sh->n_dim, 2);
    assert_string_equal(sh->dim[0]->dim_param, "N");
    assert_int_equal(sh->dim[1]->dim_value, 3);
    assert_int_equal(gp->n_initializer, 2);
    assert_string_equal(gp->initializer[0]->name, "fc.weight");
    assert_int_equal(gp->initializer[0]->data_type, 1);
    assert_int_equal(gp->initializer[0]->raw_data.len, sizeof w);
    assert_memory_equal(gp->initializer[0]->raw_data.data, w, sizeof w);
    assert_int_equal(gp->initializer[1]->data_type, 7);
    assert_memory_equal(gp->initializer[1]->raw_data.data, shape, sizeof shape);
    assert_int_equal(gp->n_node, 2);
    const IoOnnxPb__NodeProto *n = gp->node[0];
    assert_string_equal(n->op_type, "Gemm");
    assert_int_equal(n->n_input, 2);
    assert_string_equal(n->input[1], "fc.weight");
    assert_string_equal(n->output[0], "fc");
    assert_int_equal(n->n_attribute, 4);
    assert_int_equal(n->attribute[0]->type, 2);
    assert_int_equal(n->attribute[0]->i, 1);
    assert_true(n->attribute[1]->f == 0.5f);
    assert_memory_equal(n->attribute[2]->s.data, "hi", 2);
    assert_int_equal(n->attribute[3]->n_ints, 2);
    assert_int_equal(n->attribute[3]->ints[0], 1);
    assert_string_equal(gp->output[0]->name, "Reshape_1");
    io_onnx_pb__model_proto__free_unpacked(m, NULL);
}

static void test_errors_are_sticky(void **unused)
{
    (void)unused;
    rp_onnx *g = NULL;
    assert_int_equal(rp_onnx_create(&g, "bad"), RP_OK);
    const char *x = rp_onnx_input(g, "x", 1, (int64_t[]){4}, NULL);
    assert_null(rp_onnx_unary(g, "Relu", NULL, "nowhere"));
    tu_assert_error_contains("\"nowhere\" of Relu node is not a value");
    /* Later calls, even good ones, do nothing and keep the first error. */
    assert_null(rp_onnx_unary(g, "Relu", "y", x));
    assert_int_equal(rp_onnx_status(g), RP_ERR_INVALID);
    char path[128];
    snprintf(path, sizeof path, "%s/bad.onnx", tu_tmpdir());
    assert_int_equal(rp_onnx_save(g, path), RP_ERR_INVALID);
    assert_int_equal(access(path, F_OK), -1);
    rp_onnx_destroy(g);

    assert_int_equal(rp_onnx_create(&g, "dup"), RP_OK);
    x = rp_onnx_input(g, "x", 1, (int64_t[]){4}, NULL);
    assert_null(rp_onnx_unary(g, "Relu", "x", x));
    tu_assert_error_contains("\"x\": the name is already a value");
    rp_onnx_destroy(g);

    assert_int_equal(rp_onnx_create(&g, "shape"), RP_OK);
    assert_null(rp_onnx_weight(g, "w", 1, (int64_t[]){-1}, (float[]){0}));
    rp_onnx_destroy(g);

    /* No input or output: nothing to save. */
    assert_int_equal(rp_onnx_create(&g, "empty"), RP_OK);
    assert_int_equal(rp_onnx_save(g, path), RP_ERR_INVALID);
    rp_onnx_destroy(g);
}

static void test_conv_weights_permuted(void **unused)
{
    (void)unused;
    enum { O = 3, K = 2, I = 4 };
    float ohwi[O * K * K * I];
    for (int i = 0; i < O * K * K * I; i++)
        ohwi[i] = (float)i;
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_checkpoint_add_f32_as(ck, "param/c.weight", RP_CHECKPOINT_F32, 4,
                                              (int64_t[]){O, K, K, I}, ohwi),
                     RP_OK);
    rp_onnx *g = NULL;
    assert_int_equal(rp_onnx_create(&g, "conv"), RP_OK);
    const char *x = rp_onnx_input(g, "x", 4, (int64_t[]){-1, I, 5, 5}, NULL);
    const char *y = rp_onnx_conv2d(g, ck, "param/", "c", x, I, O, K, 1, 0, false);
    assert_non_null(y);
    rp_onnx_output(g, y, 4, (int64_t[]){-1, O, 4, 4}, NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/conv.onnx", tu_tmpdir());
    assert_int_equal(rp_onnx_save(g, path), RP_OK);
    char wpath[128];
    snprintf(wpath, sizeof wpath, "%s/conv.safetensors", tu_tmpdir());
    assert_int_equal(rp_onnx_save_weights(g, wpath, RP_CHECKPOINT_F32), RP_OK);
    rp_onnx_destroy(g);

    IoOnnxPb__ModelProto *m = load(path);
    const IoOnnxPb__TensorProto *t = m->graph->initializer[0];
    assert_string_equal(t->name, "c.weight");
    assert_int_equal(t->n_dims, 4);
    assert_int_equal(t->dims[1], I);
    const float *oihw = (const float *)t->raw_data.data;
    for (int o = 0; o < O; o++)
        for (int c = 0; c < I; c++)
            for (int u = 0; u < K; u++)
                for (int v = 0; v < K; v++)
                    assert_true(oihw[((o * I + c) * K + u) * K + v] ==
                                ohwi[((o * K + u) * K + v) * I + c]);
    io_onnx_pb__model_proto__free_unpacked(m, NULL);

    rp_checkpoint *w = NULL;
    assert_int_equal(rp_checkpoint_load(&w, wpath), RP_OK);
    assert_int_equal(rp_checkpoint_count(w), 1);
    assert_string_equal(rp_checkpoint_name_at(w, 0), "c.weight");
    rp_checkpoint_destroy(w);

    /* The configuration says 5 input channels: the checkpoint's 4 are refused by name. */
    assert_int_equal(rp_onnx_create(&g, "conv"), RP_OK);
    x = rp_onnx_input(g, "x", 4, (int64_t[]){-1, 5, 5, 5}, NULL);
    assert_null(rp_onnx_conv2d(g, ck, "param/", "c", x, 5, O, K, 1, 0, false));
    assert_int_equal(rp_onnx_status(g), RP_ERR_SHAPE);
    tu_assert_error_contains("param/c.weight is [3,2,2,4], the model's configuration makes it "
                             "[3,2,2,5]");
    rp_onnx_destroy(g);
    rp_checkpoint_destroy(ck);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_round_trip),
        cmocka_unit_test(test_errors_are_sticky),
        cmocka_unit_test(test_conv_weights_permuted),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
