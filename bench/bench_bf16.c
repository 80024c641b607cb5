/*
 * bench_bf16.c - the bf16 probe: our GEMM and convolutions in bf16 compute against the same in
 * f32, on this CPU's bf16 path (rp_kernels_bf16_path: AMX, AVX512-BF16, emulation), each as
 * GFLOP/s and as a fraction of the path's peak:
 *   peak = threads x GHz x FLOP per cycle per core, with 1024 for AMX (one 16x16x32 TDPBF16PS,
 *   16384 FLOP, per 16 cycles), 128 for AVX512-BF16 (two VDPBF16PS of 32 FLOP... per cycle, 2
 *   ports) and 64 for f32 AVX-512 FMA (2 ports x 16 lanes x 2).
 * The clock is /proc/cpuinfo's "cpu MHz" of the first CPU unless --ghz says.
 *
 * Usage: bench_bf16 [--threads T] [--ghz G] [--rounds R]
 * Rounds alternate f32 and bf16; the report gives each one's median.
 */
#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/conv_pool_dnnl.h"
#include "replicator/core.h"
#include "replicator/kernels.h"

static int g_rounds = 7;

static double cpu_ghz(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[256];
    double mhz = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "cpu MHz : %lf", &mhz) == 1) break;
    fclose(f);
    return mhz / 1000.0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

typedef struct probe {
    const char *name;
    double flop;
    rp_status (*run)(const struct probe *p, rp_dtype compute);
    int m, n, k;         /* gemm */
    kernels_conv_desc d; /* conv */
    int pass;            /* conv: 0 fwd, 1 bwd data, 2 bwd weights */
    float *a, *b, *c;    /* buffers */
} probe;

static rp_status run_gemm(const probe *p, rp_dtype compute)
{
    if (compute == RP_BF16)
        return kcpu_gemm_bf16(false, false, p->m, p->n, p->k, 1.0f, p->a, p->k, p->b, p->n, 0.0f,
                              p->c, p->n);
    kcpu_gemm(false, false, p->m, p->n, p->k, 1.0f, p->a, p->k, p->b, p->n, 0.0f, p->c, p->n);
    return RP_OK;
}

static rp_status run_conv(const probe *p, rp_dtype compute)
{
    kernels_conv_desc d = p->d;
    d.compute = compute;
    if (p->pass == 0) return kcpu_conv2d_fwd(p->c, p->a, p->b, NULL, &d);
    if (p->pass == 1) return kcpu_conv2d_bwd_data(p->a, p->c, p->b, &d);
    return kcpu_conv2d_bwd_weights(p->b, NULL, p->c, p->a, &d);
}

/* Seconds per call: repeats until at least 50 ms have passed. */
static double time_once(const probe *p, rp_dtype compute)
{
    if (p->run(p, compute) != RP_OK) {
        fprintf(stderr, "bench_bf16: %s failed: %s\n", p->name, rp_last_error());
        exit(1);
    }
    int reps = 0;
    double t0 = rp_now_s(), t;
    do {
        p->run(p, compute);
        reps++;
        t = rp_now_s() - t0;
    } while (t < 0.05);
    return t / reps;
}

static float *filled(int64_t n)
{
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) exit(1);
    rp_rng_fill_uniform(7, 0, x, (size_t)n, -1, 1);
    return x;
}

int main(int argc, char **argv)
{
    int threads = 0;
    double ghz = 0;
    static const struct option opts[] = {{"threads", required_argument, 0, 't'},
                                         {"ghz", required_argument, 0, 'g'},
                                         {"rounds", required_argument, 0, 'r'},
                                         {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (c == 't')
            threads = atoi(optarg);
        else if (c == 'g')
            ghz = atof(optarg);
        else if (c == 'r')
            g_rounds = atoi(optarg);
        else
            return 2;
    }
    if (g_rounds < 1 || g_rounds > 101) g_rounds = 7;
    rp_kernels_set_threads(threads);
    threads = rp_kernels_get_threads();
    if (ghz <= 0) ghz = cpu_ghz();
    const char *path = rp_kernels_bf16_path();
    double per_cycle = !strcmp(path, "amx") ? 1024 : !strcmp(path, "avx512_bf16") ? 128 : 64;
    double peak_bf16 = threads * ghz * per_cycle, peak_f32 = threads * ghz * 64;
    printf("bf16 path: %s; %d threads at %.2f GHz: peak %.0f GFLOP/s bf16, %.0f f32\n", path,
           threads, ghz, peak_bf16, peak_f32);

    probe probes[16];
    int np = 0;
    static const int gemm_sizes[] = {512, 1024, 2048};
    for (int i = 0; i < 3; i++) {
        int s = gemm_sizes[i];
        probe *p = &probes[np++];
        memset(p, 0, sizeof *p);
        p->name = i == 0 ? "gemm 512^3" : i == 1 ? "gemm 1024^3" : "gemm 2048^3";
        p->m = p->n = p->k = s;
        p->flop = 2.0 * s * s * s;
        p->run = run_gemm;
        p->a = filled((int64_t)s * s), p->b = filled((int64_t)s * s), p->c = filled((int64_t)s * s);
    }
    /* ResNet-50 at batch 32: a 3x3 bottleneck conv of stage 2 and a 1x1 expansion of stage 3. */
    static const struct {
        const char *name;
        int n, h, c, o, k, stride, pad;
    } convs[] = {{"conv 3x3 56^2 64->64", 32, 56, 64, 64, 3, 1, 1},
                 {"conv 1x1 28^2 128->512", 32, 28, 128, 512, 1, 1, 0}};
    static const char *passes[] = {"fwd", "bwd data", "bwd weights"};
    for (int i = 0; i < 2; i++)
        for (int pass = 0; pass < 3; pass++) {
            probe *p = &probes[np++];
            memset(p, 0, sizeof *p);
            static char names[6][64];
            snprintf(names[i * 3 + pass], 64, "%s %s", convs[i].name, passes[pass]);
            p->name = names[i * 3 + pass];
            kernels_conv_desc_init(&p->d, convs[i].n, convs[i].h, convs[i].h, convs[i].c,
                                   convs[i].o, convs[i].k, convs[i].k, convs[i].stride,
                                   convs[i].pad);
            p->pass = pass;
            p->run = run_conv;
            p->flop = 2.0 * p->d.n * p->d.oh * p->d.ow * p->d.o * p->d.kh * p->d.kw * p->d.c;
            p->a = filled((int64_t)p->d.n * p->d.h * p->d.w * p->d.c);
            p->b = filled((int64_t)p->d.o * p->d.kh * p->d.kw * p->d.c);
            p->c = filled((int64_t)p->d.n * p->d.oh * p->d.ow * p->d.o);
        }

    printf("%-34s %10s %10s %8s %9s %9s\n", "probe", "f32 GF/s", "bf16 GF/s", "bf16/f32",
           "f32 peak", "bf16 peak");
    for (int i = 0; i < np; i++) {
        probe *p = &probes[i];
        double tf[101], tb[101];
        for (int r = 0; r < g_rounds; r++) {
            if (r % 2) {
                tb[r] = time_once(p, RP_BF16);
                tf[r] = time_once(p, RP_F32);
            } else {
                tf[r] = time_once(p, RP_F32);
                tb[r] = time_once(p, RP_BF16);
            }
        }
        double gf = p->flop / median(tf, g_rounds) / 1e9, gb = p->flop / median(tb, g_rounds) / 1e9;
        printf("%-34s %10.1f %10.1f %7.2fx %8.1f%% %8.1f%%\n", p->name, gf, gb, gb / gf,
               100 * gf / peak_f32, 100 * gb / peak_bf16);
        free(p->a), free(p->b), free(p->c);
    }
    return 0;
}
