/*
 * classifier_bench_command.c - `replicator bench resnet`: training throughput of a ResNet on
 * synthetic data (data loading is not measured), comparable one to one with
 * bench/resnet_torch.py. Its usage is the command's (`replicator bench` alone or with --help),
 * which lists the other benchmarks.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "models/classifier/classifier_command.h"
#include "models/resnet/resnet.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: replicator bench resnet [options]\n"
            "       replicator bench sngan [--help]       (one SN-GAN iteration)\n"
            "       replicator bench allreduce [--help]   (collective bandwidth)\n"
            "       replicator bench ps [--help]          (parameter-server updates/s)\n"
            "       replicator bench pipeline [--help]    (the pipeline bubble on ResNet stages)\n"
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
            "  --threads T   kernel threads in all (default: all cores)\n"
            "  --replicas N  data-parallel replicas sharing the batch (default 1); under\n"
            "                mpirun, in each rank (mpirun -np 2 replicator bench resnet)\n"
            "  --threads-per-replica T  (default: threads / replicas)\n"
            "  --backend B   threads, mpi or auto (default: mpi under mpirun)\n"
            "  --local-bn    per-replica batch norm (default: cross-replica, as in training)\n"
            "  --precision P f32 (default) or bf16: convolutions and linear layers multiply in\n"
            "                bf16 on this CPU's bf16 path (replicator info names it), as\n"
            "                train --precision bf16 (docs/precision.md)\n"
            "  --trace FILE  write a Chrome trace-event JSON of the steps to FILE (open it in\n"
            "                ui.perfetto.dev; docs/tracing.md)\n"
            "  --no-recompute  store the blocks' inner batch norm + ReLU outputs instead of\n"
            "                recomputing them in backward (the default recomputes: less memory,\n"
            "                one more pass each)\n"
            "  --memory      print where the memory goes: peak resident memory, parameters,\n"
            "                gradients, optimizer state, the arena (activations and their\n"
            "                gradients) and the kernels' caches\n"
            "  --torch SCRIPT  with --memory: also run SCRIPT (bench/torch_env.sh) on the same\n"
            "                model, batch, steps, threads and precision (bf16: its autocast),\n"
            "                once per memory format, and print its peak resident memory next to\n"
            "                ours\n"
            "  --json        JSON instead of text: one line (a second with --memory)\n");
}

/* One replica's model, optimizer and synthetic batch. */
typedef struct bench_state {
    rp_resnet *net;
    rp_optimizer *opt;
    float *images;
    int32_t *labels;
    /* Memory, the largest seen over the steps: */
    size_t forward_live; /* arena bytes live when the forward pass ends */
    size_t arena_live_peak, arena_footprint, kernel_cache;
    float loss; /* the last step's */
} bench_state;

typedef struct bench_job {
    rp_resnet_kind kind;
    int batch; /* per replica */
    int size, channels;
    bool cross_bn, recompute;
    bench_state *states;
} bench_job;

static rp_status bench_build(rp_replica *rep, void *arg)
{
    bench_job *job = arg;
    bench_state *s = &job->states[rp_replica_local_index(rep)];
    rp_replica_set_user(rep, s);
    bool small = job->kind == RP_RESNET20;
    rp_resnet_config cfg = rp_resnet_config_default(job->kind);
    cfg.in_channels = job->channels;
    cfg.classes = small ? 10 : 1000;
    cfg.recompute_bn = job->recompute;
    if (rp_replica_count(rep) > 1 && job->cross_bn) {
        cfg.bn_comm = rp_replica_axis_comm(rep, RP_AXIS_DATA);
    }
    RP_CHECK(rp_resnet_create(&s->net, &cfg, 1));
    rp_optim_config oc = rp_optim_config_default();
    oc.weight_decay = 5e-4f;
    RP_CHECK(rp_replica_optimizer_create(rep, &s->opt, rp_resnet_params(s->net), &oc));
    int64_t n_pixels = (int64_t)job->batch * job->size * job->size * job->channels;
    s->images = rp_alloc((size_t)n_pixels * sizeof(float));
    s->labels = rp_alloc((size_t)job->batch * sizeof(int32_t));
    if (!s->images || !s->labels) return rp_last_status();
    /* Replica r holds samples [r*b, (r+1)*b) of the global batch. */
    rp_rng_fill_normal(rp_hash_str(1, "bench"), (uint64_t)(n_pixels * rp_replica_id(rep)),
                       s->images, (size_t)n_pixels, 0.0f, 1.0f);
    for (int i = 0; i < job->batch; i++)
        s->labels[i] = (i + job->batch * rp_replica_id(rep)) % cfg.classes;
    return RP_OK;
}

static rp_status bench_step(rp_replica *rep, void *arg)
{
    bench_job *job = arg;
    bench_state *s = rp_replica_user(rep);
    rp_tape *t = rp_replica_tape(rep);
    rp_tensor *x =
        rp_tensor_from(t, 4, (int[]){job->batch, job->size, job->size, job->channels}, s->images);
    rp_tensor *loss = rp_softmax_cross_entropy(t, rp_resnet_forward(t, s->net, x, true), s->labels);
    if (!loss) return rp_last_status();
    rp_arena_stats a = rp_arena_get_stats(rp_tape_storage(t));
    if (a.live > s->forward_live) s->forward_live = a.live;
    s->loss = rp_item(loss);
    RP_CHECK(rp_backward(t, loss));
    RP_CHECK(rp_optimizer_step(s->opt, 0.01f));
    a = rp_arena_get_stats(rp_tape_storage(t));
    if (a.live_peak > s->arena_live_peak) s->arena_live_peak = a.live_peak;
    if (a.high_water > s->arena_footprint) s->arena_footprint = a.high_water;
    size_t cache = rp_kernels_cache_bytes();
    if (cache > s->kernel_cache) s->kernel_cache = cache;
    return RP_OK;
}

static rp_status bench_destroy(rp_replica *rep, void *arg)
{
    bench_state *s = rp_replica_user(rep);
    if (!s) return RP_OK;
    rp_optimizer_destroy(s->opt);
    rp_resnet_destroy(s->net);
    rp_free(s->images);
    rp_free(s->labels);
    return RP_OK;
}

/*
 * Runs `script --model ... --format fmt --json` (bench/torch_env.sh) to its end and returns its
 * peak resident memory in bytes (wait4's ru_maxrss), or 0 with a message on stderr.
 */
static double torch_peak(const char *script, rp_resnet_kind kind, int batch, int size, int channels,
                         int iters, int threads, const char *fmt, rp_dtype precision)
{
    char b[16], s[16], c[16], it[16], th[16];
    snprintf(b, sizeof b, "%d", batch);
    snprintf(s, sizeof s, "%d", size);
    snprintf(c, sizeof c, "%d", channels);
    snprintf(it, sizeof it, "%d", iters);
    snprintf(th, sizeof th, "%d", threads);
    char *argv[] = {(char *)script,
                    "--model",
                    (char *)rp_resnet_kind_name(kind),
                    "--batch",
                    b,
                    "--size",
                    s,
                    "--in-ch",
                    c,
                    "--iters",
                    it,
                    "--threads",
                    th,
                    "--format",
                    (char *)fmt,
                    "--precision",
                    precision == RP_BF16 ? "bf16" : "f32",
                    "--json",
                    NULL};
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "replicator bench: --torch: fork failed: %s\n", strerror(errno));
        return 0;
    }
    if (pid == 0) {
        /* Its output would mix with ours: only its peak is wanted (run it alone to see it). */
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(127);
        execv(script, argv);
        _exit(127);
    }
    int wst = 0;
    struct rusage u;
    if (wait4(pid, &wst, 0, &u) != pid || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
        fprintf(stderr,
                "replicator bench: --torch: %s --format %s failed; run it by hand to see why\n",
                script, fmt);
        return 0;
    }
    return (double)u.ru_maxrss * 1024.0;
}

static void print_bytes(const char *what, double bytes, const char *note)
{
    printf("  %-28s %9.1f MB%s%s\n", what, bytes / 1e6, note ? "  " : "", note ? note : "");
}

/* What --memory reports, in bytes; the breakdown is replica 0's. */
typedef struct bench_memory {
    double peak; /* the process's peak resident set */
    double params, grads, optim, forward, live_peak, footprint, kernels;
    int replicas_here;
} bench_memory;

static void print_memory(const bench_memory *m, double torch_nhwc, double torch_nchw,
                         rp_dtype precision, bool json)
{
    if (json) {
        printf(
            "{\"framework\":\"replicator\",\"precision\":\"%s\",\"memory\":{\"peak_resident\":%.0f,"
            "\"parameters\":%.0f,\"gradients\":%.0f,\"optimizer_state\":%.0f,"
            "\"arena_footprint\":%.0f,\"arena_live_peak\":%.0f,\"forward_live\":%.0f,"
            "\"kernel_caches\":%.0f,\"replicas_in_process\":%d,"
            "\"pytorch_peak_channels_last\":%.0f,\"pytorch_peak_nchw\":%.0f}}\n",
            rp_dtype_name(precision), m->peak, m->params, m->grads, m->optim, m->footprint,
            m->live_peak, m->forward, m->kernels, m->replicas_here, torch_nhwc, torch_nchw);
        return;
    }
    char note[96];
    printf("memory (replica 0; %d replica%s in this process; %s):\n", m->replicas_here,
           m->replicas_here > 1 ? "s" : "", rp_dtype_name(precision));
    print_bytes("peak resident (process)", m->peak, NULL);
    print_bytes("parameters and buffers", m->params, NULL);
    print_bytes("gradients", m->grads, NULL);
    print_bytes("optimizer state", m->optim, NULL);
    snprintf(note, sizeof note, "at most %.1f MB live; %.1f MB when the forward pass ends",
             m->live_peak / 1e6, m->forward / 1e6);
    print_bytes("arena (activations, grads)", m->footprint, note);
    print_bytes("kernel caches", m->kernels, "oneDNN scratchpad, staging, reordered weights");
    if (torch_nhwc > 0)
        print_bytes(
            precision == RP_BF16 ? "pytorch bf16, channels-last" : "pytorch peak, channels-last",
            torch_nhwc,
            (snprintf(note, sizeof note, "ours / theirs %.2f", m->peak / torch_nhwc), note));
    if (torch_nchw > 0)
        print_bytes(
            precision == RP_BF16 ? "pytorch bf16, NCHW" : "pytorch peak, NCHW", torch_nchw,
            (snprintf(note, sizeof note, "ours / theirs %.2f", m->peak / torch_nchw), note));
}

/* Minor and major page faults of the whole process so far. */
static long page_faults(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_minflt + u.ru_majflt : 0;
}

int classifier_bench_main(int argc, char **argv)
{
    /* `replicator bench` with no benchmark named (cli/dispatch.c): the command's usage. */
    if (argc < 2 && !strcmp(argv[0], "bench")) {
        usage(stderr);
        return 2;
    }
    rp_resnet_kind kind = RP_RESNET20;
    int batch = 0, size = 0, channels = 0, iters = 0, warmup = -1, threads = 0, replicas = 1,
        tpr = 0;
    bool json = false, cross_bn = true;
    const char *trace = NULL, *torch = NULL;
    bool memory = false, recompute = true;
    rp_backend backend = RP_BACKEND_AUTO;
    rp_dtype precision = RP_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
            continue;
        } else if (!strcmp(a, "--local-bn")) {
            cross_bn = false;
            continue;
        } else if (!strcmp(a, "--memory")) {
            memory = true;
            continue;
        } else if (!strcmp(a, "--no-recompute")) {
            recompute = false;
            continue;
        }
        if (!v) {
            fprintf(stderr, "replicator bench: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--backend")) {
            if (strcmp(v, "auto") && strcmp(v, "threads") && strcmp(v, "mpi")) {
                fprintf(stderr, "replicator bench: --backend %s: expected threads, mpi or auto\n",
                        v);
                return 2;
            }
            backend = !strcmp(v, "mpi")       ? RP_BACKEND_MPI
                      : !strcmp(v, "threads") ? RP_BACKEND_THREADS
                                              : RP_BACKEND_AUTO;
            continue;
        }
        if (!strcmp(a, "--precision")) {
            if (!rp_bench_precision_parse(v, &precision)) {
                fprintf(stderr, "replicator bench: --precision %s: expected f32 or bf16\n", v);
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--torch")) {
            if (!*v) {
                fprintf(stderr, "replicator bench: --torch needs a script (bench/torch_env.sh)\n");
                return 2;
            }
            torch = v;
            continue;
        }
        if (!strcmp(a, "--trace")) {
            if (!*v) {
                fprintf(stderr, "replicator bench: --trace needs a file name\n");
                return 2;
            }
            trace = v;
            continue;
        }
        if (!strcmp(a, "--model")) {
            if (!rp_resnet_kind_parse(v, &kind)) {
                fprintf(stderr, "replicator bench: unknown model %s\n", v);
                return 2;
            }
            continue;
        }
        int *slot = !strcmp(a, "--batch")                 ? &batch
                    : !strcmp(a, "--size")                ? &size
                    : !strcmp(a, "--channels")            ? &channels
                    : !strcmp(a, "--iters")               ? &iters
                    : !strcmp(a, "--warmup")              ? &warmup
                    : !strcmp(a, "--threads")             ? &threads
                    : !strcmp(a, "--replicas")            ? &replicas
                    : !strcmp(a, "--threads-per-replica") ? &tpr
                                                          : NULL;
        /* Counts start at 1; only the untimed warm-up may be 0. */
        long n = 0;
        if (!slot || !rp_options_parse_long(v, slot == &warmup ? 0 : 1, 100000, &n)) {
            fprintf(stderr, "replicator bench: bad option %s %s (see --help)\n", a, v);
            return 2;
        }
        *slot = (int)n;
    }
    if (torch && !memory) {
        fprintf(stderr, "replicator bench: --torch goes with --memory\n");
        return 2;
    }
    bool small = kind == RP_RESNET20;
    if (!batch) batch = small ? 128 : 32;
    if (!size) size = small ? 28 : 224;
    if (!channels) channels = small ? 1 : 3;
    if (!iters) iters = small ? 20 : 3;
    /* Two untimed steps at least: the arena settles into one block at the second reset. */
    if (warmup < 0) warmup = small ? 3 : 2;
    if (replicas < 1) replicas = 1;
    bool mpi = backend == RP_BACKEND_MPI || (backend == RP_BACKEND_AUTO && rp_comm_mpi_launched());
    rp_kernels_set_threads(threads);
    /* Under MPI the runtime divides this host's cores among its ranks, unless --threads says. */
    if (!tpr && (!mpi || threads > 0))
        tpr = rp_kernels_get_threads() / replicas > 0 ? rp_kernels_get_threads() / replicas : 1;

    bench_job job = {kind, 0, size, channels, cross_bn, recompute, NULL};
    bench_memory mem = {0};
    rp_status status = RP_OK;
    rp_replicator *r = NULL;
    double *times = rp_alloc((size_t)(iters + 1) * sizeof(double));
    job.states = calloc((size_t)replicas, sizeof *job.states);
    if (!times || !job.states) {
        status = RP_ERROR(RP_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    rp_config cfg = rp_config_default();
    cfg.backend = mpi ? RP_BACKEND_MPI : RP_BACKEND_THREADS;
    cfg.replicas = replicas;
    cfg.threads_per_replica = tpr;
    cfg.precision = precision;
    cfg.stuck_exit = rp_trainer_stuck_exit();
    if (trace) RP_TRY(rp_file_check_writable(trace, "trace file")); /* now, not at the end */
    if (trace) RP_TRY(rp_trace_start(0)); /* before the replicator: its workers' buffers */
    RP_TRY(rp_replicator_create(&r, &cfg));
    /* The job's replicas share the batch (all ranks' under MPI); only the first rank prints. */
    int total_replicas = rp_replicator_replicas(r);
    bool root = rp_replica_id(rp_replicator_replica(r, 0)) == 0;
    tpr = rp_replicator_threads_per_replica(r);
    if (batch % total_replicas != 0) {
        status = RP_ERROR(RP_ERR_INVALID, "--batch %d does not split across %d replicas", batch,
                          total_replicas);
        goto cleanup;
    }
    job.batch = batch / total_replicas;
    replicas = total_replicas;
    RP_TRY(rp_replicator_run(r, bench_build, &job));
    double total = 0;
    long faults0 = 0;
    uint64_t allocs0 = 0;
    for (int it = 0; it < warmup + iters; it++) {
        if (it == warmup) {
            faults0 = page_faults();
            allocs0 = rp_alloc_count();
        }
        double t0 = rp_now_s();
        RP_TRY(rp_replicator_run(r, bench_step, &job));
        double dt = rp_now_s() - t0;
        if (it >= warmup) {
            times[it - warmup] = dt;
            total += dt;
        }
    }
    /* The process's, over the timed steps: the steady state should fault no pages (issue 17). */
    double faults = (double)(page_faults() - faults0) / iters;
    /* And our own allocations (rp_alloc, every thread): none once the arena has settled. */
    double allocs = (double)(rp_alloc_count() - allocs0) / iters;
    if (trace) RP_TRY(rp_replicator_trace_write(r, trace));
    double med = rp_bench_median(times, iters);
    double ips = (double)batch * iters / total;
    /* What the replicas' tapes ran with, not what was asked. */
    char prec_json[96], prec_text[64];
    rp_dtype ran = rp_bench_precision_ran(r);
    rp_bench_precision_json(ran, prec_json, sizeof prec_json);
    rp_bench_precision_text(ran, prec_text, sizeof prec_text);
    if (!root) {
        /* another rank prints */
    } else if (json)
        printf("{\"framework\":\"replicator\",\"model\":\"%s\",\"batch\":%d,\"size\":%d,"
               "\"channels\":%d,\"replicas\":%d,\"threads_per_replica\":%d,\"bn\":\"%s\","
               "\"format\":\"nhwc\",\"images_per_s\":%.2f,\"ms_per_step\":%.2f,"
               "\"median_ms_per_step\":%.2f,\"page_faults_per_step\":%.1f,"
               "\"allocations_per_step\":%.1f,\"backend\":\"%s\",%s,\"final_loss\":%.6g}\n",
               rp_resnet_kind_name(kind), batch, size, channels, replicas, tpr,
               replicas > 1 && cross_bn ? "cross-replica" : "local", ips, 1e3 * total / iters,
               1e3 * med, faults, allocs, rp_replicator_backend(r), prec_json,
               (double)job.states[0].loss);
    else
        printf("replicator %s batch %d %dx%dx%d, %d replica%s x %d threads (%s)%s, %s: %.1f "
               "images/s (%.1f ms/step, median %.1f; %.1f page faults, %.1f allocations/step)\n",
               rp_resnet_kind_name(kind), batch, size, size, channels, replicas,
               replicas > 1 ? "s" : "", tpr, rp_replicator_backend(r),
               replicas > 1 ? (cross_bn ? ", cross-replica BN" : ", local BN") : "", prec_text, ips,
               1e3 * total / iters, 1e3 * med, faults, allocs);
    if (memory && root) {
        const bench_state *s = &job.states[0];
        const rp_params *params = rp_resnet_params(s->net);
        mem = (bench_memory){
            .params = (double)rp_params_numel(params) * sizeof(float),
            .grads = (double)rp_params_trainable_numel(params) * sizeof(float),
            .optim = (double)rp_optimizer_state_bytes(s->opt),
            .forward = (double)s->forward_live,
            .live_peak = (double)s->arena_live_peak,
            .footprint = (double)s->arena_footprint,
            .kernels = (double)s->kernel_cache,
            .replicas_here = rp_replicator_local_replicas(r),
        };
        struct rusage u;
        mem.peak = getrusage(RUSAGE_SELF, &u) == 0 ? (double)u.ru_maxrss * 1024.0 : 0;
    }

cleanup:
    if (r) {
        rp_status teardown = rp_replicator_run(r, bench_destroy, &job);
        if (status == RP_OK) status = teardown;
    }
    rp_replicator_destroy(r);
    if (trace) rp_trace_stop();
    free(job.states);
    rp_free(times);
    if (status != RP_OK) {
        fprintf(stderr, "replicator bench: error: %s\n", rp_last_error());
        return 1;
    }
    /* After the teardown, so PyTorch's run does not share the machine's memory with ours. */
    if (mem.peak > 0) {
        double nhwc = 0, nchw = 0;
        if (torch) {
            nhwc = torch_peak(torch, kind, batch, size, channels, iters, tpr * replicas,
                              "channels_last", precision);
            nchw = torch_peak(torch, kind, batch, size, channels, iters, tpr * replicas, "nchw",
                              precision);
        }
        print_memory(&mem, nhwc, nchw, precision, json);
    }
    return 0;
}
