/*
 * image_decode.c - JPEG (libjpeg-turbo's TurboJPEG API) and PNG (libpng)
 * from memory to RGB, for the image-file datasets.
 *
 * The format comes from the bytes, not the name, as PIL's Image.open decides
 * it: torchvision would open a PNG named .jpg, so we do too. What PIL's
 * convert("RGB") does is matched: grayscale is replicated to three channels,
 * alpha is dropped (not composited), CMYK is converted with Pillow's
 * cmyk2rgb. Every limit is checked before a buffer is sized from a header,
 * so a forged header (30000 x 30000 in a few bytes) is an error, not an
 * allocation of gigabytes.
 */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <turbojpeg.h>

#include "data/folder_internal.h"

void img_decoder_free(img_decoder *d)
{
    if (d->tj) tjDestroy(d->tj);
    rp_free(d->rgb);
    rp_free(d->aux);
    memset(d, 0, sizeof *d);
}

/* Grows *buf to at least `need` bytes (contents not kept). */
static rp_status grow(uint8_t **buf, size_t *cap, size_t need, const char *name)
{
    if (*cap >= need) return RP_OK;
    rp_free(*buf);
    *cap = 0;
    *buf = rp_alloc(need);
    if (!*buf)
        return RP_ERROR(RP_ERR_NOMEM, "%s: cannot allocate %zu bytes to decode it", name, need);
    *cap = need;
    return RP_OK;
}

static rp_status tj_handle(img_decoder *d, const char *name)
{
    if (d->tj) return RP_OK;
    d->tj = tjInitDecompress();
    if (!d->tj)
        return RP_ERROR(RP_ERR_BACKEND, "%s: cannot start a JPEG decoder: %s", name,
                        tjGetErrorStr2(NULL));
    return RP_OK;
}

/*
 * Drops the handle, so that the next file gets a fresh one. Each file does:
 * libjpeg keeps the Huffman and quantisation tables of what a handle has read
 * (for abbreviated datastreams, whose tables come separately), so a file that
 * lacks a table would decode with the previous file's and its pixels would
 * depend on what the thread read before. Nor is a handle that has failed
 * reliable (TurboJPEG 2.1: a header read after a failed one came back 0
 * pixels wide). A handle is cheap to make.
 */
static void tj_reset(img_decoder *d)
{
    if (d->tj) tjDestroy(d->tj);
    d->tj = NULL;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

rp_status img_probe(img_decoder *d, const uint8_t *data, size_t size, const char *name,
                    img_info *info)
{
    memset(info, 0, sizeof *info);
    if (size == 0) return RP_ERROR(RP_ERR_FORMAT, "%s: the file is empty (0 bytes)", name);
    if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
        tj_reset(d); /* a fresh handle per file (see tj_reset) */
        RP_CHECK(tj_handle(d, name));
        /* TurboJPEG 2.1 succeeds without setting the size when the data ends before the frame
           header (libjpeg reads that as a tables-only stream): the zeros stay, and say so. */
        int w = 0, h = 0, subsamp = 0, cs = 0;
        if (tjDecompressHeader3(d->tj, data, (unsigned long)size, &w, &h, &subsamp, &cs) != 0) {
            rp_status st = RP_ERROR(RP_ERR_FORMAT, "%s: corrupt or truncated JPEG header: %s", name,
                                    tjGetErrorStr2(d->tj));
            tj_reset(d);
            return st;
        }
        if (w == 0 || h == 0) {
            rp_status st = RP_ERROR(RP_ERR_FORMAT,
                                    "%s: a JPEG without an image: the data ends before the frame "
                                    "header (%zu bytes; truncated?)",
                                    name, size);
            tj_reset(d);
            return st;
        }
        info->format = IMG_JPEG;
        info->w = w;
        info->h = h;
        info->cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    } else if (size >= 8 && png_sig_cmp(data, 0, 8) == 0) {
        /* IHDR must come first: length 13, "IHDR", width, height. */
        if (size < 33 || be32(data + 8) != 13 || memcmp(data + 12, "IHDR", 4) != 0)
            return RP_ERROR(RP_ERR_FORMAT, "%s: corrupt PNG: no IHDR chunk after the signature",
                            name);
        info->format = IMG_PNG;
        uint32_t w = be32(data + 16), h = be32(data + 20);
        info->w = w > 65535 ? 65536 : (int)w;
        info->h = h > 65535 ? 65536 : (int)h;
    } else {
        char head[3 * 8 + 1];
        size_t k = size < 8 ? size : 8;
        for (size_t i = 0; i < k; i++)
            snprintf(head + 3 * i, sizeof head - 3 * i, "%02x ", data[i]);
        head[k > 0 ? 3 * k - 1 : 0] = 0;
        return RP_ERROR(RP_ERR_FORMAT,
                        "%s: not a JPEG or PNG image (%zu bytes starting %s): only JPEG and PNG "
                        "are decoded",
                        name, size, head);
    }
    if (info->w < 1 || info->h < 1 || info->w > 65535 || info->h > 65535)
        return RP_ERROR(RP_ERR_FORMAT, "%s: the header says %dx%d pixels, outside 1..65535 a side",
                        name, info->w, info->h);
    return RP_OK;
}

img_scale img_pick_scale(int box_w, int box_h, int out)
{
    img_scale best = {1, 1};
    int n = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&n);
    for (int i = 0; sf && i < n; i++) {
        int num = sf[i].num, den = sf[i].denom;
        if (num > den) continue; /* upscaling factors */
        /* 1/2, 1/4, 1/8 (and 1): libjpeg-turbo's other factors reconstruct with IDCTs that have no
           SIMD code (3x3, 5x5, 6x6, 7x7 and, for subsampled chroma, 12x12 and 14x14), slower
           than decoding at the next power of two and resampling more (measured: +6.5% images/s
           on 500x375 JPEGs, docs/benchmarks.md). */
        if (num != 1 && num != den) continue;
        /* box * num/den >= out, and smaller than the best so far. */
        if ((int64_t)box_w * num >= (int64_t)out * den &&
            (int64_t)box_h * num >= (int64_t)out * den &&
            (int64_t)num * best.denom < (int64_t)best.num * den) {
            best.num = num;
            best.denom = den;
        }
    }
    return best;
}

/* TurboJPEG's TJSCALED: the size of a side at scale s, rounded up. */
static int scaled(int side, img_scale s)
{
    return (int)(((int64_t)side * s.num + s.denom - 1) / s.denom);
}

void img_scaled_size(const img_info *info, img_scale s, int *w, int *h)
{
    *w = scaled(info->w, s);
    *h = scaled(info->h, s);
}

/* Pillow's MULDIV255: a * b / 255, rounded, in integers. */
static int muldiv255(int a, int b)
{
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

/*
 * Whether the JPEG carries Adobe's APP14 marker before its scan: Photoshop
 * writes CMYK inverted and marks it so, and PIL reads such files as inverted
 * CMYK ("CMYK;I"). Walks the markers only; stops at the first scan.
 */
static bool jpeg_adobe(const uint8_t *p, size_t n)
{
    size_t i = 2;
    while (i + 4 <= n && p[i] == 0xFF) {
        int m = p[i + 1];
        if (m == 0xDA || m == 0xD9) break;
        if (m == 0xFF) {
            i++;
            continue;
        }
        size_t len = (size_t)p[i + 2] << 8 | p[i + 3];
        if (len < 2) break;
        if (m == 0xEE && len >= 7 && i + 9 <= n && !memcmp(p + i + 4, "Adobe", 5)) return true;
        i += 2 + len;
    }
    return false;
}

/*
 * Whether TurboJPEG's last message is a libjpeg warning that leaves a whole
 * image (jerror.h's JWRN_ texts). PIL refuses a truncated file ("image file
 * is truncated") and accepts the other warnings (e.g. extraneous bytes before
 * a marker). We refuse both of libjpeg's truncation warnings ("Premature end
 * of JPEG file", and "premature end of data segment", which follows it and
 * which a cut entropy segment also gives) and accept the others.
 *
 * The text decides, not tjGetErrorCode() alone: TurboJPEG 2.1 reports
 * TJERR_WARNING for a call that warned at all, even when a fatal error then
 * stopped it before any pixel was written (e.g. stray bytes before a scan,
 * then a scan naming a component the frame lacks), which would pass off a
 * buffer's old contents as the image. A fatal error's text replaces the
 * warning's.
 */
bool img_jpeg_warning_accepted(const char *msg)
{
    static const char *const accepted[] = {
        "Corrupt JPEG data: ", /* extraneous bytes, bad Huffman or arithmetic code,
                                  marker instead of RST, bad ICC marker */
        "Unknown Adobe color transform code",
        "Inconsistent progression sequence",
        "Warning: unknown JFIF revision number",
        "Invalid SOS parameters for sequential JPEG",
        "Application transferred too many scanlines",
    };
    if (strstr(msg, "premature end")) return false;
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++)
        if (!strncmp(msg, accepted[i], strlen(accepted[i]))) return true;
    return false;
}

static rp_status decode_jpeg(img_decoder *d, const uint8_t *data, size_t size, const char *name,
                             const img_info *info, img_scale s, int *pw, int *ph)
{
    RP_CHECK(tj_handle(d, name));
    int w = scaled(info->w, s), h = scaled(info->h, s);
    if ((int64_t)w * h > RP_IMAGE_MAX_PIXELS)
        return RP_ERROR(RP_ERR_FORMAT,
                        "%s: a JPEG of %dx%d pixels (decoded at %d/%d: %dx%d) is over the "
                        "limit of %d pixels",
                        name, info->w, info->h, s.num, s.denom, w, h, RP_IMAGE_MAX_PIXELS);
    size_t pixels = (size_t)w * (size_t)h;
    RP_CHECK(grow(&d->rgb, &d->rgb_cap, pixels * 3, name));
    uint8_t *dst = d->rgb;
    int pf = TJPF_RGB;
    if (info->cmyk) {
        /* CMYK and YCCK JPEGs decode only to CMYK pixels; converted below. */
        RP_CHECK(grow(&d->aux, &d->aux_cap, pixels * 4, name));
        dst = d->aux;
        pf = TJPF_CMYK;
    }
    /* The accurate IDCT and fancy upsampling are TurboJPEG's defaults, and PIL's. */
    if (tjDecompress2(d->tj, data, (unsigned long)size, dst, w, 0, h, pf, 0) != 0) {
        const char *msg = tjGetErrorStr2(d->tj);
        if (tjGetErrorCode(d->tj) != TJERR_WARNING || !img_jpeg_warning_accepted(msg)) {
            rp_status st = RP_ERROR(RP_ERR_FORMAT, "%s: corrupt or truncated JPEG: %s", name, msg);
            tj_reset(d);
            return st;
        }
    }
    if (info->cmyk) {
        /*
         * Pillow's cmyk2rgb: R = (255 - K) - (255 - K) * C / 255 with ink
         * values C, K; inverted first when the file is Adobe's (the common
         * case), as PIL's "CMYK;I" raw mode does.
         */
        bool inv = jpeg_adobe(data, size);
        const uint8_t *c = d->aux;
        for (size_t i = 0; i < pixels; i++, c += 4) {
            int k = inv ? 255 - c[3] : c[3], nk = 255 - k;
            for (int j = 0; j < 3; j++) {
                int ink = inv ? 255 - c[j] : c[j];
                int v = nk - muldiv255(ink, nk);
                d->rgb[3 * i + j] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
    *pw = w;
    *ph = h;
    return RP_OK;
}

/* ---- PNG ------------------------------------------------------------------- */

typedef struct png_mem {
    const uint8_t *data;
    size_t size, pos;
    char msg[200];
} png_mem;

static void png_mem_error(png_structp png, png_const_charp msg)
{
    png_mem *m = png_get_error_ptr(png);
    snprintf(m->msg, sizeof m->msg, "%s", msg ? msg : "unknown libpng error");
    png_longjmp(png, 1);
}

static void png_mem_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void png_mem_read(png_structp png, png_bytep out, size_t len)
{
    png_mem *m = png_get_io_ptr(png);
    if (len > m->size - m->pos) png_error(png, "the file ends early (truncated)");
    memcpy(out, m->data + m->pos, len);
    m->pos += len;
}

/*
 * Everything that may longjmp. The buffers are the decoder's (grown before
 * any row is read), so a longjmp leaks nothing. Returns 0, or -1 with the
 * message in m->msg, or -2 when a buffer cannot grow.
 */
static int png_body(png_structp png, png_infop info, png_mem *m, img_decoder *d, const char *name)
{
    if (setjmp(png_jmpbuf(png))) return -1;
    png_set_read_fn(png, m, png_mem_read);
    png_set_user_limits(png, 65535, 65535);
    png_read_info(png, info);
    int color = png_get_color_type(png, info);
    int depth = png_get_bit_depth(png, info);
    /* PIL's convert("RGB"): a palette becomes its colours, gray is replicated, alpha and
       transparency are dropped; 16-bit samples keep their high byte, as PIL's RGB;16B. */
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16) png_set_strip_16(png);
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
    if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
        png_get_rowbytes(png, info) != (size_t)w * 3) {
        snprintf(m->msg, sizeof m->msg, "unexpected layout after conversion to RGB");
        return -1;
    }
    size_t need = (size_t)w * (size_t)h * 3;
    if (grow(&d->rgb, &d->rgb_cap, need, name) != RP_OK ||
        grow(&d->aux, &d->aux_cap, (size_t)h * sizeof(png_bytep), name) != RP_OK)
        return -2;
    png_bytep *rows = (png_bytep *)(void *)d->aux;
    for (int y = 0; y < h; y++)
        rows[y] = d->rgb + (size_t)y * (size_t)w * 3;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    return 0;
}

static rp_status decode_png(img_decoder *d, const uint8_t *data, size_t size, const char *name,
                            const img_info *info, int *pw, int *ph)
{
    if ((int64_t)info->w * info->h > RP_IMAGE_MAX_PIXELS)
        return RP_ERROR(RP_ERR_FORMAT, "%s: a PNG of %dx%d pixels is over the limit of %d pixels",
                        name, info->w, info->h, RP_IMAGE_MAX_PIXELS);
    png_mem m = {.data = data, .size = size};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &m, png_mem_error, png_mem_warning);
    png_infop pi = png ? png_create_info_struct(png) : NULL;
    if (!pi) {
        png_destroy_read_struct(&png, NULL, NULL);
        return RP_ERROR(RP_ERR_NOMEM, "%s: cannot allocate libpng's reader", name);
    }
    int rc = png_body(png, pi, &m, d, name);
    png_destroy_read_struct(&png, &pi, NULL);
    if (rc == -2) return rp_last_status();
    if (rc != 0) return RP_ERROR(RP_ERR_FORMAT, "%s: corrupt or truncated PNG: %s", name, m.msg);
    *pw = info->w;
    *ph = info->h;
    return RP_OK;
}

rp_status img_decode(img_decoder *d, const uint8_t *data, size_t size, const char *name,
                     const img_info *info, img_scale s, int *w, int *h)
{
    if (info->format == IMG_JPEG) return decode_jpeg(d, data, size, name, info, s, w, h);
    return decode_png(d, data, size, name, info, w, h);
}
