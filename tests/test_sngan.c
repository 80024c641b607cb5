/*
 * test_sngan.c - the class-conditional SN-GAN (models/sngan) at tiny widths
 * on a synthetic 10-class dataset written as IDX files (28x28, padded to
 * 32x32 by the model):
 *  - a discriminator step leaves the generator's trainable values, gradients
 *    and optimizer state bitwise untouched (its batch-norm running statistics
 *    do move: the fakes are made in training mode, as the authors'), and a
 *    generator step leaves the discriminator's trainable values, gradients and
 *    optimizer state untouched (its u vectors do move: a training forward
 *    runs the power iteration);
 *  - a short run: the discriminator learns to tell real from fake (its loss
 *    falls well below its start, the margin d_real - d_fake opens);
 *  - a trainer run stopped after K iterations and resumed ends with the
 *    uninterrupted run's checkpoint, byte for byte; the sample grids are
 *    written and decode with the expected size;
 *  - 2 replicas x B/2 end a step with the parameters of 1 replica x B
 *    (cross-replica batch norm in the generator), within 1e-5;
 *  - bad input: an unknown dataset, a label out of range, a checkpoint
 *    without a generator.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sngan/sngan.h"

#define IMAGES  256
#define CLASSES 10

static char data_dir[512];

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/*
 * A dataset with something to learn: image i of class k = i % 10 is a bright 9x9 square at a
 * class-dependent place on a dark background, with a little noise.
 */
static int write_dataset(void)
{
    tu_tmp_path(data_dir, sizeof data_dir, "data");
    char cmd[600], path[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", data_dir);
    if (system(cmd) != 0) return -1;
    size_t isz = 16 + (size_t)IMAGES * 28 * 28, lsz = 8 + IMAGES;
    unsigned char *img = calloc(1, isz), *lab = calloc(1, lsz);
    if (!img || !lab) return -1;
    put_be32(img, 0x803);
    put_be32(img + 4, IMAGES);
    put_be32(img + 8, 28);
    put_be32(img + 12, 28);
    put_be32(lab, 0x801);
    put_be32(lab + 4, IMAGES);
    for (int i = 0; i < IMAGES; i++) {
        int k = i % CLASSES, top = 2 + (k / 4) * 8, left = 2 + (k % 4) * 6;
        lab[8 + i] = (unsigned char)k;
        unsigned char *p = img + 16 + (size_t)i * 784;
        for (int y = 0; y < 28; y++)
            for (int x = 0; x < 28; x++) {
                uint32_t r[4];
                rp_philox(99, (uint64_t)i * 784 + (uint64_t)(y * 28 + x), r);
                bool on = y >= top && y < top + 9 && x >= left && x < left + 9;
                p[y * 28 + x] = (unsigned char)(on ? 200 + r[0] % 56 : r[0] % 24);
            }
    }
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", data_dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(img, 1, isz, f) != isz || fclose(f)) return -1;
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", data_dir);
    f = fopen(path, "wb");
    if (!f || fwrite(lab, 1, lsz, f) != lsz || fclose(f)) return -1;
    free(img);
    free(lab);
    return 0;
}

static int group_setup(void **unused)
{
    if (tu_tmpdir_create("sngan") != 0) return -1;
    return write_dataset();
}

static int group_teardown(void **unused)
{
    tu_tmpdir_remove();
    return 0;
}

static rp_sngan_config tiny_config(void)
{
    rp_sngan_config c = rp_sngan_config_default();
    c.ch_g = 8;
    c.ch_d = 8;
    c.z_dim = 16;
    c.d_batch = 8;
    c.g_batch = 8;
    c.n_dis = 2;
    c.seed = 5;
    snprintf(c.data_dir, sizeof c.data_dir, "%s", data_dir);
    return c;
}

/* ---- a harness: the model's callbacks on a replicator of our own ----------------------------- */

#define MAX_REP 2

typedef struct harness {
    rp_sngan *gan;
    rp_replicator *r;
    void *state[MAX_REP];
    /* what a run does */
    int phase; /* 0: build, 1: train_step, 2: step_g, 3: step_d, 4: destroy */
    rp_trainer_at at;
    int d_index;
    double scalars[MAX_REP][RP_TRAINER_MAX_SCALARS];
} harness;

static rp_status harness_fn(rp_replica *rep, void *arg)
{
    harness *h = arg;
    const rp_trainer_model *m = rp_sngan_trainer_model();
    int id = rp_replica_id(rep);
    switch (h->phase) {
    case 0:
        return m->build(rep, h->gan, NULL, NULL, &h->state[id]);
    case 1:
        return m->train_step(rep, h->gan, h->state[id], &h->at, h->scalars[id]);
    case 2:
        return rp_sngan_step_g(rep, h->gan, h->state[id], &h->at, h->scalars[id]);
    case 3:
        return rp_sngan_step_d(rep, h->gan, h->state[id], &h->at, h->d_index, h->scalars[id]);
    default: {
        rp_status s = m->destroy(rep, h->gan, h->state[id]);
        h->state[id] = NULL;
        return s;
    }
    }
}

static void harness_run(harness *h, int phase)
{
    h->phase = phase;
    rp_status s = rp_replicator_run(h->r, harness_fn, h);
    if (s != RP_OK) print_error("%s\n", rp_last_error());
    assert_int_equal(s, RP_OK);
}

static void harness_init(harness *h, const rp_sngan_config *c, int replicas)
{
    memset(h, 0, sizeof *h);
    rp_status s = rp_sngan_create(&h->gan, c);
    if (s != RP_OK) print_error("%s\n", rp_last_error());
    assert_int_equal(s, RP_OK);
    rp_config rc = rp_config_default();
    rc.backend = RP_BACKEND_THREADS;
    rc.replicas = replicas;
    rc.threads_per_replica = 1;
    assert_int_equal(rp_replicator_create(&h->r, &rc), RP_OK);
    harness_run(h, 0);
}

static void harness_free(harness *h)
{
    harness_run(h, 4);
    rp_replicator_destroy(h->r);
    rp_sngan_destroy(h->gan);
}

static void set_at(harness *h, int64_t step, float lr)
{
    h->at = (rp_trainer_at){0, step, step, lr};
}

/* A copy of a parameter list's values (trainable then buffers) and gradients, and an optimizer's
 * state. */
typedef struct snapshot {
    float *values, *grads, *state;
    int64_t numel, trainable, state_numel, steps;
} snapshot;

static snapshot take(rp_params *p, rp_optimizer *o)
{
    snapshot s;
    s.numel = rp_params_numel(p);
    s.trainable = rp_params_trainable_numel(p);
    s.values = tu_read_values(p);
    s.grads = tu_param_grads(p);
    s.state = tu_optimizer_state(o, &s.state_numel);
    s.steps = rp_optimizer_steps(o);
    return s;
}

static void drop(snapshot *s)
{
    free(s->values);
    free(s->grads);
    free(s->state);
}

/* Which parts of `now` differ from `then`, bitwise. */
typedef struct diff {
    bool trainable, buffers, grads, state, steps;
} diff;

static diff compare(const snapshot *then, rp_params *p, rp_optimizer *o)
{
    snapshot now = take(p, o);
    diff d;
    d.trainable = memcmp(now.values, then->values, (size_t)then->trainable * sizeof(float)) != 0;
    d.buffers = memcmp(now.values + then->trainable, then->values + then->trainable,
                       (size_t)(then->numel - then->trainable) * sizeof(float)) != 0;
    d.grads = memcmp(now.grads, then->grads, (size_t)then->trainable * sizeof(float)) != 0;
    d.state = memcmp(now.state, then->state, (size_t)then->state_numel * sizeof(float)) != 0;
    d.steps = now.steps != then->steps;
    drop(&now);
    return d;
}

/* ---- each phase touches only its own network ------------------------------------------------ */

static void test_phases_touch_only_their_network(void **unused)
{
    rp_sngan_config c = tiny_config();
    harness h;
    harness_init(&h, &c, 1);
    rp_params *pg = rp_sngan_generator_params(rp_sngan_state_generator(h.state[0]));
    rp_params *pd = rp_sngan_state_discriminator_params(h.state[0]);
    rp_optimizer *og, *od;
    rp_sngan_state_optimizers(h.state[0], &og, &od);
    assert_true(pg && pd && og && od);
    /* One iteration first, so both optimizers hold state that a stray update would change. */
    set_at(&h, 0, c.lr_g);
    harness_run(&h, 1);
    assert_int_equal(rp_optimizer_steps(og), 1);
    assert_int_equal(rp_optimizer_steps(od), c.n_dis);

    set_at(&h, 1, c.lr_g);
    snapshot g0 = take(pg, og), d0 = take(pd, od);
    h.d_index = 0;
    harness_run(&h, 3); /* a discriminator step */
    diff dg = compare(&g0, pg, og), dd = compare(&d0, pd, od);
    assert_false(dg.trainable);
    assert_false(dg.grads);
    assert_false(dg.state);
    assert_false(dg.steps);
    assert_true(dg.buffers); /* the running statistics: fakes are made in training mode */
    assert_true(dd.trainable);
    assert_true(dd.state);
    assert_true(dd.steps);
    assert_true(dd.buffers); /* u */
    drop(&g0);
    drop(&d0);

    g0 = take(pg, og);
    d0 = take(pd, od);
    harness_run(&h, 2); /* a generator step */
    dg = compare(&g0, pg, og);
    dd = compare(&d0, pd, od);
    assert_false(dd.trainable);
    assert_false(dd.grads);
    assert_false(dd.state);
    assert_false(dd.steps);
    assert_true(dd.buffers); /* u: the discriminator's forward is a training one */
    assert_true(dg.trainable);
    assert_true(dg.state);
    assert_true(dg.steps);
    drop(&g0);
    drop(&d0);
    /* After either step every gradient is zero again (the optimizer cleared its own; the other had
     * none). */
    float *gd = tu_param_grads(pd), *gg = tu_param_grads(pg);
    for (int64_t i = 0; i < rp_params_trainable_numel(pd); i++)
        assert_true(gd[i] == 0.0f);
    for (int64_t i = 0; i < rp_params_trainable_numel(pg); i++)
        assert_true(gg[i] == 0.0f);
    free(gg);
    free(gd);
    harness_free(&h);
}

/* ---- a short run: each network learns against the other ---------------------------------- */

typedef struct run_summary {
    double d_first, d_late; /* d_loss: the first discriminator step's (before any update), the last
                               5 iterations' */
    double g_first, g_late; /* g_loss likewise */
    double margin_late;     /* d_real - d_fake over the last 5 iterations */
} run_summary;

/* Whether the generator of h's replica 0 makes different images of classes 0 and 1 from one z. */
static bool labels_matter(harness *h, const rp_sngan_config *c)
{
    rp_tape *t = NULL;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    float *z = malloc(2 * (size_t)c->z_dim * sizeof(float)),
          *img = malloc(2 * 32 * 32 * sizeof(float));
    assert_true(z && img);
    tu_fill(z, c->z_dim, 8, -1, 1);
    memcpy(z + c->z_dim, z, (size_t)c->z_dim * sizeof(float));
    assert_int_equal(
        rp_sngan_generate(rp_sngan_state_generator(h->state[0]), t, z, (int32_t[]){0, 1}, 2, img),
        RP_OK);
    bool differ = memcmp(img, img + 32 * 32, 32 * 32 * sizeof(float)) != 0;
    free(img);
    free(z);
    rp_tape_destroy(t);
    return differ;
}

static run_summary short_run(const rp_sngan_config *c)
{
    harness h;
    harness_init(&h, c, 1);
    /* The conditional batch norms start the same for every class (gamma 1, beta 0)... */
    assert_false(labels_matter(&h, c));
    enum { ITERS = 20, LATE = 5 };
    run_summary s = {0};
    for (int it = 0; it < ITERS; it++) {
        set_at(&h, it, c->lr_g);
        if (it == 0) {
            /* The first iteration phase by phase, to see the losses of the untrained networks. */
            harness_run(&h, 2);
            s.g_first = h.scalars[0][0];
            for (int i = 0; i < c->n_dis; i++) {
                h.d_index = i;
                harness_run(&h, 3);
                if (i == 0) s.d_first = h.scalars[0][0];
            }
            continue;
        }
        harness_run(&h, 1);
        for (int k = 0; k < 4; k++)
            assert_true(isfinite(h.scalars[0][k]));
        if (it >= ITERS - LATE) {
            s.d_late += h.scalars[0][0] / LATE;
            s.g_late += h.scalars[0][1] / LATE;
            s.margin_late += (h.scalars[0][2] - h.scalars[0][3]) / LATE;
        }
    }
    /* ...and training makes them the classes' own. */
    assert_true(labels_matter(&h, c));
    harness_free(&h);
    print_message("lr_d %g: d_loss %.4f -> %.4f, g_loss %.4f -> %.4f, d_real - d_fake -> %.4f\n",
                  (double)c->lr_d, s.d_first, s.d_late, s.g_first, s.g_late, s.margin_late);
    return s;
}

/*
 * 20 iterations at lr 1e-3: the discriminator learns to tell the real squares from the fakes
 * (its hinge loss falls to well under half of its start and real images score above fakes); with
 * the discriminator held at its initial weights (lr_d 0), the generator learns to fool it instead
 * (its loss falls), so each step trains what it should, in the right direction.
 */
static void test_short_run_losses_move(void **unused)
{
    rp_sngan_config c = tiny_config();
    c.n_dis = 5;
    c.lr_g = c.lr_d = 1e-3f;
    run_summary s = short_run(&c);
    assert_true(s.d_late < 0.5 * s.d_first);
    assert_true(s.margin_late > 1.0);
    c.lr_d = 0;
    c.lr_g = 3e-3f;
    run_summary f = short_run(&c);
    assert_true(f.g_late < f.g_first - 1.0);
    assert_true(f.d_late > f.d_first);
}

/* ---- 2 replicas x B/2 = 1 replica x B ----------------------------------------------------- */

/* The gradients an optimizer applied in its last step (all-reduced: the hook runs inside the
 * runtime's). */
typedef struct capture {
    rp_params *p;
    float *grad;
    int64_t n;
} capture;

static rp_status capture_before(rp_optimizer *opt, void *ctx)
{
    capture *c = ctx;
    return rp_params_read_grads(c->p, c->grad);
}

static void capture_release(void *ctx)
{
    capture *c = ctx;
    free(c->grad);
    free(c);
}

static capture *capture_add(rp_optimizer *o)
{
    capture *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->p = rp_optimizer_params(o);
    c->n = rp_params_trainable_numel(c->p);
    c->grad = malloc((size_t)c->n * sizeof(float));
    assert_non_null(c->grad);
    rp_optimizer_hooks h = {capture_before, NULL, NULL, capture_release};
    assert_int_equal(rp_optimizer_add_hooks(o, &h, c), RP_OK);
    return c;
}

/* Largest |a - b| over n, relative to the largest |b| (a gradient's scale). */
static double grad_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return d / fmax(scale, 1e-30);
}

/*
 * Every phase of two iterations on 2 replicas x B/2 and on 1 replica x B: the same losses, the same
 * all-reduced gradients and the same discriminator within 1e-5. The generator is compared through
 * its gradients: its convolution biases that feed a batch norm have a true gradient of exactly 0
 * (the norm removes any per-channel shift), so theirs is rounding noise, which Adam with beta1 = 0
 * turns into steps of +-lr in either run - its parameters agree only where the gradient is real.
 */
static void test_replicas_match_one(void **unused)
{
    /*
     * This comparison is chaotic at ReLU's and the hinge's kinks: the two layouts sum batch-norm
     * statistics in different orders, and a pre-activation within that rounding of zero takes the
     * other branch in one run, which moves every gradient upstream of it by ~1e-3. How often
     * depends on the seed and on the kernels' rounding: over seeds 1-30 of this config (at 8
     * channels, Winograd forced on for the measurement), direct convolutions failed the 1e-5
     * check for 5 seeds and Winograd ones (2-3x the rounding) for 11, every kernel being within
     * 1e-6 of the reference (test_kernels_conv). The test proves the replication, not the
     * kernels: it pins the direct algorithm, for which this seed has no kink within rounding.
     */
    rp_conv_algorithm algo = rp_kernels_get_conv_algorithm();
    rp_kernels_set_conv_algorithm(RP_CONV_DIRECT);
    rp_sngan_config c = tiny_config();
    harness one, two;
    harness_init(&one, &c, 1);
    harness_init(&two, &c, 2);
    capture *cap[3][2]; /* [one, two r0, two r1][G, D] */
    for (int k = 0; k < 3; k++) {
        rp_optimizer *og, *od;
        rp_sngan_state_optimizers(k ? two.state[k - 1] : one.state[0], &og, &od);
        cap[k][0] = capture_add(og);
        cap[k][1] = capture_add(od);
    }
    for (int it = 0; it < 2; it++) {
        for (int phase = 0; phase <= c.n_dis; phase++) {
            set_at(&one, it, c.lr_g);
            set_at(&two, it, c.lr_g);
            one.d_index = two.d_index = phase - 1;
            harness_run(&one, phase ? 3 : 2);
            harness_run(&two, phase ? 3 : 2);
            int net = phase ? 1 : 0, nscalars = phase ? 3 : 1;
            for (int k = 0; k < nscalars; k++) {
                double mean = (two.scalars[0][k] + two.scalars[1][k]) / 2, ref = one.scalars[0][k];
                assert_true(fabs(mean - ref) <= 1e-5 * fmax(1, fabs(ref)));
            }
            for (int r = 0; r < 2; r++) {
                double d = grad_diff(cap[1 + r][net]->grad, cap[0][net]->grad, cap[0][net]->n);
                if (d > 1e-5)
                    print_error("iteration %d phase %d replica %d: gradients differ by %g\n", it,
                                phase, r, d);
                assert_true(d <= 1e-5);
            }
        }
    }
    rp_params *a = rp_sngan_state_discriminator_params(one.state[0]);
    for (int r = 0; r < 2; r++) {
        rp_params *b = rp_sngan_state_discriminator_params(two.state[r]);
        assert_int_equal(rp_params_numel(a), rp_params_numel(b));
        float *va = tu_read_values(a), *vb = tu_read_values(b);
        tu_check_close(vb, va, rp_params_numel(a), 1e-5, "discriminator");
        free(vb);
        free(va);
    }
    /* The replicas of the 2-replica run agree bitwise (the sync invariant), u and running
     * statistics too. */
    for (int net = 0; net < 2; net++) {
        rp_params *p0 = net ? rp_sngan_state_discriminator_params(two.state[0])
                            : rp_sngan_generator_params(rp_sngan_state_generator(two.state[0]));
        rp_params *p1 = net ? rp_sngan_state_discriminator_params(two.state[1])
                            : rp_sngan_generator_params(rp_sngan_state_generator(two.state[1]));
        assert_int_equal(rp_params_numel(p0), rp_params_numel(p1));
        float *v0 = tu_read_values(p0), *v1 = tu_read_values(p1);
        assert_memory_equal(v0, v1, (size_t)rp_params_numel(p0) * sizeof(float));
        free(v1);
        free(v0);
    }
    harness_free(&one);
    harness_free(&two);
    rp_kernels_set_conv_algorithm(algo);
}

/* ---- gradient accumulation -------------------------------------------------------------- */

/* A copy of the discriminator's buffers (its u vectors) of a harness's replica 0 (to free). */
static float *u_of(harness *h, int64_t *n)
{
    rp_params *p = rp_sngan_state_discriminator_params(h->state[0]);
    int64_t trainable = rp_params_trainable_numel(p);
    *n = rp_params_numel(p) - trainable;
    float *v = tu_read_values(p);
    memmove(v, v + trainable, (size_t)*n * sizeof(float));
    return v;
}

/*
 * accum 2 against accum 1, from the same initial networks: each phase takes one optimizer step, and
 * the u vectors advance once per step (restored before the second micro-batch), so while the
 * discriminator's weights are still the initial ones (the generator step, then the first
 * discriminator step) its u vectors match the unaccumulated run's bitwise; without the restore they
 * would take a second power iteration. The micro-batches' gradients add up to the scale of the
 * one-batch gradient (each loss is scaled by 1/accum).
 */
static void test_accumulation(void **unused)
{
    rp_sngan_config c1 = tiny_config(), c2 = tiny_config();
    c2.accum = 2;
    harness a, b;
    harness_init(&a, &c1, 1);
    harness_init(&b, &c2, 1);
    capture *ga, *gb;
    {
        rp_optimizer *od;
        rp_sngan_state_optimizers(a.state[0], NULL, &od);
        ga = capture_add(od);
        rp_sngan_state_optimizers(b.state[0], NULL, &od);
        gb = capture_add(od);
    }
    for (int phase = 0; phase <= c1.n_dis; phase++) {
        set_at(&a, 0, c1.lr_g);
        set_at(&b, 0, c2.lr_g);
        a.d_index = b.d_index = phase - 1;
        harness_run(&a, phase ? 3 : 2);
        harness_run(&b, phase ? 3 : 2);
        assert_true(isfinite(b.scalars[0][0]));
        if (phase > 1) continue; /* the weights now differ, and so does u' */
        int64_t na, nb;
        float *ua = u_of(&a, &na), *ub = u_of(&b, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(ua, ub, (size_t)na * sizeof(float));
        free(ub);
        free(ua);
    }
    rp_optimizer *oa, *ob;
    rp_sngan_state_optimizers(b.state[0], &oa, &ob);
    assert_int_equal(rp_optimizer_steps(oa), 1);
    assert_int_equal(rp_optimizer_steps(ob), c2.n_dis);
    /* The last D step's gradient: the mean over micro-batches, the scale of the one-batch gradient.
     */
    double na2 = 0, nb2 = 0;
    for (int64_t i = 0; i < ga->n; i++) {
        na2 += (double)ga->grad[i] * ga->grad[i];
        nb2 += (double)gb->grad[i] * gb->grad[i];
    }
    print_message("|grad| accum 1 %.4g, accum 2 %.4g\n", sqrt(na2), sqrt(nb2));
    assert_true(sqrt(nb2) > 0.5 * sqrt(na2) && sqrt(nb2) < 1.5 * sqrt(na2));
    harness_free(&a);
    harness_free(&b);
}

/* ---- the trainer: resume bit for bit, the sample grids --------------------------------------- */

static unsigned char *read_all(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*size);
    if (b && fread(b, 1, (size_t)*size, f) != (size_t)*size) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

/* Trains `steps` iterations of c on `replicas` in `dir` (stopping after max_steps if > 0, resuming
 * from ck). */
static void train(const rp_sngan_config *c, int replicas, const char *dir, int64_t steps,
                  int64_t max_steps, const rp_checkpoint *ck)
{
    rp_sngan *gan = NULL;
    assert_int_equal(rp_sngan_create(&gan, c), RP_OK);
    rp_trainer_config tc = rp_trainer_config_default();
    rp_sngan_trainer_config_apply(rp_sngan_get_config(gan), &tc);
    tc.runtime.backend = RP_BACKEND_THREADS;
    tc.runtime.replicas = replicas;
    tc.runtime.threads_per_replica = 1;
    tc.run_dir = dir;
    tc.run_dir_exact = true;
    tc.steps = steps;
    tc.max_steps = max_steps;
    tc.resume = ck;
    tc.quiet = true;
    assert_int_equal(tc.schedule, RP_SCHED_LINEAR);
    rp_trainer *t = NULL;
    rp_status s = rp_trainer_create(&t, &tc, rp_sngan_trainer_model(), gan);
    if (s != RP_OK) print_error("%s\n", rp_last_error());
    assert_int_equal(s, RP_OK);
    assert_int_equal(rp_sngan_set_run_dir(gan, rp_trainer_run_dir(t)), RP_OK);
    s = rp_trainer_run(t);
    if (s != RP_OK) print_error("%s\n", rp_last_error());
    assert_int_equal(s, RP_OK);
    assert_int_equal(rp_trainer_destroy(t), RP_OK);
    rp_sngan_destroy(gan);
}

static void test_resume_bit_exact_and_samples(void **unused)
{
    rp_sngan_config c = tiny_config();
    c.sample_every = 2;
    char full[512], part[512], path[600];
    tu_tmp_path(full, sizeof full, "run-full");
    tu_tmp_path(part, sizeof part, "run-part");
    const int64_t steps = 6, stop = 3;
    train(&c, 2, full, steps, 0, NULL);
    train(&c, 2, part, steps, stop, NULL);
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_trainer_load_checkpoint(&ck, part), RP_OK);
    int64_t n = 0;
    const int64_t *pos = rp_checkpoint_get_i64(ck, "train/position", &n);
    assert_non_null(pos);
    assert_int_equal(pos[n - 1], stop);
    /* The layout: both networks, both optimizers. */
    assert_non_null(rp_checkpoint_get_f32(ck, "gen/l1.weight", NULL, NULL));
    assert_non_null(rp_checkpoint_get_f32(ck, "gen/block2.b1.running_mean", NULL, NULL));
    assert_non_null(rp_checkpoint_get_f32(ck, "dis/l5.u", NULL, NULL));
    assert_non_null(rp_checkpoint_get_i64(ck, "optim_g/steps", &n));
    assert_non_null(rp_checkpoint_get_i64(ck, "optim_d/steps", &n));
    train(&c, 2, part, steps, 0, ck);
    rp_checkpoint_destroy(ck);

    long a_size, b_size;
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", full);
    unsigned char *a = read_all(path, &a_size);
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", part);
    unsigned char *b = read_all(path, &b_size);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a_size, b_size);
    assert_memory_equal(a, b, (size_t)a_size);
    free(a);
    free(b);

    /* The grids: one row per class, 10 columns, 2 pixels between and around the 32x32 tiles. */
    const char *names[] = {"samples.png", "samples-000002.png", "samples-000004.png",
                           "samples-000006.png"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", full, names[i]);
        uint8_t *px = NULL;
        int h, w, ch;
        rp_status s = rp_image_read_png(path, &px, &h, &w, &ch);
        if (s != RP_OK) print_error("%s\n", rp_last_error());
        assert_int_equal(s, RP_OK);
        assert_int_equal(h, CLASSES * 32 + (CLASSES + 1) * 2);
        assert_int_equal(w, 10 * 32 + 11 * 2);
        assert_int_equal(ch, 1);
        /* A generated image is not flat: its tile has more than one value. */
        bool varied = false;
        for (int y = 2; y < 34 && !varied; y++)
            for (int x = 2; x < 34; x++)
                if (px[y * w + x] != px[2 * w + 2]) varied = true;
        assert_true(varied);
        rp_free(px);
    }
    /* The last grid equals samples.png (written after it, at the same iteration). */
    long s1, s2;
    snprintf(path, sizeof path, "%s/samples.png", full);
    unsigned char *p1 = read_all(path, &s1);
    snprintf(path, sizeof path, "%s/samples-000006.png", full);
    unsigned char *p2 = read_all(path, &s2);
    assert_true(p1 && p2 && s1 == s2 && memcmp(p1, p2, (size_t)s1) == 0);
    free(p1);
    free(p2);
}

/* ---- the generator alone, and bad input --------------------------------------------------- */

static void test_generator_and_bad_input(void **unused)
{
    rp_sngan_config c = tiny_config();
    rp_sngan *gan = NULL;
    snprintf(c.dataset, sizeof c.dataset, "imagenet");
    assert_int_equal(rp_sngan_create(&gan, &c), RP_ERR_INVALID);
    tu_assert_error_contains("imagenet");
    assert_null(gan);
    c = tiny_config();
    c.d_batch = IMAGES + 1;
    assert_int_equal(rp_sngan_create(&gan, &c), RP_ERR_INVALID);
    tu_assert_error_contains("d_batch");
    c = tiny_config();
    c.h = 30;
    assert_int_equal(rp_sngan_create(&gan, &c), RP_ERR_INVALID);
    tu_assert_error_contains("multiples of 8");

    c = tiny_config();
    c.classes = CLASSES;
    rp_sngan_generator *g = NULL;
    assert_int_equal(rp_sngan_generator_create(&g, &c, NULL), RP_OK);
    rp_tape *t = NULL;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    float z[2 * 16], img[2 * 32 * 32];
    tu_fill(z, 2 * 16, 3, -1, 1);
    int32_t labels[2] = {0, CLASSES};
    assert_int_equal(rp_sngan_generate(g, t, z, labels, 2, img), RP_ERR_INVALID);
    tu_assert_error_contains("label 10");
    labels[1] = 9;
    assert_int_equal(rp_sngan_generate(g, t, z, labels, 2, img), RP_OK);
    for (int i = 0; i < 2 * 32 * 32; i++)
        assert_true(img[i] >= -1 && img[i] <= 1);
    /* The same inputs, the same images (evaluation changes nothing). */
    float again[2 * 32 * 32];
    assert_int_equal(rp_sngan_generate(g, t, z, labels, 2, again), RP_OK);
    assert_memory_equal(img, again, sizeof img);

    /* A checkpoint without "gen/": a clear error, the generator unchanged. */
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_checkpoint_add_params(ck, rp_sngan_generator_params(g), "param/"), RP_OK);
    assert_int_equal(rp_sngan_generator_load(g, ck), RP_ERR_SHAPE);
    tu_assert_error_contains("gen/l1.weight");
    rp_checkpoint_destroy(ck);
    /* A checkpoint of its own parameters loads, and a differently seeded generator then agrees. */
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_checkpoint_add_params(ck, rp_sngan_generator_params(g), "gen/"), RP_OK);
    rp_sngan_generator *g2 = NULL;
    c.seed = 77;
    assert_int_equal(rp_sngan_generator_create(&g2, &c, NULL), RP_OK);
    assert_int_equal(rp_sngan_generate(g2, t, z, labels, 2, again), RP_OK);
    assert_true(memcmp(img, again, sizeof img) != 0);
    assert_int_equal(rp_sngan_generator_load(g2, ck), RP_OK);
    assert_int_equal(rp_sngan_generate(g2, t, z, labels, 2, again), RP_OK);
    assert_memory_equal(img, again, sizeof img);
    rp_checkpoint_destroy(ck);
    rp_sngan_generator_destroy(g2);
    rp_sngan_generator_destroy(g);
    rp_tape_destroy(t);
}

/* The generator's images under a tape policy p and the config's overrides. */
static void generate_with(const rp_sngan_config *c, rp_precision_policy p, float *img)
{
    rp_sngan_generator *g = NULL;
    assert_int_equal(rp_sngan_generator_create(&g, c, NULL), RP_OK);
    rp_tape *t = NULL;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    assert_int_equal(rp_tape_set_precision(t, p), RP_OK);
    float z[2 * 16];
    tu_fill(z, 2 * 16, 3, -1, 1);
    int32_t labels[2] = {1, 7};
    assert_int_equal(rp_sngan_generate(g, t, z, labels, 2, img), RP_OK);
    /* The run's policy is back on the tape after the network. */
    rp_precision_policy after = rp_tape_precision(t);
    assert_int_equal(after.compute, p.compute);
    assert_int_equal(after.activations, p.activations);
    rp_sngan_generator_destroy(g);
    rp_tape_destroy(t);
}

/*
 * --keep-f32 g under a bf16 run computes the generator exactly as an f32 run does; --activations
 * f32 is the bf16 policy with f32 storage; without either the bf16 run differs from both.
 */
static void test_precision_overrides(void **unused)
{
    (void)unused;
    enum { PIX = 2 * 32 * 32 };
    rp_sngan_config c = tiny_config();
    c.classes = CLASSES;
    /* The default stores f32 under bf16 compute: so the run's policy is bf16 compute, f32
       storage, unless the configuration says bf16. */
    rp_precision_policy dflt = rp_sngan_net_policy(rp_precision_policy_make(RP_BF16), &c, 'g');
    assert_int_equal(dflt.compute, RP_BF16);
    assert_int_equal(dflt.activations, RP_F32);
    snprintf(c.activations, sizeof c.activations, "bf16");
    rp_precision_policy f32 = rp_precision_policy_make(RP_F32),
                        bf16 = rp_precision_policy_make(RP_BF16), bf16_f32act = bf16;
    bf16_f32act.activations = RP_F32;
    static float ref[PIX], mixed[PIX], mixed_f32act[PIX], img[PIX];
    generate_with(&c, f32, ref);
    generate_with(&c, bf16, mixed);
    generate_with(&c, bf16_f32act, mixed_f32act);
    assert_true(memcmp(ref, mixed, sizeof ref) != 0);
    assert_true(memcmp(mixed, mixed_f32act, sizeof ref) != 0);

    snprintf(c.keep_f32, sizeof c.keep_f32, "g");
    generate_with(&c, bf16, img);
    assert_memory_equal(img, ref, sizeof ref);
    snprintf(c.keep_f32, sizeof c.keep_f32, "d"); /* the discriminator's: G stays bf16 */
    generate_with(&c, bf16, img);
    assert_memory_equal(img, mixed, sizeof ref);
    snprintf(c.keep_f32, sizeof c.keep_f32, "none");
    snprintf(c.activations, sizeof c.activations, "f32");
    generate_with(&c, bf16, img);
    assert_memory_equal(img, mixed_f32act, sizeof ref);
    /* In an f32 run the overrides change nothing. */
    generate_with(&c, f32, img);
    assert_memory_equal(img, ref, sizeof ref);

    /* The discriminator's policy, as the generator's. */
    snprintf(c.keep_f32, sizeof c.keep_f32, "d");
    assert_int_equal(rp_sngan_net_policy(bf16, &c, 'd').compute, RP_F32);
    assert_int_equal(rp_sngan_net_policy(bf16, &c, 'd').activations, RP_F32);
    assert_int_equal(rp_sngan_net_policy(bf16, &c, 'g').compute, RP_BF16);
    assert_int_equal(rp_sngan_net_policy(bf16, &c, 'g').activations, RP_F32);

    /* A bad value is named. */
    rp_sngan *gan = NULL;
    snprintf(c.keep_f32, sizeof c.keep_f32, "both");
    assert_int_equal(rp_sngan_create(&gan, &c), RP_ERR_INVALID);
    tu_assert_error_contains("keep_f32");
    snprintf(c.keep_f32, sizeof c.keep_f32, "g");
    snprintf(c.activations, sizeof c.activations, "f16");
    assert_int_equal(rp_sngan_create(&gan, &c), RP_ERR_INVALID);
    tu_assert_error_contains("activations");
    assert_null(gan);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_phases_touch_only_their_network),
        cmocka_unit_test(test_short_run_losses_move),
        cmocka_unit_test(test_replicas_match_one),
        cmocka_unit_test(test_accumulation),
        cmocka_unit_test(test_resume_bit_exact_and_samples),
        cmocka_unit_test(test_generator_and_bad_input),
        cmocka_unit_test(test_precision_overrides),
    };
    return tu_run_group_tests(argc, argv, tests, group_setup, group_teardown);
}
