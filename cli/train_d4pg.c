/*
 * train_d4pg.c - `replicator train d4pg`: D4PG with distributed actors
 * (models/d4pg) - a learner of R data-parallel replicas stepped by the
 * shared trainer, K actors and a replay server as roles of the same job, on
 * threads or MPI ranks. The options are stored in every checkpoint, so
 * `--resume` and `replicator eval` need only the run's directory.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "d4pg_cli.h"

static bool parse_layers(const char *v, int *layers);
static void layers_text(const int *layers, char *buf, size_t size);

void d4pg_opts_default(d4pg_opts *o)
{
    memset(o, 0, sizeof *o);
    o->j = rp_d4pg_job_config_default();
    snprintf(o->precision, sizeof o->precision, "f32");
    o->eval_every = 10000;
    o->checkpoint_every = 20000;
    o->metrics_every = 100;
    snprintf(o->backend, sizeof o->backend, "auto");
}

static void usage(FILE *f)
{
    d4pg_opts d;
    d4pg_opts_default(&d);
    const rp_d4pg_job_config *j = &d.j;
    char pl[64], cl[64];
    layers_text(j->agent.policy_layers, pl, sizeof pl);
    layers_text(j->agent.critic_layers, cl, sizeof cl);
    fprintf(
        f,
        "usage: replicator train d4pg [options]\n"
        "       replicator train --resume DIR [--env-steps N]\n"
        "\n"
        "Trains a D4PG agent (distributional critic, N-step returns, deterministic policy)\n"
        "on a MuJoCo control task: K actors step their environments and feed a replay;\n"
        "a learner of R data-parallel replicas trains on it. Writes learning_curve.png.\n"
        "\n"
        "task:\n"
        "  --task T          cartpole-swingup (default), cartpole-balance, pendulum-swingup,\n"
        "                    point_mass-easy, reacher-easy, cheetah-run, walker-walk\n"
        "  --action-repeat N physics steps per action (default %d)\n"
        "roles:\n"
        "  --actors K        actors (default %d)\n"
        "  --envs N          environments per actor, stepped in a batch (default %d)\n"
        "  --replicas R      data-parallel learner replicas (default %d)\n"
        "agent (Acme's D4PG defaults):\n"
        "  --env-steps N     environment steps in the run (default %lld)\n"
        "  --batch N         learner batch, global (default %d)\n"
        "  --policy-layers L hidden widths of the policy (default %s)\n"
        "  --critic-layers L hidden widths of the critic (default %s)\n"
        "  --lr X            Adam rate of policy and critic (default %g)\n"
        "  --sigma X         exploration noise (default %g)\n"
        "  --n-step N        N-step returns (default %d); --discount X (default %g)\n"
        "  --v-max X         critic support [-X, X] (default %g)\n"
        "  --min-replay N    transitions before learning (default %lld)\n"
        "  --spi X           samples per insert (default %g)\n"
        "  --prioritized     prioritised replay (priority = the critic's loss)\n"
        "  --actor-update N  env steps between an actor's policy fetches (default %lld)\n"
        "run:\n"
        "  --seed N          random seed (default %llu)\n"
        "  --threads N       kernel threads of each learner replica (default: cores / replicas;\n"
        "                    on a machine shared with other work, 1 keeps the learner's pace)\n"
        "  --backend B       auto (default: MPI under mpirun), threads or mpi\n"
        "  --precision P     f32 (default) or bf16 compute for the learner's and actors'\n"
        "                    linear layers (docs/precision.md)\n"
        "  --timeout S       seconds a message may wait for a peer\n"
        "  --out DIR         run directory (default runs/d4pg-TASK, made unique)\n"
        "  --tensorboard DIR also write the metrics as TensorBoard event files in DIR\n"
        "                    (view them with: tensorboard --logdir DIR)\n"
        "  --trace FILE      write a Chrome trace-event JSON of the run to FILE (open it in\n"
        "                    ui.perfetto.dev; docs/tracing.md)\n"
        "  --force           overwrite a checkpoint in --out\n"
        "  --eval-every N    env steps between evaluations (default %lld)\n"
        "  --eval-episodes N noise-free episodes per evaluation (default %d)\n"
        "  --checkpoint-every N  env steps between checkpoints (default %lld)\n"
        "  --max-steps N     stop (checkpointed, resumable) after learner step N\n"
        "  --quiet           no progress lines\n"
        "  --resume DIR      continue the run in DIR\n",
        j->action_repeat, j->actors, j->envs_per_actor, j->learners, (long long)j->env_steps,
        j->agent.batch, pl, cl, (double)j->agent.critic_lr, (double)j->agent.sigma, j->agent.n_step,
        (double)j->agent.discount, (double)j->agent.v_max, (long long)j->min_replay,
        j->samples_per_insert, (long long)j->actor_update_every, (unsigned long long)j->seed,
        (long long)d.eval_every, j->eval_episodes, (long long)d.checkpoint_every);
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

int d4pg_opts_parse(int argc, char **argv, d4pg_opts *o, const char **resume)
{
    *resume = NULL;
    rp_d4pg_job_config *j = &o->j;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n = 0;
        float x = 0;
        bool ok = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--quiet")) {
            o->quiet = true;
            continue;
        }
        if (!strcmp(a, "--force")) {
            o->force = true;
            continue;
        }
        if (!strcmp(a, "--prioritized")) {
            j->prioritized = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "replicator train d4pg: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--task"))
            snprintf(j->task, sizeof j->task, "%s", v);
        else if (!strcmp(a, "--action-repeat")) {
            ok = train_parse_long(v, 1, 100, &n);
            j->action_repeat = (int)n;
        } else if (!strcmp(a, "--actors")) {
            ok = train_parse_long(v, 1, 256, &n);
            j->actors = (int)n;
        } else if (!strcmp(a, "--envs")) {
            ok = train_parse_long(v, 1, 64, &n);
            j->envs_per_actor = (int)n;
        } else if (!strcmp(a, "--replicas")) {
            ok = train_parse_long(v, 1, 64, &n);
            j->learners = (int)n;
        } else if (!strcmp(a, "--env-steps")) {
            ok = train_parse_long(v, 2, 1L << 40, &n);
            j->env_steps = n;
        } else if (!strcmp(a, "--batch")) {
            ok = train_parse_long(v, 1, 1 << 16, &n);
            j->agent.batch = (int)n;
        } else if (!strcmp(a, "--policy-layers"))
            ok = parse_layers(v, j->agent.policy_layers);
        else if (!strcmp(a, "--critic-layers"))
            ok = parse_layers(v, j->agent.critic_layers);
        else if (!strcmp(a, "--lr")) {
            ok = train_parse_float(v, 0, 1, &x);
            j->agent.critic_lr = j->agent.policy_lr = x;
        } else if (!strcmp(a, "--sigma"))
            ok = train_parse_float(v, 0, 10, &j->agent.sigma);
        else if (!strcmp(a, "--n-step")) {
            ok = train_parse_long(v, 1, 15, &n);
            j->agent.n_step = (int)n;
        } else if (!strcmp(a, "--discount"))
            ok = train_parse_float(v, 0, 1, &j->agent.discount);
        else if (!strcmp(a, "--v-max")) {
            ok = train_parse_float(v, 1e-3f, 1e6f, &x);
            j->agent.v_max = x;
            j->agent.v_min = -x;
        } else if (!strcmp(a, "--min-replay")) {
            ok = train_parse_long(v, 1, 1L << 30, &n);
            j->min_replay = n;
        } else if (!strcmp(a, "--spi")) {
            ok = train_parse_float(v, 1e-3f, 1e6f, &x);
            j->samples_per_insert = x;
        } else if (!strcmp(a, "--actor-update")) {
            ok = train_parse_long(v, 1, 1L << 30, &n);
            j->actor_update_every = n;
        } else if (!strcmp(a, "--seed")) {
            ok = train_parse_long(v, 0, 0x7fffffffL, &n);
            j->seed = (uint64_t)n;
        } else if (!strcmp(a, "--threads")) {
            ok = train_parse_long(v, 1, 1024, &n);
            o->threads = (int)n;
        } else if (!strcmp(a, "--backend")) {
            ok = !strcmp(v, "auto") || !strcmp(v, "threads") || !strcmp(v, "mpi");
            snprintf(o->backend, sizeof o->backend, "%s", v);
        } else if (!strcmp(a, "--precision")) {
            ok = !strcmp(v, "f32") || !strcmp(v, "bf16");
            snprintf(o->precision, sizeof o->precision, "%s", ok ? v : "f32");
        } else if (!strcmp(a, "--timeout")) {
            ok = train_parse_float(v, 0.001f, 86400, &x);
            o->comm_timeout = x;
        } else if (!strcmp(a, "--out")) {
            if (!train_copy_path("replicator train d4pg", a, v, o->out_dir, sizeof o->out_dir))
                return 2;
            o->out_given = true;
        } else if (!strcmp(a, "--eval-every")) {
            ok = train_parse_long(v, 1, 1L << 40, &n);
            o->eval_every = n;
        } else if (!strcmp(a, "--eval-episodes")) {
            ok = train_parse_long(v, 1, 1000, &n);
            j->eval_episodes = (int)n;
        } else if (!strcmp(a, "--checkpoint-every")) {
            ok = train_parse_long(v, 1, 1L << 40, &n);
            o->checkpoint_every = n;
        } else if (!strcmp(a, "--max-steps")) {
            ok = train_parse_long(v, 1, 1L << 40, &n);
            o->max_steps = n;
        } else if (!strcmp(a, "--resume")) {
            if (!train_copy_path("replicator train d4pg", a, v, NULL, sizeof o->out_dir)) return 2;
            *resume = v;
        } else if (!strcmp(a, "--tensorboard")) {
            if (!train_copy_path("replicator train d4pg", a, v, NULL, CLI_PATH_MAX)) return 2;
            o->tensorboard = v;
        } else if (!strcmp(a, "--trace")) {
            if (!train_copy_path("replicator train d4pg", a, v, NULL, CLI_PATH_MAX)) return 2;
            o->trace = v;
        } else {
            fprintf(stderr, "replicator train d4pg: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "replicator train d4pg: bad value for %s: %s\n", a, v);
            return 2;
        }
    }
    if (!o->out_given) snprintf(o->out_dir, sizeof o->out_dir, "runs/d4pg-%s", j->task);
    return 0;
}

char *d4pg_opts_to_json(const d4pg_opts *o)
{
    const rp_d4pg_job_config *j = &o->j;
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON_AddStringToObject(c, "model", "d4pg");
    cJSON_AddStringToObject(c, "task", j->task);
    cJSON_AddNumberToObject(c, "action_repeat", j->action_repeat);
    cJSON_AddNumberToObject(c, "actors", j->actors);
    cJSON_AddNumberToObject(c, "envs_per_actor", j->envs_per_actor);
    cJSON_AddNumberToObject(c, "learners", j->learners);
    cJSON_AddNumberToObject(c, "env_steps", (double)j->env_steps);
    cJSON_AddNumberToObject(c, "batch", j->agent.batch);
    char layers[64];
    layers_text(j->agent.policy_layers, layers, sizeof layers);
    cJSON_AddStringToObject(c, "policy_layers", layers);
    layers_text(j->agent.critic_layers, layers, sizeof layers);
    cJSON_AddStringToObject(c, "critic_layers", layers);
    cJSON_AddNumberToObject(c, "lr", j->agent.critic_lr);
    cJSON_AddNumberToObject(c, "sigma", j->agent.sigma);
    cJSON_AddNumberToObject(c, "n_step", j->agent.n_step);
    cJSON_AddNumberToObject(c, "discount", j->agent.discount);
    cJSON_AddNumberToObject(c, "v_max", j->agent.v_max);
    cJSON_AddNumberToObject(c, "min_replay", (double)j->min_replay);
    cJSON_AddNumberToObject(c, "spi", j->samples_per_insert);
    cJSON_AddBoolToObject(c, "prioritized", j->prioritized);
    cJSON_AddNumberToObject(c, "actor_update", (double)j->actor_update_every);
    cJSON_AddNumberToObject(c, "eval_episodes", j->eval_episodes);
    cJSON_AddNumberToObject(c, "seed", (double)j->seed);
    cJSON_AddNumberToObject(c, "eval_every", (double)o->eval_every);
    cJSON_AddNumberToObject(c, "checkpoint_every", (double)o->checkpoint_every);
    cJSON_AddNumberToObject(c, "threads", o->threads);
    char *text = cJSON_PrintUnformatted(c);
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

rp_status d4pg_opts_from_json(d4pg_opts *o, const char *json)
{
    cJSON *c = cJSON_Parse(json);
    if (!c) return RP_ERROR(RP_ERR_FORMAT, "the checkpoint's configuration is not valid JSON");
    d4pg_opts_default(o);
    rp_d4pg_job_config *j = &o->j;
    train_config_reader r = {.json = c};
    char pl[256], cl[256];
    double v[20];
    bool ok = train_config_str(&r, "task", j->task, sizeof j->task) &&
              train_config_bool(&r, "prioritized", &j->prioritized) &&
              train_config_str(&r, "policy_layers", pl, sizeof pl) &&
              train_config_str(&r, "critic_layers", cl, sizeof cl);
    if (ok && !parse_layers(pl, j->agent.policy_layers))
        ok = train_config_refuse(&r, "policy_layers", "not widths 1..65536 separated by commas");
    if (ok && !parse_layers(cl, j->agent.critic_layers))
        ok = train_config_refuse(&r, "critic_layers", "not widths 1..65536 separated by commas");
    ok = ok && train_config_num(&r, "action_repeat", 1, 100, &v[0]) &&
         train_config_num(&r, "actors", 1, 256, &v[1]) &&
         train_config_num(&r, "envs_per_actor", 1, 64, &v[2]) &&
         train_config_num(&r, "learners", 1, 64, &v[3]) &&
         train_config_num(&r, "env_steps", 2, 1e13, &v[4]) &&
         train_config_num(&r, "batch", 1, 65536, &v[5]) &&
         train_config_num(&r, "lr", 0, 1, &v[6]) && train_config_num(&r, "sigma", 0, 10, &v[7]) &&
         train_config_num(&r, "n_step", 1, 15, &v[8]) &&
         train_config_num(&r, "discount", 0, 1, &v[9]) &&
         train_config_num(&r, "v_max", 1e-3, 1e6, &v[10]) &&
         train_config_num(&r, "min_replay", 1, 1e10, &v[11]) &&
         train_config_num(&r, "spi", 1e-3, 1e6, &v[12]) &&
         train_config_num(&r, "actor_update", 1, 1e10, &v[13]) &&
         train_config_num(&r, "eval_episodes", 1, 1000, &v[14]) &&
         train_config_num(&r, "seed", 0, 0x7fffffff, &v[15]) &&
         train_config_num(&r, "eval_every", 1, 1e13, &v[16]) &&
         train_config_num(&r, "checkpoint_every", 1, 1e13, &v[17]) &&
         train_config_num(&r, "threads", 0, 1024, &v[18]);
    rp_status status = ok ? RP_OK : train_config_error(&r, "the D4PG checkpoint's configuration");
    cJSON_Delete(c);
    if (!ok) return status;
    j->action_repeat = (int)v[0];
    j->actors = (int)v[1];
    j->envs_per_actor = (int)v[2];
    j->learners = (int)v[3];
    j->env_steps = (int64_t)v[4];
    j->agent.batch = (int)v[5];
    j->agent.critic_lr = j->agent.policy_lr = (float)v[6];
    j->agent.sigma = (float)v[7];
    j->agent.n_step = (int)v[8];
    j->agent.discount = (float)v[9];
    j->agent.v_max = (float)v[10];
    j->agent.v_min = -(float)v[10];
    j->min_replay = (int64_t)v[11];
    j->samples_per_insert = v[12];
    j->actor_update_every = (int64_t)v[13];
    j->eval_episodes = (int)v[14];
    j->seed = (uint64_t)v[15];
    o->eval_every = (int64_t)v[16];
    o->checkpoint_every = (int64_t)v[17];
    o->threads = (int)v[18];
    return RP_OK;
}

/* Learner steps in `env` environment steps at the job's samples per insert (at least 1). */
static int64_t learner_steps_of(const rp_d4pg_job_config *j, int64_t env)
{
    int64_t s = (int64_t)((double)env * j->samples_per_insert / j->agent.batch);
    return s > 0 ? s : 1;
}

static rp_status setup(d4pg_opts *o, const char *resume, int argc, char **argv, rp_d4pg_job **job,
                       rp_trainer **t)
{
    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    char *config = NULL;
    if (resume) {
        const char *saved;
        RP_TRY(train_load_run(resume, &ck, &saved));
        if (!d4pg_config_is_d4pg(saved)) {
            status = RP_ERROR(RP_ERR_FORMAT, "%s is not a D4PG run", resume);
            goto cleanup;
        }
        d4pg_opts cli = *o;
        RP_TRY(d4pg_opts_from_json(o, saved));
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "--env-steps")) o->j.env_steps = cli.j.env_steps;
        o->quiet = cli.quiet;
        o->tensorboard = cli.tensorboard;
        o->trace = cli.trace;
        o->max_steps = cli.max_steps;
        o->comm_timeout = cli.comm_timeout;
        snprintf(o->backend, sizeof o->backend, "%s", cli.backend);
        snprintf(o->precision, sizeof o->precision, "%s", cli.precision);
        snprintf(o->out_dir, sizeof o->out_dir, "%s", resume);
        o->out_given = true;
    }
    if (strcmp(o->backend, "threads") != 0) {
        /* Every rank's options the same, before the job is made (the threads may differ). */
        static const char *const local[] = {"threads", NULL};
        RP_TRY(train_agree_options(d4pg_opts_to_json(o), local, o->out_dir, o->max_steps,
                                   o->comm_timeout));
    }
    RP_TRY(rp_d4pg_job_create(job, &o->j, ck));
    o->j = *rp_d4pg_job_get_config(*job); /* the task's sizes filled in */
    rp_trainer_config tc = rp_trainer_config_default();
    tc.runtime.backend = !strcmp(o->backend, "threads") ? RP_BACKEND_THREADS
                         : !strcmp(o->backend, "mpi")   ? RP_BACKEND_MPI
                                                        : RP_BACKEND_AUTO;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int per =
        o->threads ? o->threads : (int)(cores / o->j.learners > 0 ? cores / o->j.learners : 1);
    tc.runtime.threads_per_replica = per;
    tc.runtime.seed = o->j.seed;
    tc.runtime.stuck_exit = train_stuck_exit();
    if (o->comm_timeout > 0) tc.runtime.timeout_s = o->comm_timeout;
    tc.runtime.precision = !strcmp(o->precision, "bf16") ? RP_BF16 : RP_F32;
    rp_d4pg_trainer_config_apply(&o->j, &tc);
    tc.run_dir = o->out_dir;
    tc.run_dir_exact = o->out_given;
    tc.force = o->force;
    tc.resume = ck;
    tc.max_steps = o->max_steps;
    tc.eval_every_steps = learner_steps_of(&o->j, o->eval_every);
    tc.checkpoint_every_steps = learner_steps_of(&o->j, o->checkpoint_every);
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
    train_print_precision(o->precision);
    if (resumed)
        fprintf(stderr, "  resumed from %s at learner step %lld\n", o->out_dir,
                (long long)p.global_step);
    fprintf(stderr, "  run directory: %s (learning_curve.png every %lld env steps)\n", o->out_dir,
            (long long)o->eval_every);
}

int train_d4pg_main(int argc, char **argv)
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
    rp_status status = setup(&o, resume, argc, argv, &job, &t);
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
    rc = train_finish(t, status, tty);
    rp_d4pg_job_destroy(job);
    return rc;
}
