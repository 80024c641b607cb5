/*
 * image_region.c - a JPEG decoded only where a training crop reads it, through libjpeg-turbo's
 * libjpeg API: jpeg_crop_scanline narrows the rows to the crop's columns (widened to the
 * iMCU boundary), jpeg_skip_scanlines passes the rows above it without the inverse DCT, colour
 * conversion or upsampling, and decoding stops after its last row. The pixels inside the region
 * are those of the whole decode (libjpeg-turbo keeps the upsampling's context rows and columns;
 * tests/test_folder.c compares them for 4:2:0, 4:2:2, 4:4:4, grayscale and progressive files);
 * a RandomResizedCrop covers about half an image on average, so most of the IDCT and colour
 * work and the entropy decoding of the rows below the crop are saved.
 *
 * What it does not take: PNG and CMYK JPEGs (decoded whole by image_decode.c), and files whose
 * last two bytes are not the EOI marker - a truncated file must fail as the whole decode fails
 * it, naming the file, even when the crop lies above the missing part.
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
    if (img_jpeg_warning_accepted(msg)) return;
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
    JDIMENSION xoff = (JDIMENSION)x0, width = (JDIMENSION)(x1 - x0);
    if (width < c->output_width) jpeg_crop_scanline(c, &xoff, &width);
    size_t stride = (size_t)width * 3, rows = (size_t)(y1 - y0);
    if (d->rgb_cap < stride * rows) {
        rp_free(d->rgb);
        d->rgb_cap = 0;
        d->rgb = rp_alloc(stride * rows);
        if (!d->rgb) return -2;
        d->rgb_cap = stride * rows;
    }
    if (y0 > 0) jpeg_skip_scanlines(c, (JDIMENSION)y0);
    for (size_t r = 0; r < rows;) {
        JSAMPROW row = d->rgb + r * stride;
        r += jpeg_read_scanlines(c, &row, 1);
    }
    out->pix = d->rgb + (size_t)(x0 - (int)xoff) * 3;
    out->stride = stride;
    return 0;
}

rp_status img_decode_region(img_decoder *d, const uint8_t *data, size_t size, const char *name,
                            const img_info *info, img_scale s, int x0, int y0, int x1, int y1,
                            img_region *out)
{
    bool eoi = size >= 4 && data[size - 2] == 0xFF && data[size - 1] == 0xD9;
    if (info->format != IMG_JPEG || info->cmyk || !eoi) {
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
    if (rc == -2)
        return RP_ERROR(RP_ERR_NOMEM, "%s: cannot allocate the decoded region", name);
    if (rc != 0) return RP_ERROR(RP_ERR_FORMAT, "%s: corrupt or truncated JPEG: %s", name, e.msg);
    return RP_OK;
}
