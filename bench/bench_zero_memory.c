/*
 * bench_zero_memory.c - what a replica holds of its model state under each data-parallel strategy,
 * measured against the planner's prediction: ResNet-N with Adam on R replica threads.
 *
 *   build/bench_zero_memory [resnet20|resnet18|resnet50] [sync|zero1|zero2|zero3[+prefetch]] [R]
 *                           [steps] [image]
 *
 * The parameters' values, their gradients and the optimizer's state are the kernel table's
 * storage: the resident pages of each (mincore) are counted on the first and the last replica (the
 * one holding more at its peak is reported, against its plan) after forward, at every
 * gradient-ready callback of backward, just before the update (the reduced gradients in place)
 * and after the step, from the second step on (the first
 * starts from whole values), with the runtime's own buffers for the optimizer (ZeRO's reduced-
 * gradient shard and packing: rp_replica_strategy_bytes). Prints one JSON line: the largest sum
 * seen and its parts, 16 bytes x
 * P / R (what ZeRO-3's target is measured against), the largest unit's bytes, the plan's
 * params + grads + optim, and the median step time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "models/resnet/resnet.h"

#define MAX_STEPS 32

typedef struct held {
    long values, grads, state, runtime; /* resident bytes; runtime: rp_replica_strategy_bytes */
} held;

typedef struct bench {
    rp_resnet_kind kind;
    int batch, image, step;
    float *x;
    int32_t *labels;
    rp_resnet *net;
    rp_optimizer *opt;
    rp_replica *rep;
    held peak;   /* the sample with the largest sum, replica 0 */
    long counts; /* samples taken */
    double step_s[MAX_STEPS];
} bench;

static bench *replicas[16];

static long resident(const void *p, size_t bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p / (uintptr_t)page * (uintptr_t)page;
    uintptr_t hi = ((uintptr_t)p + bytes + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    if (!p || hi <= lo) return 0;
    size_t n = (hi - lo) / (size_t)page;
    unsigned char *vec = malloc(n);
    if (!vec || mincore((void *)lo, hi - lo, vec) != 0) {
        free(vec);
        return 0;
    }
    long count = 0;
    for (size_t i = 0; i < n; i++)
        count += vec[i] & 1;
    free(vec);
    return count * page;
}

static void sample(bench *b)
{
    if (b->step < 1) return;
    rp_params *p = rp_resnet_params(b->net);
    int64_t nstate = 0;
    const float *state = rp_optimizer_state(b->opt, &nstate);
    held h = {resident(rp_params_data(p), (size_t)rp_params_numel(p) * sizeof(float)),
              resident(rp_params_grad(p), (size_t)rp_params_trainable_numel(p) * sizeof(float)),
              resident(state, (size_t)nstate * sizeof(float)),
              (long)rp_replica_strategy_bytes(b->rep, b->opt, true)};
    if (h.values + h.grads + h.state + h.runtime >
        b->peak.values + b->peak.grads + b->peak.state + b->peak.runtime)
        b->peak = h;
    b->counts++;
}

static void on_ready(rp_tensor *param, void *ctx)
{
    (void)param;
    sample(ctx);
}

static rp_status before_update(rp_optimizer *opt, void *ctx)
{
    (void)opt;
    sample(ctx);
    return RP_OK;
}

static rp_status build(rp_replica *rep, void *arg)
{
    bench *j = arg;
    bench *b = calloc(1, sizeof *b);
    if (!b) return RP_ERR_NOMEM;
    *b = *j;
    b->rep = rep;
    replicas[rp_replica_local_index(rep)] = b;
    rp_resnet_config cfg = rp_resnet_config_default(j->kind);
    cfg.classes = 10;
    RP_CHECK(rp_resnet_create(&b->net, &cfg, 1));
    rp_optim_config oc = rp_optim_config_default();
    oc.kind = RP_OPTIM_ADAM;
    RP_CHECK(rp_replica_optimizer_create(rep, &b->opt, rp_resnet_params(b->net), &oc));
    /* The first replica and the last: their shards are the first and the last of the block,
       whose gradients backward finishes last and first. */
    if (rp_replica_id(rep) != 0 && rp_replica_id(rep) != rp_replica_count(rep) - 1) return RP_OK;
    RP_CHECK(rp_tape_add_grad_ready(rp_replica_tape(rep), on_ready, b));
    /* After the runtime's own: the reduced gradients in place, just before the update. */
    rp_optimizer_hooks h = {.before = before_update};
    return rp_optimizer_add_hooks(b->opt, &h, b);
}

static rp_status step(rp_replica *rep, void *arg)
{
    bench *j = arg;
    bench *b = replicas[rp_replica_local_index(rep)];
    b->step = j->step;
    bool first = rp_replica_id(rep) == 0 || rp_replica_id(rep) == rp_replica_count(rep) - 1;
    rp_tape *t = rp_replica_tape(rep);
    double t0 = rp_now_s();
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){j->batch, j->image, j->image, 3}, j->x);
    rp_tensor *z = rp_resnet_forward(t, b->net, x, true);
    if (first) sample(b);
    rp_tensor *loss = rp_softmax_cross_entropy(t, z, j->labels);
    if (!loss) return rp_last_status();
    RP_CHECK(rp_backward(t, loss));
    RP_CHECK(rp_optimizer_step(b->opt, 0.001f));
    if (first) sample(b);
    if (rp_replica_id(rep) == 0) b->step_s[j->step] = rp_now_s() - t0;
    return RP_OK;
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    (void)arg;
    bench *b = replicas[rp_replica_local_index(rep)];
    rp_optimizer_destroy(b->opt);
    rp_resnet_destroy(b->net);
    free(b);
    return RP_OK;
}

/* cfg.strategy from its --strategy name, and "+prefetch" after it: cfg.prefetch. */
static rp_status strategy_parse_name(const char *name, rp_config *cfg)
{
    char kind[32];
    snprintf(kind, sizeof kind, "%s", name);
    char *plus = strchr(kind, '+');
    if (plus) *plus++ = '\0';
    if (plus && strcmp(plus, "prefetch") != 0) return RP_ERR_INVALID;
    char *argv[] = {"bench_zero_memory", "--strategy", kind, plus ? "--prefetch" : NULL, NULL};
    int argc = plus ? 4 : 3;
    return rp_config_from_args(cfg, &argc, argv);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *model = argc > 1 ? argv[1] : "resnet50";
    const char *strategy = argc > 2 ? argv[2] : "zero3";
    int R = argc > 3 ? atoi(argv[3]) : 4, steps = argc > 4 ? atoi(argv[4]) : 3;
    int image = argc > 5 ? atoi(argv[5]) : 32;
    bench j;
    memset(&j, 0, sizeof j);
    j.kind = !strcmp(model, "resnet20")   ? RP_RESNET20
             : !strcmp(model, "resnet18") ? RP_RESNET18
                                          : RP_RESNET50;
    j.batch = 2;
    j.image = image;
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = R;
    cfg.threads_per_replica = 1;
    if (R < 1 || R > 16 || steps < 2 || steps > MAX_STEPS || image < 8 ||
        strategy_parse_name(strategy, &cfg) != RP_OK) {
        fprintf(stderr, "usage: bench_zero_memory [resnet20|resnet18|resnet50] "
                        "[sync|zero1|zero2|zero3[+prefetch]] [replicas 1..16] [steps 2..32] "
                        "[image]\n");
        return 2;
    }
    size_t n = (size_t)j.batch * (size_t)(image * image * 3);
    j.x = malloc(n * sizeof(float));
    j.labels = malloc((size_t)j.batch * sizeof(int32_t));
    for (size_t i = 0; i < n; i++)
        j.x[i] = (float)sin((double)i * 0.37);
    for (int i = 0; i < j.batch; i++)
        j.labels[i] = i % 10;
    rp_replicator *r;
    if (rp_replicator_create(&r, &cfg) != RP_OK || rp_replicator_run(r, build, &j) != RP_OK) {
        fprintf(stderr, "bench_zero_memory: %s\n", rp_last_error());
        return 1;
    }
    for (j.step = 0; j.step < steps; j.step++)
        if (rp_replicator_run(r, step, &j) != RP_OK) {
            fprintf(stderr, "bench_zero_memory: step %d: %s\n", j.step, rp_last_error());
            return 1;
        }
    bench *b = replicas[0], *last = replicas[R - 1];
    int worker = 0;
    if (last->peak.values + last->peak.grads + last->peak.state + last->peak.runtime >
        b->peak.values + b->peak.grads + b->peak.state + b->peak.runtime) {
        b->peak = last->peak;
        worker = R - 1;
    }
    rp_params *p = rp_resnet_params(b->net);
    int64_t P = rp_params_trainable_numel(p);
    rp_optim_config oc = rp_optim_config_default();
    oc.kind = RP_OPTIM_ADAM;
    rp_plan_worker w;
    memset(&w, 0, sizeof w);
    if (rp_plan_runtime(&cfg, R, worker, p, &oc, &w) != RP_OK) {
        fprintf(stderr, "bench_zero_memory: plan: %s\n", rp_last_error());
        return 1;
    }
    int64_t largest = 0;
    for (int i = 0; i < rp_params_trainable_count(p); i++)
        if (rp_params_at(p, i)->numel > largest) largest = rp_params_at(p, i)->numel;
    qsort(b->step_s + 1, (size_t)(steps - 1), sizeof(double), cmp_double);
    long sum = b->peak.values + b->peak.grads + b->peak.state + b->peak.runtime;
    printf("{\"model\": \"%s\", \"strategy\": \"%s\", \"replicas\": %d, \"worker\": %d, "
           "\"params\": %lld, "
           "\"held\": %ld, \"values\": %ld, \"grads\": %ld, \"state\": %ld, "
           "\"runtime\": %ld, \"samples\": %ld, \"16P_over_R\": %lld, "
           "\"largest_layer\": %lld, \"plan_held\": %lld, \"plan_vs_measured\": %.4f, "
           "\"step_s\": %.4f}\n",
           model, strategy, R, worker, (long long)P, sum, b->peak.values, b->peak.grads,
           b->peak.state, b->peak.runtime, b->counts, (long long)(16 * P / R),
           (long long)(largest * 4), (long long)w.held, sum ? (double)w.held / (double)sum : 0.0,
           b->step_s[1 + (steps - 1) / 2]);
    rp_replicator_run(r, teardown, &j);
    rp_replicator_destroy(r);
    free(j.x);
    free(j.labels);
    return 0;
}
