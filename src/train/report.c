/*
 * report.c - what a run shows and records: the progress line, the line of
 * each epoch, metrics.jsonl and its numbers as TensorBoard scalars. Only the
 * process of replica 0 writes them.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train_internal.h"

static void format_duration(double s, char *buf, size_t size)
{
    int total = isfinite(s) && s > 0 ? (int)(s + 0.5) : 0;
    if (total >= 3600)
        snprintf(buf, size, "%dh%02dm", total / 3600, total / 60 % 60);
    else
        snprintf(buf, size, "%dm%02ds", total / 60, total % 60);
}

/* Digits after the point for a shown scalar: 4 for a loss (0.3058), fewer for counts and returns.
 */
static int value_digits(double v)
{
    double a = fabs(v);
    return a >= 1000 ? 0 : a >= 100 ? 1 : 4;
}

/* The shown scalars, each as "  <prefix><name> <value>", into buf. */
static void shown_scalars(const rp_trainer *t, const char *prefix, const double *means, char *buf,
                          size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < t->n_scalars; i++)
        if (t->shown[i] && len < size)
            len += (size_t)snprintf(buf + len, size - len, "  %s%s %.*f", prefix,
                                    t->scalar_names[i], value_digits(means[i]), means[i]);
}

/* Digits after the point for a rate: three significant ones below 100 (2.47 it/s), none above. */
static int rate_digits(double rate)
{
    return rate < 10 ? 2 : rate < 100 ? 1 : 0;
}

/* "  epoch 3/8  step 12/40" or, in steps-only mode, "  step 12/40". */
static void position_text(const rp_trainer *t, int64_t epoch, int64_t step, char *buf, size_t size)
{
    if (t->steps_only)
        snprintf(buf, size, "  step %lld/%lld", (long long)step + 1, (long long)t->steps_per_epoch);
    else
        snprintf(buf, size, "  epoch %lld/%d  step %lld/%lld", (long long)epoch + 1, t->cfg.epochs,
                 (long long)step + 1, (long long)t->steps_per_epoch);
}

/*
 * After step `step` (from 0) of `epoch`, the run's `global_done`-th: on a terminal, the live
 * line, redrawn at most 4 times a second and at the epoch's last step; otherwise a plain line
 * about every tenth of an epoch. `means` are the scalars' means so far, `done` the epoch's steps
 * in `seconds`.
 */
void trainer_print_progress(rp_trainer *t, int64_t epoch, int64_t step, int64_t global_done,
                            const double *means, float lr, int64_t done, double seconds)
{
    if (t->cfg.quiet || !t->root) return;
    double now = rp_now_s();
    bool last = step + 1 == t->steps_per_epoch;
    double rate = seconds > 0 ? (double)done * t->cfg.batch / seconds : 0;
    char where[96], values[RP_TRAINER_MAX_SCALARS * 48];
    if (t->tty) {
        if (now - t->t_print <= 0.25 && !last) return;
        double left =
            (double)(t->steps_per_epoch * t->cfg.epochs - global_done) * t->cfg.batch / rate;
        char eta[32];
        format_duration(left, eta, sizeof eta);
        position_text(t, epoch, step, where, sizeof where);
        shown_scalars(t, "", means, values, sizeof values);
        fprintf(stderr, "\r%s%s  lr %.4f  %.*f %s  ETA %s%s  ", where, values, (double)lr,
                rate_digits(rate), rate, t->cfg.rate_unit, eta, t->straggler_text);
        t->t_print = now;
        return;
    }
    int64_t every = t->steps_per_epoch >= 10 ? t->steps_per_epoch / 10 : 1;
    if ((step + 1) % every != 0 || last) return;
    position_text(t, epoch, step, where, sizeof where);
    shown_scalars(t, "", means, values, sizeof values);
    fprintf(stderr, "%s%s  lr %.4f  %.*f %s%s\n", where, values, (double)lr, rate_digits(rate),
            rate, t->cfg.rate_unit, t->straggler_text);
}

/*
 * "  epoch 3/8  train loss 0.3058  test loss 0.3202  test acc 87.81%  750 img/s  80s"; in
 * steps-only mode "  step 400/400  train loss ...".
 */
void trainer_print_epoch(const rp_trainer *t, int64_t epoch, const double *means, double rate,
                         double seconds, const rp_trainer_metrics *m)
{
    if (t->cfg.quiet || !t->root) return;
    char where[64], values[RP_TRAINER_MAX_SCALARS * 48], shown[RP_TRAINER_MAX_METRICS * 68] = "";
    size_t len = 0;
    for (int i = 0; m && i < m->n; i++)
        if (m->m[i].shown[0] && len < sizeof shown)
            len += (size_t)snprintf(shown + len, sizeof shown - len, "  %s", m->m[i].shown);
    if (t->steps_only)
        snprintf(where, sizeof where, "  step %lld/%lld", (long long)t->global_step,
                 (long long)t->steps_per_epoch);
    else
        snprintf(where, sizeof where, "  epoch %lld/%d", (long long)epoch + 1, t->cfg.epochs);
    shown_scalars(t, "train ", means, values, sizeof values);
    fprintf(stderr, "%s%s%s%s  %.*f %s  %.0fs\n", t->tty ? "\r" : "", where, values, shown,
            rate_digits(rate), rate, t->cfg.rate_unit, seconds);
}

/* An evaluation between epochs (eval_every_steps): "  step 200  test loss ...". */
void trainer_print_eval(const rp_trainer *t, const rp_trainer_metrics *m)
{
    if (t->cfg.quiet || !t->root) return;
    fprintf(stderr, "%s  step %lld", t->tty ? "\r" : "", (long long)t->global_step);
    for (int i = 0; i < m->n; i++)
        if (m->m[i].shown[0]) fprintf(stderr, "  %s", m->m[i].shown);
    fprintf(stderr, "\n");
}

/* ,"<prefix><key>":value with 6 decimals, or null: JSON has no NaN or infinity. */
static void json_value(const rp_trainer *t, const char *prefix, const char *key, double v)
{
    if (isfinite(v))
        fprintf(t->metrics, ",\"%s%s\":%.6f", prefix, key, v);
    else
        fprintf(t->metrics, ",\"%s%s\":null", prefix, key);
}

static void metrics_values(const rp_trainer *t, const rp_trainer_metrics *m)
{
    for (int i = 0; m && i < m->n; i++)
        json_value(t, "", m->m[i].key, m->m[i].value);
}

static void metrics_scalars(const rp_trainer *t, const char *prefix, const double *means)
{
    for (int i = 0; i < t->n_scalars; i++)
        json_value(t, prefix, t->scalar_names[i], means[i]);
}

/* {"step":S,"epoch":E (1-based; none in steps-only mode) */
static void metrics_position(const rp_trainer *t, int64_t epoch)
{
    fprintf(t->metrics, "{\"step\":%lld", (long long)t->global_step);
    if (!t->steps_only) fprintf(t->metrics, ",\"epoch\":%lld", (long long)epoch + 1);
}

/* The rate of the last step taken. */
static double last_lr(const rp_trainer *t)
{
    return (double)rp_schedule_lr(&t->sched, t->global_step - 1);
}

/*
 * Ends a metrics.jsonl line: flushes it and checks every write since the last flush (the stream's
 * error flag catches a failed fprintf too). A run must not die for a metrics line, but the user
 * must know that metrics.jsonl stops here: the failure is reported once, and the file is closed,
 * since a line cut short followed by whole ones would no longer parse as JSON lines.
 */
static void metrics_line_end(rp_trainer *t)
{
    errno = 0;
    bool flushed = fflush(t->metrics) == 0;
    int err = errno;
    if (flushed && !ferror(t->metrics)) return;
    rp_warn(
        "cannot write %s/metrics.jsonl (%s): the run goes on, without metrics from step %lld on",
        t->run_dir, err ? strerror(err) : "a write failed", (long long)t->global_step);
    fclose(t->metrics);
    t->metrics = NULL;
}

/* ---- TensorBoard: the same numbers as scalars ----------------------------------------------- */

/* The first failure warns and closes the file (it may end in a partial record); the run goes on. */
static void tb_failed(rp_trainer *t)
{
    rp_warn("TensorBoard events: %s; no more are written", rp_last_error());
    if (t->tb_writer->destroy) t->tb_writer->destroy(t->tb); /* its error was the one just shown */
    t->tb = NULL;
}

/*
 * "<group>/<prefix><key>" = v at the line's step. A value that is not finite is left out, as it is
 * null in metrics.jsonl: it stands for "none yet" (a gauge before its first reading).
 */
static void tb_scalar(rp_trainer *t, const char *group, const char *prefix, const char *key,
                      double v)
{
    if (!t->tb || !isfinite(v)) return;
    char tag[RP_TRAINER_TAG_MAX + 1];
    snprintf(tag, sizeof tag, "%s/%s%s", group, prefix, key);
    if (t->tb_writer->add(t->tb, tag, t->global_step, v) != RP_OK) tb_failed(t);
}

static void tb_values(rp_trainer *t, const rp_trainer_metrics *m)
{
    for (int i = 0; m && i < m->n; i++)
        tb_scalar(t, "eval", "", m->m[i].key, m->m[i].value);
}

static void tb_flush(rp_trainer *t)
{
    if (t->tb && t->tb_writer->flush(t->tb) != RP_OK) tb_failed(t);
}

void trainer_tensorboard_close(rp_trainer *t)
{
    if (!t->tb) return;
    if (t->tb_writer->destroy && t->tb_writer->destroy(t->tb) != RP_OK)
        rp_warn("TensorBoard events: %s", rp_last_error());
    t->tb = NULL;
}

/* ---- the lines ----------------------------------------------------------------------------- */

void trainer_metrics_step(rp_trainer *t, int64_t epoch, const double *means)
{
    if (t->metrics) {
        metrics_position(t, epoch);
        metrics_scalars(t, "", means);
        fprintf(t->metrics, ",\"lr\":%.6g}\n", last_lr(t));
        metrics_line_end(t);
    }
    if (!t->tb) return;
    for (int i = 0; i < t->n_scalars; i++)
        tb_scalar(t, "train", "", t->scalar_names[i], means[i]);
    tb_scalar(t, "train", "", "lr", last_lr(t));
    /* The rate of the epoch so far: models that run one long stretch get it before their end. */
    if (t->epoch_seconds > 0)
        tb_scalar(t, "perf", "", t->cfg.rate_key,
                  (double)t->epoch_run_steps * t->cfg.batch / t->epoch_seconds);
    tb_flush(t);
    t->tb_step_line = t->global_step;
}

void trainer_metrics_epoch(rp_trainer *t, int64_t epoch, const double *means, double rate,
                           const rp_trainer_metrics *m)
{
    if (t->metrics) {
        metrics_position(t, epoch);
        metrics_scalars(t, "train_", means);
        metrics_values(t, m);
        fprintf(t->metrics, ",\"%s\":%.1f,\"lr\":%.6g}\n", t->cfg.rate_key, rate, last_lr(t));
        metrics_line_end(t);
    }
    if (!t->tb) return;
    for (int i = 0; i < t->n_scalars; i++)
        tb_scalar(t, "epoch", "train_", t->scalar_names[i], means[i]);
    tb_values(t, m);
    /* A step line at this step gave them already, with the same values. */
    if (t->tb_step_line != t->global_step) {
        tb_scalar(t, "perf", "", t->cfg.rate_key, rate);
        tb_scalar(t, "train", "", "lr", last_lr(t));
    }
    tb_flush(t);
}

void trainer_metrics_eval(rp_trainer *t, const rp_trainer_metrics *m)
{
    if (t->metrics) {
        metrics_position(t, t->epoch);
        metrics_values(t, m);
        fprintf(t->metrics, "}\n");
        metrics_line_end(t);
    }
    tb_values(t, m);
    tb_flush(t);
}
