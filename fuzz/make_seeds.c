/*
 * make_seeds.c - writes the fuzz targets' seed inputs: small valid files made by the library
 * itself (rp_idx_write, rp_checkpoint_save, the command's to_json), and truncated copies.
 *
 * Usage: make_seeds DIR   writes DIR/idx, DIR/cifar, DIR/checkpoint and DIR/config.
 * fuzz/corpus/ holds its output as committed (scripts/fuzz.sh --seeds rewrites it), and
 * scripts/fuzz.sh passes a fresh copy to every run too, so the seeds follow the formats.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "cli/d4pg_cli.h"
#include "cli/sngan_cli.h"
#include "cli/train.h"
#include "replicator/data.h"
#include "replicator/io.h"

static const char *out_dir;

static void die(const char *what)
{
    fprintf(stderr, "make_seeds: %s: %s\n", what,
            rp_last_error()[0] ? rp_last_error() : strerror(errno));
    exit(1);
}

static void path_of(char *buf, size_t size, const char *target, const char *name)
{
    snprintf(buf, size, "%s/%s/%s", out_dir, target, name);
}

static void write_file(const char *target, const char *name, const void *data, size_t size)
{
    char path[4096];
    path_of(path, sizeof path, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) die(path);
}

/* Reads a file the library wrote back into memory (caller frees). */
static uint8_t *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0) die(path);
    long n = ftell(f);
    uint8_t *buf = malloc((size_t)n + 1);
    if (!buf || fseek(f, 0, SEEK_SET) != 0 || fread(buf, 1, (size_t)n, f) != (size_t)n) die(path);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* Writes name, and name.cut-K for each cut length K shorter than the file. */
static void write_with_cuts(const char *target, const char *name, const uint8_t *data, size_t size,
                            const size_t *cuts, int n_cuts)
{
    write_file(target, name, data, size);
    for (int i = 0; i < n_cuts; i++) {
        if (cuts[i] >= size) continue;
        char cut[256];
        snprintf(cut, sizeof cut, "%s.cut-%zu", name, cuts[i]);
        write_file(target, cut, data, cuts[i]);
    }
}

/* ---- idx ---- */

static uint8_t *idx_image(const char *name, int ndim, const int *dims, size_t *size)
{
    char path[4096];
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)dims[i];
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i % 10); /* also valid labels */
    path_of(path, sizeof path, "idx", name);
    if (rp_idx_write(path, data, ndim, dims) != RP_OK) die(path);
    free(data);
    return read_file(path, size);
}

static void seeds_idx(void)
{
    size_t isz, lsz, qsz;
    const int img[3] = {3, 4, 4}, lab[1] = {3}, quad[4] = {2, 3, 3, 2};
    uint8_t *images = idx_image("images-3x4x4", 3, img, &isz);
    uint8_t *labels = idx_image("labels-3", 1, lab, &lsz);
    uint8_t *four = idx_image("images-2x3x3x2", 4, quad, &qsz);
    const size_t cuts[] = {3, 9, 20};
    write_with_cuts("idx", "images-3x4x4", images, isz, cuts, 3);

    /* An image file and its labels in one input: fuzz_idx loads them as a pair. */
    uint8_t *pair = malloc(isz + lsz);
    memcpy(pair, images, isz);
    memcpy(pair + isz, labels, lsz);
    write_file("idx", "pair-3", pair, isz + lsz);
    write_file("idx", "pair-3.cut", pair, isz + lsz - 1);
    free(pair);

    /* The same image file gzip-compressed (zlib's gzip wrapper, as gzopen writes it). */
    char path[4096];
    path_of(path, sizeof path, "idx", "images-3x4x4.gz");
    gzFile gz = gzopen(path, "wb9");
    if (!gz || gzwrite(gz, images, (unsigned)isz) != (int)isz || gzclose(gz) != Z_OK) die(path);
    size_t gsz;
    uint8_t *gzipped = read_file(path, &gsz);
    write_file("idx", "images-3x4x4.gz.cut", gzipped, gsz - 4); /* trailer cut */
    free(gzipped);
    free(images);
    free(labels);
    free(four);
}

/* ---- cifar: the first byte picks the split (bit 0: train), then the batch bytes ---- */

static void seeds_cifar(void)
{
    enum { RECORD = 3073 };
    uint8_t *buf = malloc(1 + 5 * RECORD);
    for (int r = 0; r < 5; r++) {
        uint8_t *rec = buf + 1 + r * RECORD;
        rec[0] = (uint8_t)(r * 3 % 10);
        for (int i = 1; i < RECORD; i++)
            rec[i] = (uint8_t)(i * 7 + r);
    }
    buf[0] = 0; /* test: one record */
    const size_t cuts[] = {1, 2, RECORD};
    write_with_cuts("cifar", "test-1", buf, 1 + RECORD, cuts, 3);
    write_file("cifar", "test-2", buf, 1 + 2 * RECORD);
    buf[0] = 1; /* train: one record in each of the five batches */
    write_with_cuts("cifar", "train-5", buf, 1 + 5 * RECORD, cuts, 0);
    write_file("cifar", "train-5.cut", buf, 5 * RECORD);
    free(buf);
}

/* ---- checkpoint ---- */

/* The model and optimizer fuzz_checkpoint reads into, with some state and a config. */
static void seeds_checkpoint(void)
{
    rp_params *params = NULL;
    rp_optimizer *opt = NULL;
    rp_checkpoint *ck = NULL;
    const int w[2] = {3, 2}, b[1] = {3}, stat[1] = {3};
    rp_init init = {RP_INIT_UNIFORM, 1.0f, 0, 0};
    rp_optim_config cfg = rp_optim_config_default();
    cfg.kind = RP_OPTIM_ADAM;
    if (rp_params_create(&params) != RP_OK ||
        !rp_params_add(params, "fc.weight", 2, w, init, true) ||
        !rp_params_add(params, "fc.bias", 1, b, init, true) ||
        !rp_params_add(params, "bn.mean", 1, stat, init, false) ||
        rp_params_finalize(params, 7) != RP_OK || rp_optimizer_create(&opt, params, &cfg) != RP_OK)
        die("the model");
    const int64_t position[3] = {1, 2, 10};
    const uint64_t key[2] = {0x0123456789abcdefull, 42};
    const int64_t empty_shape[1] = {0};
    static train_opts run;
    train_opts_default(&run, "mlp");
    char *config = train_opts_to_json(&run);
    if (rp_checkpoint_create(&ck) != RP_OK ||
        rp_checkpoint_add_params(ck, params, "param/") != RP_OK ||
        rp_checkpoint_add_optimizer(ck, opt, params, "opt/") != RP_OK ||
        rp_checkpoint_add_i64(ck, "train/position", 3, position) != RP_OK ||
        rp_checkpoint_add_u64(ck, "rng/key", 2, key) != RP_OK ||
        rp_checkpoint_add_f32(ck, "empty", 1, empty_shape, NULL) != RP_OK ||
        rp_checkpoint_add_f32(ck, "scalar", 0, NULL, (const float[]){1.5f}) != RP_OK ||
        rp_checkpoint_set_meta(ck, "replicator.config", config) != RP_OK ||
        rp_checkpoint_set_meta(ck, "note", "seed \"quoted\" \xc3\xa9") != RP_OK)
        die("the checkpoint");
    free(config);
    char path[4096];
    path_of(path, sizeof path, "checkpoint", "model.safetensors");
    if (rp_checkpoint_save(ck, path) != RP_OK) die(path);
    size_t size;
    uint8_t *data = read_file(path, &size);
    const size_t cuts[] = {7, 8, 40, 200};
    write_with_cuts("checkpoint", "model.safetensors", data, size, cuts, 4);
    write_file("checkpoint", "model.safetensors.cut-data", data, size - 3);
    free(data);
    rp_checkpoint_destroy(ck);

    /* A small one, easier for the mutator to keep whole. */
    if (rp_checkpoint_create(&ck) != RP_OK ||
        rp_checkpoint_add_i64(ck, "opt/steps", 1, (const int64_t[]){3}) != RP_OK)
        die("the small checkpoint");
    path_of(path, sizeof path, "checkpoint", "small.safetensors");
    if (rp_checkpoint_save(ck, path) != RP_OK) die(path);
    rp_checkpoint_destroy(ck);

    /* Exported weights: bf16 parameters (odd counts: 2-byte offsets) beside an f32 buffer. */
    const float vals[5] = {1.0f, -0.5f, 3.14159f, 1e-40f, 65504.0f};
    if (rp_checkpoint_create(&ck) != RP_OK ||
        rp_checkpoint_add_f32_as(ck, "param/fc.weight", RP_CHECKPOINT_BF16, 2, (int64_t[]){1, 5},
                                 vals) != RP_OK ||
        rp_checkpoint_add_f32_as(ck, "param/fc.bias", RP_CHECKPOINT_BF16, 1, (int64_t[]){3},
                                 vals) != RP_OK ||
        rp_checkpoint_add_f32(ck, "param/bn.mean", 1, (int64_t[]){1}, vals) != RP_OK ||
        rp_checkpoint_set_meta(ck, "replicator.export", "{\"dtype\":\"bf16\"}") != RP_OK)
        die("the bf16 checkpoint");
    path_of(path, sizeof path, "checkpoint", "export-bf16.safetensors");
    if (rp_checkpoint_save(ck, path) != RP_OK) die(path);
    rp_checkpoint_destroy(ck);

    /* A safetensors file from another tool: no CRC, an F16 tensor the reader refuses. */
    static const char foreign[] =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[8,10]}}";
    static const char plain[] =
        "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
        "\"data_offsets\":[0,8]}}  ";
    const char *texts[2] = {foreign, plain};
    const size_t data_bytes[2] = {10, 8};
    const char *names[2] = {"foreign-f16.safetensors", "foreign.safetensors"};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(texts[i]);
        uint8_t buf[256] = {0};
        for (int k = 0; k < 8; k++)
            buf[k] = (uint8_t)((uint64_t)n >> (8 * k));
        memcpy(buf + 8, texts[i], n);
        for (size_t k = 0; k < data_bytes[i]; k++)
            buf[8 + n + k] = (uint8_t)(k * 37);
        write_file("checkpoint", names[i], buf, 8 + n + data_bytes[i]);
    }
    rp_optimizer_destroy(opt);
    rp_params_destroy(params);
}

/* ---- config: what each model's run stores as "replicator.config" ---- */

static void write_text(const char *name, char *text)
{
    if (!text) die(name);
    write_file("config", name, text, strlen(text));
    size_t n = strlen(text);
    char cut[64];
    snprintf(cut, sizeof cut, "%s.cut", name);
    write_file("config", cut, text, n / 2);
    free(text);
}

static void seeds_config(void)
{
    static train_opts t;
    static sngan_opts g;
    static d4pg_opts d;
    train_opts_default(&t, "resnet20");
    write_text("train-resnet20.json", train_opts_to_json(&t));
    train_opts_default(&t, "mlp");
    snprintf(t.regime, sizeof t.regime, "async");
    t.ps = 2;
    t.staleness = 3;
    write_text("train-mlp-async.json", train_opts_to_json(&t));
    sngan_opts_default(&g);
    write_text("sngan.json", sngan_opts_to_json(&g));
    d4pg_opts_default(&d);
    write_text("d4pg.json", d4pg_opts_to_json(&d));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    out_dir = argv[1];
    const char *targets[] = {"idx", "cifar", "checkpoint", "config"};
    mkdir(out_dir, 0755);
    for (int i = 0; i < 4; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", out_dir, targets[i]);
        if (mkdir(path, 0755) != 0 && errno != EEXIST) die(path);
    }
    seeds_idx();
    seeds_cifar();
    seeds_checkpoint();
    seeds_config();
    return 0;
}
