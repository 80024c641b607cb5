/*
 * render_internal.h - the renderer's drawing call on MuJoCo's own types, for
 * rp_renderer_draw (which takes them from an environment) and for tests that
 * load a model directly.
 */
#ifndef RP_RL_RENDER_INTERNAL_H
#define RP_RL_RENDER_INTERNAL_H

#include <mujoco/mujoco.h>

#include "replicator/render.h"

/* rp_renderer_draw for a model and its data: the same contract, with m and d in place of env. */
rp_status rl_renderer_draw_mj(rp_renderer *r, const mjModel *m, mjData *d, uint8_t *rgb);

#endif
