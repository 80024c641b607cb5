/*
 * collectives.c - cross-replica primitives written by hand inside a step, on
 * N replicas (threads; MPI processes under mpirun). Each replica holds a
 * shard of uneven size of one data set, and one step:
 *
 *   1. normalises its values with the statistics of the whole set (one
 *      all-reduce of [sum, sum of squares, count], in f64);
 *   2. finds which replica holds the largest value (an all-gather of each
 *      replica's maximum);
 *   3. agrees on a random seed that replica 0 chose (a broadcast);
 *   4. builds a histogram of the whole set, each replica owning a slice of
 *      the bins (a reduce-scatter of every replica's full histogram);
 *   5. averages inside pairs of replicas (a communicator split into groups).
 *
 * Every result is compared with the same computation done serially over all
 * the shards. Reductions add the replicas' values in rank order, so the sums
 * match the serial ones bit for bit.
 *
 *     ./collectives [--replicas N] [other runtime options]
 *
 * Exits 1 if any result differs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <replicator/replicator.h>

enum { MAX_REPLICAS = 64, BINS_PER_REPLICA = 4 };
static const float lo = -3.0f, hi = 9.0f; /* the histogram's range (values are N(3, 2^2)) */

/* Replica r's shard at step k: 8 + r values, drawn by global position so that a serial loop
   sees the same ones. */
static int shard_size(int r)
{
    return 8 + r;
}
static int64_t shard_first(int r)
{
    return 8 * (int64_t)r + (int64_t)r * (r - 1) / 2;
}
static void shard(int r, int64_t k, float *v)
{
    rp_rng_fill_normal(100 + (uint64_t)k, (uint64_t)shard_first(r), v, (size_t)shard_size(r), 3.0f,
                       2.0f);
}
static int bin_of(float v, int bins)
{
    int b = (int)floorf((v - lo) / (hi - lo) * (float)bins);
    return b < 0 ? 0 : b >= bins ? bins - 1 : b;
}

/* Each replica keeps a communicator of its pair, made once in build(). */
struct replica_state {
    rp_comm *pair;
};

static rp_status build(rp_replica *rep, void *arg)
{
    (void)arg;
    struct replica_state *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "replica state");
    rp_replica_set_user(rep, s);
    int id = rp_replica_id(rep);
    return rp_comm_split(rp_replica_comm(rep), id / 2, id, &s->pair); /* collective */
}

static rp_status step(rp_replica *rep, void *arg)
{
    int64_t k = *(const int64_t *)arg;
    struct replica_state *s = rp_replica_user(rep);
    int id = rp_replica_id(rep), n = rp_replica_count(rep), errors = 0;
    if (n > MAX_REPLICAS)
        return RP_ERROR(RP_ERR_INVALID, "at most %d replicas, not %d", MAX_REPLICAS, n);
    float raw[8 + MAX_REPLICAS], z[8 + MAX_REPLICAS];
    shard(id, k, raw);
    int m = shard_size(id);

    /* 1. Global mean and variance: one all-reduce of three partial sums. */
    double part[3] = {0, 0, (double)m}, total[3];
    for (int i = 0; i < m; i++)
        part[0] += raw[i], part[1] += (double)raw[i] * raw[i];
    RP_CHECK(rp_all_reduce(rep, part, total, 3, RP_F64, RP_SUM));
    double mean = total[0] / total[2], std = sqrt(total[1] / total[2] - mean * mean);
    for (int i = 0; i < m; i++)
        z[i] = (float)((raw[i] - mean) / std);

    /* 2. Where the largest value is: each replica's maximum, stacked. */
    float mx = -INFINITY, all_max[MAX_REPLICAS];
    for (int i = 0; i < m; i++)
        mx = fmaxf(mx, z[i]);
    RP_CHECK(rp_all_gather(rep, &mx, all_max, 1, RP_F32));
    int holder = 0;
    for (int r = 1; r < n; r++)
        holder = all_max[r] > all_max[holder] ? r : holder;

    /* 3. A seed replica 0 picks (say, for an augmentation every replica must apply alike). */
    int64_t seed = id == 0 ? (int64_t)rp_replica_seed(rep) * 1000 + k : -1;
    RP_CHECK(rp_broadcast(rep, &seed, 1, RP_I64, 0));

    /* 4. A histogram of the whole set; replica r receives bins [r*B, (r+1)*B). */
    int32_t hist[MAX_REPLICAS * BINS_PER_REPLICA] = {0}, mine[BINS_PER_REPLICA];
    for (int i = 0; i < m; i++)
        hist[bin_of(raw[i], n * BINS_PER_REPLICA)]++;
    RP_CHECK(rp_reduce_scatter(rep, hist, mine, BINS_PER_REPLICA, RP_I32, RP_SUM));

    /* 5. The mean of the pair's local means, inside the pair only. */
    double local_mean = part[0] / part[2], pair_mean;
    RP_CHECK(rp_comm_all_reduce(s->pair, &local_mean, &pair_mean, 1, RP_F64, RP_MEAN));

    /* The same, serially, over every shard (what one device holding all the data would do). */
    double want[3] = {0, 0, 0}, pair_sum = 0;
    int32_t want_hist[MAX_REPLICAS * BINS_PER_REPLICA] = {0};
    for (int r = 0; r < n; r++) {
        float u[8 + MAX_REPLICAS];
        shard(r, k, u);
        double p0 = 0, p1 = 0;
        for (int i = 0; i < shard_size(r); i++) {
            p0 += u[i], p1 += (double)u[i] * u[i];
            want_hist[bin_of(u[i], n * BINS_PER_REPLICA)]++;
        }
        want[0] += p0, want[1] += p1,
            want[2] += shard_size(r); /* in rank order, as the all-reduce */
        if (r / 2 == id / 2) pair_sum += p0 / shard_size(r);
    }
    double want_mean = want[0] / want[2],
           want_std = sqrt(want[1] / want[2] - want_mean * want_mean);
    float want_max[MAX_REPLICAS];
    int want_holder = 0;
    for (int r = 0; r < n; r++) {
        float u[8 + MAX_REPLICAS];
        shard(r, k, u);
        want_max[r] = -INFINITY;
        for (int i = 0; i < shard_size(r); i++)
            want_max[r] = fmaxf(want_max[r], (float)((u[i] - want_mean) / want_std));
        want_holder = want_max[r] > want_max[want_holder] ? r : want_holder;
    }
    errors += memcmp(want, total, sizeof want) != 0;
    errors += memcmp(want_max, all_max, (size_t)n * sizeof(float)) != 0 || want_holder != holder;
    errors += seed != (int64_t)rp_replica_seed(rep) * 1000 + k;
    errors += memcmp(want_hist + id * BINS_PER_REPLICA, mine, sizeof mine) != 0;
    errors += fabs(pair_mean - pair_sum / rp_comm_size(s->pair)) > 1e-12 * fabs(pair_mean);

    RP_CHECK(rp_replica_report(rep, "errors", errors, RP_SUM));
    RP_CHECK(rp_replica_report(rep, "mean", mean, RP_FIRST));
    RP_CHECK(rp_replica_report(rep, "std", std, RP_FIRST));
    return rp_replica_report(rep, "holder", holder, RP_MAX);
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    (void)arg;
    struct replica_state *s = rp_replica_user(rep);
    if (!s) return RP_OK;
    rp_comm_destroy(s->pair);
    free(s);
    rp_replica_set_user(rep, NULL);
    return RP_OK;
}

int main(int argc, char **argv)
{
    rp_status status = RP_OK;
    rp_replicator *r = NULL;
    rp_config cfg = rp_config_default();
    cfg.replicas = 4;
    RP_TRY(rp_config_from_args(&cfg, &argc, argv));
    RP_TRY(rp_replicator_create(&r, &cfg));
    RP_TRY(rp_replicator_run(r, build, NULL));
    double errors = 0;
    for (int64_t k = 0; k < 3; k++) {
        RP_TRY(rp_replicator_run(r, step, &k));
        double e, mean, std, holder;
        RP_TRY(rp_replicator_result(r, "errors", &e));
        RP_TRY(rp_replicator_result(r, "mean", &mean));
        RP_TRY(rp_replicator_result(r, "std", &std));
        RP_TRY(rp_replicator_result(r, "holder", &holder));
        errors += e;
        printf("step %lld: mean %.4f std %.4f, largest value on replica %d, %g results differ\n",
               (long long)k, mean, std, (int)holder, e);
    }
    printf("replicas %d: %s\n", rp_replicator_replicas(r),
           errors == 0 ? "every result matches the serial computation" : "MISMATCH");
    if (errors != 0)
        status = RP_ERROR(RP_ERR_MISMATCH, "%g results differ from the serial ones", errors);
cleanup:
    if (r) {
        rp_status down = rp_replicator_run(r, teardown, NULL);
        if (status == RP_OK) status = down;
    }
    rp_replicator_destroy(r);
    if (status != RP_OK) fprintf(stderr, "collectives: %s\n", rp_last_error());
    return status == RP_OK ? 0 : 1;
}
