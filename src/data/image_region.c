/*
 * image_region.c - a JPEG decoded only where a training crop reads it, through libjpeg-turbo's
 * libjpeg API: jpeg_crop_scanline narrows the rows to the crop's columns (widened to the
 * iMCU boundary, and by one iMCU more on either side, where the chroma upsampling of a cropped
 * row's edges would differ), and jpeg_skip_scanlines passes the rows above it without the
 * inverse DCT, colour conversion or upsampling. The pixels inside the region are those of the
 * whole decode (libjpeg-turbo keeps the upsampling's context rows and columns; tests/test_folder.c
 * compares them for 4:2:0, 4:2:2, 4:4:4, grayscale and progressive files, and fuzz_image on
 * every input). A RandomResizedCrop covers about half an image on average, so about half of the
 * IDCT, upsampling and colour work above and beside the crop is saved. The rows below it are
 * decoded (in its columns) and the file read to its end, as the whole decode reads it, so that
 * what fails that fails this too (truncated, corrupt past what PIL accepts), whatever the crop. A
 * file whose region decode fails or warns (damaged data, which libjpeg conceals, and which skipping
 * can read otherwise than decoding) is decoded again whole, and the whole decode's error or pixels
 * are the answer. fuzz_image compares region and whole decodes on every input (it found the edge
 * columns, and premature ends of the data that skipping reported, or missed, unlike decoding).
 *
 * PNG and CMYK JPEGs are decoded whole (image_decode.c).
 */
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* After stdio.h and stddef.h, which it uses without including them. */
#include <jpeglib.h>

#include "data/folder_internal.h"

typedef struct region_error {
    struct jpeg_error_mgr pub; /* first: libjpeg's handle points at it */
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
    bool warned; /* an accepted warning: the data is damaged, decode it whole instead */
} region_error;

static void region_error_exit(j_common_ptr c)
{
    region_error *e = (region_error *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jump, 1);
}

/* A warning (level -1) that the whole decode would refuse ends this one the same way. */
static void region_emit(j_common_ptr c, int level)
{
    if (level >= 0) return; /* trace messages */
    region_error *e = (region_error *)c->err;
    char msg[JMSG_LENGTH_MAX];
    (*c->err->format_message)(c, msg);
    if (img_jpeg_warning_accepted(msg)) {
        e->warned = true;
        return;
    }
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    longjmp(e->jump, 1);
}

/* The decode proper; every libjpeg call that may fail is here, after the setjmp. */
static int region_body(struct jpeg_decompress_struct *c, region_error *e, const uint8_t *data,
                       size_t size, img_scale s, int x0, int y0, int x1, int y1, img_decoder *d,
                       img_region *out)
{
    if (setjmp(e->jump)) return -1;
    jpeg_mem_src(c, data, (unsigned long)size);
    jpeg_read_header(c, TRUE);
    c->scale_num = (unsigned)s.num;
    c->scale_denom = (unsigned)s.denom;
    c->out_color_space = JCS_RGB;  /* grayscale is replicated, as TurboJPEG's TJPF_RGB */
    c->dct_method = JDCT_ISLOW;    /* TurboJPEG's default and PIL's */
    c->do_fancy_upsampling = TRUE; /* likewise */
    jpeg_start_decompress(c);
    if (c->output_components != 3 || (int)c->output_width < x1 || (int)c->output_height < y1) {
        snprintf(e->msg, sizeof e->msg, "decodes to %ux%u x %d, not the %dx%d region's 3 channels",
                 c->output_width, c->output_height, c->output_components, x1, y1);
        return -1;
    }
    /* One iMCU more on either side: the upsampled chroma of a cropped row's edge columns is not
       the whole row's (measured: 4:2:0 and 4:2:2 differ at the edges without it, never with). */
    int m = c->max_h_samp_factor * c->min_DCT_scaled_size;
    int a = x0 - m > 0 ? x0 - m : 0,
        z = x1 + m < (int)c->output_width ? x1 + m : (int)c->output_width;
    JDIMENSION xoff = (JDIMENSION)a, width = (JDIMENSION)(z - a);
    /* (It narrows output_width to the cropped rows' width.) */
    if (width < c->output_width) jpeg_crop_scanline(c, &xoff, &width);
    size_t stride = (size_t)width * 3, rows = (size_t)(y1 - y0);
    size_t need = stride * (rows + 1); /* and a row for those below it */
    if (d->rgb_cap < need) {
        rp_free(d->rgb);
        d->rgb_cap = 0;
        d->rgb = rp_alloc(need);
        if (!d->rgb) return -2;
        d->rgb_cap = need;
    }
    if (y0 > 0) jpeg_skip_scanlines(c, (JDIMENSION)y0);
    for (size_t r = 0; r < rows;) {
        JSAMPROW row = d->rgb + r * stride;
        r += jpeg_read_scanlines(c, &row, 1);
    }
    /* The rows below are decoded (in the crop's columns) and the file read to its end, as the
       whole decode reads it, so that what fails that fails this (then the caller decodes it
       whole). Skipping them missed a premature end of the data (found by fuzz_image). */
    JSAMPROW spare = d->rgb + rows * stride; /* the row past the region's */
    while (c->output_scanline < c->output_height)
        jpeg_read_scanlines(c, &spare, 1);
    jpeg_finish_decompress(c);
    out->pix = d->rgb + (size_t)(x0 - (int)xoff) * 3;
    out->stride = stride;
    return 0;
}

rp_status img_decode_region(img_decoder *d, const uint8_t *data, size_t size, const char *name,
                            const img_info *info, img_scale s, int x0, int y0, int x1, int y1,
                            img_region *out)
{
    if (info->format != IMG_JPEG || info->cmyk) {
        int w, h;
        RP_CHECK(img_decode(d, data, size, name, info, s, &w, &h));
        out->pix = d->rgb + ((size_t)y0 * (size_t)w + (size_t)x0) * 3;
        out->stride = (size_t)w * 3;
        return RP_OK;
    }
    int w, h;
    img_scaled_size(info, s, &w, &h);
    if ((int64_t)w * h > RP_IMAGE_MAX_PIXELS)
        return RP_ERROR(RP_ERR_FORMAT,
                        "%s: a JPEG of %dx%d pixels (decoded at %d/%d: %dx%d) is over the "
                        "limit of %d pixels",
                        name, info->w, info->h, s.num, s.denom, w, h, RP_IMAGE_MAX_PIXELS);
    if (x0 < 0 || y0 < 0 || x1 > w || y1 > h || x1 <= x0 || y1 <= y0)
        return RP_ERROR(RP_ERR_INVALID, "%s: region [%d, %d) x [%d, %d) outside the %dx%d image",
                        name, x0, x1, y0, y1, w, h);
    struct jpeg_decompress_struct c;
    region_error e;
    memset(&e, 0, sizeof e);
    c.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = region_error_exit;
    e.pub.emit_message = region_emit;
    jpeg_create_decompress(&c);
    int rc = region_body(&c, &e, data, size, s, x0, y0, x1, y1, d, out);
    jpeg_destroy_decompress(&c); /* also after an abandoned decode: it frees everything */
    if (rc == -2) return RP_ERROR(RP_ERR_NOMEM, "%s: cannot allocate the decoded region", name);
    /* A failure, or a warning PIL accepts: the whole decode decides, and gives its pixels
       (on damaged data, skipped rows can be read otherwise than decoded ones). */
    if (rc != 0 || e.warned) {
        int fw, fh;
        RP_CHECK(img_decode(d, data, size, name, info, s, &fw, &fh));
        out->pix = d->rgb + ((size_t)y0 * (size_t)fw + (size_t)x0) * 3;
        out->stride = (size_t)fw * 3;
    }
    return RP_OK;
}
