/*
 * replicator/render.h - pictures of a MuJoCo environment's state, drawn
 * offscreen by MuJoCo's own OpenGL renderer: frames of an evaluation episode.
 *
 * The GL context is headless: EGL on Mesa's surfaceless platform (no window,
 * no X server, no GPU needed; Mesa's llvmpipe draws on the CPU when there is
 * no GPU driver). docs/rendering.md says what it needs and how fast it is.
 *
 *     rp_renderer *r;
 *     rp_renderer_create(&r, 320, 240);
 *     uint8_t *rgb = rp_alloc(320 * 240 * 3);
 *     for (each step of the episode) { ...; rp_renderer_draw(r, env, rgb); save rgb; }
 *     rp_renderer_destroy(r);
 *
 * Thread-safety: a renderer is used by one thread at a time (any thread: each
 * call makes its context current and releases it before returning). Separate
 * renderers may draw concurrently on separate threads.
 *
 * These functions live in libreplicator-envs (pkg-config replicator-envs, CMake replicator::envs),
 * not in the core library: a program that does not use them links no MuJoCo or EGL.
 */
#ifndef REPLICATOR_RENDER_H
#define REPLICATOR_RENDER_H

#include <stdint.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rp_renderer rp_renderer;
typedef struct rp_rl_env rp_rl_env; /* an environment (replicator/env.h) */

#define RP_RENDER_MAX_SIDE 4096

/*
 * Creates a renderer of width x height pixels (each 1..RP_RENDER_MAX_SIDE)
 * with its own headless GL context. The scene and MuJoCo's GL resources are
 * made on the first draw, and again when a draw brings another model.
 *
 * Errors: RP_ERR_INVALID (r NULL, a bad size), RP_ERR_UNSUPPORTED (no
 * headless GL here: the message says which EGL step failed, e.g. no Mesa
 * surfaceless platform), RP_ERR_NOMEM. On error *r is NULL.
 */
RP_API rp_status rp_renderer_create(rp_renderer **r, int width, int height);

/* Frees the renderer, its GL context and MuJoCo's GL resources. NULL is a no-op. */
RP_API void rp_renderer_destroy(rp_renderer *r);

/*
 * Draws the environment's current state (as its physics holds it; nothing is
 * stepped or changed) into rgb[height * width * 3]: 8-bit RGB, rows from the
 * top, the layout rp_image_grid_write_png and PNG files use. The view is the
 * model's first camera if it has one, otherwise a free camera that follows
 * the first body (so a running cheetah stays in the picture) at a distance
 * set from the model's size.
 *
 * Errors: RP_ERR_INVALID (a NULL argument), RP_ERR_BACKEND (the GL context
 * cannot be made current, or GL reports an error), RP_ERR_NOMEM.
 */
RP_API rp_status rp_renderer_draw(rp_renderer *r, rp_rl_env *env, uint8_t *rgb);

#ifdef __cplusplus
}
#endif
#endif
