/*
 * bench.c - `replicator bench`: training throughput of the models on
 * synthetic data (data loading is not measured), comparable one to one with
 * bench/resnet_torch.py.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kernels/kernels.h"
#include "models/resnet/resnet.h"

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: replicator bench resnet [options]\n"
            "\n"
            "Measures training images/s (forward, backward, SGD momentum step) of a ResNet on\n"
            "random data. The same measurement in PyTorch: bench/torch_env.sh --model resnet20.\n"
            "\n"
            "options:\n"
            "  --model M     resnet20 (default), resnet18 or resnet50\n"
            "  --batch N     batch size (default 128; 32 for resnet18/50)\n"
            "  --size S      image height and width (default 28; 224 for resnet18/50)\n"
            "  --channels C  input channels (default 1; 3 for resnet18/50)\n"
            "  --iters K     timed steps (default 20; 3 for resnet18/50)\n"
            "  --warmup W    untimed steps first (default 3; 2 for resnet18/50)\n"
            "  --threads T   kernel threads (default: all cores)\n"
            "  --json        one JSON line instead of text\n");
}

/* The median of n values (sorts them). */
static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double tmp = v[j];
            v[j] = v[j - 1];
            v[j - 1] = tmp;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int bench_resnet(int argc, char **argv)
{
    rp_resnet_kind kind = RP_RESNET20;
    int batch = 0, size = 0, channels = 0, iters = 0, warmup = -1, threads = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            bench_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "replicator bench: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--model")) {
            if (!rp_resnet_kind_parse(v, &kind)) {
                fprintf(stderr, "replicator bench: unknown model %s\n", v);
                return 2;
            }
            continue;
        }
        int *slot = !strcmp(a, "--batch")      ? &batch
                    : !strcmp(a, "--size")     ? &size
                    : !strcmp(a, "--channels") ? &channels
                    : !strcmp(a, "--iters")    ? &iters
                    : !strcmp(a, "--warmup")   ? &warmup
                    : !strcmp(a, "--threads")  ? &threads
                                               : NULL;
        char *end;
        long n = strtol(v, &end, 10);
        if (!slot || *end || n < 0 || n > 100000) {
            fprintf(stderr, "replicator bench: bad option %s %s (see --help)\n", a, v);
            return 2;
        }
        *slot = (int)n;
    }
    bool small = kind == RP_RESNET20;
    if (!batch) batch = small ? 128 : 32;
    if (!size) size = small ? 28 : 224;
    if (!channels) channels = small ? 1 : 3;
    if (!iters) iters = small ? 20 : 3;
    /* Two untimed steps at least: the arena settles into one block at the second reset. */
    if (warmup < 0) warmup = small ? 3 : 2;
    rp_kernels_set_threads(threads);

    rp_status status = RP_OK;
    rp_resnet *net = NULL;
    rp_tape *t = NULL;
    rp_optimizer *opt = NULL;
    float *images = NULL;
    int32_t *labels = NULL;
    double *times = NULL;
    rp_resnet_config cfg = rp_resnet_config_default(kind);
    cfg.in_channels = channels;
    cfg.classes = small ? 10 : 1000;
    RP_TRY(rp_resnet_create(&net, &cfg, 1));
    RP_TRY(rp_tape_create(&t, 0));
    rp_optim_config oc = rp_optim_config_default();
    oc.weight_decay = 5e-4f;
    RP_TRY(rp_optimizer_create(&opt, rp_resnet_params(net), &oc));
    int64_t n_pixels = (int64_t)batch * size * size * channels;
    images = rp_alloc((size_t)n_pixels * sizeof(float));
    labels = rp_alloc((size_t)batch * sizeof(int32_t));
    times = rp_alloc((size_t)(iters + 1) * sizeof(double));
    if (!images || !labels || !times) {
        status = rp_last_status();
        goto cleanup;
    }
    rp_rng_fill_normal(rp_hash_str(1, "bench"), 0, images, (size_t)n_pixels, 0.0f, 1.0f);
    for (int i = 0; i < batch; i++) labels[i] = i % cfg.classes;

    double total = 0;
    for (int it = 0; it < warmup + iters; it++) {
        double t0 = rp_now_s();
        rp_tape_reset(t);
        rp_tensor *x = rp_tensor_from(t, 4, (int[]){batch, size, size, channels}, images);
        rp_tensor *loss = rp_softmax_cross_entropy(t, rp_resnet_forward(t, net, x, true), labels);
        if (!loss) {
            status = rp_last_status();
            goto cleanup;
        }
        RP_TRY(rp_backward(t, loss));
        RP_TRY(rp_optimizer_step(opt, 0.01f));
        double dt = rp_now_s() - t0;
        if (it >= warmup) {
            times[it - warmup] = dt;
            total += dt;
        }
    }
    double med = median(times, iters);
    double ips = (double)batch * iters / total;
    if (json)
        printf("{\"framework\":\"replicator\",\"model\":\"%s\",\"batch\":%d,\"size\":%d,"
               "\"channels\":%d,\"threads\":%d,\"format\":\"nhwc\",\"images_per_s\":%.2f,"
               "\"ms_per_step\":%.2f,\"median_ms_per_step\":%.2f}\n",
               rp_resnet_kind_name(kind), batch, size, channels, rp_kernels_get_threads(), ips,
               1e3 * total / iters, 1e3 * med);
    else
        printf("replicator %s batch %d %dx%dx%d, %d threads: %.1f images/s (%.1f ms/step, median "
               "%.1f)\n",
               rp_resnet_kind_name(kind), batch, size, size, channels, rp_kernels_get_threads(), ips,
               1e3 * total / iters, 1e3 * med);

cleanup:
    rp_free(times);
    rp_free(labels);
    rp_free(images);
    rp_optimizer_destroy(opt);
    rp_tape_destroy(t);
    rp_resnet_destroy(net);
    if (status != RP_OK) {
        fprintf(stderr, "replicator bench: error: %s\n", rp_last_error());
        return 1;
    }
    return 0;
}

int rp_cli_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "resnet")) return bench_resnet(argc - 1, argv + 1);
    fprintf(stderr, "replicator bench: unknown benchmark \"%s\" (available: resnet)\n", argv[1]);
    return 2;
}
