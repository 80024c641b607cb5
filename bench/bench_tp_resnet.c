/*
 * bench_tp_resnet.c - memory and step time per worker of a ResNet at tensor
 * parallelism T (rp_resnet_config.tp_comm) on the runtime's mesh, threads
 * backend, one replica of T model workers, SGD with momentum:
 *
 *   build/bench_tp_resnet [resnet20|resnet18|resnet50] [T] [batch] [image] [steps]
 *
 * Prints one JSON line per worker: its parameter and buffer floats (the
 * gradient block is as large as the parameters, SGD's momentum too), the
 * activation arena's high-water mark over the steps (the step's footprint)
 * and the median step time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/resnet/resnet.h"

#define MAX_T     8
#define MAX_STEPS 64

typedef struct bench_worker {
    rp_resnet *net;
    rp_optimizer *opt;
    double step_s[MAX_STEPS];
    size_t high_water;
} bench_worker;

typedef struct bench_job {
    rp_resnet_kind kind;
    int batch, image, classes, step;
    float *x;
    int32_t *labels;
    bench_worker w[MAX_T];
} bench_job;

static rp_status build(rp_replica *rep, void *arg)
{
    bench_job *j = arg;
    bench_worker *w = &j->w[rp_replica_local_index(rep)];
    rp_resnet_config cfg = rp_resnet_config_default(j->kind);
    cfg.classes = j->classes;
    cfg.tp_comm = rp_replica_axis_comm(rep, RP_AXIS_MODEL);
    RP_CHECK(rp_resnet_create(&w->net, &cfg, 1));
    rp_optim_config oc = rp_optim_config_default();
    return rp_replica_optimizer_create(rep, &w->opt, rp_resnet_params(w->net), &oc);
}

static rp_status step(rp_replica *rep, void *arg)
{
    bench_job *j = arg;
    bench_worker *w = &j->w[rp_replica_local_index(rep)];
    rp_tape *t = rp_replica_tape(rep);
    double t0 = rp_now_s();
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){j->batch, j->image, j->image, 3}, j->x);
    rp_tensor *loss = rp_softmax_cross_entropy(t, rp_resnet_forward(t, w->net, x, true), j->labels);
    if (!loss) return rp_last_status();
    RP_CHECK(rp_backward(t, loss));
    RP_CHECK(rp_optimizer_step(w->opt, 0.01f));
    w->step_s[j->step] = rp_now_s() - t0;
    rp_arena_stats st = rp_arena_get_stats(rp_tape_arena(t));
    if (st.high_water > w->high_water) w->high_water = st.high_water;
    return RP_OK;
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    bench_job *j = arg;
    bench_worker *w = &j->w[rp_replica_local_index(rep)];
    rp_optimizer_destroy(w->opt);
    rp_resnet_destroy(w->net);
    return RP_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    bench_job j = {.kind = RP_RESNET20, .batch = 32, .image = 32, .classes = 10};
    int tp = argc > 2 ? atoi(argv[2]) : 2, steps = argc > 5 ? atoi(argv[5]) : 3;
    if (argc > 1 && !rp_resnet_kind_parse(argv[1], &j.kind)) {
        fprintf(stderr, "bench_tp_resnet: unknown model \"%s\"\n", argv[1]);
        return 2;
    }
    if (argc > 3) j.batch = atoi(argv[3]);
    if (argc > 4) j.image = atoi(argv[4]);
    if (j.kind != RP_RESNET20) j.classes = 1000;
    if (tp < 1 || tp > MAX_T || steps < 1 || steps > MAX_STEPS || j.batch < 1 || j.image < 8) {
        fprintf(stderr, "bench_tp_resnet: T in [1, %d], steps in [1, %d], batch >= 1, image >= 8\n",
                MAX_T, MAX_STEPS);
        return 2;
    }
    int64_t n = (int64_t)j.batch * j.image * j.image * 3;
    j.x = malloc((size_t)n * sizeof(float));
    j.labels = malloc((size_t)j.batch * sizeof(int32_t));
    if (!j.x || !j.labels) return 1;
    rp_rng rng = rp_rng_make(7, 0);
    for (int64_t i = 0; i < n; i++)
        j.x[i] = rp_rng_uniform(&rng) * 2.0f - 1.0f;
    for (int i = 0; i < j.batch; i++)
        j.labels[i] = i % j.classes;
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.threads_per_replica = 1;
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("replica", 1, tp);
    rp_replicator *r;
    rp_status st = rp_replicator_create(&r, &cfg);
    if (st == RP_OK) st = rp_replicator_run(r, build, &j);
    for (j.step = 0; st == RP_OK && j.step < steps; j.step++)
        st = rp_replicator_run(r, step, &j);
    if (st != RP_OK) {
        fprintf(stderr, "bench_tp_resnet: %s\n", rp_last_error());
        return 1;
    }
    for (int i = 0; i < tp; i++) {
        bench_worker *w = &j.w[i];
        rp_params *p = rp_resnet_params(w->net);
        qsort(w->step_s, (size_t)steps, sizeof(double), cmp_double);
        printf("{\"model\": \"%s\", \"tp\": %d, \"worker\": %d, \"batch\": %d, \"image\": %d, "
               "\"param_floats\": %lld, \"buffer_floats\": %lld, \"activation_mb\": %.1f, "
               "\"step_s\": %.3f}\n",
               rp_resnet_kind_name(j.kind), tp, i, j.batch, j.image,
               (long long)rp_params_trainable_numel(p),
               (long long)(rp_params_numel(p) - rp_params_trainable_numel(p)),
               (double)w->high_water / 1e6, w->step_s[steps / 2]);
    }
    rp_replicator_run(r, teardown, &j);
    rp_replicator_destroy(r);
    free(j.x);
    free(j.labels);
    return 0;
}
