/*
 * d4pg_train_command.c - `replicator train d4pg`: D4PG with distributed actors (this folder)
 * - a learner of R data-parallel replicas stepped by the shared trainer, K actors and a replay
 * server as roles of the same job, on threads or MPI ranks. The options are stored in every
 * checkpoint, so `--resume` and `replicator eval` need only the run's directory. The model's
 * descriptor is d4pg_model.c's.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/d4pg/d4pg_command.h"

static bool parse_layers(const char *v, int *layers);
static void layers_text(const int *layers, char *buf, size_t size);

void d4pg_opts_default(d4pg_opts *o)
{
    memset(o, 0, sizeof *o);
    o->j = rp_d4pg_job_config_default();
    snprintf(o->precision, sizeof o->precision, "f32");
    o->grad_dtype = RP_F32;
    o->eval_every = 10000;
    o->checkpoint_every = 20000;
    o->metrics_every = 100;
    snprintf(o->backend, sizeof o->backend, "auto");
}

/* "256,256,256" into layers[RP_D4PG_MAX_LAYERS] (0-terminated); false if malformed. */
static bool parse_layers(const char *v, int *layers)
{
    int n = 0;
    for (const char *p = v; *p;) {
        char *end = NULL;
        long w = strtol(p, &end, 10);
        if (end == p || w < 1 || w > 65536 || n == RP_D4PG_MAX_LAYERS) return false;
        layers[n++] = (int)w;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            return false;
    }
    for (int i = n; i < RP_D4PG_MAX_LAYERS; i++)
        layers[i] = 0;
    return n > 0;
}

static void layers_text(const int *layers, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < RP_D4PG_MAX_LAYERS && layers[i] && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%d", i ? "," : "", layers[i]);
}

static bool parse_policy(const rp_option *opt, const char *value, void *dst)
{
    (void)opt;
    return parse_layers(value, ((d4pg_opts *)dst)->j.agent.policy_layers);
}

static bool parse_critic(const rp_option *opt, const char *value, void *dst)
{
    (void)opt;
    return parse_layers(value, ((d4pg_opts *)dst)->j.agent.critic_layers);
}

#define T      d4pg_opts
#define SAVED  RP_OPT_SAVED
#define LAYERS sizeof(int[RP_D4PG_MAX_LAYERS])
#define OLD    (RP_OPT_SAVED | RP_OPT_OPTIONAL) /* saved; older runs lack it */

static const int wire_dtypes[] = {RP_F32, RP_BF16};

/*
 * The options of `replicator train d4pg`: one row each gives the parser, the help, the
 * checkpoint's JSON and what --resume takes from the command line (--env-steps, and the unsaved
 * options; the others given with --resume are the run's, as they always were). --lr is the
 * critic's rate, which the policy shares; --v-max's support is symmetric (d4pg_derive).
 */
static const rp_option d4pg_table[] = {
    RP_OPT_SECTION("task:"),
    RP_OPT_TEXT(T, j.task, "--task", "T", SAVED,
                "cartpole-swingup (default), cartpole-balance, pendulum-swingup,\n"
                "point_mass-easy, reacher-easy, cheetah-run, walker-walk"),
    RP_OPT_INT(T, j.action_repeat, "--action-repeat", "N", 1, 100, SAVED,
               "physics steps per action (default 1)"),
    RP_OPT_SECTION("roles:"),
    RP_OPT_INT(T, j.actors, "--actors", "K", 1, 256, SAVED, "actors (default 1)"),
    {.type = RP_OPTION_INT,
     .name = "--envs",
     .meta = "N",
     .key = "envs_per_actor",
     .offset = offsetof(T, j.envs_per_actor),
     .size = sizeof(int),
     .lo = 1,
     .hi = 64,
     .flags = SAVED,
     .help = "environments per actor, stepped in a batch (default 1)"},
    {.type = RP_OPTION_INT,
     .name = "--replicas",
     .meta = "R",
     .key = "learners",
     .offset = offsetof(T, j.learners),
     .size = sizeof(int),
     .lo = 1,
     .hi = 64,
     .flags = SAVED,
     .help = "data-parallel learner replicas (default 1)"},
    RP_OPT_SECTION("agent (Acme's D4PG defaults):"),
    RP_OPT_INT64(T, j.env_steps, "--env-steps", "N", 2, 1LL << 40, SAVED | RP_OPT_RESUME,
                 "environment steps in the run (default 300000)"),
    RP_OPT_INT(T, j.agent.batch, "--batch", "N", 1, 1 << 16, SAVED,
               "learner batch, global (default 256)"),
    RP_OPT_CUSTOM(T, j.agent.policy_layers, LAYERS, "--policy-layers", "L", parse_policy,
                  RP_OPT_OWN_JSON, "hidden widths of the policy (default 256,256,256)"),
    RP_OPT_CUSTOM(T, j.agent.critic_layers, LAYERS, "--critic-layers", "L", parse_critic,
                  RP_OPT_OWN_JSON, "hidden widths of the critic (default 512,512,256)"),
    {.type = RP_OPTION_FLOAT,
     .name = "--lr",
     .meta = "X",
     .key = "lr",
     .offset = offsetof(T, j.agent.critic_lr),
     .size = sizeof(float),
     .lo = 0,
     .hi = 1,
     .flags = SAVED,
     .help = "Adam rate of policy and critic (default 1e-04)"},
    RP_OPT_FLOAT(T, j.agent.sigma, "--sigma", "X", 0, 10, SAVED, "exploration noise (default 0.3)"),
    RP_OPT_INT(T, j.agent.n_step, "--n-step", "N", 1, 15, SAVED, "N-step returns (default 5)"),
    RP_OPT_FLOAT(T, j.agent.discount, "--discount", "X", 0, 1, SAVED, "discount (default 0.99)"),
    RP_OPT_FLOAT(T, j.agent.v_max, "--v-max", "X", 1e-3, 1e6, SAVED,
                 "critic support [-X, X] (default 150)"),
    RP_OPT_INT64(T, j.min_replay, "--min-replay", "N", 1, 1LL << 30, SAVED,
                 "transitions before learning (default 1000)"),
    {.type = RP_OPTION_DOUBLE,
     .name = "--spi",
     .meta = "X",
     .key = "spi",
     .offset = offsetof(T, j.samples_per_insert),
     .size = sizeof(double),
     .lo = 1e-3,
     .hi = 1e6,
     .flags = SAVED,
     .help = "samples per insert (default 32)"},
    RP_OPT_FLAG(T, j.prioritized, "--prioritized", SAVED,
                "prioritised replay (priority = the critic's loss)"),
    {.type = RP_OPTION_INT64,
     .name = "--actor-update",
     .meta = "N",
     .key = "actor_update",
     .offset = offsetof(T, j.actor_update_every),
     .size = sizeof(int64_t),
     .lo = 1,
     .hi = 1LL << 30,
     .flags = SAVED,
     .help = "env steps between an actor's policy fetches (default 1000)"},
    RP_OPT_SECTION("run:"),
    RP_OPT_INT(T, j.eval_episodes, "--eval-episodes", "N", 1, 1000, SAVED,
               "noise-free episodes per evaluation (default 5)"),
    RP_OPT_UINT64(T, j.seed, "--seed", "N", 0, 0x7fffffff, SAVED, "random seed (default 1)"),
    RP_OPT_INT64(T, eval_every, "--eval-every", "N", 1, 1LL << 40, SAVED,
                 "env steps between evaluations (default 10000)"),
    RP_OPT_INT64(T, checkpoint_every, "--checkpoint-every", "N", 1, 1LL << 40, SAVED,
                 "env steps between checkpoints (default 20000)"),
    RP_OPT_INT(T, threads, "--threads", "N", 1, 1024, SAVED | RP_OPT_ZERO_OK,
               "kernel threads of each learner replica (default: cores / replicas;\n"
               "on a machine shared with other work, 1 keeps the learner's pace)"),
    RP_OPT_CHOICE(T, backend, "--backend", "B", "auto|threads|mpi", 0,
                  "auto (default: MPI under mpirun), threads or mpi"),
    RP_OPT_CHOICE(T, precision, "--precision", "P", "f32|bf16", OLD | RP_OPT_RESUME,
                  "f32 (default) or bf16 compute for the learner's and actors'\n"
                  "linear layers (docs/precision.md); a run resumes in its own\n"
                  "unless given"),
    RP_OPT_ENUM(T, grad_dtype, "--grad-dtype", "T", "f32|bf16", wire_dtypes, OLD | RP_OPT_RESUME,
                "the learner replicas' gradients on the wire: f32 (default) or\n"
                "bf16 (half the bytes; summed in f32)"),
    RP_OPT_DOUBLE(T, comm_timeout, "--timeout", "S", 0.001, 86400, 0,
                  "seconds a message may wait for a peer"),
    RP_OPT_PATH(T, out_dir, "--out", "DIR", 0,
                "run directory (default runs/d4pg-TASK, made unique)"),
    RP_OPT_PATH_REF(T, tensorboard, "--tensorboard", "DIR", 0,
                    "also write the metrics as TensorBoard event files in DIR\n"
                    "(view them with: tensorboard --logdir DIR)"),
    RP_OPT_PATH_REF(T, trace, "--trace", "FILE", 0,
                    "write a Chrome trace-event JSON of the run to FILE (open it in\n"
                    "ui.perfetto.dev; docs/tracing.md)"),
    RP_OPT_INT(T, checkpoint_shards, "--checkpoint-shards", "N", 0, 1024, RP_OPT_RESUME,
               "write each checkpoint as N shard files and an index (default 0:\n"
               "one file; docs/training.md)"),
    RP_OPT_FLAG(T, background_save, "--background-save", RP_OPT_RESUME,
                "write each checkpoint on a background thread while training goes on"),
    RP_OPT_FLAG(T, force, "--force", 0, "overwrite a checkpoint in --out"),
    RP_OPT_INT64(T, max_steps, "--max-steps", "N", 1, 1LL << 40, 0,
                 "stop (checkpointed, resumable) after learner step N"),
    RP_OPT_FLAG(T, quiet, "--quiet", 0, "no progress lines"),
    RP_OPT_PATH_REF(T, resume, "--resume", "DIR", 0, "continue the run in DIR"),
    RP_OPTION_END,
};

#undef T
#undef SAVED
#undef LAYERS
#undef OLD

/* The fields one option sets two of: the policy's rate is the critic's; the support is [-X, X]. */
static void d4pg_derive(d4pg_opts *o)
{
    o->j.agent.policy_lr = o->j.agent.critic_lr;
    o->j.agent.v_min = -o->j.agent.v_max;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: replicator train d4pg [options]\n"
               "       replicator train --resume DIR [--env-steps N]\n"
               "\n"
               "Trains a D4PG agent (distributional critic, N-step returns, deterministic policy)\n"
               "on a MuJoCo control task: K actors step their environments and feed a replay;\n"
               "a learner of R data-parallel replicas trains on it. Writes learning_curve.png.\n"
               "\n");
    rp_options_print_help(f, d4pg_table);
}

int d4pg_opts_parse(int argc, char **argv, d4pg_opts *o, const char **resume)
{
    static const char CMD[] = "replicator train d4pg";
    rp_option_fault fault;
    *resume = NULL;
    if (rp_options_parse(d4pg_table, o, &argc, argv, RP_OPTIONS_HELP, &o->given, &fault) != RP_OK) {
        return rp_options_print_fault(CMD, &fault);
    }
    if (fault.kind == RP_OPTION_HELP) {
        usage(stdout);
        return 1;
    }
    d4pg_derive(o);
    *resume = o->resume;
    o->out_given = rp_options_was_given(d4pg_table, &o->given, "--out");
    if (!o->out_given) snprintf(o->out_dir, sizeof o->out_dir, "runs/d4pg-%s", o->j.task);
    return 0;
}

char *d4pg_opts_to_json(const d4pg_opts *o)
{
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON_AddStringToObject(c, "model", "d4pg");
    char *text = NULL, layers[64];
    if (rp_options_to_json(d4pg_table, o, c) == RP_OK) {
        layers_text(o->j.agent.policy_layers, layers, sizeof layers);
        cJSON_AddStringToObject(c, "policy_layers", layers);
        layers_text(o->j.agent.critic_layers, layers, sizeof layers);
        cJSON_AddStringToObject(c, "critic_layers", layers);
        text = cJSON_PrintUnformatted(c);
    }
    cJSON_Delete(c);
    return text;
}

bool d4pg_config_is_d4pg(const char *json)
{
    cJSON *c = json ? cJSON_Parse(json) : NULL;
    const cJSON *m = c ? cJSON_GetObjectItemCaseSensitive(c, "model") : NULL;
    bool yes = cJSON_IsString(m) && !strcmp(m->valuestring, "d4pg");
    cJSON_Delete(c);
    return yes;
}

/* A saved value for a message: a number in full, anything else as JSON, cut at 64 bytes. */
static void value_text(const cJSON *v, char *buf, size_t size)
{
    if (cJSON_IsNumber(v)) {
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(buf, size, "%.*g", digits, v->valuedouble);
            if (strtod(buf, NULL) == v->valuedouble) break;
        }
        return;
    }
    char *text = cJSON_PrintUnformatted(v);
    snprintf(buf, size, "%.64s%s", text ? text : "a value", text && strlen(text) > 64 ? "..." : "");
    free(text);
}

/* The saved layer widths under `key` into layers; false with why in bad[size] ("\"key\" is
   \"256,0\", not widths ..."), as strictly as the command line. */
static bool layers_from(const cJSON *c, const char *key, int *layers, char *bad, size_t size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    char value[80];
    if (!v) {
        snprintf(bad, size, "\"%.64s\" is missing", key);
        return false;
    }
    value_text(v, value, sizeof value);
    char why[96] = "";
    if (!cJSON_IsString(v))
        snprintf(why, sizeof why, "not a string");
    else if (strlen(v->valuestring) >= 256)
        snprintf(why, sizeof why, "%zu bytes long, over the 255 it may have",
                 strlen(v->valuestring));
    else if (!parse_layers(v->valuestring, layers))
        snprintf(why, sizeof why, "not widths 1..65536 separated by commas");
    if (why[0]) snprintf(bad, size, "\"%.64s\" is %s, %s", key, value, why);
    return !why[0];
}

rp_status d4pg_opts_from_json(d4pg_opts *o, const char *json)
{
    cJSON *c = cJSON_Parse(json);
    if (!c) return RP_ERROR(RP_ERR_FORMAT, "the checkpoint's configuration is not valid JSON");
    d4pg_opts_default(o);
    rp_d4pg_job_config *j = &o->j;
    char bad[256] = "";
    bool ok = layers_from(c, "policy_layers", j->agent.policy_layers, bad, sizeof bad) &&
              layers_from(c, "critic_layers", j->agent.critic_layers, bad, sizeof bad);
    /* The table's rows, with the command line's ranges. */
    if (ok && rp_options_from_json(d4pg_table, o, c, bad, sizeof bad) != RP_OK) ok = false;
    rp_status status = ok ? RP_OK
                          : RP_ERROR(RP_ERR_FORMAT,
                                     "the D4PG checkpoint's configuration is incomplete or "
                                     "invalid: %s",
                                     bad[0] ? bad : "it is not a JSON object");
    cJSON_Delete(c);
    if (ok) d4pg_derive(o);
    return status;
}

/* Learner steps in `env` environment steps at the job's samples per insert (at least 1). */
static int64_t learner_steps_of(const rp_d4pg_job_config *j, int64_t env)
{
    int64_t s = (int64_t)((double)env * j->samples_per_insert / j->agent.batch);
    return s > 0 ? s : 1;
}

static rp_status setup(d4pg_opts *o, const char *resume, rp_d4pg_job **job, rp_trainer **t)
{
    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    char *config = NULL;
    if (resume) {
        const char *saved;
        RP_TRY(rp_trainer_load_run(resume, &ck, &saved));
        if (!d4pg_config_is_d4pg(saved)) {
            status = RP_ERROR(RP_ERR_FORMAT, "%s is not a D4PG run", resume);
            goto cleanup;
        }
        d4pg_opts cli = *o;
        RP_TRY(d4pg_opts_from_json(o, saved));
        /* --env-steps if given, and the options a run never saves (this invocation's). */
        rp_options_apply_resume(d4pg_table, o, &cli, &cli.given);
        o->given = cli.given;
        snprintf(o->out_dir, sizeof o->out_dir, "%s", resume);
        o->out_given = true;
    }
    if (strcmp(o->backend, "threads") != 0) {
        /* Every rank's options the same, before the job is made (the threads may differ). */
        static const char *const local[] = {"threads", NULL};
        char *mine = d4pg_opts_to_json(o);
        status = rp_trainer_agree_config(mine, local, o->out_dir, o->max_steps, o->comm_timeout);
        free(mine);
        if (status != RP_OK) goto cleanup;
    }
    RP_TRY(rp_d4pg_job_create(job, &o->j, ck));
    o->j = *rp_d4pg_job_get_config(*job); /* the task's sizes filled in */
    rp_trainer_config tc = rp_trainer_config_default();
    /* The job's layout is its roles' (rp_d4pg_trainer_config_apply); a learner replica gets
       --threads, or the cores over the learners. */
    tc.runtime.backend = !strcmp(o->backend, "threads") ? RP_BACKEND_THREADS
                         : !strcmp(o->backend, "mpi")   ? RP_BACKEND_MPI
                                                        : RP_BACKEND_AUTO;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int per =
        o->threads ? o->threads : (int)(cores / o->j.learners > 0 ? cores / o->j.learners : 1);
    tc.runtime.threads_per_replica = per;
    tc.runtime.seed = o->j.seed;
    /* The command's promise: --timeout bounds a stall (on unless RP_STUCK_EXIT=0; runtime.h). */
    tc.runtime.stuck_exit = rp_trainer_stuck_exit();
    if (o->comm_timeout > 0) tc.runtime.timeout_s = o->comm_timeout;
    tc.runtime.precision = !strcmp(o->precision, "bf16") ? RP_BF16 : RP_F32;
    tc.runtime.grad_dtype = (rp_dtype)o->grad_dtype;
    rp_d4pg_trainer_config_apply(&o->j, &tc);
    tc.run_dir = o->out_dir;
    tc.run_dir_exact = o->out_given;
    tc.force = o->force;
    tc.resume = ck;
    tc.max_steps = o->max_steps;
    tc.eval_every_steps = learner_steps_of(&o->j, o->eval_every);
    tc.checkpoint_every_steps = learner_steps_of(&o->j, o->checkpoint_every);
    tc.checkpoint_shards = o->checkpoint_shards;
    tc.checkpoint_background = o->background_save;
    tc.metrics_every_steps = o->metrics_every;
    tc.quiet = o->quiet;
    tc.tensorboard_dir = o->tensorboard;
    tc.tensorboard_writer = rp_tensorboard_scalar_writer();
    tc.trace = o->trace;
    RP_TRY(rp_trainer_create(t, &tc, rp_d4pg_trainer_model(), *job));
    if (!rp_trainer_is_root(*t)) o->quiet = true;
    snprintf(o->out_dir, sizeof o->out_dir, "%s", rp_trainer_run_dir(*t));
    if (rp_trainer_is_root(*t)) RP_TRY(rp_d4pg_job_set_run_dir(*job, o->out_dir));
    config = d4pg_opts_to_json(o);
    if (!config) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot serialise the configuration");
        goto cleanup;
    }
    RP_TRY(rp_trainer_set_config_json(*t, config));
cleanup:
    free(config);
    rp_checkpoint_destroy(ck);
    return status;
}

static void print_header(const d4pg_opts *o, const rp_trainer *t, bool resumed)
{
    const rp_d4pg_job_config *j = &o->j;
    rp_replicator *rep = rp_trainer_replicator(t);
    rp_trainer_progress p = rp_trainer_get_progress(t);
    fprintf(stderr,
            "replicator train d4pg on %s: %d observations, %d actions\n"
            "  %lld env steps (%lld learner steps of batch %d at %g samples per insert); N %d, "
            "discount %g, "
            "sigma %g, Adam %g, support [%g, %g] x %d; seed %llu\n"
            "  learner %d replica(s) x %d threads, %d actor(s) x %d env(s), 1 replay (%s)\n",
            j->task, j->agent.obs_dim, j->agent.act_dim, (long long)j->env_steps,
            (long long)rp_d4pg_job_learner_steps(j), j->agent.batch, j->samples_per_insert,
            j->agent.n_step, (double)j->agent.discount, (double)j->agent.sigma,
            (double)j->agent.critic_lr, (double)j->agent.v_min, (double)j->agent.v_max,
            j->agent.atoms, (unsigned long long)j->seed, j->learners,
            rp_replicator_threads_per_replica(rep), j->actors, j->envs_per_actor,
            rp_replicator_backend(rep));
    /* Linear layers and layer norms write f32: the learner stores no activation in bf16. */
    rp_trainer_print_precision(o->precision, "f32");
    if (strcmp(o->precision, "bf16") == 0)
        fprintf(stderr, "  actors and evaluation act in f32 (a few observations' forward is "
                        "slower in bf16: bench_d4pg --actor)\n");
    if (o->grad_dtype == RP_BF16 && o->j.learners > 1)
        fprintf(stderr, "  learner gradients all-reduced in bf16 (summed in f32)\n");
    if (resumed)
        fprintf(stderr, "  resumed from %s at learner step %lld\n", o->out_dir,
                (long long)p.global_step);
    /* The configuration's echo, from the option table: what differs from the defaults. */
    static d4pg_opts defaults; /* static: a few KiB of paths */
    d4pg_opts_default(&defaults);
    char echo[1024];
    rp_options_describe(d4pg_table, o, &defaults, echo, sizeof echo);
    if (echo[0]) fprintf(stderr, "  options: %s\n", echo);
    fprintf(stderr, "  run directory: %s (learning_curve.png every %lld env steps)\n", o->out_dir,
            (long long)o->eval_every);
}

int d4pg_train_main(int argc, char **argv)
{
    d4pg_opts o;
    d4pg_opts_default(&o);
    const char *resume = NULL;
    int rc = d4pg_opts_parse(argc, argv, &o, &resume);
    if (rc) return rc == 1 ? 0 : rc;
    rp_trainer_catch_signals();
    rp_d4pg_job *job = NULL;
    rp_trainer *t = NULL;
    double t_start = rp_now_s();
    rp_status status = setup(&o, resume, &job, &t);
    bool tty = isatty(STDERR_FILENO) && !o.quiet;
    if (status == RP_OK) {
        if (!o.quiet) print_header(&o, t, resume != NULL);
        t_start = rp_now_s();
        status = rp_trainer_run(t);
    }
    rp_trainer_progress p = rp_trainer_get_progress(t);
    if (status == RP_OK && p.stopped && !o.quiet)
        fprintf(stderr,
                "%s  stopped at learner step %lld; resume with: replicator train --resume %s\n",
                tty ? "\n" : "", (long long)p.global_step, o.out_dir);
    if (status == RP_OK && rp_trainer_is_root(t) && p.finished) {
        const double *x, *y;
        int n = rp_d4pg_job_curve(job, &x, &y);
        printf("d4pg on %s: %lld learner steps (%lld this run) in %.0fs", o.j.task,
               (long long)p.global_step, (long long)p.steps_this_run, rp_now_s() - t_start);
        if (n > 0) printf("; last evaluation %.1f at %.0f env steps", y[n - 1], x[n - 1]);
        printf("; curve in %s/learning_curve.png\n", o.out_dir);
    }
    rc = rp_trainer_finish(t, status, "replicator train", tty);
    rp_d4pg_job_destroy(job);
    return rc;
}
