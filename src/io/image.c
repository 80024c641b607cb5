/*
 * image.c - PNG grids of images (sample sheets) and PNG reading, with libpng.
 *
 * Writing builds the 8-bit picture in memory, encodes it with libpng's
 * simplified API (which keeps its setjmp inside libpng) and hands the bytes
 * to the atomic file writer, so a failed write never leaves a partial PNG.
 * Reading uses the full API, which can expand every PNG colour type to the
 * two layouts we return; its error handler longjmps, so all the state that
 * must survive a jump lives in a context owned by the caller of the one
 * function that calls setjmp.
 */
#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/file_internal.h"
#include "replicator/io.h"

/* libpng's simplified encoder refuses pictures of 4 GiB or more (its row arithmetic is 32-bit). */
#define IMAGE_MAX_BYTES ((uint64_t)0xffffffffu)

/* One value of [lo, hi] as a byte: see rp_image_grid_write_png in io.h. */
static inline uint8_t to_byte(float x, double lo, double scale)
{
    double v = ((double)x - lo) * scale;
    if (!(v >= 0.0)) return 0; /* below lo, -inf, and NaN */
    if (v >= 255.0) return 255;
    return (uint8_t)(v + 0.5);
}

/*
 * A grid over the limits: false, with `why` saying its size ("the grid would be ..."). The one
 * rule for rp_image_grid_check and rp_image_grid_write_png; the counts are checked already.
 */
static bool grid_fits(int n, int h, int w, int c, int cols, int pad, char *why, size_t size)
{
    int64_t rows = ((int64_t)n + cols - 1) / cols;
    int64_t height = rows * h + (rows + 1) * (int64_t)pad;
    int64_t width = (int64_t)cols * w + ((int64_t)cols + 1) * pad;
    if (height <= RP_IMAGE_MAX_SIDE && width <= RP_IMAGE_MAX_SIDE &&
        (uint64_t)height * (uint64_t)width * (uint64_t)c <= IMAGE_MAX_BYTES)
        return true;
    snprintf(why, size,
             "the grid would be %lld x %lld x %d (%lld rows of %d tiles of %dx%d, pad %d), over "
             "the limit of %d per side and 4 GiB",
             (long long)height, (long long)width, c, (long long)rows, cols, h, w, pad,
             RP_IMAGE_MAX_SIDE);
    return false;
}

rp_status rp_image_grid_check(int n, int h, int w, int c, int cols, int pad)
{
    if (n < 1 || h < 1 || w < 1 || cols < 1 || pad < 0 || (c != 1 && c != 3))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_image_grid_check: n %d, h %d, w %d and cols %d must be >= 1, c 1 or 3 "
                        "(is %d), pad >= 0 (is %d)",
                        n, h, w, cols, c, pad);
    char why[256];
    if (!grid_fits(n, h, w, c, cols, pad, why, sizeof why))
        return RP_ERROR(RP_ERR_INVALID, "%s", why);
    return RP_OK;
}

rp_status rp_image_grid_write_png(const char *path, const float *images, int n, int h, int w, int c,
                                  int cols, int pad, uint8_t pad_value, float lo, float hi)
{
    rp_status status = RP_OK;
    uint8_t *pixels = NULL;
    void *png = NULL;

    if (!path || !*path)
        return RP_ERROR(RP_ERR_INVALID, "rp_image_grid_write_png: path is %s",
                        path ? "empty" : "NULL");
    if (!images)
        return RP_ERROR(RP_ERR_INVALID, "rp_image_grid_write_png %s: images is NULL", path);
    if (n < 1 || h < 1 || w < 1 || cols < 1)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_image_grid_write_png %s: n %d, h %d, w %d and cols %d must all be >= 1",
                        path, n, h, w, cols);
    if (c != 1 && c != 3)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_image_grid_write_png %s: c is %d, expected 1 (gray) or 3 (RGB)", path,
                        c);
    if (pad < 0)
        return RP_ERROR(RP_ERR_INVALID, "rp_image_grid_write_png %s: pad is %d, expected >= 0",
                        path, pad);
    if (!isfinite(lo) || !isfinite(hi) || !(lo < hi))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_image_grid_write_png %s: the range [lo %g, hi %g] must be finite with "
                        "lo < hi",
                        path, (double)lo, (double)hi);

    int64_t rows = ((int64_t)n + cols - 1) / cols;
    int64_t height = rows * h + (rows + 1) * (int64_t)pad;
    int64_t width = (int64_t)cols * w + ((int64_t)cols + 1) * pad;
    char why[256];
    if (!grid_fits(n, h, w, c, cols, pad, why, sizeof why))
        return RP_ERROR(RP_ERR_INVALID, "rp_image_grid_write_png %s: %s", path, why);

    size_t row_bytes = (size_t)width * (size_t)c;
    size_t bytes = row_bytes * (size_t)height;
    pixels = rp_alloc(bytes);
    if (!pixels) {
        status = RP_ERROR(RP_ERR_NOMEM, "rp_image_grid_write_png %s: cannot allocate %zu bytes",
                          path, bytes);
        goto cleanup;
    }
    memset(pixels, pad_value, bytes);
    double dlo = lo;
    double scale = 255.0 / ((double)hi - (double)lo);
    size_t tile_row = (size_t)w * (size_t)c;
    for (int i = 0; i < n; i++) {
        size_t y0 = (size_t)pad + (size_t)(i / cols) * ((size_t)h + (size_t)pad);
        size_t x0 = (size_t)pad + (size_t)(i % cols) * ((size_t)w + (size_t)pad);
        const float *src = images + (size_t)i * (size_t)h * tile_row;
        for (int y = 0; y < h; y++) {
            uint8_t *dst = pixels + (y0 + (size_t)y) * row_bytes + x0 * (size_t)c;
            const float *s = src + (size_t)y * tile_row;
            for (size_t k = 0; k < tile_row; k++)
                dst[k] = to_byte(s[k], dlo, scale);
        }
    }

    png_image image;
    memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    image.width = (png_uint_32)width;
    image.height = (png_uint_32)height;
    image.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    /* The worst case of the encoder's output, so that one pass always fits. */
    png_alloc_size_t png_bytes = PNG_IMAGE_PNG_SIZE_MAX(image);
    png = rp_alloc(png_bytes);
    if (!png) {
        status = RP_ERROR(RP_ERR_NOMEM,
                          "rp_image_grid_write_png %s: cannot allocate %zu bytes for the encoder",
                          path, (size_t)png_bytes);
        goto cleanup;
    }
    if (!png_image_write_to_memory(&image, png, &png_bytes, 0, pixels, 0, NULL)) {
        status = RP_ERROR(RP_ERR_BACKEND, "rp_image_grid_write_png %s: libpng failed to encode: %s",
                          path, image.message[0] ? image.message : "no reason given");
        png_image_free(&image);
        goto cleanup;
    }
    png_image_free(&image);
    core_file_piece piece = {png, (size_t)png_bytes};
    RP_TRY(core_file_write_atomic(path, "PNG image", &piece, 1));
cleanup:
    rp_free(png);
    rp_free(pixels);
    return status;
}

/* ---- reading ------------------------------------------------------------------ */

/* What the reader keeps across libpng's longjmp: owned by rp_image_read_png. */
typedef struct read_ctx {
    FILE *f;
    const char *path;
    char msg[256];   /* libpng's error, or ours from the read callback */
    int read_errno;  /* nonzero: the file could not be read (RP_ERR_IO) */
    uint8_t *pixels; /* [h, w, c] */
    png_bytep *rows; /* row pointers into pixels */
    int h, w, c;
} read_ctx;

static void png_error_cb(png_structp png, png_const_charp msg)
{
    read_ctx *ctx = png_get_error_ptr(png);
    snprintf(ctx->msg, sizeof ctx->msg, "%s", msg ? msg : "unknown libpng error");
    png_longjmp(png, 1);
}

/* Warnings (e.g. an odd ICC profile) do not stop the read; libpng would print them. */
static void png_warning_cb(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* A short read is a truncated file unless the stream reports an error. */
static void png_read_cb(png_structp png, png_bytep data, size_t len)
{
    read_ctx *ctx = png_get_io_ptr(png);
    size_t got = fread(data, 1, len, ctx->f);
    if (got == len) return;
    if (ferror(ctx->f)) {
        ctx->read_errno = errno ? errno : EIO;
        png_error(png, "read error");
    }
    png_error(png, "the file ends early (truncated)");
}

/* Everything that may longjmp; returns 0 on success, -1 after a libpng error. */
static int read_body(png_structp png, png_infop info, read_ctx *ctx)
{
    if (setjmp(png_jmpbuf(png))) return -1;
    png_set_read_fn(png, ctx, png_read_cb);
    png_set_sig_bytes(png, 8);
    png_read_info(png, info);
    int color = png_get_color_type(png, info);
    int depth = png_get_bit_depth(png, info);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16) png_set_scale_16(png);
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);

    ctx->h = (int)png_get_image_height(png, info);
    ctx->w = (int)png_get_image_width(png, info);
    ctx->c = png_get_channels(png, info);
    size_t row_bytes = png_get_rowbytes(png, info);
    if ((ctx->c != 1 && ctx->c != 3) || png_get_bit_depth(png, info) != 8 ||
        row_bytes != (size_t)ctx->w * (size_t)ctx->c) {
        snprintf(ctx->msg, sizeof ctx->msg,
                 "unexpected layout after conversion (%d channels, %d bits, %zu bytes a row)",
                 ctx->c, png_get_bit_depth(png, info), row_bytes);
        return -1;
    }
    /* libpng has checked both sides against its 1,000,000 limit, so this cannot overflow. */
    ctx->pixels = rp_alloc(row_bytes * (size_t)ctx->h);
    ctx->rows = rp_alloc((size_t)ctx->h * sizeof *ctx->rows);
    if (!ctx->pixels || !ctx->rows) {
        snprintf(ctx->msg, sizeof ctx->msg, "cannot allocate %zu bytes for %dx%dx%d pixels",
                 row_bytes * (size_t)ctx->h, ctx->h, ctx->w, ctx->c);
        return -2;
    }
    for (int y = 0; y < ctx->h; y++)
        ctx->rows[y] = ctx->pixels + (size_t)y * row_bytes;
    png_read_image(png, ctx->rows);
    png_read_end(png, NULL);
    return 0;
}

rp_status rp_image_read_png(const char *path, uint8_t **pixels, int *h, int *w, int *c)
{
    rp_status status = RP_OK;
    read_ctx ctx;
    png_structp png = NULL;
    png_infop info = NULL;

    memset(&ctx, 0, sizeof ctx);
    if (pixels) *pixels = NULL;
    if (h) *h = 0;
    if (w) *w = 0;
    if (c) *c = 0;
    if (!path || !pixels || !h || !w || !c)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_image_read_png: NULL argument (path %s, pixels %s, h %s, w %s, c %s)",
                        path ? path : "NULL", pixels ? "set" : "NULL", h ? "set" : "NULL",
                        w ? "set" : "NULL", c ? "set" : "NULL");
    ctx.path = path;
    /* Checked to be a regular file before anything blocks on it (a FIFO would wait forever). */
    int fd = -1;
    RP_CHECK(core_file_open_regular(path, "PNG file", &fd));
    ctx.f = fdopen(fd, "rb");
    if (!ctx.f) {
        int err = errno;
        close(fd);
        return RP_ERROR(RP_ERR_IO, "%s: cannot open PNG file: %s", path, strerror(err));
    }

    uint8_t sig[8];
    size_t got = fread(sig, 1, sizeof sig, ctx.f);
    if (got < sizeof sig && ferror(ctx.f)) {
        status = RP_ERROR(RP_ERR_IO, "%s: cannot read PNG file: %s", path, strerror(errno));
        goto cleanup;
    }
    if (got < sizeof sig || png_sig_cmp(sig, 0, sizeof sig) != 0) {
        if (got < sizeof sig)
            status = RP_ERROR(RP_ERR_FORMAT,
                              "%s: not a PNG file: it holds %zu byte%s, less than the 8-byte PNG "
                              "signature",
                              path, got, got == 1 ? "" : "s");
        else
            status = RP_ERROR(RP_ERR_FORMAT,
                              "%s: not a PNG file: it does not start with the PNG signature "
                              "(found %02x %02x %02x %02x ...)",
                              path, sig[0], sig[1], sig[2], sig[3]);
        goto cleanup;
    }
    png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, png_error_cb, png_warning_cb);
    info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        status = RP_ERROR(RP_ERR_NOMEM, "%s: cannot allocate libpng's reader", path);
        goto cleanup;
    }
    int rc = read_body(png, info, &ctx);
    if (rc == -2) {
        status = RP_ERROR(RP_ERR_NOMEM, "%s: %s", path, ctx.msg);
        goto cleanup;
    }
    if (rc != 0) {
        if (ctx.read_errno)
            status =
                RP_ERROR(RP_ERR_IO, "%s: cannot read PNG file: %s", path, strerror(ctx.read_errno));
        else
            status = RP_ERROR(RP_ERR_FORMAT, "%s: corrupt or truncated PNG: %s", path, ctx.msg);
        goto cleanup;
    }
    *pixels = ctx.pixels;
    ctx.pixels = NULL;
    *h = ctx.h;
    *w = ctx.w;
    *c = ctx.c;
cleanup:
    if (png) png_destroy_read_struct(&png, info ? &info : NULL, NULL);
    rp_free(ctx.rows);
    rp_free(ctx.pixels);
    fclose(ctx.f);
    return status;
}
