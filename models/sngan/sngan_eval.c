/*
 * sngan_eval.c - the domain classifier as the judge of an SN-GAN's samples:
 * tallies over image sets, the scores they give, the calibrations that give
 * the scores a scale, and the trainer's evaluation hooks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sngan/sngan_eval.h"

/* Images per classifier forward: the tape's arena holds one chunk's activations. */
#define CHUNK 200

struct rp_sngan_judge {
    rp_classifier_net net;
    int h, w, c, classes, dim;
    float mean[RP_LOADER_MAX_CHANNELS], std[RP_LOADER_MAX_CHANNELS];
    rp_dataset *train, *test;
    double *mu_feat, *cov_feat, *mu_logit, *cov_logit; /* the test set's */
};

void rp_sngan_judge_shape(const rp_sngan_judge *j, int *h, int *w, int *c, int *classes)
{
    if (h) *h = j->h;
    if (w) *w = j->w;
    if (c) *c = j->c;
    if (classes) *classes = j->classes;
}

rp_status rp_sngan_tally_init(rp_sngan_tally *t, const rp_sngan_judge *j)
{
    memset(t, 0, sizeof *t);
    t->classes = j->classes;
    RP_CHECK(rp_gauss_sums_init(&t->feat, j->dim));
    rp_status status = rp_gauss_sums_init(&t->logit, j->classes);
    if (status != RP_OK) rp_gauss_sums_free(&t->feat);
    return status;
}

void rp_sngan_tally_free(rp_sngan_tally *t)
{
    if (!t) return;
    rp_gauss_sums_free(&t->feat);
    rp_gauss_sums_free(&t->logit);
}

/* One chunk of 8-bit pixels in the classifier's normalised input, through the classifier. */
static rp_status add_chunk(const rp_sngan_judge *j, rp_tape *tape, const float *x,
                           const int32_t *labels, int n, rp_sngan_tally *t)
{
    rp_tape_reset(tape);
    rp_tensor *in = rp_tensor_from(tape, 4, (int[]){n, j->h, j->w, j->c}, x);
    rp_tensor *feat = NULL;
    rp_tensor *logits =
        in ? rp_resnet_forward_features(tape, j->net.resnet, in, false, &feat) : NULL;
    if (!logits || !feat) return rp_last_status();
    /* The tallies run on the host, over the values read back into the tape's host arena. */
    float *fv = rp_arena_alloc(rp_tape_arena(tape), (size_t)feat->numel * sizeof(float));
    float *lv = rp_arena_alloc(rp_tape_arena(tape), (size_t)logits->numel * sizeof(float));
    if (!fv || !lv) return rp_last_status();
    RP_CHECK(rp_tensor_read(feat, fv, feat->numel));
    RP_CHECK(rp_tensor_read(logits, lv, logits->numel));
    RP_CHECK(rp_gauss_sums_add(&t->feat, fv, n));
    RP_CHECK(rp_gauss_sums_add(&t->logit, lv, n));
    int k = j->classes;
    for (int i = 0; i < n; i++) {
        const float *z = lv + (size_t)i * (size_t)k;
        int best = 0;
        double max = z[0], sum = 0;
        for (int y = 1; y < k; y++)
            if (z[y] > max) max = z[y], best = y;
        for (int y = 0; y < k; y++)
            sum += exp(z[y] - max);
        double log_sum = log(sum);
        for (int y = 0; y < k; y++) {
            double logp = z[y] - max - log_sum, p = exp(logp);
            t->p_sum[y] += p;
            if (p > 0) t->plogp += p * logp;
        }
        if (labels) {
            t->labelled += 1;
            t->correct += best == labels[i];
        }
    }
    t->n += n;
    return RP_OK;
}

/* [0,1] pixel values (already 8-bit steps) -> the classifier's input, normalised per channel. */
static void normalise(const rp_sngan_judge *j, float *x, int64_t values)
{
    for (int64_t i = 0; i < values; i++) {
        int ch = (int)(i % j->c);
        x[i] = (x[i] - j->mean[ch]) / j->std[ch];
    }
}

rp_status rp_sngan_judge_add(const rp_sngan_judge *j, rp_tape *tape, const float *images,
                             const int32_t *labels, int64_t n, rp_sngan_tally *t)
{
    if (!j || !tape || (!images && n > 0) || !t || n < 0)
        return RP_ERROR(RP_ERR_INVALID, "rp_sngan_judge_add: NULL argument or n %lld",
                        (long long)n);
    for (int64_t i = 0; labels && i < n; i++)
        if (labels[i] < 0 || labels[i] >= j->classes)
            return RP_ERROR(RP_ERR_INVALID, "sample %lld's class %d: the judge knows classes 0..%d",
                            (long long)i, labels[i], j->classes - 1);
    int64_t per = (int64_t)j->h * j->w * j->c;
    float *x = malloc((size_t)(CHUNK * per) * sizeof *x);
    if (!x)
        return RP_ERROR(RP_ERR_NOMEM, "rp_sngan_judge_add: %lld floats", (long long)(CHUNK * per));
    rp_status status = RP_OK;
    for (int64_t s = 0; s < n && status == RP_OK; s += CHUNK) {
        int m = (int)(n - s < CHUNK ? n - s : CHUNK);
        for (int64_t i = 0; i < m * per; i++) {
            /* As a PNG shows it: 8-bit steps of [-1,1] -> [0,1]. A NaN is drawn as 0. */
            float v = images[s * per + i];
            double q = isnan(v) ? 0 : rint(((double)v + 1) * 127.5);
            x[i] = (float)((q < 0 ? 0 : q > 255 ? 255 : q) / 255.0);
        }
        normalise(j, x, m * per);
        status = add_chunk(j, tape, x, labels ? labels + s : NULL, m, t);
    }
    rp_tape_reset(tape);
    free(x);
    return status;
}

/* A dataset's images (optionally blurred or noised) into a tally. */
typedef enum { AS_IS, BLURRED, NOISED } distortion;

static rp_status add_dataset(const rp_sngan_judge *j, rp_tape *tape, const rp_dataset *ds,
                             int64_t limit, distortion d, rp_sngan_tally *t)
{
    int64_t count = limit > 0 && limit < ds->n ? limit : ds->n;
    int64_t per = (int64_t)j->h * j->w * j->c;
    float *x = malloc((size_t)(CHUNK * per) * sizeof *x);
    if (!x)
        return RP_ERROR(RP_ERR_NOMEM, "the judge's calibration: %lld floats",
                        (long long)(CHUNK * per));
    rp_status status = RP_OK;
    for (int64_t s = 0; s < count && status == RP_OK; s += CHUNK) {
        int m = (int)(count - s < CHUNK ? count - s : CHUNK);
        const uint8_t *px = ds->pixels + s * per;
        for (int i = 0; i < m; i++)
            for (int y = 0; y < j->h; y++)
                for (int xx = 0; xx < j->w; xx++)
                    for (int ch = 0; ch < j->c; ch++) {
                        int64_t at = (((int64_t)i * j->h + y) * j->w + xx) * j->c + ch;
                        double v = px[at] / 255.0;
                        if (d == BLURRED) {
                            /* A 3x3 box, the border clamped. */
                            double sum = 0;
                            for (int dy = -1; dy <= 1; dy++)
                                for (int dx = -1; dx <= 1; dx++) {
                                    int yy = y + dy < 0 ? 0 : y + dy >= j->h ? j->h - 1 : y + dy;
                                    int xs = xx + dx < 0 ? 0 : xx + dx >= j->w ? j->w - 1 : xx + dx;
                                    sum += px[(((int64_t)i * j->h + yy) * j->w + xs) * j->c + ch];
                                }
                            v = rint(sum / 9) / 255.0;
                        } else if (d == NOISED) {
                            float e;
                            rp_rng_fill_normal(0x6e6f697365ULL, (uint64_t)(s * per + at), &e, 1,
                                               0.0f, 0.1f);
                            v = rint(fmin(1, fmax(0, v + e)) * 255) / 255.0;
                        }
                        x[at] = (float)v;
                    }
        normalise(j, x, m * per);
        status = add_chunk(j, tape, x, ds->labels + s, m, t);
    }
    rp_tape_reset(tape);
    free(x);
    return status;
}

rp_status rp_sngan_judge_create(rp_sngan_judge **out, const rp_classifier_config *cc,
                                const rp_checkpoint *ck)
{
    if (!out || !cc || !ck) return RP_ERROR(RP_ERR_INVALID, "rp_sngan_judge_create: NULL argument");
    *out = NULL;
    if (strncmp(cc->model, "resnet", 6))
        return RP_ERROR(RP_ERR_INVALID,
                        "the judge must be a ResNet (its pooled features are compared); "
                        "the classifier run is a %s",
                        cc->model);
    rp_status status = RP_OK;
    rp_tape *tape = NULL;
    rp_sngan_tally t = {0};
    rp_sngan_judge *j = calloc(1, sizeof *j);
    if (!j) return RP_ERROR(RP_ERR_NOMEM, "rp_sngan_judge_create");
    RP_TRY(rp_classifier_load_splits(&j->train, &j->test, cc));
    j->h = j->test->h;
    j->w = j->test->w;
    j->c = j->test->c;
    j->classes = j->test->num_classes;
    if (j->c > RP_LOADER_MAX_CHANNELS || j->classes > RP_SNGAN_MAX_CLASSES) {
        status = RP_ERROR(RP_ERR_UNSUPPORTED, "the judge takes at most %d channels and %d classes",
                          RP_LOADER_MAX_CHANNELS, RP_SNGAN_MAX_CLASSES);
        goto cleanup;
    }
    RP_TRY(rp_dataset_channel_stats(j->train, j->mean, j->std));
    RP_TRY(rp_classifier_net_create(&j->net, cc, j->h, j->w, j->c, j->classes, NULL));
    RP_TRY(rp_checkpoint_read_params(ck, rp_classifier_net_params(&j->net), "param/"));
    rp_params *p = rp_classifier_net_params(&j->net);
    j->dim = rp_params_find(p, "fc.weight") ? rp_params_find(p, "fc.weight")->shape[1] : 0;
    if (j->dim <= 0) {
        status = RP_ERROR(RP_ERR_FORMAT, "the judge's ResNet has no fc.weight head");
        goto cleanup;
    }
    rp_params_set_frozen(p, true);
    j->mu_feat = malloc((size_t)j->dim * sizeof(double));
    j->cov_feat = malloc((size_t)j->dim * (size_t)j->dim * sizeof(double));
    j->mu_logit = malloc((size_t)j->classes * sizeof(double));
    j->cov_logit = malloc((size_t)j->classes * (size_t)j->classes * sizeof(double));
    if (!j->mu_feat || !j->cov_feat || !j->mu_logit || !j->cov_logit) {
        status = RP_ERROR(RP_ERR_NOMEM, "rp_sngan_judge_create: the reference statistics");
        goto cleanup;
    }
    RP_TRY(rp_tape_create(&tape, 0));
    RP_TRY(rp_sngan_tally_init(&t, j));
    RP_TRY(add_dataset(j, tape, j->test, 0, AS_IS, &t));
    RP_TRY(rp_gauss_sums_moments(&t.feat, j->mu_feat, j->cov_feat));
    RP_TRY(rp_gauss_sums_moments(&t.logit, j->mu_logit, j->cov_logit));
    *out = j;
    j = NULL;
cleanup:
    rp_sngan_tally_free(&t);
    rp_tape_destroy(tape);
    rp_sngan_judge_destroy(j);
    return status;
}

void rp_sngan_judge_destroy(rp_sngan_judge *j)
{
    if (!j) return;
    rp_classifier_net_destroy(&j->net);
    rp_dataset_destroy(j->train);
    rp_dataset_destroy(j->test);
    free(j->mu_feat);
    free(j->cov_feat);
    free(j->mu_logit);
    free(j->cov_logit);
    free(j);
}

/* rp_sngan_tally_all_reduce packs the fields into one call in a fixed order, then unpacks them
 * the same way (the macros name its locals t, p, fd and ld). */
/* clang-format off */
#define FIELDS(X)                                                                                  \
    X(&t->n, 1) X(&t->labelled, 1) X(&t->correct, 1) X(&t->plogp, 1)                               \
    X(t->p_sum, RP_SNGAN_MAX_CLASSES) X(&t->feat.n, 1) X(&t->logit.n, 1) X(t->feat.sum, fd)        \
    X(t->feat.outer, (int64_t)fd * fd) X(t->logit.sum, ld) X(t->logit.outer, (int64_t)ld * ld)
/* clang-format on */
#define PACK(ptr, len)                                                                             \
    {                                                                                              \
        memcpy(p, ptr, (size_t)(len) * sizeof(double));                                            \
        p += (len);                                                                                \
    }
#define UNPACK(ptr, len)                                                                           \
    {                                                                                              \
        memcpy(ptr, p, (size_t)(len) * sizeof(double));                                            \
        p += (len);                                                                                \
    }

rp_status rp_sngan_tally_all_reduce(rp_sngan_tally *t, rp_comm *comm)
{
    int fd = t->feat.d, ld = t->logit.d;
    int64_t count = 4 + RP_SNGAN_MAX_CLASSES + 2 + fd + (int64_t)fd * fd + ld + (int64_t)ld * ld;
    double *buf = malloc((size_t)count * sizeof *buf), *p = buf;
    if (!buf)
        return RP_ERROR(RP_ERR_NOMEM, "rp_sngan_tally_all_reduce: %lld doubles", (long long)count);
    FIELDS(PACK)
    rp_status status = rp_comm_all_reduce(comm, buf, buf, count, RP_F64, RP_SUM);
    p = buf;
    if (status == RP_OK) {
        FIELDS(UNPACK)
    }
#undef FIELDS
#undef PACK
#undef UNPACK
    free(buf);
    return status;
}

rp_status rp_sngan_judge_scores(const rp_sngan_judge *j, const rp_sngan_tally *t,
                                rp_sngan_scores *s)
{
    if (!j || !t || !s) return RP_ERROR(RP_ERR_INVALID, "rp_sngan_judge_scores: NULL argument");
    if (t->n < 2)
        return RP_ERROR(RP_ERR_INVALID, "a score needs at least 2 images, the tally has %.0f",
                        t->n);
    memset(s, 0, sizeof *s);
    s->n = (int64_t)t->n;
    s->class_accuracy = t->labelled > 0 ? t->correct / t->labelled : NAN;
    /* E KL(p(y|x) || p(y)) = E sum p log p - sum p(y) log p(y), p(y) the marginal. */
    double marginal = 0;
    for (int y = 0; y < t->classes; y++) {
        double py = t->p_sum[y] / t->n;
        if (py > 0) marginal += py * log(py);
    }
    s->is = exp(t->plogp / t->n - marginal);
    rp_status status = RP_OK;
    double *mu = malloc((size_t)j->dim * sizeof *mu),
           *cov = malloc((size_t)j->dim * (size_t)j->dim * sizeof *cov);
    if (!mu || !cov) {
        status = RP_ERROR(RP_ERR_NOMEM, "rp_sngan_judge_scores");
        goto cleanup;
    }
    RP_TRY(rp_gauss_sums_moments(&t->feat, mu, cov));
    RP_TRY(rp_frechet_distance(mu, cov, j->mu_feat, j->cov_feat, j->dim, &s->fd));
    RP_TRY(rp_gauss_sums_moments(&t->logit, mu, cov));
    RP_TRY(rp_frechet_distance(mu, cov, j->mu_logit, j->cov_logit, j->classes, &s->fd_logits));
cleanup:
    free(mu);
    free(cov);
    return status;
}

static rp_status score_dataset(const rp_sngan_judge *j, rp_tape *tape, const rp_dataset *ds,
                               int64_t n, distortion d, rp_sngan_scores *s)
{
    rp_sngan_tally t;
    RP_CHECK(rp_sngan_tally_init(&t, j));
    rp_status status = add_dataset(j, tape, ds, n, d, &t);
    if (status == RP_OK) status = rp_sngan_judge_scores(j, &t, s);
    rp_sngan_tally_free(&t);
    return status;
}

rp_status rp_sngan_judge_calibrate(const rp_sngan_judge *j, rp_tape *tape, int64_t n,
                                   rp_sngan_calibration *c)
{
    if (!j || !tape || !c)
        return RP_ERROR(RP_ERR_INVALID, "rp_sngan_judge_calibrate: NULL argument");
    RP_CHECK(score_dataset(j, tape, j->test, n, AS_IS, &c->test));
    RP_CHECK(score_dataset(j, tape, j->train, n, AS_IS, &c->train));
    RP_CHECK(score_dataset(j, tape, j->test, n, BLURRED, &c->blurred));
    return score_dataset(j, tape, j->test, n, NOISED, &c->noised);
}

void rp_sngan_eval_z(uint64_t seed, int64_t s, int z_dim, float *z)
{
    /* A stream of its own (not the training's): the evaluation set is fixed by the seed. */
    rp_rng_fill_normal(seed ^ 0x6576616c5f7aULL, (uint64_t)s * (uint64_t)z_dim, z, (size_t)z_dim,
                       0.0f, 1.0f);
}

rp_status rp_sngan_judge_generator(const rp_sngan_judge *j, rp_sngan_generator *g,
                                   const rp_sngan_config *cfg, rp_tape *tape, uint64_t seed,
                                   int64_t total, int64_t first, int64_t stride, rp_sngan_tally *t)
{
    if (!j || !g || !cfg || !tape || !t || total < 0 || first < 0 || stride < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_sngan_judge_generator: bad argument");
    if (cfg->h != j->h || cfg->w != j->w || cfg->c != j->c || cfg->classes != j->classes)
        return RP_ERROR(RP_ERR_INVALID,
                        "the generator makes %dx%dx%d images of %d classes; the judge takes "
                        "%dx%dx%d of %d",
                        cfg->h, cfg->w, cfg->c, cfg->classes, j->h, j->w, j->c, j->classes);
    int64_t per = (int64_t)cfg->h * cfg->w * cfg->c;
    enum { GEN = 50 };
    float *z = malloc((size_t)GEN * (size_t)cfg->z_dim * sizeof *z),
          *img = malloc((size_t)(GEN * per) * sizeof *img);
    int32_t labels[GEN];
    rp_status status = RP_OK;
    if (!z || !img) {
        status = RP_ERROR(RP_ERR_NOMEM, "rp_sngan_judge_generator");
        goto cleanup;
    }
    for (int64_t s = first; s < total && status == RP_OK;) {
        int m = 0;
        for (; m < GEN && s < total; m++, s += stride) {
            labels[m] = (int32_t)(s % cfg->classes);
            rp_sngan_eval_z(seed, s, cfg->z_dim, z + (size_t)m * (size_t)cfg->z_dim);
        }
        rp_tape_reset(tape);
        status = rp_sngan_generate(g, tape, z, labels, m, img);
        if (status == RP_OK) status = rp_sngan_judge_add(j, tape, img, labels, m, t);
    }
cleanup:
    rp_tape_reset(tape);
    free(z);
    free(img);
    return status;
}

/* ---- the trainer's hooks ------------------------------------------------------------------ */

rp_status rp_sngan_eval_replica(rp_replica *rep, rp_sngan *g, void *state)
{
    rp_sngan_eval *e = rp_sngan_get_eval(g);
    if (!e || !e->judge) return RP_OK;
    const rp_sngan_config *cfg = rp_sngan_get_config(g);
    rp_comm *data = rp_replica_axis_comm(rep, RP_AXIS_DATA);
    int id = rp_replica_coord(rep, RP_AXIS_DATA), n = rp_replica_axis_size(rep, RP_AXIS_DATA);
    rp_sngan_tally t;
    RP_CHECK(rp_sngan_tally_init(&t, e->judge));
    rp_status status =
        rp_sngan_judge_generator(e->judge, rp_sngan_state_generator(state), cfg,
                                 rp_replica_tape(rep), cfg->seed, e->samples, id, n, &t);
    /* Every member all-reduces, even after a failure, so that none waits for the others. */
    rp_status reduced = n > 1 ? rp_sngan_tally_all_reduce(&t, data) : RP_OK;
    if (status == RP_OK) status = reduced;
    if (status == RP_OK && rp_replica_id(rep) == 0) {
        rp_status s = rp_sngan_judge_scores(e->judge, &t, &e->last);
        if (s == RP_OK) e->have = true;
        status = s;
    }
    rp_sngan_tally_free(&t);
    return status;
}

rp_status rp_sngan_eval_done(rp_sngan *g, const rp_replicator *r, rp_trainer_metrics *m)
{
    (void)r;
    rp_sngan_eval *e = rp_sngan_get_eval(g);
    if (!e || !e->judge || !e->have) return RP_OK;
    e->have = false;
    const rp_sngan_scores *s = &e->last;
    RP_CHECK(rp_trainer_metrics_add(m, "fd", s->fd, "FD %.2f", s->fd));
    RP_CHECK(rp_trainer_metrics_add(m, "fd_logits", s->fd_logits, NULL));
    RP_CHECK(rp_trainer_metrics_add(m, "class_acc", s->class_accuracy, "class acc %.1f%%",
                                    100 * s->class_accuracy));
    return rp_trainer_metrics_add(m, "is", s->is, "IS %.2f", s->is);
}
