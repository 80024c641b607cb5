/*
 * make_seeds.c - writes the fuzz targets' seed inputs: small valid files made by the library
 * itself (rp_idx_write, rp_checkpoint_save, the command's to_json), and truncated copies.
 *
 * Usage: make_seeds DIR   writes DIR/idx, DIR/cifar, DIR/checkpoint, DIR/config, DIR/image,
 *                         DIR/tar and DIR/list.
 * fuzz/corpus/ holds its output as committed (scripts/fuzz.sh --seeds rewrites it), and
 * scripts/fuzz.sh passes a fresh copy to every run too, so the seeds follow the formats.
 */
#include <errno.h>
#include <png.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <zlib.h>

#include "models/d4pg/d4pg_command.h"
#include "models/sngan/sngan_command.h"
#include "models/classifier/classifier_options.h"
#include "folder_fixture.h"
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

/* ---- image: 5 bytes of transform (fuzz_image.c), then a JPEG or PNG file ---- */

/* Writes name: the transform byte, the epoch, the file; and name.cut-K for each cut. */
static void write_image(const char *name, uint8_t mode, const uint8_t *file, size_t size,
                        const size_t *cuts, int n_cuts)
{
    uint8_t *buf = malloc(size + 5);
    if (!buf) die(name);
    buf[0] = mode;
    buf[1] = 7;
    buf[2] = buf[3] = buf[4] = 0;
    memcpy(buf + 5, file, size);
    size_t c5[8];
    for (int i = 0; i < n_cuts && i < 8; i++)
        c5[i] = cuts[i] + 5;
    write_with_cuts("image", name, buf, size + 5, c5, n_cuts < 8 ? n_cuts : 8);
    free(buf);
}

/* A JPEG by TurboJPEG's compressor with the given subsampling and flags (tjFree'd copy). */
static uint8_t *jpeg_bytes(const uint8_t *px, int w, int h, int pf, int samp, int flags,
                           size_t *size)
{
    tjhandle tj = tjInitCompress();
    unsigned char *out = NULL;
    unsigned long n = 0;
    if (!tj || tjCompress2(tj, px, w, 0, h, pf, &out, &n, samp, 90, flags) != 0) die("tjCompress2");
    tjDestroy(tj);
    uint8_t *copy = malloc(n);
    memcpy(copy, out, n);
    tjFree(out);
    *size = n;
    return copy;
}

typedef struct png_buf {
    uint8_t *data;
    size_t size, cap;
} png_buf;

static void png_buf_write(png_structp png, png_bytep p, size_t n)
{
    png_buf *b = png_get_io_ptr(png);
    if (b->size + n > b->cap) {
        b->cap = (b->size + n) * 2;
        b->data = realloc(b->data, b->cap);
        if (!b->data) die("png");
    }
    memcpy(b->data + b->size, p, n);
    b->size += n;
}

static void png_buf_flush(png_structp png)
{
    (void)png;
}

/*
 * A PNG of what the simplified API does not write: a 4-bit palette, 16-bit gray with a tRNS
 * colour, Adam7 interlacing. Pixel values follow the pattern of (x, y).
 */
static uint8_t *png_custom(int w, int h, int color, int depth, bool interlace, size_t *size)
{
    png_buf b = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info || setjmp(png_jmpbuf(png))) die("png_custom");
    png_set_write_fn(png, &b, png_buf_write, png_buf_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, color,
                 interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (color == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[16];
        for (int i = 0; i < 16; i++)
            pal[i] = (png_color){(png_byte)(i * 16), (png_byte)(255 - i * 16), (png_byte)(i * 5)};
        png_set_PLTE(png, info, pal, 16);
    }
    if (color == PNG_COLOR_TYPE_GRAY && depth == 16) {
        png_color_16 t = {.gray = 1000};
        png_set_tRNS(png, info, NULL, 0, &t);
    }
    png_write_info(png, info);
    int channels = color == PNG_COLOR_TYPE_RGB ? 3 : 1;
    size_t row_bytes = ((size_t)w * (size_t)channels * (size_t)depth + 7) / 8;
    uint8_t *rows = calloc((size_t)h, row_bytes);
    png_bytep *ptr = malloc((size_t)h * sizeof *ptr);
    for (int y = 0; y < h; y++) {
        ptr[y] = rows + (size_t)y * row_bytes;
        for (size_t i = 0; i < row_bytes; i++)
            ptr[y][i] = (uint8_t)(y * 37 + (int)i * 11);
    }
    png_write_image(png, ptr);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(ptr);
    free(rows);
    *size = b.size;
    return b.data;
}

/* The JPEG's SOF height and width set to h x w (a header that lies about its size). */
static void jpeg_set_size(uint8_t *p, size_t n, int w, int h)
{
    for (size_t i = 2; i + 9 < n; i++)
        if (p[i] == 0xFF && (p[i + 1] == 0xC0 || p[i + 1] == 0xC2)) {
            p[i + 5] = (uint8_t)(h >> 8);
            p[i + 6] = (uint8_t)h;
            p[i + 7] = (uint8_t)(w >> 8);
            p[i + 8] = (uint8_t)w;
            return;
        }
    die("no SOF marker");
}

static void seeds_image(void)
{
    enum { W = 64, H = 48 };
    uint8_t px[W * H * 4];
    fx_pattern(px, W, H, 3);
    size_t n;
    uint8_t *b;
    /* Training crops of a 64 x 48 image to 8 x 8 decode at reduced DCT scales. */
    const size_t jcuts[] = {2, 20, 200, 600};
    b = jpeg_bytes(px, W, H, TJPF_RGB, TJSAMP_420, TJFLAG_ACCURATEDCT, &n);
    write_image("jpeg-420-64x48-train8", 0x01, b, n, jcuts, 4);
    write_image("jpeg-420-64x48-eval24", 0x04, b, n, NULL, 0);
    write_image("jpeg-420-64x48-train8-noscale", 0x0f, b, n, NULL, 0);
    jpeg_set_size(b, n, 30000, 30000);
    write_image("jpeg-claims-30000x30000", 0x01, b, n, NULL, 0);
    free(b);
    /* ImageNet's recipe over 4 (side 56): a 256 x 192 image's crops decode at 1/4 to 7/8. */
    uint8_t *big = malloc(256 * 192 * 3);
    if (!big) die("seed image");
    fx_pattern(big, 256, 192, 9);
    b = jpeg_bytes(big, 256, 192, TJPF_RGB, TJSAMP_420, 0, &n);
    write_image("jpeg-420-256x192-train56", 0x09, b, n, NULL, 0);
    free(b);
    free(big);
    b = jpeg_bytes(px, 16, 12, TJPF_RGB, TJSAMP_444, TJFLAG_PROGRESSIVE, &n);
    write_image("jpeg-progressive-16x12-eval56", 0x08, b, n, NULL, 0);
    free(b);
    b = jpeg_bytes(px, 20, 20, TJPF_GRAY, TJSAMP_GRAY, 0, &n);
    write_image("jpeg-gray-20x20-train24", 0x07, b, n, NULL, 0);
    free(b);
    b = jpeg_bytes(px, 16, 16, TJPF_CMYK, TJSAMP_444, 0, &n);
    write_image("jpeg-cmyk-16x16-train8", 0x03, b, n, NULL, 0);
    free(b);
    b = jpeg_bytes(px, 17, 9, TJPF_RGB, TJSAMP_422, 0, &n);
    write_image("jpeg-422-17x9-train8", 0x01, b, n, NULL, 0);
    free(b);
    /* PNGs: the simplified writer's gray, gray+alpha, RGB, RGBA (mode bit 4: CRCs repaired). */
    const size_t pcuts[] = {8, 33, 60};
    for (int c = 1; c <= 4; c++) {
        if (fx_png_bytes(px, 12, 10, c, &b, &n) != 0) die("png");
        char name[64];
        snprintf(name, sizeof name, "png-%dch-12x10", c);
        write_image(name, (uint8_t)(0x10 | (c & 1)), b, n, c == 3 ? pcuts : NULL, c == 3 ? 3 : 0);
        free(b);
    }
    b = png_custom(13, 7, PNG_COLOR_TYPE_PALETTE, 4, true, &n);
    write_image("png-palette4-interlaced-13x7", 0x11, b, n, NULL, 0);
    free(b);
    b = png_custom(9, 11, PNG_COLOR_TYPE_GRAY, 16, false, &n);
    write_image("png-gray16-trns-9x11", 0x10, b, n, NULL, 0);
    free(b);
    b = png_custom(10, 10, PNG_COLOR_TYPE_RGB, 8, false, &n);
    write_image("png-rgb-10x10-eval56", 0x18, b, n, NULL, 0);
    free(b);
}

/* ---- tar: 1 byte of flags (fuzz_tar.c), then a shard ---- */

typedef struct tar_buf {
    uint8_t *data;
    size_t size;
} tar_buf;

/* Appends a member: header (typeflag `type`, name split into prefix/name past 100 bytes),
   data, padding. */
static void tar_add(tar_buf *t, const char *name, char type, const void *data, size_t size)
{
    size_t padded = (size + 511) / 512 * 512;
    t->data = realloc(t->data, t->size + 512 + padded);
    if (!t->data) die("tar");
    uint8_t *h = t->data + t->size;
    memset(h, 0, 512 + padded);
    size_t len = strlen(name);
    if (len > 100) {
        const char *slash = strchr(name + len - 100, '/');
        if (!slash || slash - name > 155) die(name);
        memcpy(h + 345, name, (size_t)(slash - name));
        memcpy(h, slash + 1, len - (size_t)(slash - name) - 1);
    } else {
        memcpy(h, name, len);
    }
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011lo", (unsigned long)size);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int k = 0; k < 512; k++)
        sum += h[k];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    if (size) memcpy(h + 512, data, size);
    t->size += 512 + padded;
}

static void tar_end(tar_buf *t)
{
    t->data = realloc(t->data, t->size + 1024);
    if (!t->data) die("tar");
    memset(t->data + t->size, 0, 1024);
    t->size += 1024;
}

static void write_tar(const char *name, uint8_t flags, const tar_buf *t, const size_t *cuts,
                      int n_cuts)
{
    uint8_t *buf = malloc(t->size + 1);
    if (!buf) die(name);
    buf[0] = flags;
    memcpy(buf + 1, t->data, t->size);
    write_with_cuts("tar", name, buf, t->size + 1, cuts, n_cuts);
    free(buf);
}

static void seeds_tar(void)
{
    uint8_t px[16 * 12 * 3], *jpg = NULL, *png = NULL;
    size_t nj = 0, np = 0;
    fx_pattern(px, 16, 12, 5);
    if (fx_jpeg_bytes(px, 16, 12, 3, 80, &jpg, &nj) != 0 || fx_png_bytes(px, 6, 5, 3, &png, &np))
        die("tar images");
    /* Two samples: bits 1 (checksums repaired) and 2 (decoded) set. */
    tar_buf t = {0};
    tar_add(&t, "000000.jpg", '0', jpg, nj);
    tar_add(&t, "000000.cls", '0', "3", 1);
    tar_add(&t, "000001.cls", '0', "0\n", 2);
    tar_add(&t, "000001.PNG", '0', png, np);
    tar_end(&t);
    const size_t cuts[] = {300, 513, 1500};
    write_tar("two-samples", 0x06, &t, cuts, 3);
    write_tar("two-samples-skip-bad", 0x07, &t, NULL, 0);
    free(t.data);
    /* pax path and size records; GNU long names; a name in the ustar prefix; a directory and
       a member without a key; then (skip_bad) a last sample without its label. */
    memset(&t, 0, sizeof t);
    static const char pax[] = "24 path=dir/000002.jpeg\n"
                              "11 size=12\n";
    tar_add(&t, "PaxHeaders/x", 'x', pax, sizeof pax - 1);
    tar_add(&t, "ignored", '0', "\xff\xd8\xff\xe0\0\x10JFIF\0\x01", 12);
    tar_add(&t, "dir/000002.cls", '0', "12", 2);
    char long_name[200];
    snprintf(long_name, sizeof long_name, "%0150d.jpg", 3);
    tar_add(&t, "././@LongLink", 'L', long_name, strlen(long_name) + 1);
    tar_add(&t, "trunc", '0', jpg, nj);
    snprintf(long_name, sizeof long_name, "%0150d.cls", 3);
    tar_add(&t, "././@LongLink", 'L', long_name, strlen(long_name) + 1);
    tar_add(&t, "trunc", '0', "1", 1);
    tar_add(&t,
            "some/where/quite/deep/00000000000000000000000000000000000000000000000000000000000"
            "00000000000000000000000000000000000000000000000000/000004.jpg",
            '0', jpg, nj);
    tar_add(&t,
            "some/where/quite/deep/00000000000000000000000000000000000000000000000000000000000"
            "00000000000000000000000000000000000000000000000000/000004.cls",
            '0', "2", 1);
    tar_add(&t, "subdir/", '5', NULL, 0);
    tar_add(&t, "README", '0', "no key", 6);
    tar_buf whole = {malloc(t.size), t.size};
    if (!whole.data) die("tar");
    memcpy(whole.data, t.data, t.size);
    tar_end(&whole);
    write_tar("pax-gnu-prefix", 0x06, &whole, NULL, 0);
    free(whole.data);
    tar_add(&t, "000005.jpg", '0', jpg, nj);
    tar_end(&t);
    write_tar("pax-gnu-prefix-unlabelled-skip-bad", 0x07, &t, NULL, 0);
    free(t.data);
    free(jpg);
    free(png);
}

/* ---- list: 1 byte of flags (bit 0: skip_bad), then a list file ---- */

static void write_list(const char *name, uint8_t flags, const char *text)
{
    size_t n = strlen(text);
    uint8_t *buf = malloc(n + 1);
    if (!buf) die(name);
    buf[0] = flags;
    memcpy(buf + 1, text, n);
    const size_t cuts[] = {n / 2 + 1};
    write_with_cuts("list", name, buf, n + 1, cuts, 1);
    free(buf);
}

static void seeds_list(void)
{
    static const char good[] = "a.jpg 0\n"
                               "sub dir/b c.png\t3\r\n"
                               "# a comment 9\n"
                               "\n"
                               "   /abs/x.JPEG  2   \n"
                               "last.jpg 1";
    static const char bad[] = "a.jpg 0\n"
                              "no-label.jpg\n"
                              "neg.jpg -1\n"
                              "big.jpg 1048576\n"
                              "word.jpg one\n"
                              "ok.png 4\n";
    write_list("good", 0, good);
    write_list("good-skip-bad", 1, good);
    write_list("bad-lines", 0, bad);
    write_list("bad-lines-skip-bad", 1, bad);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    out_dir = argv[1];
    const char *targets[] = {"idx", "cifar", "checkpoint", "config", "image", "tar", "list"};
    mkdir(out_dir, 0755);
    for (int i = 0; i < 7; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", out_dir, targets[i]);
        if (mkdir(path, 0755) != 0 && errno != EEXIST) die(path);
    }
    seeds_idx();
    seeds_cifar();
    seeds_checkpoint();
    seeds_config();
    seeds_image();
    seeds_tar();
    seeds_list();
    return 0;
}
