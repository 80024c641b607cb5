/*
 * classifier_plan_command.c - `replicator plan`: each worker's memory and each step's
 * communication for a classifier's `replicator train` command line, predicted before anything
 * trains (classifier_plan.h); and `train --plan-check`, which wraps the classifier's trainer
 * callbacks to measure the first steps of the run and compares them with the plan. The plan's
 * parts per worker and per axis are the library's (replicator/plan.h); what fills them, the
 * activations recorded from the classifier's own steps and its run options, is this model's.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/classifier/classifier_command.h"

/* ---- the plan ---------------------------------------------------------------------------- */

static int64_t worker_total(const rp_plan_worker *w)
{
    return w->params + w->grads + w->optim + w->strategy + w->activations + w->loader;
}

/* Whether workers a and b hold and send the same (their ids and shards aside). */
static bool same_worker(const rp_plan_worker *a, const rp_plan_worker *b)
{
    rp_plan_worker x = *a, y = *b;
    x.worker = y.worker = 0;
    x.shard = y.shard = 0;
    return memcmp(&x, &y, sizeof x) == 0;
}

rp_status plan_for_run(rp_classifier_plan **p, const train_opts *o, const rp_config *rcfg,
                       const rp_classifier *clf)
{
    /* o->replicas: the job's replicas when a replica spans workers; without, each rank's under
       MPI. */
    int stages = o->model_parallel > 1 ? o->model_parallel : 1,
        tp = o->tensor_parallel > 1 ? o->tensor_parallel : 1;
    bool mpi = rcfg->backend == RP_BACKEND_MPI && rp_env_get()->mpi_world_size > 1;
    int replicas = o->replicas * (mpi && stages * tp == 1 ? rp_env_get()->mpi_world_size : 1);
    /* Sync groups under MPI: one replica per rank, the last --ps ranks serve (strategy_groups.c).
     */
    if (mpi && o->sync_groups > 1) replicas = rp_env_get()->mpi_world_size - o->ps;
    RP_CHECK(rp_classifier_plan_create(p, clf, rcfg, replicas, stages, tp));
    (*p)->server_ranks = mpi && o->sync_groups > 1;
    return RP_OK;
}

static void print_row(FILE *f, const char *what, const int64_t *v, int n)
{
    fprintf(f, "  %-32s", what);
    for (int i = 0; i < n; i++)
        fprintf(f, " %14.2f", (double)v[i] / 1e6);
    fprintf(f, "\n");
}

static void print_text(FILE *f, const rp_classifier_plan *p, const train_opts *o,
                       const rp_classifier *clf)
{
    const rp_dataset *ds = clf->train;
    char stages[96] = "", split[64] = "", sync[96] = "";
    if (p->stages > 1 || p->micro_batches > 1)
        snprintf(stages, sizeof stages, " x %d pipeline stage%s (%s, %d micro-batch%s of %d)",
                 p->stages, p->stages > 1 ? "s" : "", rp_pipe_schedule_name(clf->cfg.schedule),
                 p->micro_batches, p->micro_batches > 1 ? "es" : "", p->micro);
    if (p->tp > 1)
        snprintf(split, sizeof split, " x %d tensor-parallel workers (Megatron-style blocks)",
                 p->tp);
    if (p->groups > 1)
        snprintf(sync, sizeof sync,
                 ", %d sync groups of %d (sync inside, async between, %d parameter server%s)",
                 p->groups, p->in_sync, o->ps, o->ps > 1 ? "s" : "");
    else if (p->replicas > 1)
        snprintf(sync, sizeof sync, ", sync");
    fprintf(
        f,
        "plan: %s on %s (%dx%dx%d, %d classes), batch %d on %d replica%s (%d each)%s%s%s%s%s%s\n",
        o->model, ds->name, ds->h, ds->w, ds->c, ds->num_classes, o->batch, p->replicas,
        p->replicas > 1 ? "s" : "", p->batch, stages, split, sync,
        p->in_sync > 1 ? ", cross-replica batch norm" : "",
        o->zero == 3 && p->replicas > 1   ? ", ZeRO-3"
        : o->zero == 2 && p->replicas > 1 ? ", ZeRO-2"
        : o->zero == 1 && p->replicas > 1 ? ", ZeRO-1"
                                          : "",
        o->grad_dtype == RP_BF16 && (p->in_sync > 1 || p->tp > 1)
            ? ", gradients in bf16 on the wire"
            : "");
    /* One column per group of workers that hold and send the same. */
    enum { MAX_GROUPS = 8 };
    int first[MAX_GROUPS], last[MAX_GROUPS], count[MAX_GROUPS], ng = 0;
    for (int id = 0; id < p->workers; id++) {
        int g = 0;
        while (g < ng && !same_worker(&p->worker[first[g]], &p->worker[id]))
            g++;
        if (g == ng) {
            if (ng == MAX_GROUPS) continue; /* more kinds of worker than columns: the first shown */
            first[ng] = last[ng] = id;
            count[ng++] = 0;
        }
        last[g] = id;
        count[g]++;
    }
    char label[MAX_GROUPS][32];
    for (int g = 0; g < ng; g++) {
        if (p->stages > 1)
            snprintf(label[g], sizeof label[g], "stage %d%s", p->worker[first[g]].stage,
                     count[g] > 1 ? " (each)" : "");
        else if (p->tp > 1 && count[g] == p->workers)
            snprintf(label[g], sizeof label[g], "every shard");
        else if (count[g] == 1)
            snprintf(label[g], sizeof label[g], "worker %d", first[g]);
        else if (last[g] - first[g] + 1 == count[g])
            snprintf(label[g], sizeof label[g], "workers %d-%d", first[g], last[g]);
        else
            snprintf(label[g], sizeof label[g], "%d workers", count[g]);
    }
    fprintf(f, "memory per worker, MB (1e6 bytes)  ");
    for (int g = 0; g < ng; g++)
        fprintf(f, " %14s", label[g]);
    fprintf(f, "\n");
    int64_t v[MAX_GROUPS];
#define ROW(name, field)                                                                           \
    do {                                                                                           \
        for (int g = 0; g < ng; g++)                                                               \
            v[g] = p->worker[first[g]].field;                                                      \
        print_row(f, name, v, ng);                                                                 \
    } while (0)
    ROW("parameters and buffers", params);
    ROW("gradients", grads);
    ROW("optimizer state", optim);
    ROW("strategy buffers", strategy);
    bool piped = p->stages > 1 || p->micro_batches > 1;
    ROW(piped ? "activations (a bound)" : "activations (arena live peak)", activations);
    ROW("loader buffers", loader);
#undef ROW
    for (int g = 0; g < ng; g++)
        v[g] = worker_total(&p->worker[first[g]]);
    print_row(f, "total", v, ng);
    for (int s = 0; s < p->stages; s++) {
        const rp_classifier_plan_stage *st = &p->stage[s];
        char who[32] = "";
        if (p->stages > 1) snprintf(who, sizeof who, " (stage %d)", s);
        fprintf(
            f,
            "  activations%s: one training step recorded at batch %d (%.2f MB) and %d (%.2f MB), "
            "fitted as a + b x batch: a = %.2f MB, b = %.3f MB per sample, at batch %d",
            who, st->probe_batch[0], (double)st->probe_peak[0] / 1e6, st->probe_batch[1],
            (double)st->probe_peak[1] / 1e6, st->act_a / 1e6, st->act_b / 1e6, p->micro);
        if (piped) fprintf(f, ", x %d micro-batch%s alive", st->tapes, st->tapes > 1 ? "es" : "");
        fprintf(f, "\n");
        if (p->tp > 1) {
            uint64_t calls = 0, b1 = 0, b2 = 0;
            for (int k = 0; k < RP_COMM_KINDS; k++) {
                calls += st->model[0].by[RP_COMM_USER][k].calls;
                b1 += st->model[0].by[RP_COMM_USER][k].bytes;
                b2 += st->model[1].by[RP_COMM_USER][k].bytes;
            }
            fprintf(f,
                    "  model axis%s: the same step on %d threads over a %d-member communicator: "
                    "%llu calls at batch %d and %d, %llu B and %llu B, fitted as a + b x batch "
                    "(the calls fixed), at batch %d\n",
                    who, p->tp, p->tp, (unsigned long long)calls, st->probe_batch[0],
                    st->probe_batch[1], (unsigned long long)b1, (unsigned long long)b2, p->micro);
        }
    }
    fprintf(f,
            "  process-wide: the datasets %.2f MB; kernel caches %.2f MB after the recorded steps "
            "(they grow with the batch's shapes; `replicator bench resnet --memory` measures "
            "them)\n",
            (double)p->datasets / 1e6, (double)p->kernel_caches / 1e6);
    if (p->groups > 1 && p->server_ranks)
        fprintf(f,
                "  on the %d server rank%s, in all: the parameter servers' shards (their values "
                "and optimizer slots) %.2f MB; each worker's optimizer state above is its own "
                "copy, filled only for checkpoints\n",
                o->ps, o->ps > 1 ? "s" : "", (double)p->servers / 1e6);
    else if (p->groups > 1)
        fprintf(f,
                "  process-wide: the parameter servers (in-process, one set shared by the %d "
                "groups; its values and optimizer slots) %.2f MB; each worker's optimizer state "
                "above is its own copy, filled only for checkpoints\n",
                p->groups, (double)p->servers / 1e6);
    fprintf(f, "communication per step, per worker (payload bytes: count x dtype size per call)\n");
    for (int g = 0; g < ng; g++) {
        const rp_plan_worker *w = &p->worker[first[g]];
        if (w->ntraffic == 0) {
            fprintf(f, "  %-14s none (one replica: nothing to exchange)\n", label[g]);
            continue;
        }
        int64_t calls = 0, bytes = 0;
        for (int i = 0; i < w->ntraffic; i++) {
            const rp_plan_traffic *l = &w->traffic[i];
            fprintf(f, "  %-14s %-5s %-15s %-8s %-36s %6lld calls %12lld B\n", i ? "" : label[g],
                    rp_plan_axis_name(l->axis), rp_flight_kind_name(l->kind),
                    rp_comm_class_name(l->cls), l->what, (long long)l->calls, (long long)l->bytes);
            calls += l->calls;
            bytes += l->bytes;
        }
        fprintf(f, "  %-14s %-68s %6lld calls %12lld B\n", "", "total", (long long)calls,
                (long long)bytes);
    }
    if (p->replicas > 1 || p->tp > 1)
        fprintf(f, "  not in the plan: the runtime's housekeeping (the report all-gathers of each "
                   "run, the parameter checksum every 100 steps)\n");
    if (p->groups > 1 && p->server_ranks)
        fprintf(f,
                "  not in the plan: each group's rank 0 pushes the group's mean gradient to the "
                "server ranks and pulls the values, %.2f MB each way per step, over the servers' "
                "own communicator\n",
                (double)p->worker[0].grads / 1e6);
    else if (p->groups > 1)
        fprintf(f,
                "  not counted (no communicator call): each group's rank 0 pushes the group's "
                "mean gradient to the in-process parameter servers and pulls the values, "
                "%.2f MB each way per step, as memory copies\n",
                (double)p->worker[0].grads / 1e6);
}

static void print_json(FILE *f, const rp_classifier_plan *p, const train_opts *o)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", o->model);
    cJSON_AddNumberToObject(j, "replicas", p->replicas);
    cJSON_AddNumberToObject(j, "stages", p->stages);
    cJSON_AddNumberToObject(j, "tensor_parallel", p->tp);
    cJSON_AddNumberToObject(j, "sync_groups", p->groups);
    cJSON_AddNumberToObject(j, "replicas_in_sync", p->in_sync);
    cJSON_AddNumberToObject(j, "micro_batches", p->micro_batches);
    cJSON_AddNumberToObject(j, "batch", o->batch);
    cJSON_AddNumberToObject(j, "batch_per_worker", p->batch);
    cJSON_AddBoolToObject(j, "zero", o->zero && p->replicas > 1);
    cJSON_AddNumberToObject(j, "zero_stage", p->replicas > 1 ? o->zero : 0);
    cJSON_AddStringToObject(j, "grad_dtype", rp_dtype_name(o->grad_dtype));
    cJSON *fits = cJSON_AddArrayToObject(j, "activations_fit");
    for (int s = 0; fits && s < p->stages; s++) {
        const rp_classifier_plan_stage *st = &p->stage[s];
        cJSON *fit = cJSON_CreateObject();
        cJSON_AddItemToArray(fits, fit);
        cJSON_AddNumberToObject(fit, "a", st->act_a);
        cJSON_AddNumberToObject(fit, "b", st->act_b);
        /* peak_batch_1 and _2: the peaks at the first and second recorded batch (probe_batches:
           1 and 2, or 2 and 4 where batch norm sees 1x1 images). */
        cJSON *pb = cJSON_AddArrayToObject(fit, "probe_batches");
        for (int k = 0; pb && k < 2; k++)
            cJSON_AddItemToArray(pb, cJSON_CreateNumber(st->probe_batch[k]));
        cJSON_AddNumberToObject(fit, "peak_batch_1", (double)st->probe_peak[0]);
        cJSON_AddNumberToObject(fit, "peak_batch_2", (double)st->probe_peak[1]);
        cJSON_AddNumberToObject(fit, "micro_batches_alive", st->tapes);
        if (p->tp > 1) {
            /* The model axis's recorded steps: calls and bytes at the two recorded batches. */
            cJSON *mj = cJSON_AddObjectToObject(fit, "model_axis");
            uint64_t calls = 0, b1 = 0, b2 = 0;
            for (int k = 0; k < RP_COMM_KINDS; k++) {
                calls += st->model[0].by[RP_COMM_USER][k].calls;
                b1 += st->model[0].by[RP_COMM_USER][k].bytes;
                b2 += st->model[1].by[RP_COMM_USER][k].bytes;
            }
            cJSON_AddNumberToObject(mj, "calls", (double)calls);
            cJSON_AddNumberToObject(mj, "bytes_batch_1", (double)b1);
            cJSON_AddNumberToObject(mj, "bytes_batch_2", (double)b2);
        }
    }
    cJSON_AddNumberToObject(j, "datasets", (double)p->datasets);
    cJSON_AddNumberToObject(j, "kernel_caches_probe", (double)p->kernel_caches);
    cJSON_AddNumberToObject(j, "parameter_servers", (double)p->servers);
    cJSON *workers = cJSON_AddArrayToObject(j, "workers");
    for (int id = 0; workers && id < p->workers; id++) {
        const rp_plan_worker *w = &p->worker[id];
        cJSON *wj = cJSON_CreateObject();
        cJSON_AddItemToArray(workers, wj);
        cJSON_AddNumberToObject(wj, "worker", w->worker);
        cJSON_AddNumberToObject(wj, "stage", w->stage);
        cJSON_AddNumberToObject(wj, "shard", w->shard);
        cJSON *m = cJSON_AddObjectToObject(wj, "memory");
        cJSON_AddNumberToObject(m, "parameters", (double)w->params);
        cJSON_AddNumberToObject(m, "gradients", (double)w->grads);
        cJSON_AddNumberToObject(m, "optimizer_state", (double)w->optim);
        cJSON_AddNumberToObject(m, "strategy", (double)w->strategy);
        cJSON_AddNumberToObject(m, "activations", (double)w->activations);
        cJSON_AddNumberToObject(m, "loader", (double)w->loader);
        cJSON_AddNumberToObject(m, "total", (double)worker_total(w));
        cJSON *tr = cJSON_AddArrayToObject(wj, "traffic");
        for (int i = 0; tr && i < w->ntraffic; i++) {
            const rp_plan_traffic *l = &w->traffic[i];
            cJSON *lj = cJSON_CreateObject();
            cJSON_AddItemToArray(tr, lj);
            cJSON_AddStringToObject(lj, "axis", rp_plan_axis_name(l->axis));
            cJSON_AddStringToObject(lj, "class", rp_comm_class_name(l->cls));
            cJSON_AddStringToObject(lj, "kind", rp_flight_kind_name(l->kind));
            cJSON_AddStringToObject(lj, "what", l->what);
            cJSON_AddNumberToObject(lj, "calls", (double)l->calls);
            cJSON_AddNumberToObject(lj, "bytes", (double)l->bytes);
        }
    }
    char *text = cJSON_PrintUnformatted(j);
    if (text) fprintf(f, "%s\n", text);
    free(text);
    cJSON_Delete(j);
}

void plan_print(FILE *f, const rp_classifier_plan *p, const train_opts *o, const rp_classifier *clf,
                bool json)
{
    if (json)
        print_json(f, p, o);
    else
        print_text(f, p, o, clf);
}

int classifier_plan_main(int argc, char **argv)
{
    /* train's options, less the plan's own (--json), which train_opts_parse would refuse. */
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) {
        fprintf(stderr, "replicator plan: out of memory\n");
        return 1;
    }
    int n = 0;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--json"))
            json = true;
        else if (i > 0 && (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))) {
            printf(
                "usage: replicator plan [MODEL] [the options of replicator train] [--json]\n"
                "\n"
                "Prints, before anything trains, what each worker of the run `replicator train`\n"
                "would start with the same options holds (parameters, gradients, optimizer\n"
                "state, the strategy's buffers, activations at its batch, loader buffers) and\n"
                "what it sends in each step (calls and payload bytes per axis and kind).\n"
                "Activations come from one training step recorded at batch 1 and 2, or 2 and 4\n"
                "where batch norm sees 1x1 images (a + b x batch). Layouts: one replica, N sync "
                "replicas, --zero, --model-parallel W\n"
                "with --pipeline and --micro-batches, --tensor-parallel T (each worker's\n"
                "shard, the model axis's all-reduces), --sync-groups G (async is refused).\n"
                "--json: one JSON object instead of the table. `replicator train ...\n"
                "--plan-check` compares the plan with the run's first steps (docs/\n"
                "model-parallel.md, \"Planner\").\n");
            free(args);
            return 0;
        } else if (i > 0 && (!strcmp(argv[i], "--resume") || !strcmp(argv[i], "--plan-check"))) {
            fprintf(stderr, "replicator plan: %s is train's; plan takes the options of a new run\n",
                    argv[i]);
            free(args);
            return 2;
        } else
            args[n++] = argv[i];
    }
    train_opts o;
    const char *resume = NULL;
    int rc = train_opts_parse(n, args, &o, &resume);
    free(args);
    if (rc == 2)
        fprintf(stderr, "replicator plan: takes the options of replicator train (replicator train "
                        "--help), and --json\n");
    if (rc) return rc == 1 ? 0 : rc;
    rp_kernels_set_threads(o.threads);
    rp_config rcfg;
    rp_classifier *clf = NULL;
    rp_classifier_plan *p = NULL;
    rp_status status = train_runtime_config(&o, &rcfg);
    rp_classifier_config cc;
    train_opts_classifier(&o, &cc);
    if (status == RP_OK) status = rp_classifier_create(&clf, &cc);
    if (status == RP_OK) status = plan_for_run(&p, &o, &rcfg, clf);
    if (status == RP_OK) plan_print(stdout, p, &o, clf, json);
    if (status != RP_OK) fprintf(stderr, "replicator plan: error: %s\n", rp_last_error());
    rp_classifier_plan_destroy(p);
    rp_classifier_destroy(clf);
    return status == RP_OK ? 0 : 1;
}

/* ---- --plan-check -------------------------------------------------------------------------- */

#define CHECK_MAX_STEPS 8

/*
 * The communicators whose traffic the check measures: a worker's data, pipe and model axes, its
 * sync group's (rp_replica_sync_comm where it is none of the axes) and HSDP's two
 * (rp_replica_hsdp_comm).
 */
enum { CHECKED = 6, CHECKED_GROUP = 3 }; /* CHECKED_AXES[CHECKED_GROUP] = RP_PLAN_GROUP */
static const rp_axis CHECKED_AXES[CHECKED] = {RP_AXIS_DATA,  RP_AXIS_PIPE,  RP_AXIS_MODEL,
                                              RP_PLAN_GROUP, RP_PLAN_SHARD, RP_PLAN_REPLICATE};

/* The worker's communicator of a checked axis (NULL: it has none). */
static rp_comm *axis_comm(rp_replica *rep, rp_axis axis)
{
    if (axis == RP_PLAN_GROUP) return rp_replica_sync_comm(rep);
    if (axis == RP_PLAN_SHARD || axis == RP_PLAN_REPLICATE)
        return rp_replica_hsdp_comm(rep, axis == RP_PLAN_REPLICATE);
    return rp_replica_axis_comm(rep, axis);
}

/* What one local worker measured. */
typedef struct measured {
    int id; /* the job's worker (rp_replica_worker; -1: not measured) */
    int steps;
    int64_t params, grads, optim, arena_peak;
    rp_comm_stats step[CHECK_MAX_STEPS][CHECKED]; /* each measured step's traffic */
    bool has_comm[CHECKED];
    rp_comm_stats group_mark; /* the group's counters at the end of build or of the last step */
} measured;

struct plan_check {
    const rp_classifier_plan *plan;
    const rp_trainer_model *inner;
    void *inner_ctx;
    rp_trainer_model model; /* the wrapper: inner's table with this file's callbacks */
    int workers, steps;
    measured *m; /* [workers] by local index */
};

/* The worker's communicator of CHECKED_AXES[a], or NULL (none, or one counted already). */
static rp_comm *checked_comm(rp_replica *rep, int a)
{
    rp_comm *c[CHECKED];
    for (int i = 0; i <= a; i++)
        c[i] = axis_comm(rep, CHECKED_AXES[i]);
    /* An axis of one member may share another's handle, and the sync communicator is the data
       axis's outside sync groups: count each handle once. */
    for (int i = 0; i < a; i++)
        if (c[i] == c[a]) return NULL;
    return c[a];
}

static rp_status pc_build(rp_replica *rep, void *ctx, const rp_checkpoint *ck,
                          const rp_trainer_at *at, void **state)
{
    plan_check *pc = ctx;
    RP_CHECK(pc->inner->build(rep, pc->inner_ctx, ck, at, state));
    int i = rp_replica_local_index(rep);
    rp_comm *group = checked_comm(rep, CHECKED_GROUP);
    if (i >= 0 && i < pc->workers && group)
        RP_CHECK(rp_comm_stats_get(group, &pc->m[i].group_mark));
    return RP_OK;
}

static int64_t pc_steps_per_epoch(void *ctx, void *state)
{
    plan_check *pc = ctx;
    return pc->inner->steps_per_epoch(pc->inner_ctx, state);
}

/*
 * The axes' traffic is measured over the model's step. A sync group's also over what the
 * trainer's loop and the runtime send in the group before it (the stop agreement, the batch's
 * ticket: one of each per batch), so its window runs from the end of build or of the worker's
 * last step to the end of this one.
 */
static rp_status pc_train_step(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                               double *scalars)
{
    plan_check *pc = ctx;
    int i = rp_replica_local_index(rep);
    measured *m = i >= 0 && i < pc->workers ? &pc->m[i] : NULL;
    bool measure = m && m->steps < pc->steps;
    rp_comm *comm[CHECKED];
    rp_comm_stats before[CHECKED] = {0}, after = {0};
    for (int a = 0; a < CHECKED; a++) {
        comm[a] = checked_comm(rep, a);
        if (!measure || !comm[a]) continue;
        if (CHECKED_AXES[a] == RP_PLAN_GROUP)
            before[a] = m->group_mark;
        else
            RP_CHECK(rp_comm_stats_get(comm[a], &before[a]));
    }
    RP_CHECK(pc->inner->train_step(rep, pc->inner_ctx, state, at, scalars));
    if (!measure) return RP_OK;
    for (int a = 0; a < CHECKED; a++) {
        if (!comm[a]) continue;
        RP_CHECK(rp_comm_stats_get(comm[a], &after));
        rp_comm_stats_diff(&after, &before[a], &m->step[m->steps][a]);
        if (CHECKED_AXES[a] == RP_PLAN_GROUP) m->group_mark = after;
        m->has_comm[a] = true;
    }
    const rp_params *p = rp_classifier_state_params(state);
    m->id = rp_replica_worker(rep);
    m->params = rp_params_numel(p) * (int64_t)sizeof(float);
    m->grads = rp_params_trainable_numel(p) * (int64_t)sizeof(float);
    m->optim = (int64_t)rp_optimizer_state_bytes(rp_classifier_state_optimizer(state));
    /* The replica's tape, and the pipeline's tapes when it runs micro-batches or stages. */
    int64_t peak = (int64_t)rp_arena_get_stats(rp_tape_storage(rp_replica_tape(rep))).live_peak +
                   (int64_t)rp_pipeline_live_peak(rp_classifier_state_pipeline(state));
    if (peak > m->arena_peak) m->arena_peak = peak;
    m->steps++;
    return RP_OK;
}

static rp_status pc_settle(rp_replica *rep, void *ctx, void *state)
{
    plan_check *pc = ctx;
    return pc->inner->settle(rep, pc->inner_ctx, state);
}

static rp_status pc_evaluate(rp_replica *rep, void *ctx, void *state)
{
    plan_check *pc = ctx;
    return pc->inner->evaluate(rep, pc->inner_ctx, state);
}

static rp_status pc_evaluated(void *ctx, const rp_replicator *r, rp_trainer_metrics *m)
{
    plan_check *pc = ctx;
    return pc->inner->evaluated(pc->inner_ctx, r, m);
}

static rp_status pc_save(void *ctx, void *state, rp_checkpoint *ck)
{
    plan_check *pc = ctx;
    return pc->inner->save(pc->inner_ctx, state, ck);
}

static rp_status pc_destroy(rp_replica *rep, void *ctx, void *state)
{
    plan_check *pc = ctx;
    return pc->inner->destroy(rep, pc->inner_ctx, state);
}

rp_status plan_check_create(plan_check **out, const rp_classifier_plan *plan,
                            const rp_trainer_model *inner, void *inner_ctx, int workers, int steps)
{
    *out = NULL;
    if (inner->start_roles || inner->stop_roles)
        return RP_ERROR(RP_ERR_UNSUPPORTED, "--plan-check: a model with roles of its own");
    plan_check *pc = calloc(1, sizeof *pc);
    if (pc) pc->m = calloc((size_t)(workers > 0 ? workers : 1), sizeof *pc->m);
    if (!pc || !pc->m) {
        free(pc);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the plan check of %d workers", workers);
    }
    pc->plan = plan;
    pc->inner = inner;
    pc->inner_ctx = inner_ctx;
    pc->workers = workers;
    pc->steps = steps < 1 ? 1 : steps > CHECK_MAX_STEPS ? CHECK_MAX_STEPS : steps;
    for (int i = 0; i < workers; i++)
        pc->m[i].id = -1;
    /* The inner table's optional slots stay optional: a NULL one is NULL in the wrapper. */
    pc->model = *inner;
    pc->model.build = pc_build;
    pc->model.train_step = pc_train_step;
    if (inner->steps_per_epoch) pc->model.steps_per_epoch = pc_steps_per_epoch;
    if (inner->settle) pc->model.settle = pc_settle;
    if (inner->evaluate) pc->model.evaluate = pc_evaluate;
    if (inner->evaluated) pc->model.evaluated = pc_evaluated;
    if (inner->save) pc->model.save = pc_save;
    if (inner->destroy) pc->model.destroy = pc_destroy;
    *out = pc;
    return RP_OK;
}

const rp_trainer_model *plan_check_model(const plan_check *pc)
{
    return &pc->model;
}

void plan_check_destroy(plan_check *pc)
{
    if (!pc) return;
    free(pc->m);
    free(pc);
}

/* One memory row: predicted, measured, the difference in percent; returns 1 if beyond 10%. */
static int memory_row(FILE *f, const char *what, int64_t predicted, int64_t measured_bytes)
{
    double diff = predicted > 0
                      ? 100.0 * ((double)measured_bytes - (double)predicted) / (double)predicted
                  : measured_bytes == 0 ? 0.0
                                        : 100.0;
    bool bad = fabs(diff) > 10.0;
    fprintf(f, "    %-30s %14lld %14lld %+8.2f%%%s\n", what, (long long)predicted,
            (long long)measured_bytes, diff, bad ? "  <- over 10%" : "");
    return bad;
}

/*
 * Worker m's traffic on axis CHECKED_AXES[a] in each measured step against w's plan, user and
 * runtime classes exactly (housekeeping shown apart); returns the number of differing kinds.
 */
static int traffic_rows(FILE *f, const measured *m, const rp_plan_worker *w, int a)
{
    if (!m->has_comm[a]) return 0;
    const char *axis = rp_plan_axis_name(CHECKED_AXES[a]);
    rp_comm_stats want;
    rp_plan_traffic_stats(w, CHECKED_AXES[a], &want);
    int flags = 0;
    for (int c = RP_COMM_USER; c <= RP_COMM_RUNTIME; c++)
        for (int k = 0; k < RP_COMM_KINDS; k++) {
            const rp_comm_tally *p = &want.by[c][k];
            int differing = 0;
            for (int s = 0; s < m->steps; s++) {
                const rp_comm_tally *g = &m->step[s][a].by[c][k];
                if (g->calls == p->calls && g->bytes == p->bytes) continue;
                if (!differing)
                    fprintf(f,
                            "    %-4s %-15s %-8s step %d: predicted %llu calls %llu B, measured "
                            "%llu calls %llu B  <- differs\n",
                            axis, rp_flight_kind_name((rp_flight_kind)k),
                            rp_comm_class_name((rp_comm_class)c), s + 1,
                            (unsigned long long)p->calls, (unsigned long long)p->bytes,
                            (unsigned long long)g->calls, (unsigned long long)g->bytes);
                differing++;
            }
            if (differing) {
                flags++;
                continue;
            }
            if (p->calls == 0) continue;
            fprintf(f, "    %-4s %-15s %-8s %6llu calls %12llu B per step: exact in %d step%s\n",
                    axis, rp_flight_kind_name((rp_flight_kind)k),
                    rp_comm_class_name((rp_comm_class)c), (unsigned long long)p->calls,
                    (unsigned long long)p->bytes, m->steps, m->steps > 1 ? "s" : "");
        }
    uint64_t hk_calls = 0, hk_bytes = 0;
    for (int s = 0; s < m->steps; s++)
        for (int k = 0; k < RP_COMM_KINDS; k++) {
            hk_calls += m->step[s][a].by[RP_COMM_HOUSEKEEPING][k].calls;
            hk_bytes += m->step[s][a].by[RP_COMM_HOUSEKEEPING][k].bytes;
        }
    if (hk_calls)
        fprintf(f, "    %-4s housekeeping (not planned): %llu calls %llu B in %d steps\n", axis,
                (unsigned long long)hk_calls, (unsigned long long)hk_bytes, m->steps);
    return flags;
}

int plan_check_report(const plan_check *pc, FILE *f)
{
    int flags = 0, shown = 0;
    if (pc->plan->groups > 1)
        fprintf(f,
                "plan check: each worker's first %d steps at most (the groups take the batches "
                "as they come) measured against the plan; the group's traffic from the end of the "
                "worker's last step, so the stop agreement and the batch's ticket before each step "
                "count\n",
                pc->steps);
    else
        fprintf(f, "plan check: each worker's first %d step%s measured against the plan\n",
                pc->steps, pc->steps > 1 ? "s" : "");
    for (int i = 0; i < pc->workers; i++) {
        const measured *m = &pc->m[i];
        if (m->id < 0) continue;
        shown++;
        if (m->id >= pc->plan->workers) {
            fprintf(f, "  worker %d: not in the plan (%d workers)  <- differs\n", m->id,
                    pc->plan->workers);
            flags++;
            continue;
        }
        const rp_plan_worker *w = &pc->plan->worker[m->id];
        char who[64];
        if (w->stages > 1 && w->shards > 1)
            snprintf(who, sizeof who, "worker %d, stage %d, shard %d (%d step%s)", m->id, w->stage,
                     w->shard, m->steps, m->steps > 1 ? "s" : "");
        else if (w->stages > 1)
            snprintf(who, sizeof who, "worker %d, stage %d (%d step%s)", m->id, w->stage, m->steps,
                     m->steps > 1 ? "s" : "");
        else if (w->shards > 1)
            snprintf(who, sizeof who, "worker %d, shard %d (%d step%s)", m->id, w->shard, m->steps,
                     m->steps > 1 ? "s" : "");
        else
            snprintf(who, sizeof who, "worker %d (%d step%s)", m->id, m->steps,
                     m->steps > 1 ? "s" : "");
        fprintf(f, "  %-34s predicted B     measured B     diff\n", who);
        flags += memory_row(f, "parameters and buffers", w->params, m->params);
        flags += memory_row(f, "gradients", w->grads, m->grads);
        flags += memory_row(f, "optimizer state", w->optim, m->optim);
        flags += memory_row(f,
                            pc->plan->stages > 1 || pc->plan->micro_batches > 1
                                ? "activations (tapes' live peaks)"
                                : "activations (arena live peak)",
                            w->activations, m->arena_peak);
        for (int a = 0; a < CHECKED; a++)
            flags += traffic_rows(f, m, w, a);
    }
    if (!shown) {
        fprintf(f, "  no worker of this process trained a step  <- nothing measured\n");
        flags++;
    }
    if (flags)
        fprintf(f, "plan check: %d difference%s flagged\n", flags, flags > 1 ? "s" : "");
    else
        fprintf(f, "plan check: memory within 10%% and communication exact on every worker\n");
    return flags;
}
