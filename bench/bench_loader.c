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
 *
 * With --folder it measures a dataset of image files instead (rp_dataset_load_folder: an
 * ImageFolder tree, "list:DIR" or "tar:DIR"): decode plus torchvision's training transform
 * (RandomResizedCrop to --size, horizontal flip, ImageNet normalisation) on the dataset's
 * --threads decoding threads, prefetch on, rp_loader_next() in a loop for --seconds after one
 * warm-up epoch. The decoding threads do the work (the caller and the prefetch thread wait on
 * them), so images/s per core is images/s over --threads. bench/compare_loader_folder.sh runs
 * it beside torchvision's DataLoader (bench/folder_torch.py).
 *
 *   bench_loader --folder DIR [--threads T] [--batch B] [--size S] [--seconds S] [--json]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* --folder: images/s of an image-file dataset's training batches; see the header. */
static int bench_folder(int argc, char **argv)
{
    const char *dir = NULL;
    int threads = 1, batch = 64, size = 224;
    double seconds = 5;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_loader: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--folder"))
            dir = v;
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--batch"))
            batch = atoi(v);
        else if (!strcmp(a, "--size"))
            size = atoi(v);
        else if (!strcmp(a, "--seconds"))
            seconds = atof(v);
        else {
            fprintf(stderr, "bench_loader: unknown option %s\n", a);
            return 2;
        }
    }
    if (!dir || threads < 1 || batch < 1 || size < 1 || !(seconds > 0)) {
        fprintf(stderr, "usage: bench_loader --folder DIR [--threads T >= 1] [--batch B] "
                        "[--size S] [--seconds S] [--json]\n");
        return 2;
    }
    rp_folder_config fc = rp_folder_config_default();
    fc.image_size = size;
    fc.threads = threads;
    rp_dataset *ds = NULL;
    RP(rp_dataset_load_folder(&ds, dir, "train", &fc));
    rp_loader_config cfg = rp_loader_config_default();
    cfg.global_batch = batch;
    cfg.augment = true;
    cfg.flip = true;
    cfg.prefetch = true;
    RP(rp_dataset_channel_stats(ds, cfg.mean, cfg.std));
    rp_loader *ld = NULL;
    RP(rp_loader_create(&ld, ds, &cfg));
    rp_batch b;
    /* Warm-up: one epoch, so the threads' buffers have grown and the files are in the page
       cache, as torchvision's side gets one too. */
    int64_t steps = rp_loader_steps_per_epoch(ld);
    for (int64_t i = 0; i < steps; i++)
        RP(rp_loader_next(ld, &b));
    int64_t images = 0;
    double t0 = rp_now_s(), t = t0;
    while (t - t0 < seconds) {
        RP(rp_loader_next(ld, &b));
        images += b.n;
        g_sink += b.x[0];
        t = rp_now_s();
    }
    double ips = (double)images / (t - t0);
    if (json)
        printf("{\"impl\": \"replicator\", \"threads\": %d, \"batch\": %d, \"size\": %d, "
               "\"images\": %lld, \"seconds\": %.3f, \"images_per_s\": %.1f, "
               "\"images_per_s_per_core\": %.1f}\n",
               threads, batch, size, (long long)images, t - t0, ips, ips / threads);
    else
        printf("replicator  %-28s threads %d  batch %d  %dx%d: %8.1f images/s  %8.1f per core "
               "(%lld images in %.2f s)\n",
               ds->name, threads, batch, size, size, ips, ips / threads, (long long)images, t - t0);
    rp_loader_destroy(ld);
    rp_dataset_destroy(ds);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--folder")) return bench_folder(argc, argv);
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
