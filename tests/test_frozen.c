/*
 * test_frozen.c - a frozen parameter set through the sync runtime
 * (rp_params_set_frozen in nn.h, rp_optimizer_step in optim.h), the SN-GAN
 * pattern: two sets, A (a "generator", z -> tanh(A z)) and B (a
 * "discriminator" on A's output), each with its own replica optimizer, on 2
 * replicas; each step is a generator step with B frozen, then a
 * discriminator step with A frozen.
 *  - a backward through both sets leaves the frozen set's gradients zero and
 *    starts no all-reduce for its buckets: with one bucket per parameter,
 *    the communicator's sequence advances by exactly the trained set's
 *    parameter count over backward and step;
 *  - stepping the frozen set's optimizer is RP_ERR_INVALID naming the set,
 *    with no collective and nothing changed (values, step count);
 *  - the trained set's update equals a one-replica reference on the whole
 *    batch (plain optimizers, the same freezing), step after step, with
 *    momentum.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NREP  2
#define B     4 /* per replica */
#define Z     3
#define H     5
#define C     3
#define STEPS 3
#define LR    0.1f

typedef struct model {
    rp_params *a, *b;
    rp_linear_layer gen, disc;
} model;

static rp_status model_build(model *m)
{
    RP_CHECK(rp_params_create(&m->a));
    RP_CHECK(rp_params_create(&m->b));
    RP_CHECK(rp_linear_layer_init(&m->gen, m->a, "gen", Z, H, true, false));
    RP_CHECK(rp_linear_layer_init(&m->disc, m->b, "disc", H, C, true, false));
    RP_CHECK(rp_params_finalize(m->a, 11));
    return rp_params_finalize(m->b, 12);
}

static void model_destroy(model *m)
{
    rp_params_destroy(m->a);
    rp_params_destroy(m->b);
}

/* The mean loss of samples [k0, k0 + n) of step `step`, phase `phase` (0: G, 1: D). */
static rp_tensor *model_loss(rp_tape *t, const model *m, int step, int phase, int k0, int n)
{
    float *xs = rp_arena_alloc(rp_tape_arena(t), (size_t)n * Z * sizeof(float));
    int32_t *y = rp_arena_alloc(rp_tape_arena(t), (size_t)n * sizeof(int32_t));
    if (!xs || !y) return NULL;
    for (int k = 0; k < n; k++) {
        int g = k0 + k; /* the sample's index in the global batch */
        tu_fill(xs + (size_t)k * Z, Z, (uint64_t)(1000 * step + 100 * phase + g + 1), -1.0f, 1.0f);
        y[k] = (g * 7 + step + phase) % C;
    }
    rp_tensor *x = rp_tensor_from(t, 2, (int[]){n, Z}, xs);
    rp_tensor *h = rp_tanh(t, rp_linear_layer_forward(t, &m->gen, x));
    return rp_softmax_cross_entropy(t, rp_linear_layer_forward(t, &m->disc, h), y);
}

typedef struct rstate {
    model m;
    rp_optimizer *opt_a, *opt_b;
    float a[STEPS][64], b[STEPS][64]; /* values after each step */
} rstate;

typedef struct job {
    rstate st[NREP];
    int step;
    char failure[256];
} job;

static rp_status broke(job *j, const char *what)
{
    snprintf(j->failure, sizeof j->failure, "%s", what);
    return RP_ERROR(RP_ERR_INVALID, "%s", what);
}

static rp_optim_config optim(void)
{
    rp_optim_config oc = rp_optim_config_default();
    oc.momentum = 0.9f;
    return oc;
}

static rp_status build(rp_replica *rep, void *arg)
{
    job *j = arg;
    rstate *s = &j->st[rp_replica_id(rep)];
    RP_CHECK(model_build(&s->m));
    rp_optim_config oc = optim();
    RP_CHECK(rp_replica_optimizer_create(rep, &s->opt_a, s->m.a, &oc));
    return rp_replica_optimizer_create(rep, &s->opt_b, s->m.b, &oc);
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    job *j = arg;
    rstate *s = &j->st[rp_replica_id(rep)];
    rp_optimizer_destroy(s->opt_a);
    rp_optimizer_destroy(s->opt_b);
    model_destroy(&s->m);
    return RP_OK;
}

/*
 * One phase on one replica: `train` is stepped, `frozen` (with its optimizer `idle`) is frozen.
 * Checks the frozen set's gradients, the collectives started, and the refused step.
 */
static rp_status phase(rp_replica *rep, job *j, int ph, rp_params *train, rp_optimizer *opt,
                       rp_params *frozen, rp_optimizer *idle)
{
    rstate *s = &j->st[rp_replica_id(rep)];
    rp_comm *c = rp_replica_comm(rep);
    rp_tape *t = rp_replica_tape(rep);
    rp_tape_reset(t);
    rp_params_set_frozen(frozen, true);
    int64_t nf = rp_params_trainable_numel(frozen);
    float before[64], now[64], g[64]; /* both sets hold under 64 values (checked by the test) */
    RP_CHECK(rp_params_read_values(frozen, before));
    uint64_t seq0 = rp_comm_sequence(c), user0 = rp_comm_user_sequence(c);
    rp_tensor *loss = model_loss(t, &s->m, j->step, ph, rp_replica_id(rep) * B, B);
    if (!loss) return RP_ERR_INVALID;
    RP_CHECK(rp_backward(t, loss));
    RP_CHECK(rp_params_read_grads(frozen, g));
    if (!tu_all_zero(g, nf)) return broke(j, "the frozen set's gradients are not zero");
    RP_CHECK(rp_params_read_grads(train, g));
    if (tu_all_zero(g, rp_params_trainable_numel(train)))
        return broke(j, "the trained set has no gradient");
    /* One bucket per parameter (bucket_bytes 4): backward started exactly the trained set's. */
    uint64_t expect = (uint64_t)rp_params_trainable_count(train);
    if (rp_comm_sequence(c) - seq0 != expect)
        return broke(j, "backward started buckets of the frozen set");
    RP_CHECK(rp_optimizer_step(opt, LR));
    if (rp_comm_sequence(c) - seq0 != expect)
        return broke(j, "the step all-reduced more than the trained set");
    int64_t steps = rp_optimizer_steps(idle);
    rp_status st = rp_optimizer_step(idle, LR);
    if (st != RP_ERR_INVALID)
        return broke(j, "stepping the frozen set's optimizer was not refused");
    if (!strstr(rp_last_error(), "is frozen") ||
        !strstr(rp_last_error(), ph ? "'gen.weight'" : "'disc.weight'"))
        return broke(j, "the refusal does not name the frozen set");
    rp_error_clear();
    if (rp_comm_sequence(c) - seq0 != expect) return broke(j, "the refused step ran a collective");
    if (rp_comm_user_sequence(c) != user0)
        return broke(j, "the runtime's calls counted as the user's");
    RP_CHECK(rp_params_read_values(frozen, now));
    if (rp_optimizer_steps(idle) != steps || memcmp(before, now, (size_t)nf * sizeof(float)))
        return broke(j, "the refused step changed the frozen set");
    rp_params_set_frozen(frozen, false);
    return RP_OK;
}

static rp_status step(rp_replica *rep, void *arg)
{
    job *j = arg;
    rstate *s = &j->st[rp_replica_id(rep)];
    RP_CHECK(phase(rep, j, 0, s->m.a, s->opt_a, s->m.b, s->opt_b)); /* generator: B frozen */
    RP_CHECK(phase(rep, j, 1, s->m.b, s->opt_b, s->m.a, s->opt_a)); /* discriminator: A frozen */
    RP_CHECK(rp_params_read_values(s->m.a, s->a[j->step]));
    return rp_params_read_values(s->m.b, s->b[j->step]);
}

/* The same steps on one replica over the whole batch, with plain optimizers. */
static void reference(float a[STEPS][64], float b[STEPS][64])
{
    model m;
    assert_int_equal(model_build(&m), RP_OK);
    rp_optim_config oc = optim();
    rp_optimizer *oa, *ob;
    assert_int_equal(rp_optimizer_create(&oa, m.a, &oc), RP_OK);
    assert_int_equal(rp_optimizer_create(&ob, m.b, &oc), RP_OK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    for (int s = 0; s < STEPS; s++) {
        for (int ph = 0; ph < 2; ph++) {
            rp_params *frozen = ph ? m.a : m.b;
            rp_tape_reset(t);
            rp_params_set_frozen(frozen, true);
            rp_tensor *loss = model_loss(t, &m, s, ph, 0, NREP * B);
            assert_non_null(loss);
            assert_int_equal(rp_backward(t, loss), RP_OK);
            assert_int_equal(rp_optimizer_step(ph ? ob : oa, LR), RP_OK);
            rp_params_set_frozen(frozen, false);
        }
        assert_int_equal(rp_params_read_values(m.a, a[s]), RP_OK);
        assert_int_equal(rp_params_read_values(m.b, b[s]), RP_OK);
    }
    rp_tape_destroy(t);
    rp_optimizer_destroy(oa);
    rp_optimizer_destroy(ob);
    model_destroy(&m);
}

static void assert_close(const float *x, const float *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (fabsf(x[i] - want[i]) > 1e-5f * (1 + fabsf(want[i])))
            print_error("element %lld: %.9g, want %.9g\n", (long long)i, (double)x[i],
                        (double)want[i]);
        assert_true(fabsf(x[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])));
    }
}

static void test_frozen_set_two_optimizers(void **state)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = NREP;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    cfg.bucket_bytes = 4;   /* one bucket per parameter, so the count names the sets */
    cfg.checksum_every = 0; /* no checksum gather between the counted calls */
    rp_replicator *r = NULL;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    job *j = calloc(1, sizeof *j);
    assert_int_equal(rp_replicator_run(r, build, j), RP_OK);
    int64_t na = rp_params_numel(j->st[0].m.a), nb = rp_params_numel(j->st[0].m.b);
    assert_true(na <= 64 && nb <= 64);
    static float ra[STEPS][64], rb[STEPS][64];
    reference(ra, rb);
    for (j->step = 0; j->step < STEPS; j->step++) {
        rp_status st = rp_replicator_run(r, step, j);
        if (st != RP_OK) print_error("step %d: %s (%s)\n", j->step, rp_last_error(), j->failure);
        assert_int_equal(st, RP_OK);
        for (int q = 0; q < NREP; q++) {
            assert_memory_equal(j->st[q].a[j->step], j->st[0].a[j->step],
                                (size_t)na * sizeof(float));
            assert_memory_equal(j->st[q].b[j->step], j->st[0].b[j->step],
                                (size_t)nb * sizeof(float));
        }
        assert_close(j->st[0].a[j->step], ra[j->step], na);
        assert_close(j->st[0].b[j->step], rb[j->step], nb);
    }
    /* Each optimizer stepped once per step: the refused steps counted nothing. */
    assert_int_equal(rp_optimizer_steps(j->st[1].opt_a), STEPS);
    assert_int_equal(rp_optimizer_steps(j->st[1].opt_b), STEPS);
    assert_int_equal(rp_replicator_run(r, teardown, j), RP_OK);
    rp_replicator_destroy(r);
    free(j);
}

/* Without a runtime: the refusal itself, and a thawed set steps again. */
static void test_frozen_step_refused(void **state)
{
    model m;
    assert_int_equal(model_build(&m), RP_OK);
    rp_optim_config oc = optim();
    oc.weight_decay = 0.1f;
    rp_optimizer *ob;
    assert_int_equal(rp_optimizer_create(&ob, m.b, &oc), RP_OK);
    int64_t n = rp_params_numel(m.b);
    float *before = malloc((size_t)n * sizeof(float)), *now = malloc((size_t)n * sizeof(float));
    assert_int_equal(rp_params_read_values(m.b, before), RP_OK);
    rp_params_set_frozen(m.b, true);
    assert_int_equal(rp_optimizer_step(ob, LR), RP_ERR_INVALID);
    tu_assert_error_contains("'disc.weight' .. 'disc.bias', 2 trainable) is frozen");
    assert_int_equal(rp_params_read_values(m.b, now), RP_OK);
    assert_memory_equal(before, now, (size_t)n * sizeof(float));
    assert_int_equal(rp_optimizer_steps(ob), 0);
    rp_params_set_frozen(m.b, false);
    assert_int_equal(rp_optimizer_step(ob, LR), RP_OK); /* weight decay moves it now */
    assert_int_equal(rp_params_read_values(m.b, now), RP_OK);
    assert_memory_not_equal(before, now, (size_t)n * sizeof(float));
    free(now);
    free(before);
    rp_optimizer_destroy(ob);
    model_destroy(&m);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frozen_set_two_optimizers),
        cmocka_unit_test(test_frozen_step_refused),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
