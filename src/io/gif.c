/*
 * gif.c - animated GIFs (replicator/gif.h), written frame by frame into a temporary file
 * with giflib and renamed into place at the end. In libreplicator-extras.
 */
#include <errno.h>
#include <fcntl.h>
#include <gif_lib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replicator/gif.h"

#define GIF_PATH_MAX 4096

struct rp_gif {
    char path[GIF_PATH_MAX], tmp[GIF_PATH_MAX + 32];
    FILE *f;
    GifFileType *gif;
    ColorMapObject *map;      /* each frame's palette, copied by giflib into the frame */
    uint8_t *r, *g, *b, *idx; /* [h * w] planes for the quantiser and its output */
    int w, h;
};

static int gif_write(GifFileType *gif, const GifByteType *buf, int len)
{
    return (int)fwrite(buf, 1, (size_t)len, gif->UserData);
}

static rp_status gif_error(const rp_gif *o, int err)
{
    const char *what = GifErrorString(err) ? GifErrorString(err) : "unknown error";
    /* giflib's write errors are the file's (a full disk): say which file, and why. */
    if (err == E_GIF_ERR_WRITE_FAILED || err == E_GIF_ERR_DISK_IS_FULL)
        return RP_ERROR(RP_ERR_IO, "cannot write %s: %s (giflib: %s)", o->tmp,
                        o->f && ferror(o->f) ? strerror(errno) : "short write", what);
    return RP_ERROR(RP_ERR_BACKEND, "%s: giflib: %s", o->path, what);
}

void rp_gif_abort(rp_gif *o)
{
    if (!o) return;
    int err = 0;
    if (o->gif) EGifCloseFile(o->gif, &err);
    if (o->f) {
        fclose(o->f);
        unlink(o->tmp);
    }
    GifFreeMapObject(o->map);
    free(o->r), free(o->g), free(o->b), free(o->idx);
    free(o);
}

rp_status rp_gif_create(rp_gif **out, const char *path, int w, int h)
{
    if (!out) return RP_ERROR(RP_ERR_INVALID, "rp_gif_create: gif is NULL");
    *out = NULL;
    if (!path || !path[0]) return RP_ERROR(RP_ERR_INVALID, "rp_gif_create: path is NULL or empty");
    if (strlen(path) >= GIF_PATH_MAX)
        return RP_ERROR(RP_ERR_INVALID, "rp_gif_create: path of %zu characters, at most %d",
                        strlen(path), GIF_PATH_MAX - 1);
    if (w < 1 || h < 1 || w > RP_GIF_MAX_SIDE || h > RP_GIF_MAX_SIDE)
        return RP_ERROR(RP_ERR_INVALID, "rp_gif_create: %s: size %dx%d, each must be 1..%d", path,
                        w, h, RP_GIF_MAX_SIDE);
    /* The library's rule for a file renamed into place: absent or regular, never a FIFO's or a
       device's name taken over. */
    RP_CHECK(rp_file_check_writable(path, "animated GIF"));
    rp_gif *o = calloc(1, sizeof *o);
    if (!o) return RP_ERROR(RP_ERR_NOMEM, "%s: a GIF writer", path);
    o->w = w, o->h = h;
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid());
    size_t n = (size_t)w * (size_t)h;
    o->r = malloc(n), o->g = malloc(n), o->b = malloc(n), o->idx = malloc(n);
    o->map = GifMakeMapObject(256, NULL);
    if (!o->r || !o->g || !o->b || !o->idx || !o->map) {
        rp_gif_abort(o);
        return RP_ERROR(RP_ERR_NOMEM, "%s: buffers of %dx%d", path, w, h);
    }
    int fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    o->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!o->f) {
        int e = errno;
        rp_status s = RP_ERROR(RP_ERR_IO, "cannot write %s: %s", o->tmp, strerror(e));
        if (fd >= 0) close(fd), unlink(o->tmp);
        rp_gif_abort(o);
        return s;
    }
    int err = 0;
    o->gif = EGifOpen(o->f, gif_write, &err);
    if (!o->gif) {
        rp_status s = gif_error(o, err);
        rp_gif_abort(o);
        return s;
    }
    /* GIF89a, for the per-frame delays and the looping extension. */
    EGifSetGifVersion(o->gif, true);
    static const uint8_t loop[3] = {1, 0, 0}; /* sub-block 1: loop count 0, for ever */
    if (EGifPutScreenDesc(o->gif, w, h, 8, 0, NULL) == GIF_ERROR ||
        EGifPutExtensionLeader(o->gif, APPLICATION_EXT_FUNC_CODE) == GIF_ERROR ||
        EGifPutExtensionBlock(o->gif, 11, "NETSCAPE2.0") == GIF_ERROR ||
        EGifPutExtensionBlock(o->gif, 3, loop) == GIF_ERROR ||
        EGifPutExtensionTrailer(o->gif) == GIF_ERROR) {
        rp_status s = gif_error(o, o->gif->Error);
        rp_gif_abort(o);
        return s;
    }
    *out = o;
    return RP_OK;
}

rp_status rp_gif_add_frame(rp_gif *o, const uint8_t *rgb, int delay_cs)
{
    if (!o || !rgb) return RP_ERROR(RP_ERR_INVALID, "rp_gif_add_frame: a NULL argument");
    if (delay_cs < 0 || delay_cs > 65535)
        return RP_ERROR(RP_ERR_INVALID, "rp_gif_add_frame: %s: delay %d, must be 0..65535", o->path,
                        delay_cs);
    size_t n = (size_t)o->w * (size_t)o->h;
    for (size_t i = 0; i < n; i++)
        o->r[i] = rgb[3 * i], o->g[i] = rgb[3 * i + 1], o->b[i] = rgb[3 * i + 2];
    /* The palette is each frame's own: an episode's colours barely change from frame to frame,
       so the median cut gives nearly the same palette, without a pass over the whole episode. */
    int colours = 256;
    memset(o->map->Colors, 0, 256 * sizeof *o->map->Colors);
    if (GifQuantizeBuffer((unsigned)o->w, (unsigned)o->h, &colours, o->r, o->g, o->b, o->idx,
                          o->map->Colors) == GIF_ERROR)
        return RP_ERROR(RP_ERR_NOMEM, "%s: giflib's colour quantiser failed (out of memory)",
                        o->path);
    GraphicsControlBlock gcb = {.DisposalMode = DISPOSE_DO_NOT,
                                .DelayTime = delay_cs,
                                .TransparentColor = NO_TRANSPARENT_COLOR};
    GifByteType ext[4];
    size_t len = EGifGCBToExtension(&gcb, ext);
    if (EGifPutExtension(o->gif, GRAPHICS_EXT_FUNC_CODE, (int)len, ext) == GIF_ERROR ||
        EGifPutImageDesc(o->gif, 0, 0, o->w, o->h, false, o->map) == GIF_ERROR ||
        EGifPutLine(o->gif, o->idx, (int)n) == GIF_ERROR)
        return gif_error(o, o->gif->Error);
    return RP_OK;
}

rp_status rp_gif_close(rp_gif *o)
{
    if (!o) return RP_ERROR(RP_ERR_INVALID, "rp_gif_close: gif is NULL");
    int err = 0;
    rp_status status = RP_OK;
    if (EGifCloseFile(o->gif, &err) == GIF_ERROR) status = gif_error(o, err);
    o->gif = NULL;
    if (status == RP_OK && (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0))
        status = RP_ERROR(RP_ERR_IO, "cannot write %s: %s", o->tmp, strerror(errno));
    if (fclose(o->f) != 0 && status == RP_OK)
        status = RP_ERROR(RP_ERR_IO, "cannot write %s: %s", o->tmp, strerror(errno));
    o->f = NULL;
    if (status == RP_OK) status = rp_file_check_writable(o->path, "animated GIF");
    if (status == RP_OK && rename(o->tmp, o->path) != 0)
        status =
            RP_ERROR(RP_ERR_IO, "cannot rename %s to %s: %s", o->tmp, o->path, strerror(errno));
    if (status != RP_OK) unlink(o->tmp);
    rp_gif_abort(o);
    return status;
}
