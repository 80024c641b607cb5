/*
 * replicator/gif.h - animated GIFs: RGB frames written one by one into a
 * looping GIF89a file, each with its own 256-colour palette (giflib's
 * median-cut quantiser) and its own delay. `replicator eval` writes a D4PG
 * policy's episode with it.
 *
 *     rp_gif *g;
 *     RP_CHECK(rp_gif_create(&g, "run/episode.gif", 320, 240));
 *     for (...) RP_CHECK(rp_gif_add_frame(g, rgb, 4));   // 4/100 s each
 *     RP_CHECK(rp_gif_close(g));                         // now at run/episode.gif
 *
 * The file is written as every library file is: into "<path>.tmp.<pid>"
 * beside it, synced and renamed over `path` by rp_gif_close, so a reader
 * never sees a part of it, and a failed or abandoned GIF leaves nothing.
 *
 * These functions live in libreplicator-extras (pkg-config replicator-extras,
 * CMake replicator::extras), not in the core library.
 *
 * Thread-safety: a writer is used by one thread at a time; different writers
 * are independent.
 */
#ifndef REPLICATOR_GIF_H
#define REPLICATOR_GIF_H

#include <stdint.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rp_gif rp_gif;

/* Largest width or height (GIF's 16-bit screen size). */
#define RP_GIF_MAX_SIDE 65535

/*
 * Starts an animated GIF of width x height pixels (each 1..RP_GIF_MAX_SIDE)
 * that loops for ever, to be renamed over `path` by rp_gif_close().
 *
 * Errors: RP_ERR_INVALID (NULL, an empty or too long path, a bad size,
 * named); RP_ERR_IO naming the file and the system's reason (its directory is
 * missing, or `path` is a FIFO, a device or a directory: refused, never
 * replaced, as rp_file_check_writable()); RP_ERR_NOMEM; RP_ERR_BACKEND
 * (giflib's message). On error *gif is NULL and no file is left behind.
 */
RP_API rp_status rp_gif_create(rp_gif **gif, const char *path, int width, int height);

/*
 * Appends a frame: rgb[height * width * 3] (row-major, 8 bits per channel),
 * shown for delay_cs hundredths of a second (0..65535; browsers show
 * anything under 2 as 10). The palette is the frame's own.
 *
 * Errors: RP_ERR_INVALID (NULL, a bad delay); RP_ERR_IO (the write failed,
 * naming the temporary file and the reason); RP_ERR_NOMEM; RP_ERR_BACKEND.
 * After an error, only rp_gif_abort() is useful.
 */
RP_API rp_status rp_gif_add_frame(rp_gif *gif, const uint8_t *rgb, int delay_cs);

/*
 * Ends the file, syncs it, renames it over the path given to create, and
 * frees the writer, whatever happens. Errors: RP_ERR_INVALID (NULL);
 * RP_ERR_IO naming the file and the reason (the temporary file is then
 * removed and `path` left as it was); RP_ERR_BACKEND.
 */
RP_API rp_status rp_gif_close(rp_gif *gif);

/* Frees the writer and removes its temporary file: nothing is written. NULL is a no-op. */
RP_API void rp_gif_abort(rp_gif *gif);

#ifdef __cplusplus
}
#endif

#endif
