/*
 * d4pg_eval_command.c - `replicator eval D4PG_RUN`: plays noise-free episodes with a
 * saved D4PG policy (the one its actors ran: the target policy, as in Acme)
 * and reports the mean and spread of the returns.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg_command.h"
#include "models/d4pg/policy_onnx.h"

/* A whole decimal integer in [lo, hi]: the command line's number rules. */
static bool parse_long(const char *s, long lo, long hi, long *v)
{
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    return !errno && end != s && !*end && *v >= lo && *v <= hi;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: replicator eval D4PG_RUN [--episodes N] [--seed S] [--online]\n"
            "                                [--frames DIR [--every K] [--size WxH]]\n"
            "\n"
            "Plays N noise-free episodes (default 10) of the run's task with its saved policy\n"
            "(the target policy its actors ran; --online: the learner's latest) and prints the\n"
            "mean return, its standard deviation, the smallest and the largest.\n"
            "\n"
            "--frames DIR  then draws the first of those episodes offscreen (MuJoCo's renderer,\n"
            "              headless EGL) into DIR (made if missing): frame-NNNN.png every K-th\n"
            "              agent step (--every, default 4) and the first and last state, at\n"
            "              --size (default 320x240); contact.png, up to 16 of them in a grid;\n"
            "              episode.gif, all of them in simulated time.\n");
}

/* "WxH", each side 1..RP_RENDER_MAX_SIDE. */
static bool parse_size(const char *s, int *w, int *h)
{
    char *x = strchr(s, 'x'), side[16];
    long a = 0, b = 0;
    if (!x || x == s || (size_t)(x - s) >= sizeof side) return false;
    memcpy(side, s, (size_t)(x - s));
    side[x - s] = 0;
    if (!parse_long(side, 1, RP_RENDER_MAX_SIDE, &a) ||
        !parse_long(x + 1, 1, RP_RENDER_MAX_SIDE, &b))
        return false;
    *w = (int)a, *h = (int)b;
    return true;
}

int d4pg_eval_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *run = argv[1];
    long episodes = 10, seed = 12345;
    bool online = false;
    const char *frames_dir = NULL;
    rp_d4pg_frames_options fo = rp_d4pg_frames_options_default();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--online")) {
            online = true;
            continue;
        }
        long x = 0;
        if (!strcmp(a, "--episodes") && v && parse_long(v, 1, 100000, &x))
            episodes = x;
        else if (!strcmp(a, "--seed") && v && parse_long(v, 0, 0x7fffffffL, &x))
            seed = x;
        else if (!strcmp(a, "--frames") && v && v[0])
            frames_dir = v;
        else if (!strcmp(a, "--every") && v && parse_long(v, 1, 100000, &x))
            fo.every = (int)x;
        else if (!strcmp(a, "--size") && v && parse_size(v, &fo.width, &fo.height))
            ;
        else {
            fprintf(stderr, "replicator eval: bad option %s%s%s (see --help)\n", a, v ? " " : "",
                    v ? v : "");
            return 2;
        }
        i++;
    }
    rp_d4pg_frames_options fd = rp_d4pg_frames_options_default();
    if (!frames_dir && (fo.every != fd.every || fo.width != fd.width || fo.height != fd.height)) {
        fprintf(stderr, "replicator eval: --every and --size go with --frames DIR\n");
        return 2;
    }
    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    rp_d4pg_job *job = NULL;
    rp_d4pg_policy *policy = NULL;
    rp_tape *tape = NULL;
    const char *config;
    d4pg_opts o;
    RP_TRY(rp_trainer_load_run(run, &ck, &config));
    RP_TRY(d4pg_opts_from_json(&o, config));
    RP_TRY(rp_d4pg_job_create(&job, &o.j, ck)); /* checks the task, fills in its sizes */
    const char *prefix = online ? "d4pg/policy/" : "d4pg/target_policy/";
    /* The policy's tensors held to the checkpoint's before they are allocated. */
    rp_trainer_guard_arg guard = {ck, prefix};
    RP_TRY(rp_params_guard_push(rp_trainer_checkpoint_guard, &guard));
    status = rp_d4pg_policy_create(&policy, &rp_d4pg_job_get_config(job)->agent);
    rp_params_guard_pop();
    if (status != RP_OK) goto cleanup;
    RP_TRY(rp_checkpoint_read_params(ck, rp_d4pg_policy_params(policy), prefix));
    RP_TRY(rp_tape_create(&tape, 0));
    double mean = 0, std = 0;
    RP_TRY(rp_d4pg_evaluate_policy(policy, tape, o.j.task, o.j.action_repeat, (int)episodes,
                                   (uint64_t)seed, &mean, &std));
    int64_t n = 0;
    const int64_t *steps = rp_checkpoint_get_i64(ck, "d4pg/env_steps", &n);
    printf("d4pg on %s: return %.1f +- %.1f over %ld episodes (%s policy after %lld env steps)\n",
           o.j.task, mean, std, episodes, online ? "online" : "target",
           steps && n == 1 ? (long long)steps[0] : -1LL);
    if (frames_dir) {
        fo.action_repeat = o.j.action_repeat;
        fo.seed = (uint64_t)seed;
        double ret = 0;
        int frames = 0;
        RP_TRY(rp_d4pg_record_frames(policy, tape, o.j.task, frames_dir, &fo, &ret, &frames));
        printf("frames of episode 1 (return %.1f): %s/frame-0000.png .. frame-%04d.png (%dx%d, "
               "every %d steps), %s/contact.png, %s/episode.gif\n",
               ret, frames_dir, frames - 1, fo.width, fo.height, fo.every, frames_dir, frames_dir);
    }
cleanup:
    rp_tape_destroy(tape);
    rp_d4pg_policy_destroy(policy);
    rp_d4pg_job_destroy(job);
    rp_checkpoint_destroy(ck);
    if (status != RP_OK) {
        fprintf(stderr, "replicator eval: error: %s\n", rp_last_error());
        return 1;
    }
    return 0;
}

/* `replicator export --format onnx` of a D4PG run (rp_model_desc.onnx): the target policy its
 * actors ran, or with `online` the learner's latest. */
rp_status d4pg_onnx_export(rp_onnx **g, const rp_checkpoint *ck, const char *config, bool online,
                           char *what, size_t what_size)
{
    d4pg_opts o;
    rp_d4pg_job *job = NULL;
    rp_status status = RP_OK;
    *g = NULL;
    RP_TRY(d4pg_opts_from_json(&o, config));
    RP_TRY(rp_d4pg_job_create(&job, &o.j, ck)); /* checks the task, fills in its sizes */
    const rp_d4pg_config *agent = &rp_d4pg_job_get_config(job)->agent;
    RP_TRY(rp_d4pg_policy_onnx(g, agent, ck, online ? "d4pg/policy/" : "d4pg/target_policy/"));
    snprintf(what, what_size, "D4PG's %s policy for %s (%d observations, %d actions)",
             online ? "online" : "target", o.j.task, agent->obs_dim, agent->act_dim);
cleanup:
    rp_d4pg_job_destroy(job);
    return status;
}
