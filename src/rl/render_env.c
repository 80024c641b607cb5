/*
 * render_env.c - rp_renderer_draw: the environment's model and data, drawn.
 * Its own file so that a program using only the MuJoCo-level call (a test)
 * links without the environment.
 */
#include "rl/env_internal.h"
#include "rl/render_internal.h"

rp_status rp_renderer_draw(rp_renderer *r, rp_rl_env *env, uint8_t *rgb)
{
    if (!env) return RP_ERROR(RP_ERR_INVALID, "rp_renderer_draw: env is NULL");
    return rl_renderer_draw_mj(r, rl_env_mj_model(env), rl_env_mj_data(env), rgb);
}
