/*
 * test_loader.c - the data loader: the per-epoch shuffle, the global order
 * and its independence of the replica count, augmentation bounds, prefetch
 * against no prefetch, positions and seeking, evaluation order, errors
 * carried out of the prefetch thread, and no allocation in the steady state.
 *
 * The datasets are small and built by hand: labels equal to the sample index
 * identify every sample in a batch, and in the augmentation tests each pixel
 * encodes its own coordinates so that the crop and flip can be read back.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/loader.h"

/* ---- helpers ------------------------------------------------------------- */

enum { PIX_RANDOM, PIX_COORDS };

/*
 * A dataset of n h x w x c images whose label is the sample index (so
 * num_classes = n). PIX_RANDOM fills pixels from a hash of the byte's index;
 * PIX_COORDS stores 1 + y, 1 + x and 1 + (index + k) % 250 in channels 0, 1
 * and k >= 2 when c >= 2, and 1 + y * w + x when c is 1 (h * w < 255), so no
 * source pixel is 0 and padding stands out.
 */
static rp_dataset *make_ds(int64_t n, int h, int w, int c, int kind)
{
    rp_dataset *ds = rp_calloc(sizeof *ds);
    assert_non_null(ds);
    ds->n = n;
    ds->h = h;
    ds->w = w;
    ds->c = c;
    ds->num_classes = (int)n;
    size_t bytes = (size_t)n * (size_t)h * (size_t)w * (size_t)c;
    ds->pixels = rp_alloc(bytes);
    ds->labels = rp_alloc((size_t)n * sizeof *ds->labels);
    assert_non_null(ds->pixels);
    assert_non_null(ds->labels);
    for (int64_t i = 0; i < n; i++) {
        ds->labels[i] = (int32_t)i;
        uint8_t *img = ds->pixels + (size_t)i * (size_t)h * (size_t)w * (size_t)c;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int k = 0; k < c; k++) {
                    size_t j = ((size_t)y * (size_t)w + (size_t)x) * (size_t)c + (size_t)k;
                    uint8_t v;
                    if (kind == PIX_COORDS && c == 1)
                        v = (uint8_t)(1 + y * w + x);
                    else if (kind == PIX_COORDS)
                        v = (uint8_t)(k == 0 ? 1 + y : k == 1 ? 1 + x : 1 + (i + k) % 250);
                    else
                        v = (uint8_t)((((uint64_t)i * 2654435761u) ^ (j * 40503u)) >> 3);
                    img[j] = v;
                }
    }
    snprintf(ds->name, sizeof ds->name, "test/%dx%dx%d", h, w, c);
    return ds;
}

static rp_loader *make_loader(const rp_dataset *ds, const rp_loader_config *cfg)
{
    rp_loader *ld = NULL;
    rp_status st = rp_loader_create(&ld, ds, cfg);
    if (st != RP_OK) print_error("rp_loader_create: %s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    assert_non_null(ld);
    return ld;
}

static void next_ok(rp_loader *ld, rp_batch *b)
{
    rp_status st = rp_loader_next(ld, b);
    if (st != RP_OK) print_error("rp_loader_next: %s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
}

/* A copy of a batch, since the loader's buffers are reused. */
typedef struct saved_batch {
    float *x;
    int32_t *y;
    int n;
    int64_t epoch, step;
} saved_batch;

static void save_batch(saved_batch *s, const rp_batch *b)
{
    size_t image = (size_t)b->h * (size_t)b->w * (size_t)b->c;
    s->n = b->n;
    s->epoch = b->epoch;
    s->step = b->step;
    s->x = malloc((size_t)b->n * image * sizeof *s->x + 1);
    s->y = malloc((size_t)b->n * sizeof *s->y + 1);
    assert_non_null(s->x);
    assert_non_null(s->y);
    memcpy(s->x, b->x, (size_t)b->n * image * sizeof *s->x);
    memcpy(s->y, b->y, (size_t)b->n * sizeof *s->y);
}

static void free_saved(saved_batch *s, int count)
{
    for (int i = 0; i < count; i++) {
        free(s[i].x);
        free(s[i].y);
    }
}

/* Asserts that b holds exactly the saved batch (bit for bit). */
static void assert_same_batch(const saved_batch *s, const rp_batch *b)
{
    size_t image = (size_t)b->h * (size_t)b->w * (size_t)b->c;
    assert_int_equal(b->n, s->n);
    assert_int_equal(b->epoch, s->epoch);
    assert_int_equal(b->step, s->step);
    assert_memory_equal(b->y, s->y, (size_t)b->n * sizeof *b->y);
    assert_memory_equal(b->x, s->x, (size_t)b->n * image * sizeof *b->x);
}

/* The labels (= sample indices) of one epoch, in order, from a 1-replica loader at step 0. */
static void epoch_order(rp_loader *ld, int32_t *order, int64_t samples)
{
    int64_t got = 0;
    rp_batch b;
    do {
        next_ok(ld, &b);
        assert_in_range(got + b.n, 0, samples);
        memcpy(order + got, b.y, (size_t)b.n * sizeof *order);
        got += b.n;
    } while (!b.end_of_epoch);
    assert_int_equal(got, samples);
}

/* ---- shuffle ------------------------------------------------------------- */

static void test_shuffle_reproducible(void **state)
{
    enum { N = 200 };
    rp_dataset *ds = make_ds(N, 2, 2, 1, PIX_RANDOM);
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = 20;
    cfg.seed = 42;
    cfg.prefetch = false;
    int32_t a0[N], a1[N], b0[N], c0[N];

    rp_loader *a = make_loader(ds, &cfg);
    assert_int_equal(rp_loader_steps_per_epoch(a), 10);
    assert_int_equal(rp_loader_samples(a), N);
    epoch_order(a, a0, N);
    epoch_order(a, a1, N);
    rp_loader_destroy(a);

    /* A true permutation, not the identity. */
    int seen[N] = {0}, fixed = 0;
    for (int i = 0; i < N; i++) {
        assert_in_range(a0[i], 0, N - 1);
        seen[a0[i]]++;
        fixed += a0[i] == i;
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], 1);
    assert_true(fixed < 10);

    /* The same seed gives the same order; so does a fresh loader sought straight to epoch 1. */
    rp_loader *b = make_loader(ds, &cfg);
    epoch_order(b, b0, N);
    assert_memory_equal(a0, b0, sizeof a0);
    assert_int_equal(rp_loader_seek(b, 1, 0), RP_OK);
    epoch_order(b, b0, N);
    assert_memory_equal(a1, b0, sizeof a1);
    rp_loader_destroy(b);

    /* Another epoch and another seed give another order. */
    assert_memory_not_equal(a0, a1, sizeof a0);
    cfg.seed = 43;
    rp_loader *c = make_loader(ds, &cfg);
    epoch_order(c, c0, N);
    assert_memory_not_equal(a0, c0, sizeof a0);
    rp_loader_destroy(c);

    /* Without shuffle the order is the dataset's. */
    cfg.shuffle = false;
    rp_loader *d = make_loader(ds, &cfg);
    epoch_order(d, c0, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(c0[i], i);
    rp_loader_destroy(d);
    rp_dataset_destroy(ds);
}

/* ---- global order independent of the replica count ----------------------- */

/*
 * For R = 1, 2, 4 (one loader per simulated replica), the replicas' slices
 * of each step, concatenated in replica order, equal the 1-replica batch bit
 * for bit, labels and augmented images, over more than two epochs, with and
 * without the final partial batch.
 */
static void check_replica_independence(bool drop_last)
{
    enum { N = 70, B = 8, H = 7, W = 6, C = 3 };
    const size_t image = H * W * C;
    rp_dataset *ds = make_ds(N, H, W, C, PIX_RANDOM);
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = B;
    cfg.seed = 7;
    cfg.drop_last = drop_last;
    cfg.augment = true;
    cfg.pad = 2;
    cfg.mean[0] = 0.5f, cfg.mean[1] = 0.4f, cfg.mean[2] = 0.3f;
    cfg.std[0] = 0.2f, cfg.std[1] = 0.25f, cfg.std[2] = 0.3f;
    cfg.prefetch = false;
    rp_loader *one = make_loader(ds, &cfg);
    const int64_t steps = rp_loader_steps_per_epoch(one);
    assert_int_equal(steps, drop_last ? N / B : (N + B - 1) / B);

    const int counts[] = {2, 4};
    rp_loader *rep[2][4] = {{NULL}};
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < counts[k]; r++) {
            rp_loader_config c = cfg;
            c.replicas = counts[k];
            c.replica = r;
            c.prefetch = (r % 2) == 0; /* mix: prefetching must not matter either */
            rep[k][r] = make_loader(ds, &c);
            assert_int_equal(rp_loader_steps_per_epoch(rep[k][r]), steps);
            assert_int_equal(rp_loader_max_batch(rep[k][r]), B / counts[k]);
        }
    }

    float x[B * H * W * C];
    int32_t y[B];
    for (int64_t t = 0; t < 2 * steps + 3; t++) {
        rp_batch full;
        next_ok(one, &full);
        for (int k = 0; k < 2; k++) {
            int got = 0;
            for (int r = 0; r < counts[k]; r++) {
                rp_batch b;
                next_ok(rep[k][r], &b);
                assert_int_equal(b.epoch, full.epoch);
                assert_int_equal(b.step, full.step);
                assert_int_equal(b.end_of_epoch, full.end_of_epoch);
                assert_int_equal(b.first_global, full.first_global + got);
                assert_true(b.n <= B / counts[k]);
                memcpy(x + (size_t)got * image, b.x, (size_t)b.n * image * sizeof *x);
                memcpy(y + got, b.y, (size_t)b.n * sizeof *y);
                got += b.n;
            }
            assert_int_equal(got, full.n);
            assert_memory_equal(y, full.y, (size_t)got * sizeof *y);
            assert_memory_equal(x, full.x, (size_t)got * image * sizeof *x);
        }
    }
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < counts[k]; r++)
            rp_loader_destroy(rep[k][r]);
    rp_loader_destroy(one);
    rp_dataset_destroy(ds);
}

static void test_replica_independence(void **state)
{
    check_replica_independence(true);
    check_replica_independence(false);
}

/* ---- augmentation -------------------------------------------------------- */

/*
 * Reads back an augmented coordinate image: finds the one (oy, ox, flip) such
 * that every output pixel is source pixel (y + oy, x' + ox), x' = x or
 * w-1-x, or padding (all channels 0) exactly where that lies outside the
 * image. Returns the combination index (oy + pad) * span * 2 + (ox + pad) * 2
 * + flip, or -1 if none fits.
 */
static int decode_augment(const float *img, int h, int w, int c, int pad, int sample)
{
    const int span = 2 * pad + 1;
    int found = -1, matches = 0;
    for (int oy = -pad; oy <= pad; oy++)
        for (int ox = -pad; ox <= pad; ox++)
            for (int flip = 0; flip < 2; flip++) {
                bool ok = true;
                for (int y = 0; y < h && ok; y++)
                    for (int x = 0; x < w && ok; x++) {
                        int cx = flip ? w - 1 - x : x;
                        int sy = y + oy, sx = cx + ox;
                        bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
                        int want[4] = {0, 0, 0, 0};
                        if (inside && c == 1) {
                            want[0] = 1 + sy * w + sx;
                        } else if (inside) {
                            want[0] = 1 + sy;
                            want[1] = 1 + sx;
                            for (int k = 2; k < c; k++)
                                want[k] = 1 + (sample + k) % 250;
                        }
                        for (int k = 0; k < c; k++) {
                            /* mean 0, std 1: the value is pixel / 255 (up to rounding). */
                            float v = img[((size_t)y * w + x) * c + k];
                            ok &= fabsf(v * 255.0f - (float)want[k]) < 1e-3f;
                        }
                    }
                if (ok) {
                    matches++;
                    found = ((oy + pad) * span + (ox + pad)) * 2 + flip;
                }
            }
    /* A symmetric crop could match twice only if the image were symmetric; ours are not. */
    return matches == 1 ? found : -1;
}

static void check_augment_bounds(int C)
{
    enum { N = 64, H = 9, W = 8, PAD = 2, EPOCHS = 20, SPAN = 2 * PAD + 1 };
    rp_dataset *ds = make_ds(N, H, W, C, PIX_COORDS);
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = 16;
    cfg.seed = 99;
    cfg.augment = true;
    cfg.pad = PAD;
    rp_loader *ld = make_loader(ds, &cfg);

    int combos[SPAN * SPAN * 2] = {0};
    int flips = 0, total = 0, changed = 0;
    int first_epoch[N];
    for (int e = 0; e < EPOCHS; e++) {
        for (int64_t s = 0; s < rp_loader_steps_per_epoch(ld); s++) {
            rp_batch b;
            next_ok(ld, &b);
            for (int i = 0; i < b.n; i++) {
                int sample = b.y[i];
                int combo = decode_augment(b.x + (size_t)i * H * W * C, H, W, C, PAD, sample);
                if (combo < 0)
                    print_error("sample %d epoch %d: not a valid crop/flip\n", sample, e);
                assert_true(combo >= 0);
                combos[combo]++;
                flips += combo & 1;
                total++;
                if (e == 0) first_epoch[sample] = combo;
                if (e == 1) changed += first_epoch[sample] != combo;
            }
        }
    }
    rp_loader_destroy(ld);
    /* Every offset in [-pad, pad]^2 with and without flip is drawn; the flip is fair. */
    for (int k = 0; k < SPAN * SPAN * 2; k++)
        assert_true(combos[k] > 0);
    assert_true(flips > total * 2 / 5 && flips < total * 3 / 5);
    /* The draws depend on the epoch. */
    assert_true(changed > N / 2);

    /*
     * They are keyed by the sample's dataset index, not its place in the
     * batch: in epoch 0 the dataset order gives every sample the same crop
     * and flip as the shuffled order did.
     */
    cfg.shuffle = false;
    ld = make_loader(ds, &cfg);
    for (int64_t s = 0; s < rp_loader_steps_per_epoch(ld); s++) {
        rp_batch b;
        next_ok(ld, &b);
        for (int i = 0; i < b.n; i++)
            assert_int_equal(decode_augment(b.x + (size_t)i * H * W * C, H, W, C, PAD, b.y[i]),
                             first_epoch[b.y[i]]);
    }
    rp_loader_destroy(ld);
    cfg.shuffle = true;

    /* Without flip no image is mirrored; without augmentation the image is the source. */
    cfg.flip = false;
    ld = make_loader(ds, &cfg);
    for (int s = 0; s < 8; s++) {
        rp_batch b;
        next_ok(ld, &b);
        for (int i = 0; i < b.n; i++) {
            int combo = decode_augment(b.x + (size_t)i * H * W * C, H, W, C, PAD, b.y[i]);
            assert_true(combo >= 0);
            assert_int_equal(combo & 1, 0);
        }
    }
    rp_loader_destroy(ld);
    cfg.augment = false;
    ld = make_loader(ds, &cfg);
    for (int s = 0; s < 8; s++) {
        rp_batch b;
        next_ok(ld, &b);
        for (int i = 0; i < b.n; i++)
            assert_int_equal(decode_augment(b.x + (size_t)i * H * W * C, H, W, C, PAD, b.y[i]),
                             ((0 + PAD) * SPAN + (0 + PAD)) * 2);
    }
    rp_loader_destroy(ld);
    rp_dataset_destroy(ds);
}

/* One and three channels have their own loops; two and four take the general one. */
static void test_augment_bounds(void **state)
{
    for (int c = 1; c <= 4; c++)
        check_augment_bounds(c);
}

/*
 * Normalisation is (pixel / 255 - mean) / std per channel, and padding is a
 * zero pixel normalised the same way: -mean / std.
 */
static void test_normalise(void **state)
{
    enum { N = 12, H = 5, W = 4, C = 3, PAD = 4 };
    rp_dataset *ds = make_ds(N, H, W, C, PIX_RANDOM);
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = 4;
    cfg.shuffle = false;
    cfg.mean[0] = 0.1f, cfg.mean[1] = 0.5f, cfg.mean[2] = 0.9f;
    cfg.std[0] = 0.3f, cfg.std[1] = 0.2f, cfg.std[2] = 0.7f;
    rp_loader *ld = make_loader(ds, &cfg);
    rp_batch b;
    next_ok(ld, &b);
    assert_int_equal(b.n, 4);
    assert_int_equal(b.h, H);
    assert_int_equal(b.w, W);
    assert_int_equal(b.c, C);
    for (int i = 0; i < b.n; i++)
        for (int j = 0; j < H * W * C; j++) {
            int k = j % C;
            double want =
                (ds->pixels[(size_t)i * H * W * C + j] / 255.0 - cfg.mean[k]) / cfg.std[k];
            assert_true(fabs(b.x[(size_t)i * H * W * C + j] - want) < 1e-5);
        }
    rp_loader_destroy(ld);

    /* pad 4 on a 5x4 image: most crops hold padding; count it per channel. */
    cfg.augment = true;
    cfg.pad = PAD;
    ld = make_loader(ds, &cfg);
    int padding[C] = {0};
    for (int s = 0; s < 3; s++) {
        next_ok(ld, &b);
        for (int j = 0; j < b.n * H * W * C; j++) {
            int k = j % C;
            float pad_value = -cfg.mean[k] / cfg.std[k];
            padding[k] += fabsf(b.x[j] - pad_value) < 1e-6f;
        }
    }
    for (int k = 0; k < C; k++)
        assert_true(padding[k] > 0);
    rp_loader_destroy(ld);
    rp_dataset_destroy(ds);
}

/* ---- prefetch ------------------------------------------------------------ */

static void test_prefetch_matches(void **state)
{
    enum { N = 90, STEPS = 30 };
    rp_dataset *ds = make_ds(N, 8, 8, 3, PIX_RANDOM);
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = 12;
    cfg.replicas = 3;
    cfg.replica = 1;
    cfg.augment = true;
    cfg.pad = 3;
    cfg.drop_last = false;
    cfg.limit = 80;
    cfg.prefetch = false;
    rp_loader *plain = make_loader(ds, &cfg);
    cfg.prefetch = true;
    rp_loader *fetch = make_loader(ds, &cfg);
    assert_int_equal(rp_loader_steps_per_epoch(plain), 7); /* 80 / 12, rounded up */
    assert_int_equal(rp_loader_samples(fetch), 80);
    for (int t = 0; t < STEPS; t++) { /* more than four epochs */
        rp_batch a, b;
        next_ok(plain, &a);
        saved_batch s;
        save_batch(&s, &a);
        next_ok(fetch, &b);
        assert_same_batch(&s, &b);
        for (int i = 0; i < b.n; i++)
            assert_in_range(b.y[i], 0, 79); /* the limit holds */
        free_saved(&s, 1);
        int64_t e1, s1, e2, s2;
        rp_loader_position(plain, &e1, &s1);
        rp_loader_position(fetch, &e2, &s2);
        assert_int_equal(e1, e2);
        assert_int_equal(s1, s2);
    }
    rp_loader_destroy(fetch);
    rp_loader_destroy(plain);
    rp_dataset_destroy(ds);
}

/* ---- positions ----------------------------------------------------------- */

static void test_epoch_rollover(void **state)
{
    rp_dataset *ds = make_ds(30, 3, 3, 1, PIX_RANDOM);
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = 8; /* drop_last: 3 steps of 8, 6 samples dropped per epoch */
    rp_loader *ld = make_loader(ds, &cfg);
    assert_int_equal(rp_loader_steps_per_epoch(ld), 3);
    int64_t e, s;
    rp_loader_position(ld, &e, &s);
    assert_int_equal(e, 0);
    assert_int_equal(s, 0);
    for (int t = 0; t < 10; t++) {
        rp_batch b;
        next_ok(ld, &b);
        assert_int_equal(b.epoch, t / 3);
        assert_int_equal(b.step, t % 3);
        assert_int_equal(b.n, 8);
        assert_int_equal(b.first_global, (t % 3) * 8);
        assert_int_equal(b.end_of_epoch, t % 3 == 2);
        rp_loader_position(ld, &e, &s);
        assert_int_equal(e, (t + 1) / 3);
        assert_int_equal(s, (t + 1) % 3);
    }
    rp_loader_destroy(ld);
    rp_dataset_destroy(ds);
}

/*
 * Take some batches with one replica, record the position, and resume from
 * it in new loaders with two replicas: the following batches match. Seeking
 * back on the first loader replays what it returned before.
 */
static void test_seek_resume(void **state)
{
    enum { N = 50, B = 6, BEFORE = 11, AFTER = 12 };
    const size_t image = 4 * 4 * 3;
    rp_dataset *ds = make_ds(N, 4, 4, 3, PIX_RANDOM);
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = B;
    cfg.seed = 5;
    cfg.augment = true;
    cfg.pad = 1;
    rp_loader *a = make_loader(ds, &cfg);
    saved_batch first[BEFORE], later[AFTER];
    for (int t = 0; t < BEFORE; t++) {
        rp_batch b;
        next_ok(a, &b);
        save_batch(&first[t], &b);
    }
    int64_t epoch, step;
    rp_loader_position(a, &epoch, &step);
    assert_int_equal(epoch, BEFORE / 8); /* 50 / 6 = 8 steps per epoch */
    assert_int_equal(step, BEFORE % 8);
    for (int t = 0; t < AFTER; t++) {
        rp_batch b;
        next_ok(a, &b);
        save_batch(&later[t], &b);
    }

    rp_loader *r[2];
    for (int k = 0; k < 2; k++) {
        rp_loader_config c = cfg;
        c.replicas = 2;
        c.replica = k;
        c.prefetch = k == 0;
        r[k] = make_loader(ds, &c);
        rp_batch b;
        next_ok(r[k], &b); /* something to discard, also from the prefetch thread */
        assert_int_equal(rp_loader_seek(r[k], epoch, step), RP_OK);
        int64_t e2, s2;
        rp_loader_position(r[k], &e2, &s2);
        assert_int_equal(e2, epoch);
        assert_int_equal(s2, step);
    }
    for (int t = 0; t < AFTER; t++) {
        rp_batch b0, b1;
        next_ok(r[0], &b0);
        next_ok(r[1], &b1);
        assert_int_equal(b0.n + b1.n, later[t].n);
        assert_int_equal(b0.epoch, later[t].epoch);
        assert_int_equal(b1.step, later[t].step);
        assert_memory_equal(b0.y, later[t].y, (size_t)b0.n * sizeof *b0.y);
        assert_memory_equal(b1.y, later[t].y + b0.n, (size_t)b1.n * sizeof *b1.y);
        assert_memory_equal(b0.x, later[t].x, (size_t)b0.n * image * sizeof *b0.x);
        assert_memory_equal(b1.x, later[t].x + (size_t)b0.n * image,
                            (size_t)b1.n * image * sizeof *b1.x);
    }

    /* Back to the start, and into the middle, on the original loader. */
    assert_int_equal(rp_loader_seek(a, 0, 0), RP_OK);
    for (int t = 0; t < BEFORE; t++) {
        rp_batch b;
        next_ok(a, &b);
        assert_same_batch(&first[t], &b);
    }
    assert_int_equal(rp_loader_seek(a, 0, 4), RP_OK);
    rp_batch b;
    next_ok(a, &b);
    assert_same_batch(&first[4], &b);

    /* A bad position is refused and changes nothing. */
    assert_int_equal(rp_loader_seek(a, 0, 8), RP_ERR_INVALID);
    tu_assert_error_contains("step 8");
    assert_int_equal(rp_loader_seek(a, -1, 0), RP_ERR_INVALID);
    assert_int_equal(rp_loader_seek(NULL, 0, 0), RP_ERR_INVALID);
    next_ok(a, &b);
    assert_same_batch(&first[5], &b);

    free_saved(first, BEFORE);
    free_saved(later, AFTER);
    rp_loader_destroy(r[1]);
    rp_loader_destroy(r[0]);
    rp_loader_destroy(a);
    rp_dataset_destroy(ds);
}

/* Many seeks in a row while the thread works on large batches: no hang, right results. */
static void test_seek_stress(void **state)
{
    rp_dataset *ds = make_ds(64, 48, 48, 3, PIX_RANDOM);
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = 16;
    cfg.augment = true;
    cfg.prefetch = false;
    rp_loader *plain = make_loader(ds, &cfg);
    saved_batch want[4];
    for (int t = 0; t < 4; t++) {
        rp_batch b;
        next_ok(plain, &b);
        save_batch(&want[t], &b);
    }
    rp_loader_destroy(plain);

    cfg.prefetch = true;
    rp_loader *ld = make_loader(ds, &cfg);
    for (int i = 0; i < 200; i++) {
        int64_t step = i % 4;
        assert_int_equal(rp_loader_seek(ld, 0, step), RP_OK);
        if (i % 3 == 0) {
            rp_batch b;
            next_ok(ld, &b);
            assert_same_batch(&want[step], &b);
        }
    }
    rp_loader_destroy(ld);
    /* Destroy right after create, with the thread in its first batch. */
    for (int i = 0; i < 20; i++)
        rp_loader_destroy(make_loader(ds, &cfg));
    free_saved(want, 4);
    rp_dataset_destroy(ds);
}

/* ---- evaluation order ---------------------------------------------------- */

/*
 * No shuffle and no drop_last: over each epoch the replicas together see
 * every sample exactly once, in dataset order, and the final partial batch
 * is split with the first m % R replicas taking one more.
 */
static void test_eval_covers_all(void **state)
{
    enum { N = 23, B = 8, R = 4 };
    rp_dataset *ds = make_ds(N, 2, 3, 2, PIX_RANDOM);
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = B;
    cfg.replicas = R;
    cfg.shuffle = false;
    cfg.drop_last = false;
    rp_loader *ld[R];
    for (int r = 0; r < R; r++) {
        cfg.replica = r;
        cfg.prefetch = r < 2;
        ld[r] = make_loader(ds, &cfg);
        assert_int_equal(rp_loader_steps_per_epoch(ld[r]), 3);
    }
    for (int e = 0; e < 2; e++) {
        int seen[N] = {0}, next = 0;
        for (int s = 0; s < 3; s++)
            for (int r = 0; r < R; r++) {
                rp_batch b;
                next_ok(ld[r], &b);
                assert_int_equal(b.epoch, e);
                assert_int_equal(b.end_of_epoch, s == 2);
                /* 7 samples in the last batch: 2, 2, 2, 1. */
                assert_int_equal(b.n, s < 2 ? 2 : (r < 3 ? 2 : 1));
                assert_int_equal(b.first_global, next);
                for (int i = 0; i < b.n; i++) {
                    assert_int_equal(b.y[i], next++);
                    seen[b.y[i]]++;
                }
            }
        for (int i = 0; i < N; i++)
            assert_int_equal(seen[i], 1);
    }
    for (int r = 0; r < R; r++)
        rp_loader_destroy(ld[r]);

    /* Fewer samples than replicas in the last batch: the later replicas get none. */
    cfg.limit = 10; /* batches of 8 and 2 */
    int sizes[R];
    for (int r = 0; r < R; r++) {
        cfg.replica = r;
        rp_loader *one = make_loader(ds, &cfg);
        rp_batch b;
        next_ok(one, &b);
        next_ok(one, &b);
        assert_true(b.end_of_epoch);
        sizes[r] = b.n;
        if (b.n == 0) assert_non_null(b.x);
        rp_loader_destroy(one);
    }
    assert_int_equal(sizes[0], 1);
    assert_int_equal(sizes[1], 1);
    assert_int_equal(sizes[2], 0);
    assert_int_equal(sizes[3], 0);
    rp_dataset_destroy(ds);
}

/* ---- steady state -------------------------------------------------------- */

static void test_no_alloc_steady_state(void **state)
{
    rp_dataset *ds = make_ds(40, 8, 8, 3, PIX_RANDOM);
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = 8;
    cfg.augment = true;
    for (int p = 0; p < 2; p++) {
        cfg.prefetch = p == 1;
        rp_loader *ld = make_loader(ds, &cfg);
        rp_batch b;
        next_ok(ld, &b);
        uint64_t before = rp_alloc_count();
        for (int t = 0; t < 200; t++) /* 40 epochs */
            next_ok(ld, &b);
        assert_int_equal(rp_loader_seek(ld, 3, 2), RP_OK);
        next_ok(ld, &b);
        assert_int_equal(rp_alloc_count(), before);
        rp_loader_destroy(ld);
    }
    rp_dataset_destroy(ds);
}

/* ---- errors -------------------------------------------------------------- */

static void expect_create_error(const rp_dataset *ds, const rp_loader_config *cfg, rp_status want,
                                const char *needle)
{
    rp_loader *ld = (rp_loader *)&ld; /* not NULL: create must reset it */
    assert_int_equal(rp_loader_create(&ld, ds, cfg), want);
    assert_null(ld);
    tu_assert_error_contains(needle);
}

static void test_config_errors(void **state)
{
    rp_dataset *ds = make_ds(20, 4, 4, 3, PIX_RANDOM);
    const rp_loader_config def = rp_loader_config_default();
    rp_loader_config cfg;

    rp_loader *ld = NULL;
    assert_int_equal(rp_loader_create(NULL, ds, &def), RP_ERR_INVALID);
    expect_create_error(NULL, &def, RP_ERR_INVALID, "ds is NULL");
    expect_create_error(ds, NULL, RP_ERR_INVALID, "cfg is NULL");

    cfg = def, cfg.global_batch = 0;
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "global_batch 0");
    cfg = def, cfg.global_batch = 8, cfg.replicas = 0;
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "replicas 0");
    cfg = def, cfg.global_batch = 8, cfg.replicas = 4, cfg.replica = 4;
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "replica 4 is outside [0, 4)");
    cfg = def, cfg.global_batch = 10, cfg.replicas = 4;
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "global_batch 10 is not divisible by replicas 4");
    cfg = def, cfg.global_batch = 8, cfg.augment = true, cfg.pad = -1;
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "pad -1");
    cfg.pad = 5;
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "pad 5 is outside [0, 4]");
    cfg = def, cfg.global_batch = 8, cfg.std[2] = 0.0f;
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "std[2] is 0");
    cfg.std[2] = NAN;
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "std[2]");
    cfg = def, cfg.global_batch = 8, cfg.mean[1] = INFINITY;
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "mean[1]");
    cfg = def, cfg.global_batch = 8, cfg.limit = 21;
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "limit 21 is outside [0, 20]");
    cfg.limit = -1;
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "limit -1");
    cfg = def, cfg.global_batch = 32; /* drop_last with 20 samples */
    expect_create_error(ds, &cfg, RP_ERR_INVALID, "20 samples and global_batch 32");
    cfg.drop_last = false; /* fine without drop_last: one partial batch */
    ld = make_loader(ds, &cfg);
    assert_int_equal(rp_loader_steps_per_epoch(ld), 1);
    rp_loader_destroy(ld);

    /* The dataset: a std beyond its channels is ignored; too many channels, bad labels. */
    cfg = def, cfg.global_batch = 8, cfg.std[3] = -1.0f;
    ld = make_loader(ds, &cfg);
    rp_loader_destroy(ld);
    ds->labels[13] = 20;
    cfg = def, cfg.global_batch = 8;
    expect_create_error(ds, &cfg, RP_ERR_FORMAT, "sample 13");
    cfg.limit = 13; /* the bad sample is outside the limit */
    ld = make_loader(ds, &cfg);
    rp_loader_destroy(ld);
    ds->labels[13] = 13;
    rp_dataset *wide = make_ds(4, 2, 2, 5, PIX_RANDOM);
    cfg = def, cfg.global_batch = 2;
    expect_create_error(wide, &cfg, RP_ERR_INVALID, "5 channels");
    rp_dataset_destroy(wide);

    assert_int_equal(rp_loader_next(NULL, NULL), RP_ERR_INVALID);
    assert_int_equal(rp_loader_steps_per_epoch(NULL), 0);
    rp_loader_destroy(NULL);
    rp_dataset_destroy(ds);
}

/*
 * A label broken after create is caught when its batch is made: from the
 * prefetch thread it reaches rp_loader_next() with the thread's message,
 * stays until a seek, and the position does not move.
 */
static void test_error_from_thread(void **state)
{
    rp_dataset *ds = make_ds(24, 3, 3, 1, PIX_RANDOM);
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = 4;
    cfg.shuffle = false;
    for (int p = 0; p < 2; p++) {
        cfg.prefetch = p == 1;
        rp_loader *ld = make_loader(ds, &cfg);
        /* The thread is at most two batches ahead before the first next(): batch 3 is not made yet.
         */
        ds->labels[13] = -7;
        rp_batch b;
        for (int t = 0; t < 3; t++)
            next_ok(ld, &b);
        for (int k = 0; k < 2; k++) {
            assert_int_equal(rp_loader_next(ld, &b), RP_ERR_FORMAT);
            tu_assert_error_contains("sample 13");
            tu_assert_error_contains("label -7");
            if (p == 1) tu_assert_error_contains("prefetch thread");
            assert_null(b.x);
            assert_int_equal(b.n, 0);
        }
        int64_t e, s;
        rp_loader_position(ld, &e, &s);
        assert_int_equal(e, 0);
        assert_int_equal(s, 3);
        ds->labels[13] = 13;
        assert_int_equal(rp_loader_seek(ld, 0, 3), RP_OK);
        next_ok(ld, &b);
        assert_int_equal(b.y[1], 13);
        rp_loader_destroy(ld);
    }
    rp_dataset_destroy(ds);
}

/* The loader on the library's own synthetic data, with the defaults. */
static void test_synthetic_defaults(void **state)
{
    rp_dataset *ds = NULL;
    assert_int_equal(rp_dataset_synthetic(&ds, 300, 32, 32, 3, 10, 1), RP_OK);
    rp_loader_config cfg = rp_loader_config_default();
    assert_int_equal(cfg.global_batch, 128);
    assert_true(cfg.prefetch);
    cfg.augment = true;
    rp_loader *ld = make_loader(ds, &cfg);
    assert_int_equal(rp_loader_steps_per_epoch(ld), 2);
    assert_int_equal(rp_loader_max_batch(ld), 128);
    for (int t = 0; t < 5; t++) {
        rp_batch b;
        next_ok(ld, &b);
        assert_int_equal(b.n, 128);
        for (int i = 0; i < b.n; i++)
            assert_in_range(b.y[i], 0, 9);
        for (int j = 0; j < b.n * 32 * 32 * 3; j++)
            assert_true(b.x[j] >= 0.0f && b.x[j] <= 1.0f);
    }
    rp_loader_destroy(ld);
    rp_dataset_destroy(ds);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shuffle_reproducible), cmocka_unit_test(test_replica_independence),
        cmocka_unit_test(test_augment_bounds),       cmocka_unit_test(test_normalise),
        cmocka_unit_test(test_prefetch_matches),     cmocka_unit_test(test_epoch_rollover),
        cmocka_unit_test(test_seek_resume),          cmocka_unit_test(test_seek_stress),
        cmocka_unit_test(test_eval_covers_all),      cmocka_unit_test(test_no_alloc_steady_state),
        cmocka_unit_test(test_config_errors),        cmocka_unit_test(test_error_from_thread),
        cmocka_unit_test(test_synthetic_defaults),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
