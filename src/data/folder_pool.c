/*
 * folder_pool.c - making the samples of a dataset of image files: read the
 * file, decode it (at a reduced DCT scale when the crop allows), crop and
 * resize it as torchvision does, flip and normalise; on the dataset's
 * decoding threads, which every loader of the dataset shares.
 *
 * A loader's producer (its prefetch thread, or the caller) posts a job, one
 * batch's samples, and waits for it; the threads claim samples one at a time
 * from the posted jobs, so several loaders (one per replica) keep all the
 * threads busy. A sample's result depends only on the sample, the epoch and
 * the loader's seed, never on the thread, so the batch is the same whatever
 * the thread count. The threads start at the first job, block every signal
 * (signals belong to the application's threads), and after warm-up allocate
 * nothing: each keeps its buffers at the largest image it has seen.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/folder_internal.h"

/* Most bytes an image file may have. */
#define FOLDER_FILE_MAX ((int64_t)1 << 30)
/* How many following samples skip_bad tries before it gives up. */
#define FOLDER_SKIP_TRIES 16

struct folder_job {
    const folder_request *req;
    int next;    /* the next sample to claim */
    int claimed; /* samples claimed */
    int done;    /* claimed samples finished */
    bool failed, cancelled;
    rp_status status;
    char err[1024];
    folder_job *link;
};

void folder_worker_free(folder_worker *w)
{
    img_decoder_free(&w->dec);
    aug_scratch_free(&w->scr);
    rp_free(w->file);
    rp_free(w->img);
    memset(w, 0, sizeof *w);
}

/* ---- one sample ------------------------------------------------------------ */

static rp_status grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (*cap >= need) return RP_OK;
    rp_free(*buf);
    *cap = 0;
    *buf = rp_alloc(need ? need : 1);
    if (!*buf) return RP_ERROR(RP_ERR_NOMEM, "image folder: cannot allocate %zu bytes", need);
    *cap = need;
    return RP_OK;
}

/* Reads sample i's bytes into w->file; *size gets their count. */
static rp_status read_sample(const rp_image_source *src, int64_t i, const char *name,
                             folder_worker *w, size_t *size)
{
    if (src->kind == FOLDER_TAR) {
        const folder_shard *sh = &src->shards[src->shard[i]];
        size_t want = (size_t)src->size[i], done = 0;
        RP_CHECK(grow(&w->file, &w->file_cap, want));
        while (done < want) {
            ssize_t r =
                pread(sh->fd, w->file + done, want - done, (off_t)(src->offset[i] + (int64_t)done));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return RP_ERROR(RP_ERR_IO, "%s: cannot read: %s", name, strerror(errno));
            if (r == 0)
                return RP_ERROR(RP_ERR_FORMAT,
                                "%s: the shard ends before the member's %zu bytes (it was "
                                "truncated after it was indexed)",
                                name, want);
            done += (size_t)r;
        }
        *size = want;
        return RP_OK;
    }
    /* Non-blocking open, then a type check: a FIFO named x.jpg must not hang the loader. */
    int fd = open(name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return RP_ERROR(RP_ERR_IO, "%s: cannot open: %s%s", name, strerror(errno),
                        errno == ENOENT ? " (deleted since the dataset was indexed?)" : "");
    rp_status status = RP_OK;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        status = RP_ERROR(RP_ERR_IO, "%s: cannot stat: %s", name, strerror(errno));
        goto cleanup;
    }
    if (!S_ISREG(st.st_mode)) {
        status = RP_ERROR(RP_ERR_IO, "%s: not a regular file", name);
        goto cleanup;
    }
    if ((int64_t)st.st_size > FOLDER_FILE_MAX) {
        status = RP_ERROR(RP_ERR_FORMAT, "%s: %lld bytes, over the %lld an image file may have",
                          name, (long long)st.st_size, (long long)FOLDER_FILE_MAX);
        goto cleanup;
    }
    size_t want = (size_t)st.st_size, done = 0;
    RP_TRY(grow(&w->file, &w->file_cap, want));
    while (done < want) {
        ssize_t r = read(fd, w->file + done, want - done);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r < 0) {
            status = RP_ERROR(RP_ERR_IO, "%s: cannot read: %s", name, strerror(errno));
            goto cleanup;
        }
        if (r == 0) break; /* shrank since fstat: decoded as it is (a truncated image fails) */
        done += (size_t)r;
    }
    *size = done;
cleanup:
    close(fd);
    return status;
}

/* Makes sample i (no replacement): read, decode, crop and resize, flip and normalise. */
static rp_status make_one(const folder_request *req, int64_t i, folder_worker *w, float *out)
{
    const rp_dataset *ds = req->ds;
    const rp_image_source *src = ds->source;
    const rp_folder_config *cfg = &src->cfg;
    const int S = ds->h;
    char name[4200];
    folder_sample_describe(src, i, name, sizeof name);

    size_t size = 0;
    RP_CHECK(read_sample(src, i, name, w, &size));
    img_info info;
    RP_CHECK(img_probe(&w->dec, w->file, size, name, &info));
    RP_CHECK(grow(&w->img, &w->img_cap, (size_t)S * (size_t)S * 3));
    int dw, dh;
    bool flip = false;
    if (req->train) {
        aug_rng rng;
        aug_rng_init(&rng, req->key, (uint32_t)i, req->epoch);
        aug_box b = aug_random_resized_crop(info.h, info.w, cfg->scale_min, cfg->scale_max,
                                            cfg->ratio_min, cfg->ratio_max, aug_rng_uniform, &rng);
        flip = req->flip && (aug_rng_u32(&rng) >> 31);
        img_scale sc = {1, 1};
        if (info.format == IMG_JPEG && cfg->dct_scaling) sc = img_pick_scale(b.w, b.h, S);
        img_scaled_size(&info, sc, &dw, &dh);
        /* The box at the decoded scale, and the whole pixels around it (PIL's crop). */
        double f = (double)sc.num / sc.denom;
        double x0 = b.left * f, x1 = (b.left + b.w) * f, y0 = b.top * f, y1 = (b.top + b.h) * f;
        int ix0 = (int)floor(x0), iy0 = (int)floor(y0);
        int ix1 = (int)ceil(x1), iy1 = (int)ceil(y1);
        if (ix1 > dw) ix1 = dw;
        if (iy1 > dh) iy1 = dh;
        /* Only those pixels are decoded (a JPEG's other rows and columns are not). */
        img_region r;
        RP_CHECK(
            img_decode_region(&w->dec, w->file, size, name, &info, sc, ix0, iy0, ix1, iy1, &r));
        RP_CHECK(aug_resample(&w->scr, r.pix, r.stride, ix1 - ix0, iy1 - iy0, x0 - ix0, y0 - iy0,
                              x1 - ix0, y1 - iy0, S, S, 0, 0, S, S, w->img));
    } else {
        /* Evaluation decodes at full size, so that accuracy compares with published numbers. */
        RP_CHECK(img_decode(&w->dec, w->file, size, name, &info, (img_scale){1, 1}, &dw, &dh));
        int rh, rw, top, left;
        aug_eval_geometry(dh, dw, cfg->resize_size, S, &rh, &rw, &top, &left);
        RP_CHECK(aug_resample(&w->scr, w->dec.rgb, (size_t)dw * 3, dw, dh, 0, 0, dw, dh, rw, rh,
                              left, top, S, S, w->img));
    }
    aug_flip_normalise(w->img, S, S, flip, req->scale, req->shift, out);
    return RP_OK;
}

rp_status folder_make_sample(const folder_request *req, int64_t idx, folder_worker *w, float *out,
                             int32_t *label)
{
    const rp_dataset *ds = req->ds;
    rp_image_source *src = ds->source;
    int tries = src->cfg.skip_bad ? FOLDER_SKIP_TRIES : 1;
    if (tries > ds->n) tries = (int)ds->n;
    char last[4400] = ""; /* the last failure's message, for the error when all fail */
    for (int t = 0; t < tries; t++) {
        int64_t j = (idx + t) % ds->n;
        if (__atomic_load_n(&src->bad[j], __ATOMIC_RELAXED)) continue;
        rp_status status = make_one(req, j, w, out);
        if (status == RP_OK) {
            *label = ds->labels[j];
            return RP_OK;
        }
        /* Only the file's own faults are skipped; running out of memory is not one. */
        if (!src->cfg.skip_bad || status == RP_ERR_NOMEM) return status;
        snprintf(last, sizeof last, "%s", rp_last_error());
        if (__atomic_exchange_n(&src->bad[j], 1, __ATOMIC_RELAXED) == 0) {
            __atomic_add_fetch(&src->bad_count, 1, __ATOMIC_RELAXED);
            rp_warn("%s; skipped (--skip-bad): sample %lld is replaced by the next that decodes",
                    last, (long long)j);
        }
    }
    /* Every try failed, now or in an earlier batch: the error names a file at fault. */
    char first[4200];
    if (!last[0]) {
        folder_sample_describe(src, idx % ds->n, first, sizeof first);
        snprintf(last, sizeof last, "%s failed to decode earlier", first);
    }
    return RP_ERROR(RP_ERR_FORMAT,
                    "image folder: %d samples in a row from sample %lld cannot be decoded, too "
                    "many bad files to skip; the last: %s",
                    tries, (long long)idx, last);
}

/* ---- the threads ------------------------------------------------------------- */

static void pool_lock(folder_pool *p)
{
    int rc = pthread_mutex_lock(&p->mu);
    (void)rc;
}

static void pool_unlock(folder_pool *p)
{
    int rc = pthread_mutex_unlock(&p->mu);
    (void)rc;
}

/* Takes `job` off the list of jobs with samples to claim. */
static void pool_unlink(folder_pool *p, folder_job *job)
{
    for (folder_job **q = &p->jobs; *q; q = &(*q)->link)
        if (*q == job) {
            *q = job->link;
            return;
        }
}

static bool job_finished(const folder_job *j)
{
    return j->next >= j->req->n && j->done == j->claimed;
}

typedef struct worker_arg {
    folder_pool *pool;
    int index;
} worker_arg;

static void *pool_thread(void *arg)
{
    folder_pool *p = ((worker_arg *)arg)->pool;
    folder_worker *w = &p->workers[((worker_arg *)arg)->index];
    free(arg);
    pool_lock(p);
    for (;;) {
        while (!p->stop && !p->jobs)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        folder_job *job = p->jobs;
        const folder_request *req = job->req;
        if (req->cancel && __atomic_load_n(req->cancel, __ATOMIC_RELAXED)) {
            job->cancelled = true;
            job->next = req->n;
        }
        if (job->next >= req->n) {
            pool_unlink(p, job);
            if (job_finished(job)) pthread_cond_broadcast(&p->done);
            continue;
        }
        int k = job->next++;
        job->claimed++;
        if (job->next >= req->n) pool_unlink(p, job);
        pool_unlock(p);

        int64_t pos = req->lo + k;
        int64_t idx = req->perm ? (int64_t)req->perm[pos] : pos;
        size_t image = (size_t)req->ds->h * (size_t)req->ds->w * 3;
        rp_status status = folder_make_sample(req, idx, w, req->x + (size_t)k * image, &req->y[k]);

        pool_lock(p);
        if (status != RP_OK && !job->failed) {
            job->failed = true;
            job->status = status;
            snprintf(job->err, sizeof job->err, "%s", rp_last_error());
            if (job->next < req->n) {
                job->next = req->n;
                pool_unlink(p, job);
            }
        }
        job->done++;
        if (job_finished(job)) pthread_cond_broadcast(&p->done);
    }
    pool_unlock(p);
    return NULL;
}

rp_status folder_pool_init(folder_pool *p)
{
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        return RP_ERROR(RP_ERR_BACKEND, "image folder: pthread_mutex_init failed");
    if (pthread_cond_init(&p->work, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        return RP_ERROR(RP_ERR_BACKEND, "image folder: pthread_cond_init failed");
    }
    if (pthread_cond_init(&p->done, NULL) != 0) {
        pthread_cond_destroy(&p->work);
        pthread_mutex_destroy(&p->mu);
        return RP_ERROR(RP_ERR_BACKEND, "image folder: pthread_cond_init failed");
    }
    p->made = true;
    return RP_OK;
}

/* Starts the threads, under the mutex; an error leaves those started running. */
static rp_status pool_start(folder_pool *p, int threads, char *err, size_t err_size)
{
    if (!p->threads) {
        p->threads = calloc((size_t)threads, sizeof *p->threads);
        p->workers = calloc((size_t)threads, sizeof *p->workers);
        if (!p->threads || !p->workers) {
            free(p->threads);
            free(p->workers);
            p->threads = NULL;
            p->workers = NULL;
            snprintf(err, err_size, "image folder: cannot allocate %d decoding threads", threads);
            return RP_ERR_NOMEM;
        }
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0;
    while (p->started < threads) {
        worker_arg *a = malloc(sizeof *a);
        if (!a) {
            rc = ENOMEM;
            break;
        }
        a->pool = p;
        a->index = p->started;
        rc = pthread_create(&p->threads[p->started], NULL, pool_thread, a);
        if (rc != 0) {
            free(a);
            break;
        }
        p->started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (p->started == 0) {
        snprintf(err, err_size, "image folder: cannot start a decoding thread: %s", strerror(rc));
        return RP_ERR_BACKEND;
    }
    if (p->started < threads)
        rp_warn("image folder: started %d of %d decoding threads (%s)", p->started, threads,
                strerror(rc));
    return RP_OK;
}

void folder_pool_stop(folder_pool *p)
{
    if (!p->made) return;
    pool_lock(p);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pool_unlock(p);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    for (int i = 0; p->workers && i < p->started; i++)
        folder_worker_free(&p->workers[i]);
    free(p->workers);
    free(p->threads);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    memset(p, 0, sizeof *p);
}

rp_status folder_fill(const folder_request *req, char *err, size_t err_size)
{
    folder_pool *p = &req->ds->source->pool;
    if (req->n == 0) return RP_OK;
    folder_job job;
    memset(&job, 0, sizeof job);
    job.req = req;
    pool_lock(p);
    if (p->stop) {
        pool_unlock(p);
        snprintf(err, err_size, "image folder: the dataset is being destroyed");
        return RP_ERR_INVALID;
    }
    if (p->started == 0) {
        rp_status status = pool_start(p, req->ds->source->cfg.threads, err, err_size);
        if (status != RP_OK) {
            pool_unlock(p);
            return status;
        }
    }
    /* First come, first served: appended at the tail. */
    folder_job **tail = &p->jobs;
    while (*tail)
        tail = &(*tail)->link;
    *tail = &job;
    pthread_cond_broadcast(&p->work);
    while (!job_finished(&job))
        pthread_cond_wait(&p->done, &p->mu);
    pool_unlink(p, &job);
    pool_unlock(p);
    if (job.failed) {
        snprintf(err, err_size, "%s", job.err);
        return job.status;
    }
    return job.cancelled ? 1 : RP_OK;
}
