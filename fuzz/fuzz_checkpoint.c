/*
 * fuzz_checkpoint.c - libFuzzer target for the checkpoint reader: rp_checkpoint_load (replicator's
 * own files, CRC required) and rp_checkpoint_load_safetensors (any safetensors file), and what
 * a resumed run does with a loaded checkpoint (rp_checkpoint_read_params and
 * rp_checkpoint_read_optimizer into a small model and its Adam state).
 *
 * The input is the file. Checked besides memory safety:
 * - an error leaves no checkpoint and names the path;
 * - what the strict reader accepts the lenient one accepts too, with the same contents;
 * - every tensor of a loaded checkpoint is reachable by name with a shape that fits its dtype,
 *   and every metadata key by name, the reserved CRC key never among them;
 * - a BF16 tensor reads back as f32 exactly widened (rp_checkpoint_copy_f32);
 * - reading params or optimizer state is all or nothing: on an error nothing changed;
 * - a loaded checkpoint saved again (to a scratch directory in memory) loads back strictly with
 *   the same tensors and metadata.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "replicator/io.h"

/* Bytes per element of a dtype. */
static size_t dtype_size(rp_checkpoint_dtype dtype)
{
    return dtype == RP_CHECKPOINT_BF16 ? 2 : dtype == RP_CHECKPOINT_F32 ? 4 : 8;
}

/* A BF16 tensor read as f32 is each value's bits shifted up 16, and a wrong count is refused. */
static void check_widened(const rp_checkpoint *ck, const char *name, const uint8_t *data,
                          size_t numel)
{
    static float wide[4096];
    if (numel > sizeof wide / sizeof wide[0]) return;
    FUZZ_EXPECT(rp_checkpoint_copy_f32(ck, name, wide, (int64_t)numel + 1) != RP_OK,
                "tensor \"%s\" copied into a destination of the wrong size", name);
    FUZZ_EXPECT(rp_checkpoint_copy_f32(ck, name, wide, (int64_t)numel) == RP_OK,
                "tensor \"%s\" (BF16) cannot be read as f32: %s", name, rp_last_error());
    for (size_t k = 0; k < numel; k++) {
        uint16_t h;
        uint32_t u;
        memcpy(&h, data + 2 * k, sizeof h);
        memcpy(&u, &wide[k], sizeof u);
        FUZZ_EXPECT(u == (uint32_t)h << 16, "tensor \"%s\" element %zu widened wrongly", name, k);
    }
}

/* Visits every tensor and metadata entry; returns the total tensor bytes. */
static size_t walk(const rp_checkpoint *ck)
{
    size_t bytes = 0;
    int n = rp_checkpoint_count(ck);
    FUZZ_EXPECT(n >= 0 && rp_checkpoint_name_at(ck, n) == NULL, "count %d", n);
    for (int i = 0; i < n; i++) {
        const char *name = rp_checkpoint_name_at(ck, i);
        FUZZ_EXPECT(name && *name && strlen(name) <= RP_CHECKPOINT_NAME_MAX, "tensor %d", i);
        rp_checkpoint_dtype dtype;
        int ndim = -1;
        int64_t shape[RP_MAX_DIMS];
        const uint8_t *data = rp_checkpoint_get(ck, name, &dtype, &ndim, shape);
        FUZZ_EXPECT(data != NULL, "tensor \"%s\" not found by its name", name);
        FUZZ_EXPECT(ndim >= 0 && ndim <= RP_MAX_DIMS, "tensor \"%s\": ndim %d", name, ndim);
        FUZZ_EXPECT(dtype == RP_CHECKPOINT_F32 || dtype == RP_CHECKPOINT_BF16 ||
                        dtype == RP_CHECKPOINT_I64 || dtype == RP_CHECKPOINT_U64,
                    "tensor \"%s\": dtype %d", name, (int)dtype);
        size_t nbytes = dtype_size(dtype);
        for (int d = 0; d < ndim; d++) {
            FUZZ_EXPECT(shape[d] >= 0, "tensor \"%s\": dimension %d is %lld", name, d,
                        (long long)shape[d]);
            nbytes *= (size_t)shape[d];
        }
        /* Every byte must be readable: ASan checks the block really holds the shape. */
        volatile uint8_t sink = 0;
        for (size_t k = 0; k < nbytes; k++)
            sink ^= data[k];
        (void)sink;
        if (dtype == RP_CHECKPOINT_BF16) check_widened(ck, name, data, nbytes / 2);
        bytes += nbytes;
    }
    int m = rp_checkpoint_meta_count(ck);
    FUZZ_EXPECT(m >= 0 && rp_checkpoint_meta_key_at(ck, m) == NULL, "meta count %d", m);
    for (int i = 0; i < m; i++) {
        const char *key = rp_checkpoint_meta_key_at(ck, i);
        FUZZ_EXPECT(key && *key && strcmp(key, "replicator.crc32") != 0, "metadata key %d", i);
        FUZZ_EXPECT(rp_checkpoint_get_meta(ck, key) != NULL, "metadata \"%s\" by name", key);
    }
    return bytes;
}

/* True if a and b hold the same tensors (any order) and metadata. */
static bool same_contents(const rp_checkpoint *a, const rp_checkpoint *b)
{
    if (rp_checkpoint_count(a) != rp_checkpoint_count(b) ||
        rp_checkpoint_meta_count(a) != rp_checkpoint_meta_count(b))
        return false;
    for (int i = 0; i < rp_checkpoint_count(a); i++) {
        const char *name = rp_checkpoint_name_at(a, i);
        rp_checkpoint_dtype ta, tb;
        int na, nb;
        int64_t sa[RP_MAX_DIMS], sb[RP_MAX_DIMS];
        const void *da = rp_checkpoint_get(a, name, &ta, &na, sa);
        const void *db = rp_checkpoint_get(b, name, &tb, &nb, sb);
        if (!db || ta != tb || na != nb) return false;
        size_t nbytes = dtype_size(ta);
        for (int d = 0; d < na; d++) {
            if (sa[d] != sb[d]) return false;
            nbytes *= (size_t)sa[d];
        }
        if (memcmp(da, db, nbytes) != 0) return false;
    }
    for (int i = 0; i < rp_checkpoint_meta_count(a); i++) {
        const char *key = rp_checkpoint_meta_key_at(a, i);
        const char *vb = rp_checkpoint_get_meta(b, key);
        if (!vb || strcmp(rp_checkpoint_get_meta(a, key), vb) != 0) return false;
    }
    return true;
}

/* A small model and its Adam state, as a resumed run holds them. */
typedef struct model {
    rp_params *params;
    rp_optimizer *opt;
} model;

static void model_create(model *m)
{
    const int w[2] = {3, 2}, b[1] = {3}, stat[1] = {3};
    rp_init init = {RP_INIT_CONSTANT, 0.5f, 0, 0};
    rp_optim_config cfg = rp_optim_config_default();
    cfg.kind = RP_OPTIM_ADAM;
    bool ok = rp_params_create(&m->params) == RP_OK &&
              rp_params_add(m->params, "fc.weight", 2, w, init, true) &&
              rp_params_add(m->params, "fc.bias", 1, b, init, true) &&
              rp_params_add(m->params, "bn.mean", 1, stat, init, false) &&
              rp_params_finalize(m->params, 1) == RP_OK &&
              rp_optimizer_create(&m->opt, m->params, &cfg) == RP_OK;
    if (!ok) {
        fprintf(stderr, "fuzz harness: cannot build the model: %s\n", rp_last_error());
        abort();
    }
}

/* Reads params and optimizer state from ck; on an error, checks that nothing changed. */
static void read_into(model *m, const rp_checkpoint *ck)
{
    int64_t n = rp_params_numel(m->params), ns = 0;
    float *state = rp_optimizer_state(m->opt, &ns);
    float before[64], state_before[64];
    FUZZ_EXPECT(n <= 64 && ns <= 64, "model of %lld values", (long long)n);
    memcpy(before, rp_params_data(m->params), (size_t)n * sizeof(float));
    memcpy(state_before, state, (size_t)ns * sizeof(float));
    int64_t steps = rp_optimizer_steps(m->opt);
    if (rp_checkpoint_read_params(ck, m->params, "param/") != RP_OK)
        FUZZ_EXPECT(!memcmp(before, rp_params_data(m->params), (size_t)n * sizeof(float)),
                    "a failed read_params changed the parameters");
    if (rp_checkpoint_read_optimizer(ck, m->opt, m->params, "opt/") != RP_OK) {
        FUZZ_EXPECT(!memcmp(state_before, state, (size_t)ns * sizeof(float)) &&
                        rp_optimizer_steps(m->opt) == steps,
                    "a failed read_optimizer changed the state");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fuzz_file file;
    static char saved[4096];
    static model m;
    if (!m.params) {
        fuzz_file_open(&file, "checkpoint");
        snprintf(saved, sizeof saved, "%s/saved.safetensors", fuzz_dir_create("checkpoint"));
        model_create(&m);
    }
    fuzz_file_set(&file, data, size);

    rp_checkpoint *strict = (rp_checkpoint *)1, *loose = (rp_checkpoint *)1;
    rp_status s = rp_checkpoint_load(&strict, file.path);
    if (s != RP_OK)
        FUZZ_EXPECT(!strict && strstr(rp_last_error(), file.path), "strict load: status %s",
                    rp_status_name(s));
    s = rp_checkpoint_load_safetensors(&loose, file.path);
    if (s != RP_OK) {
        FUZZ_EXPECT(!loose && strstr(rp_last_error(), file.path), "lenient load: status %s",
                    rp_status_name(s));
        FUZZ_EXPECT(!strict, "the strict reader accepted what the lenient one refused");
        return 0;
    }
    size_t bytes = walk(loose);
    FUZZ_EXPECT(bytes + 8 <= size, "%zu tensor bytes from a file of %zu", bytes, size);
    if (strict) {
        FUZZ_EXPECT(same_contents(strict, loose) && same_contents(loose, strict),
                    "the strict and lenient readers disagree");
        rp_checkpoint_destroy(strict);
    }
    read_into(&m, loose);

    s = rp_checkpoint_save(loose, saved);
    FUZZ_EXPECT(s == RP_OK, "a loaded checkpoint cannot be saved again");
    rp_checkpoint *again = NULL;
    s = rp_checkpoint_load(&again, saved);
    FUZZ_EXPECT(s == RP_OK, "a saved checkpoint does not load back");
    FUZZ_EXPECT(same_contents(loose, again) && same_contents(again, loose),
                "the saved checkpoint loads back different");
    rp_checkpoint_destroy(again);
    rp_checkpoint_destroy(loose);
    return 0;
}
