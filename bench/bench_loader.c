/*
 * bench_loader.c - images per second of the data loader with augmentation
 * (random crop with padding, horizontal flip, normalisation), batch 128, on
 * 28x28x1 (Fashion-MNIST when installed, else synthetic) and 32x32x3
 * (synthetic), without and with the prefetch thread.
 *
 * Two figures per configuration:
 *   - "produce": the loader alone, rp_loader_next() in a tight loop. Without
 *     prefetch it is the cost of making a batch on the caller's thread; with
 *     prefetch the caller only waits, so it is the thread's throughput plus
 *     the hand-off.
 *   - "overlap": each rp_loader_next() is followed by a stand-in for a
 *     training step of `work` microseconds (1.5x the time to make a batch);
 *     the figure is the time per step beyond the work itself, i.e. what the
 *     input pipeline costs the training loop. With prefetch it should be
 *     close to zero. "busy" spins through the step, like a replica thread
 *     computing, and needs a free core for the prefetch thread to overlap;
 *     "idle" sleeps through it, like a thread waiting on its OpenMP team or
 *     a collective, and shows the hand-off even on a loaded machine.
 *
 * Usage: bench_loader [seconds per measurement, default 0.25]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "replicator/data.h"
#include "replicator/loader.h"

#define RP(call)                                                                                   \
    do {                                                                                           \
        if ((call) != RP_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, rp_last_error()); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static volatile float g_sink;

/* Spins for `us` microseconds: a training step that keeps its core busy. */
static void busy_wait_us(double us)
{
    uint64_t end = rp_now_ns() + (uint64_t)(us * 1e3);
    while (rp_now_ns() < end) {
    }
}

/* Images per second of rp_loader_next() alone over about `seconds`. */
static double bench_produce(rp_loader *ld, double seconds)
{
    rp_batch b;
    RP(rp_loader_next(ld, &b)); /* warm up: the thread's first batch, the first touch of buffers */
    int64_t images = 0;
    double t0 = rp_now_s(), t = t0;
    while (t - t0 < seconds) {
        for (int i = 0; i < 8; i++) {
            RP(rp_loader_next(ld, &b));
            images += b.n;
            g_sink += b.x[0];
        }
        t = rp_now_s();
    }
    return (double)images / (t - t0);
}

/* Sleeps until `us` microseconds from now have passed. */
static void idle_wait_us(double us)
{
    uint64_t end = rp_now_ns() + (uint64_t)(us * 1e3);
    for (uint64_t now = rp_now_ns(); now < end; now = rp_now_ns()) {
        struct timespec ts = {0, (long)(end - now)};
        nanosleep(&ts, NULL);
    }
}

/* Microseconds per step beyond `work_us`, with a busy or idle step after each batch. */
static double bench_overlap(rp_loader *ld, double work_us, int steps, bool busy)
{
    rp_batch b;
    RP(rp_loader_next(ld, &b));
    busy ? busy_wait_us(work_us) : idle_wait_us(work_us);
    double t0 = rp_now_s();
    for (int i = 0; i < steps; i++) {
        RP(rp_loader_next(ld, &b));
        g_sink += b.x[0];
        busy ? busy_wait_us(work_us) : idle_wait_us(work_us);
    }
    double per_step_us = (rp_now_s() - t0) * 1e6 / steps;
    /* Sleeping overshoots on its own (timer slack, wake-up): measure and remove that. */
    double base_us = work_us;
    if (!busy) {
        t0 = rp_now_s();
        for (int i = 0; i < steps; i++)
            idle_wait_us(work_us);
        base_us = (rp_now_s() - t0) * 1e6 / steps;
    }
    return per_step_us - base_us;
}

static void bench_dataset(const rp_dataset *ds, int pad, double seconds)
{
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = 128;
    cfg.augment = true;
    cfg.pad = pad;
    RP(rp_dataset_channel_stats(ds, cfg.mean, cfg.std));
    double plain_ips = 0;
    for (int p = 0; p < 2; p++) {
        cfg.prefetch = p == 1;
        rp_loader *ld = NULL;
        RP(rp_loader_create(&ld, ds, &cfg));
        double ips = bench_produce(ld, seconds);
        if (p == 0) plain_ips = ips;
        /* A step that takes 1.5x as long as making a batch on the caller's thread. */
        double work_us = 1.5 * 128.0 / plain_ips * 1e6;
        int steps = (int)(seconds * 1e6 / work_us) + 10;
        double busy_us = bench_overlap(ld, work_us, steps, true);
        double idle_us = bench_overlap(ld, work_us, steps, false);
        printf("%-20s %2dx%2dx%d pad %d  prefetch %-3s  produce %8.0f images/s %6.1f us/batch"
               "  overlap on a %.0f us step: busy %+7.1f us  idle %+7.1f us\n",
               ds->name, ds->h, ds->w, ds->c, pad, p ? "on" : "off", ips, 128.0 / ips * 1e6,
               work_us, busy_us, idle_us);
        rp_loader_destroy(ld);
    }
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 0.25;
    if (!(seconds > 0)) seconds = 0.25;

    rp_dataset *mnist = NULL;
    if (rp_dataset_load_mnist(&mnist, NULL, "train") != RP_OK) {
        printf("(Fashion-MNIST not found: %s; using synthetic 28x28x1)\n", rp_last_error());
        RP(rp_dataset_synthetic(&mnist, 60000, 28, 28, 1, 10, 1));
    }
    rp_dataset *cifar = NULL;
    RP(rp_dataset_synthetic(&cifar, 20000, 32, 32, 3, 10, 2));

    printf("loader: batch 128, random crop + flip + normalise, %.2f s per measurement\n", seconds);
    bench_dataset(mnist, 2, seconds);
    bench_dataset(cifar, 4, seconds);

    rp_dataset_destroy(cifar);
    rp_dataset_destroy(mnist);
    return 0;
}
