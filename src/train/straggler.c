/*
 * straggler.c - the straggler report: which replica is consistently slower
 * than its peers, in which phase.
 *
 * Every lockstep step each replica reports its phase self times (data wait,
 * compute, optimizer, collectives: replicator/trace.h), which ride along with
 * the report exchange the step makes anyway (rp_replicator_result_each). A
 * window of the last W steps is kept; a replica is a straggler in a phase when
 * its median time there over the window exceeds STRAGGLER_RATIO times the
 * median of the other replicas' medians and by more than STRAGGLER_FLOOR_S.
 * Collective time is never blamed: it is where the peers of a straggler wait
 * for it (their wait grows, their compute does not). A report is logged when
 * a straggler is found, changes (replica or phase) or clears (its ratio falls
 * under STRAGGLER_CLEAR), never once per step; the progress line carries it
 * while it lasts.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_internal.h"

#define STRAGGLER_RATIO     1.5
#define STRAGGLER_CLEAR     1.25
#define STRAGGLER_FLOOR_S   2e-3
#define STRAGGLER_MIN_STEPS 10
#define HOST_LEN            64

/* The phases a replica can be blamed for, and their report names (all four are reported). */
static const rp_trace_phase blamed[] = {RP_PHASE_DATA, RP_PHASE_COMPUTE, RP_PHASE_OPTIMIZER};
static const char *const report_names[TRAIN_PHASES] = {"phase_data", "phase_compute",
                                                       "phase_optimizer", "phase_comm"};
static const rp_trace_phase reported[TRAIN_PHASES] = {RP_PHASE_DATA, RP_PHASE_COMPUTE,
                                                      RP_PHASE_OPTIMIZER, RP_PHASE_COMM};

rp_status trainer_straggler_init(rp_trainer *t)
{
    train_straggler *s = &t->straggler;
    memset(s, 0, sizeof *s);
    s->replica = -1;
    s->n = rp_replicator_replicas(t->rep);
    s->window = t->cfg.straggler_window;
    if (!t->lockstep || s->n < 2 || s->window <= 0) return RP_OK; /* nothing to compare */
    s->times = calloc((size_t)s->window * (size_t)s->n * TRAIN_PHASES, sizeof(double));
    s->scratch = calloc((size_t)(s->window > s->n ? s->window : s->n), sizeof(double));
    s->medians = calloc((size_t)s->n * TRAIN_PHASES, sizeof(double));
    s->step = calloc((size_t)s->n, sizeof(double));
    s->hosts = calloc((size_t)s->n, HOST_LEN);
    if (!s->times || !s->scratch || !s->medians || !s->step || !s->hosts) {
        trainer_straggler_free(t);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the straggler report's window");
    }
    s->on = true;
    return RP_OK;
}

void trainer_straggler_free(rp_trainer *t)
{
    train_straggler *s = &t->straggler;
    free(s->times);
    free(s->scratch);
    free(s->medians);
    free(s->step);
    free(s->hosts);
    s->times = s->scratch = s->medians = s->step = NULL;
    s->hosts = NULL;
    s->on = false;
}

rp_status trainer_straggler_report(rp_replica *rep)
{
    double ph[RP_PHASE_COUNT];
    rp_trace_phase_take(ph);
    for (int k = 0; k < TRAIN_PHASES; k++)
        RP_CHECK(rp_replica_report(rep, report_names[k], ph[reported[k]], RP_SUM));
    return RP_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Every replica's host name into s->hosts, once (a run: each replica's name, gathered). */
static rp_status hosts_fn(rp_replica *rep, void *arg)
{
    rp_trainer *t = arg;
    char mine[HOST_LEN] = "";
    if (gethostname(mine, sizeof mine) != 0) snprintf(mine, sizeof mine, "?");
    mine[HOST_LEN - 1] = '\0';
    char *all = rp_replica_local_index(rep) == 0 ? t->straggler.hosts : NULL;
    if (!all) {
        /* Other local replicas take part in the gather too; one copy is kept. */
        char *tmp = malloc((size_t)t->straggler.n * HOST_LEN);
        if (!tmp) return RP_ERROR(RP_ERR_NOMEM, "cannot gather the replicas' host names");
        rp_status st = rp_all_gather(rep, mine, tmp, HOST_LEN, RP_U8);
        free(tmp);
        return st;
    }
    return rp_all_gather(rep, mine, all, HOST_LEN, RP_U8);
}

rp_status trainer_straggler_step(rp_trainer *t)
{
    train_straggler *s = &t->straggler;
    if (!s->on) return RP_OK;
    int n = s->n, w = s->window;
    double *row = s->times + (size_t)s->next * (size_t)n * TRAIN_PHASES;
    for (int k = 0; k < TRAIN_PHASES; k++) {
        RP_CHECK(rp_replicator_result_each(t->rep, report_names[k], s->step, n));
        for (int q = 0; q < n; q++)
            row[q * TRAIN_PHASES + k] = s->step[q];
    }
    s->next = (s->next + 1) % w;
    if (s->filled < w) s->filled++;
    int need = w < STRAGGLER_MIN_STEPS ? w : STRAGGLER_MIN_STEPS;
    if (s->filled < need) return RP_OK;

    /* Each replica's median per phase over the window. */
    for (int q = 0; q < n; q++)
        for (int k = 0; k < TRAIN_PHASES; k++) {
            for (int i = 0; i < s->filled; i++)
                s->scratch[i] = s->times[((size_t)i * (size_t)n + (size_t)q) * TRAIN_PHASES + k];
            s->medians[q * TRAIN_PHASES + k] = median(s->scratch, s->filled);
        }
    /* The worst (replica, phase) by its ratio to the median of the others. */
    int worst = -1, worst_phase = 0;
    double worst_ratio = 0, current_ratio = 0;
    for (size_t b = 0; b < sizeof blamed / sizeof blamed[0]; b++) {
        int k = (int)b; /* blamed[] follow reported[]'s first entries */
        for (int q = 0; q < n; q++) {
            int m = 0;
            for (int o = 0; o < n; o++)
                if (o != q) s->scratch[m++] = s->medians[o * TRAIN_PHASES + k];
            double others = median(s->scratch, m), own = s->medians[q * TRAIN_PHASES + k];
            double ratio = others > 0 ? own / others : own > STRAGGLER_FLOOR_S ? 1e9 : 0;
            if (q == s->replica && k == s->phase) current_ratio = ratio;
            if (own - others > STRAGGLER_FLOOR_S && ratio > worst_ratio) {
                worst_ratio = ratio;
                worst = q;
                worst_phase = k;
            }
        }
    }
    bool found = worst >= 0 && worst_ratio > STRAGGLER_RATIO;
    /* The reported one stays while it is above the clearing ratio and no other is worse. */
    if (s->replica >= 0 && current_ratio > STRAGGLER_CLEAR &&
        (!found || (worst == s->replica && worst_phase == s->phase))) {
        s->ratio = current_ratio;
        snprintf(t->straggler_text, sizeof t->straggler_text, "  straggler: replica %d %s %.1fx",
                 s->replica, rp_trace_phase_name(blamed[s->phase]), s->ratio);
        return RP_OK;
    }
    if (!found) {
        if (s->replica >= 0 && t->root)
            rp_info("straggler: cleared (replica %d's %s is within %.2fx of the others' median "
                    "over the last %d steps)",
                    s->replica, rp_trace_phase_name(blamed[s->phase]), STRAGGLER_CLEAR, s->filled);
        s->replica = -1;
        t->straggler_text[0] = '\0';
        return RP_OK;
    }
    if (!s->have_hosts) {
        RP_CHECK(rp_replicator_run(t->rep, hosts_fn, t));
        s->have_hosts = true;
    }
    s->replica = worst;
    s->phase = worst_phase;
    s->ratio = worst_ratio;
    s->reports++;
    const char *host = s->hosts + (size_t)worst * HOST_LEN;
    if (t->root) /* every process decides alike; the process of replica 0 says it */
        rp_warn("straggler: replica %d on host %s: %s %.1fx the median over the last %d steps",
                worst, host, rp_trace_phase_name(blamed[worst_phase]), worst_ratio, s->filled);
    snprintf(t->straggler_text, sizeof t->straggler_text, "  straggler: replica %d %s %.1fx", worst,
             rp_trace_phase_name(blamed[worst_phase]), worst_ratio);
    return RP_OK;
}
