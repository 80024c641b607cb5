/*
 * report.c - what a run shows and records: the progress line, the line of
 * each epoch, and metrics.jsonl. Only the process of replica 0 writes them.
 */
#include <math.h>
#include <stdio.h>

#include "train_internal.h"

static void format_duration(double s, char *buf, size_t size)
{
    int total = isfinite(s) && s > 0 ? (int)(s + 0.5) : 0;
    if (total >= 3600) snprintf(buf, size, "%dh%02dm", total / 3600, total / 60 % 60);
    else snprintf(buf, size, "%dm%02ds", total / 60, total % 60);
}

/*
 * After step `step` (from 0) of `epoch`, the run's `global_done`-th: on a terminal, the live
 * line, redrawn at most 4 times a second and at the epoch's last step; otherwise a plain line
 * about every tenth of an epoch. `loss` is the mean loss so far, `done` the epoch's steps in
 * `seconds`.
 */
void train_print_progress(rp_trainer *t, int64_t epoch, int64_t step, int64_t global_done, double loss,
                          float lr, int64_t done, double seconds)
{
    if (t->cfg.quiet || !t->root) return;
    double now = rp_now_s();
    bool last = step + 1 == t->steps_per_epoch;
    double rate = seconds > 0 ? (double)done * t->cfg.batch / seconds : 0;
    if (t->tty) {
        if (now - t->t_print <= 0.25 && !last) return;
        double left = (double)(t->steps_per_epoch * t->cfg.epochs - global_done) *
                      t->cfg.batch / rate;
        char eta[32];
        format_duration(left, eta, sizeof eta);
        fprintf(stderr, "\r  epoch %lld/%d  step %lld/%lld  loss %.4f  lr %.4f  %.0f %s  ETA %s  ",
                (long long)epoch + 1, t->cfg.epochs, (long long)step + 1, (long long)t->steps_per_epoch,
                loss, (double)lr, rate, t->cfg.rate_unit, eta);
        t->t_print = now;
        return;
    }
    int64_t every = t->steps_per_epoch >= 10 ? t->steps_per_epoch / 10 : 1;
    if ((step + 1) % every != 0 || last) return;
    fprintf(stderr, "  epoch %lld/%d  step %lld/%lld  loss %.4f  lr %.4f  %.0f %s\n", (long long)epoch + 1,
            t->cfg.epochs, (long long)step + 1, (long long)t->steps_per_epoch, loss, (double)lr, rate,
            t->cfg.rate_unit);
}

/* "  epoch 3/8  train loss 0.3058  test loss 0.3202  test acc 87.81%  750 img/s  80s" */
void train_print_epoch(const rp_trainer *t, int64_t epoch, double train_loss, double rate,
                       double seconds, const rp_trainer_metrics *m)
{
    if (t->cfg.quiet || !t->root) return;
    char shown[RP_TRAINER_MAX_METRICS * 68] = "";
    size_t len = 0;
    for (int i = 0; m && i < m->n; i++)
        if (m->m[i].shown[0] && len < sizeof shown)
            len += (size_t)snprintf(shown + len, sizeof shown - len, "  %s", m->m[i].shown);
    fprintf(stderr, "%s  epoch %lld/%d  train loss %.4f%s  %.0f %s  %.0fs\n", t->tty ? "\r" : "",
            (long long)epoch + 1, t->cfg.epochs, train_loss, shown, rate, t->cfg.rate_unit, seconds);
}

/* An evaluation between epochs (eval_every_steps): "  step 200  test loss ...". */
void train_print_eval(const rp_trainer *t, const rp_trainer_metrics *m)
{
    if (t->cfg.quiet || !t->root) return;
    fprintf(stderr, "%s  step %lld", t->tty ? "\r" : "", (long long)t->global_step);
    for (int i = 0; i < m->n; i++)
        if (m->m[i].shown[0]) fprintf(stderr, "  %s", m->m[i].shown);
    fprintf(stderr, "\n");
}

static void metrics_values(const rp_trainer *t, const rp_trainer_metrics *m)
{
    for (int i = 0; m && i < m->n; i++) fprintf(t->metrics, ",\"%s\":%.6f", m->m[i].key, m->m[i].value);
}

/* The rate of the last step taken. */
static double last_lr(const rp_trainer *t)
{
    return (double)rp_schedule_lr(&t->sched, t->global_step - 1);
}

void train_metrics_step(const rp_trainer *t, int64_t epoch, double loss)
{
    if (!t->metrics) return;
    fprintf(t->metrics, "{\"step\":%lld,\"epoch\":%lld,\"loss\":%.6f,\"lr\":%.6g}\n",
            (long long)t->global_step, (long long)epoch + 1, loss, last_lr(t));
    fflush(t->metrics);
}

void train_metrics_epoch(const rp_trainer *t, int64_t epoch, double train_loss, double rate,
                         const rp_trainer_metrics *m)
{
    if (!t->metrics) return;
    fprintf(t->metrics, "{\"step\":%lld,\"epoch\":%lld,\"train_loss\":%.6f", (long long)t->global_step,
            (long long)epoch + 1, train_loss);
    metrics_values(t, m);
    fprintf(t->metrics, ",\"%s\":%.1f,\"lr\":%.6g}\n", t->cfg.rate_key, rate, last_lr(t));
    fflush(t->metrics);
}

void train_metrics_eval(const rp_trainer *t, const rp_trainer_metrics *m)
{
    if (!t->metrics) return;
    fprintf(t->metrics, "{\"step\":%lld,\"epoch\":%lld", (long long)t->global_step, (long long)t->epoch + 1);
    metrics_values(t, m);
    fprintf(t->metrics, "}\n");
    fflush(t->metrics);
}
