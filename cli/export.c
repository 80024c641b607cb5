/*
 * export.c - `replicator export RUN_DIR OUT [--dtype bf16|f32]`: a run's
 * parameters, without its optimizer state, in a safetensors file of their
 * own, as bf16 or f32. The training checkpoint keeps its f32 masters; this
 * is the file to hand to another program. With --format onnx the network
 * as an ONNX model, and with --layout standard its weights as that model
 * holds them (export_onnx.c; docs/export.md).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export_onnx.h"

/*
 * Where each model's save callback puts its parameters and buffers
 * (rp_checkpoint_add_params): the classifiers, the SN-GAN's generator and
 * discriminator, D4PG's four networks. Optimizer state, counters and RNG
 * state sit under other names and are left out.
 */
static const char *const param_prefixes[] = {
    "param/",
    "gen/",
    "dis/",
    "d4pg/policy/",
    "d4pg/critic/",
    "d4pg/target_policy/",
    "d4pg/target_critic/",
};
#define N_PREFIXES (sizeof param_prefixes / sizeof param_prefixes[0])

static void usage(FILE *f)
{
    fprintf(f,
            "usage: replicator export RUN_DIR OUT.safetensors [--dtype bf16|f32]\n"
            "                         [--layout checkpoint|standard]\n"
            "       replicator export RUN_DIR --format onnx [OUT.onnx] [--online]\n"
            "\n"
            "Writes the parameters of RUN_DIR/checkpoint.safetensors (a run of replicator\n"
            "train: a classifier, an SN-GAN or D4PG) to OUT.safetensors, a safetensors file\n"
            "any reader opens (Python's safetensors, PyTorch): every parameter and buffer\n"
            "under its checkpoint name (param/..., gen/... and dis/..., d4pg/policy/...),\n"
            "without optimizer state, step counters or RNG state, and the run's\n"
            "configuration as the metadata \"replicator.config\". The run's checkpoint is\n"
            "only read: it keeps its f32 masters.\n"
            "\n"
            "  --dtype bf16   (default) each value rounded to the nearest bfloat16, ties to\n"
            "                 even (NaN and infinities kept): half the bytes of f32\n"
            "  --dtype f32    the f32 values as the checkpoint holds them\n"
            "  --layout standard  instead, the weights of the network --format onnx writes\n"
            "                 (the classifier, the SN-GAN's generator, D4PG's policy), under\n"
            "                 its names without the checkpoint's prefix (stem.conv0.weight)\n"
            "                 and in its layouts: convolutions [out, in, kh, kw] (PyTorch's\n"
            "                 and ONNX's), linear layers [out, in]\n"
            "\n"
            "  --format onnx  the network as an ONNX model (opset 13) in OUT.onnx (default\n"
            "                 RUN_DIR/model.onnx), in evaluation mode, NCHW: a classifier\n"
            "                 takes \"image\" [N, C, H, W] (pixel / 255) and gives \"logits\";\n"
            "                 the SN-GAN's generator takes \"z\" [N, z_dim] and \"class\"\n"
            "                 [N, classes] (one-hot) and gives \"image\" [N, C, H, W] in\n"
            "                 [-1, 1]; D4PG's policy takes \"observation\" and gives \"action\"\n"
            "  --online       ONNX, D4PG: the learner's latest policy, not the target policy\n"
            "                 its actors ran\n");
}

static bool is_param(const char *name)
{
    for (size_t i = 0; i < N_PREFIXES; i++) {
        if (strncmp(name, param_prefixes[i], strlen(param_prefixes[i])) == 0) return true;
    }
    return false;
}

/* True if `out` exists and is the same file as the run's checkpoint (a name or a hard link). */
static bool is_run_checkpoint(const char *out, const char *run_dir)
{
    char path[PATH_MAX + 64];
    rp_trainer_checkpoint_path(path, sizeof path, run_dir);
    struct stat a, b;
    return stat(out, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/*
 * Adds every float tensor of `ck` under a parameter prefix to `out` as `dtype`, and counts
 * them, their values and the bytes they held in `ck`.
 */
static rp_status add_params(rp_checkpoint *out, const rp_checkpoint *ck, rp_checkpoint_dtype dtype,
                            int *tensors, int64_t *values)
{
    rp_status status = RP_OK;
    float *buf = NULL;
    int64_t cap = 0;
    for (int i = 0; i < rp_checkpoint_count(ck); i++) {
        const char *name = rp_checkpoint_name_at(ck, i);
        rp_checkpoint_dtype have;
        int ndim = 0;
        int64_t shape[RP_MAX_DIMS], numel = 1;
        if (!is_param(name) || !rp_checkpoint_get(ck, name, &have, &ndim, shape)) continue;
        if (have != RP_CHECKPOINT_F32 && have != RP_CHECKPOINT_BF16) continue;
        for (int d = 0; d < ndim; d++)
            numel *= shape[d];
        if (numel > cap) {
            free(buf);
            buf = malloc((size_t)numel * sizeof *buf);
            cap = buf ? numel : 0;
            if (!buf) {
                status = RP_ERROR(RP_ERR_NOMEM, "no memory for the %lld values of %s",
                                  (long long)numel, name);
                goto cleanup;
            }
        }
        RP_TRY(rp_checkpoint_copy_f32(ck, name, buf, numel));
        RP_TRY(rp_checkpoint_add_f32_as(out, name, dtype, ndim, shape, buf));
        (*tensors)++;
        *values += numel;
    }
cleanup:
    free(buf);
    return status;
}

/* Copies the run's metadata and records what the export did as "replicator.export". */
static rp_status add_meta(rp_checkpoint *out, const rp_checkpoint *ck, const char *dtype_name)
{
    for (int i = 0; i < rp_checkpoint_meta_count(ck); i++) {
        const char *key = rp_checkpoint_meta_key_at(ck, i);
        RP_CHECK(rp_checkpoint_set_meta(out, key, rp_checkpoint_get_meta(ck, key)));
    }
    char text[96];
    int64_t n = 0;
    const int64_t *pos = rp_checkpoint_get_i64(ck, "train/position", &n);
    if (pos && n == 3)
        snprintf(text, sizeof text, "{\"dtype\":\"%s\",\"step\":%lld}", dtype_name,
                 (long long)pos[2]);
    else
        snprintf(text, sizeof text, "{\"dtype\":\"%s\"}", dtype_name);
    return rp_checkpoint_set_meta(out, "replicator.export", text);
}

/*
 * The network as the ONNX exporters build it: saved as an ONNX model (onnx) or its weights as
 * safetensors (--layout standard).
 */
static rp_status export_network(const rp_checkpoint *ck, const char *config, const char *out_path,
                                bool onnx, rp_checkpoint_dtype dtype, const char *dtype_name,
                                bool online)
{
    rp_onnx *g = NULL;
    char what[256] = "";
    rp_status status = RP_OK;
    RP_TRY(export_onnx_graph(&g, ck, config, online, what, sizeof what));
    if (onnx)
        RP_TRY(rp_onnx_save(g, out_path));
    else
        RP_TRY(rp_onnx_save_weights(g, out_path, dtype));
    printf("exported %s: %d weight tensors (%lld values) %s to %s\n", what, rp_onnx_weight_count(g),
           (long long)rp_onnx_weight_numel(g), onnx ? "as an ONNX model (opset 13)" : dtype_name,
           out_path);
cleanup:
    rp_onnx_destroy(g);
    return status;
}

int rp_cli_export(int argc, char **argv)
{
    const char *pos[2] = {NULL, NULL}, *dtype_arg = NULL, *format = "safetensors";
    const char *layout = "checkpoint";
    bool online = false;
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--dtype")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "replicator export: --dtype needs a value, bf16 or f32\n");
                return 2;
            }
            dtype_arg = argv[++i];
            continue;
        }
        if (!strcmp(a, "--format") || !strcmp(a, "--layout")) {
            const char *v = i + 1 < argc ? argv[++i] : NULL;
            if (!strcmp(a, "--format") && v && (!strcmp(v, "onnx") || !strcmp(v, "safetensors"))) {
                format = v;
            } else if (!strcmp(a, "--layout") && v &&
                       (!strcmp(v, "checkpoint") || !strcmp(v, "standard"))) {
                layout = v;
            } else {
                fprintf(stderr, "replicator export: %s takes %s%s%s%s\n", a,
                        !strcmp(a, "--format") ? "onnx or safetensors" : "checkpoint or standard",
                        v ? ", not \"" : "", v ? v : "", v ? "\"" : "");
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--online")) {
            online = true;
            continue;
        }
        if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "replicator export: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (n_pos == 2) {
            fprintf(stderr,
                    "replicator export: takes RUN_DIR and OUT.safetensors, but was also given "
                    "%s\n",
                    a);
            return 2;
        }
        pos[n_pos++] = a;
    }
    bool onnx = !strcmp(format, "onnx");
    if (onnx && (dtype_arg || strcmp(layout, "checkpoint") != 0)) {
        fprintf(stderr, "replicator export: --format onnx writes f32 weights in ONNX's own layout; "
                        "--dtype and --layout are for safetensors\n");
        return 2;
    }
    if (!onnx && strcmp(layout, "standard") != 0 && online) {
        fprintf(stderr,
                "replicator export: --online goes with --format onnx or --layout standard\n");
        return 2;
    }
    if (!dtype_arg) dtype_arg = "bf16";
    if (n_pos < (onnx ? 1 : 2)) {
        if (argc == 1) {
            usage(stderr);
        } else {
            fprintf(stderr,
                    "replicator export: needs %s (replicator export RUN_DIR OUT.safetensors "
                    "[--dtype bf16|f32], or RUN_DIR --format onnx [OUT.onnx])\n",
                    onnx         ? "RUN_DIR"
                    : n_pos == 0 ? "RUN_DIR and OUT.safetensors"
                                 : "OUT.safetensors after RUN_DIR");
        }
        return 2;
    }
    rp_checkpoint_dtype dtype;
    if (!strcmp(dtype_arg, "bf16")) {
        dtype = RP_CHECKPOINT_BF16;
    } else if (!strcmp(dtype_arg, "f32")) {
        dtype = RP_CHECKPOINT_F32;
    } else {
        fprintf(stderr, "replicator export: --dtype must be bf16 or f32, not \"%s\"\n", dtype_arg);
        return 2;
    }
    const char *run_dir = pos[0], *out_path = pos[1];
    char default_out[PATH_MAX + 16];
    if (!out_path && run_dir) {
        snprintf(default_out, sizeof default_out, "%s/model.onnx", run_dir);
        out_path = default_out;
    }
    if (!rp_options_copy_path("replicator export", "RUN_DIR", run_dir, NULL, PATH_MAX) ||
        !rp_options_copy_path("replicator export", "OUT", out_path, NULL, PATH_MAX))
        return 2;

    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL, *out = NULL;
    const char *config; /* required: a run's checkpoint carries it (copied with the metadata) */
    int tensors = 0;
    int64_t values = 0;
    RP_TRY(rp_trainer_load_run(run_dir, &ck, &config));
    if (is_run_checkpoint(out_path, run_dir)) {
        status = RP_ERROR(RP_ERR_INVALID,
                          "%s is the run's checkpoint; an export holds the parameters only and "
                          "would replace it: write it elsewhere",
                          out_path);
        goto cleanup;
    }
    if (onnx || !strcmp(layout, "standard")) {
        status = export_network(ck, config, out_path, onnx, dtype, dtype_arg, online);
        goto cleanup;
    }
    RP_TRY(rp_checkpoint_create(&out));
    RP_TRY(add_params(out, ck, dtype, &tensors, &values));
    if (tensors == 0) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "the checkpoint of %s holds no parameters (no f32 tensor under param/, "
                          "gen/, dis/ or d4pg/policy/, d4pg/critic/ and their targets)",
                          run_dir);
        goto cleanup;
    }
    RP_TRY(add_meta(out, ck, dtype_arg));
    RP_TRY(rp_checkpoint_save(out, out_path));
    printf("exported %d tensors (%lld values, %lld bytes as %s) of %s to %s\n", tensors,
           (long long)values, (long long)values * (dtype == RP_CHECKPOINT_BF16 ? 2 : 4), dtype_arg,
           run_dir, out_path);
cleanup:
    rp_checkpoint_destroy(out);
    rp_checkpoint_destroy(ck);
    if (status != RP_OK) {
        fprintf(stderr, "replicator export: error: %s\n", rp_last_error());
        return 1;
    }
    return 0;
}
