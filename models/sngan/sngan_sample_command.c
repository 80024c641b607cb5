/*
 * sngan_sample_command.c - `replicator sample RUN`: a trained SN-GAN's samples as a PNG grid
 * (a row per class, or one class), or as IDX files any tool can read.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sngan/generator_onnx.h"
#include "models/sngan/sngan_command.h"

rp_status sngan_run_load(const char *dir, sngan_opts *o, rp_sngan_generator **g)
{
    *g = NULL;
    rp_checkpoint *ck = NULL;
    const char *config;
    RP_CHECK(rp_trainer_load_run(dir, &ck, &config));
    rp_status status = RP_OK;
    if (!sngan_config_is_gan(config)) {
        cJSON *j = cJSON_Parse(config);
        const cJSON *m = j ? cJSON_GetObjectItemCaseSensitive(j, "model") : NULL;
        status = RP_ERROR(RP_ERR_INVALID, "%s is not a GAN run: its checkpoint holds %s%s", dir,
                          cJSON_IsString(m) ? "a " : "no model configuration",
                          cJSON_IsString(m) ? m->valuestring : "");
        cJSON_Delete(j);
        goto cleanup;
    }
    RP_TRY(sngan_opts_from_json(o, config));
    /* The generator's tensors held to the checkpoint's before they are allocated. */
    rp_trainer_guard_arg guard = {ck, "gen/"};
    RP_TRY(rp_params_guard_push(rp_trainer_checkpoint_guard, &guard));
    status = rp_sngan_generator_create(g, &o->g, NULL);
    rp_params_guard_pop();
    if (status != RP_OK) goto cleanup;
    RP_TRY(rp_sngan_generator_load(*g, ck));
cleanup:
    if (status != RP_OK) {
        rp_sngan_generator_destroy(*g);
        *g = NULL;
    }
    rp_checkpoint_destroy(ck);
    return status;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: replicator sample RUN [--class C] [--n N] [--out FILE] [--raw] [--seed S]\n"
               "\n"
               "Draws samples from the SN-GAN saved in RUN (written by replicator train sngan).\n"
               "  --class C   only class C (default: every class, a row each)\n"
               "  --n N       samples per class (default 10; with --class, 100); refused before\n"
               "              drawing if the file cannot hold them (a PNG side over 1,000,000\n"
               "              pixels, an IDX file of 2 GiB)\n"
               "  --out FILE  where to write (default samples.png, or samples.idx with --raw)\n"
               "  --raw       write the images as an IDX file of bytes ([n,h,w] or [n,h,w,c]) and\n"
               "              their classes beside it (FILE with -labels before the extension)\n"
               "  --seed S    the latent vectors' seed (default 1)\n"
               "  --threads N kernel threads (default: all cores)\n");
}

/* "dir/samples.idx" -> "dir/samples-labels.idx", in a block of its own (free() it), or NULL. */
static char *labels_path(const char *images)
{
    const char *dot = strrchr(images, '.'), *slash = strrchr(images, '/');
    if (!dot || (slash && dot < slash)) dot = images + strlen(images);
    size_t size = strlen(images) + sizeof "-labels";
    char *buf = malloc(size);
    if (buf) snprintf(buf, size, "%.*s-labels%s", (int)(dot - images), images, dot);
    return buf;
}

int sngan_sample_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *run = argv[1], *out = NULL;
    long cls = -1, n = 0, seed = 1, threads = 0;
    bool raw = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--raw")) {
            raw = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "replicator sample: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        long x = 0;
        if (!strcmp(a, "--out") && v[0])
            out = v;
        else if (!strcmp(a, "--class") && rp_options_parse_long(v, 0, 1 << 20, &x))
            cls = x;
        else if (!strcmp(a, "--n") && rp_options_parse_long(v, 1, 1000000, &x))
            n = x;
        else if (!strcmp(a, "--seed") && rp_options_parse_long(v, 0, 0x7fffffffL, &x))
            seed = x;
        else if (!strcmp(a, "--threads") && rp_options_parse_long(v, 1, 1024, &x))
            threads = x;
        else {
            fprintf(stderr, "replicator sample: bad option %s %s (see --help)\n", a, v);
            return 2;
        }
    }
    rp_kernels_set_threads((int)threads);
    sngan_opts o;
    rp_sngan_generator *g = NULL;
    rp_tape *tape = NULL;
    float *z = NULL, *img = NULL;
    int32_t *labels = NULL;
    uint8_t *bytes = NULL;
    char *lpath = NULL;
    rp_status status = RP_OK;
    RP_TRY(sngan_run_load(run, &o, &g));
    const rp_sngan_config *c = &o.g;
    if (cls >= c->classes) {
        status = RP_ERROR(RP_ERR_INVALID, "--class %ld: the run's generator knows classes 0..%d",
                          cls, c->classes - 1);
        goto cleanup;
    }
    if (!n) n = cls >= 0 ? 100 : 10;
    int64_t total = cls >= 0 ? n : n * c->classes, per = (int64_t)c->h * c->w * c->c;
    if (!out) out = raw ? "samples.idx" : "samples.png";
    /* What the file can hold, before any sample is drawn. */
    int cols = cls >= 0 ? (n < 10 ? (int)n : 10) : (int)n;
    if (raw && total * per >= (int64_t)1 << 31)
        status = RP_ERROR(RP_ERR_INVALID,
                          "--n %ld: %lld samples of %dx%dx%d are %lld bytes, over the 2^31 an IDX "
                          "file holds; ask for fewer",
                          n, (long long)total, c->h, c->w, c->c, (long long)(total * per));
    else if (!raw && total <= INT32_MAX &&
             rp_image_grid_check((int)total, c->h, c->w, c->c, cols, 2) != RP_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", rp_last_error());
        status = RP_ERROR(RP_ERR_INVALID, "--n %ld: %s; ask for fewer, or write them with --raw", n,
                          why);
    }
    if (status != RP_OK) goto cleanup;
    z = malloc((size_t)total * (size_t)c->z_dim * sizeof *z);
    img = malloc((size_t)(total * per) * sizeof *img);
    labels = malloc((size_t)total * sizeof *labels);
    if (!z || !img || !labels) {
        status = RP_ERROR(RP_ERR_NOMEM, "%lld samples", (long long)total);
        goto cleanup;
    }
    /* Column j of every row shares its z: the rows differ by class alone. */
    for (int64_t s = 0; s < total; s++) {
        labels[s] = (int32_t)(cls >= 0 ? cls : s / n);
        rp_rng_fill_normal((uint64_t)seed, (uint64_t)((s % n) * c->z_dim), z + s * c->z_dim,
                           (size_t)c->z_dim, 0.0f, 1.0f);
    }
    RP_TRY(rp_tape_create(&tape, 0));
    for (int64_t s = 0; s < total; s += 100) {
        int m = (int)(total - s < 100 ? total - s : 100);
        rp_tape_reset(tape);
        RP_TRY(rp_sngan_generate(g, tape, z + s * c->z_dim, labels + s, m, img + s * per));
    }
    if (!raw) {
        RP_TRY(rp_image_grid_write_png(out, img, (int)total, c->h, c->w, c->c, cols, 2, 255, -1.0f,
                                       1.0f));
        printf("%lld samples%s in %s (%d per row)\n", (long long)total,
               cls >= 0 ? " of one class" : ", a row per class", out, cols);
    } else {
        bytes = malloc((size_t)(total * per));
        if (!bytes) {
            status = RP_ERROR(RP_ERR_NOMEM, "%lld samples", (long long)total);
            goto cleanup;
        }
        for (int64_t i = 0; i < total * per; i++) {
            float q = (img[i] + 1) * 127.5f;
            bytes[i] = (uint8_t)(q != q || q < 0 ? 0 : q > 255 ? 255 : (int)(q + 0.5f));
        }
        int dims[4] = {(int)total, c->h, c->w, c->c};
        RP_TRY(rp_idx_write(out, bytes, c->c == 1 ? 3 : 4, dims));
        for (int64_t s = 0; s < total; s++)
            bytes[s] = (uint8_t)labels[s];
        lpath = labels_path(out);
        if (!lpath) {
            status = RP_ERROR(RP_ERR_NOMEM, "the labels' path next to %s", out);
            goto cleanup;
        }
        RP_TRY(rp_idx_write(lpath, bytes, 1, dims));
        printf("%lld samples in %s, their classes in %s (IDX, unsigned bytes)\n", (long long)total,
               out, lpath);
    }
cleanup:
    free(lpath);
    free(bytes);
    free(labels);
    free(img);
    free(z);
    rp_tape_destroy(tape);
    rp_sngan_generator_destroy(g);
    if (status != RP_OK) {
        fprintf(stderr, "replicator sample: error: %s\n", rp_last_error());
        return 1;
    }
    return 0;
}

/* `replicator export --format onnx` of an SN-GAN run (rp_model_desc.onnx): its generator. */
rp_status sngan_onnx_export(rp_onnx **g, const rp_checkpoint *ck, const char *config, bool online,
                            char *what, size_t what_size)
{
    (void)online; /* one generator */
    sngan_opts o;
    *g = NULL;
    RP_CHECK(sngan_opts_from_json(&o, config));
    RP_CHECK(rp_sngan_generator_onnx(g, &o.g, ck, "gen/"));
    snprintf(what, what_size, "the SN-GAN's generator (%d x %d x %d images, %d classes)", o.g.h,
             o.g.w, o.g.c, o.g.classes);
    return RP_OK;
}
