/*
 * d4pg_frames.c - a picture of the policy: one noise-free episode drawn
 * offscreen as PNG frames, a contact sheet and an animated GIF (see
 * rp_d4pg_record_frames in d4pg_job.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/d4pg/d4pg_job_internal.h"

#define FRAMES_SHEET_MAX  16
#define FRAMES_SHEET_COLS 4
#define FRAMES_PATH_MAX   4096

rp_d4pg_frames_options rp_d4pg_frames_options_default(void)
{
    rp_d4pg_frames_options o = {.every = 4,
                                .width = 320,
                                .height = 240,
                                .action_repeat = 1,
                                .seed = 12345,
                                .animation = true};
    return o;
}

int rp_d4pg_frames_count(int steps, int every)
{
    if (steps < 1 || every < 1) return 0;
    return steps / every + 1 + (steps % every != 0);
}

/* ---- the episode ---------------------------------------------------------------------- */

static rp_status make_dir(const char *dir)
{
    if (mkdir(dir, 0777) == 0) return RP_OK;
    int e = errno;
    struct stat st;
    if (e == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return RP_OK;
    return RP_ERROR(RP_ERR_IO, "cannot make the frames directory %s: %s", dir,
                    e == EEXIST ? "a file of that name is in the way" : strerror(e));
}

static rp_status write_frame(const char *dir, int i, const uint8_t *rgb, float *buf, int w, int h)
{
    char path[FRAMES_PATH_MAX];
    snprintf(path, sizeof path, "%s/frame-%04d.png", dir, i);
    for (size_t k = 0; k < (size_t)w * (size_t)h * 3; k++)
        buf[k] = rgb[k];
    return rp_image_grid_write_png(path, buf, 1, h, w, 3, 1, 0, 0, 0.0f, 255.0f);
}

rp_status rp_d4pg_record_frames(rp_d4pg_policy *policy, rp_tape *t, const char *task,
                                const char *dir, const rp_d4pg_frames_options *opt,
                                double *episode_return, int *frames)
{
    rp_d4pg_frames_options o = opt ? *opt : rp_d4pg_frames_options_default();
    if (!policy || !t || !task || !dir || !dir[0] || !episode_return)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_record_frames: a NULL argument");
    if (o.every < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_record_frames: every %d, must be >= 1", o.every);
    if (o.width < 1 || o.height < 1 || o.width > RP_RENDER_MAX_SIDE ||
        o.height > RP_RENDER_MAX_SIDE)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_record_frames: size %dx%d, each must be 1..%d",
                        o.width, o.height, RP_RENDER_MAX_SIDE);
    /* Room for the longest name below ("/episode.gif.tmp.<pid>"). */
    if (strlen(dir) > FRAMES_PATH_MAX - 64)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_record_frames: directory name of %zu characters",
                        strlen(dir));
    const rp_d4pg_config *pc = rp_d4pg_policy_config(policy);
    const int w = o.width, h = o.height, obs_dim = pc->obs_dim, act_dim = pc->act_dim;
    const size_t frame_bytes = (size_t)w * (size_t)h * 3;
    rp_status status = RP_OK;
    rp_renderer *ren = NULL;
    rp_rl_env *env = NULL;
    uint8_t *rgb = NULL, *sheet = NULL;
    float *fbuf = NULL, *obs = NULL, *act = NULL;
    rp_gif *gif = NULL;
    double ret = 0;
    int n = 0;

    /* The GL context first: where there is none, nothing is made or played. */
    status = rp_renderer_create(&ren, w, h);
    if (status != RP_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", rp_last_error());
        return RP_ERROR(status, "%s frames of %s: %s",
                        status == RP_ERR_UNSUPPORTED ? "no headless GL context to draw"
                                                     : "cannot draw",
                        task, why);
    }
    rp_env_options eo = rp_env_options_default();
    eo.action_repeat = o.action_repeat;
    RP_TRY(rp_env_create(&env, task, &eo));
    const rp_env_spec *spec = rp_env_get_spec(env);
    if (spec->obs_dim != obs_dim || spec->act_dim != act_dim) {
        status = RP_ERROR(RP_ERR_SHAPE,
                          "task %s has %d observations and %d actions; the policy %d and %d", task,
                          spec->obs_dim, spec->act_dim, obs_dim, act_dim);
        goto cleanup;
    }
    const int steps = spec->episode_steps;
    n = rp_d4pg_frames_count(steps, o.every);
    const int sheet_n = n < FRAMES_SHEET_MAX ? n : FRAMES_SHEET_MAX;
    rgb = malloc(frame_bytes);
    sheet = malloc(frame_bytes * (size_t)sheet_n);
    fbuf = malloc(sizeof *fbuf * frame_bytes * (size_t)sheet_n);
    obs = malloc(sizeof *obs * (size_t)obs_dim);
    act = malloc(sizeof *act * (size_t)act_dim);
    if (!rgb || !sheet || !fbuf || !obs || !act) {
        status = RP_ERROR(RP_ERR_NOMEM, "frame buffers for %d frames of %dx%d", sheet_n, w, h);
        goto cleanup;
    }
    RP_TRY(make_dir(dir));
    if (o.animation) {
        char gif_path[FRAMES_PATH_MAX];
        snprintf(gif_path, sizeof gif_path, "%s/episode.gif", dir);
        RP_TRY(rp_gif_create(&gif, gif_path, w, h));
    }
    /* In simulated time, at GIF's resolution of 1/100 s; browsers slow anything under 2/100. */
    int delay = (int)lround(o.every * spec->control_dt * 100.0);
    delay = delay < 2 ? 2 : delay;

    /* Evaluation episode 0 of this seed (rp_d4pg_evaluate_policy's), so the returns agree. */
    RP_TRY(rp_env_reset(env, rp_d4pg_episode_seed(o.seed, 0xe7a1ULL, 0), obs));
    int frame = 0, next_sheet = 0;
    for (int step = 0;; step++) {
        bool last = step == steps;
        if (step % o.every == 0 || last) {
            RP_TRY(rp_renderer_draw(ren, env, rgb));
            RP_TRY(write_frame(dir, frame, rgb, fbuf, w, h));
            /* Sheet tile j is frame round(j (n - 1) / (sheet_n - 1)): strictly increasing, as
               sheet_n <= n, from the first frame to the last. */
            if (next_sheet < sheet_n && frame == (int)lround((double)next_sheet * (n - 1) /
                                                             (sheet_n > 1 ? sheet_n - 1 : 1)))
                memcpy(sheet + frame_bytes * (size_t)next_sheet++, rgb, frame_bytes);
            if (o.animation) RP_TRY(rp_gif_add_frame(gif, rgb, last ? 100 : delay));
            frame++;
        }
        if (last) break;
        rp_tape_reset(t);
        RP_TRY(rp_d4pg_policy_act(policy, t, obs, 1, 0.0f, NULL, act));
        rp_env_step_result r;
        RP_TRY(rp_env_step(env, act, act_dim, obs, &r));
        ret += r.reward;
        if (r.last != (step + 1 == steps)) {
            status = RP_ERROR(RP_ERR_INVALID, "task %s ended its episode at step %d of %d", task,
                              step + 1, steps);
            goto cleanup;
        }
    }
    if (frame != n || next_sheet != sheet_n) {
        status = RP_ERROR(RP_ERR_INVALID, "drew %d frames (%d on the sheet), expected %d (%d)",
                          frame, next_sheet, n, sheet_n);
        goto cleanup;
    }
    for (size_t k = 0; k < frame_bytes * (size_t)sheet_n; k++)
        fbuf[k] = sheet[k];
    char path[FRAMES_PATH_MAX];
    snprintf(path, sizeof path, "%s/contact.png", dir);
    int cols = sheet_n < FRAMES_SHEET_COLS ? sheet_n : FRAMES_SHEET_COLS;
    RP_TRY(rp_image_grid_write_png(path, fbuf, sheet_n, h, w, 3, cols, 2, 255, 0.0f, 255.0f));
    if (o.animation) {
        rp_gif *done = gif;
        gif = NULL;
        RP_TRY(rp_gif_close(done));
    }
    /* Frames a longer recording left here would read as part of this episode. */
    for (int i = n;; i++) {
        snprintf(path, sizeof path, "%s/frame-%04d.png", dir, i);
        if (unlink(path) != 0) break;
    }
    *episode_return = ret;
    if (frames) *frames = n;
cleanup:
    rp_gif_abort(gif);
    rp_tape_reset(t);
    free(act);
    free(obs);
    free(fbuf);
    free(sheet);
    free(rgb);
    rp_env_destroy(env);
    rp_renderer_destroy(ren);
    return status;
}
