/*
 * schedule.c - learning-rate schedules: a linear warm-up followed by a
 * constant rate, step decay at milestones, cosine annealing or a linear
 * decay to 0; and the
 * linear scaling rule for large batches.
 *
 * Every rate is computed in double from the step number alone, so a run
 * resumed at step k gets exactly the rate it would have had.
 */
#include <math.h>
#include <string.h>

#include "replicator/optim.h"

/* A schedule that returns `lr` at every step: no warm-up, no decay. */
rp_schedule rp_schedule_constant(float lr)
{
    rp_schedule s;
    memset(&s, 0, sizeof(s));
    s.kind = RP_SCHED_CONSTANT;
    s.base_lr = lr;
    s.gamma = 1.0f;
    return s;
}

/*
 * Cosine annealing from `lr` to 0 over steps [warmup_steps, total_steps],
 * after a linear warm-up from 0 over the first warmup_steps steps. Set
 * min_lr or warmup_start on the result to change the floor or the start of
 * the warm-up.
 */
rp_schedule rp_schedule_cosine(float lr, int64_t warmup_steps, int64_t total_steps)
{
    rp_schedule s = rp_schedule_constant(lr);
    s.kind = RP_SCHED_COSINE;
    s.warmup_steps = warmup_steps < 0 ? 0 : warmup_steps;
    s.total_steps = total_steps;
    return s;
}

/* Step decay at the caller's milestones, which the schedule points at (not copied). */
rp_schedule rp_schedule_step(float lr, float gamma, const int64_t *milestones, int n)
{
    rp_schedule s = rp_schedule_constant(lr);
    s.kind = RP_SCHED_STEP;
    s.gamma = gamma;
    s.n_milestones = n;
    s.milestones = milestones;
    return s;
}

/*
 * Linear decay from `lr` at step 0 to 0 at total_steps (SN-GAN's schedule),
 * after a linear warm-up from 0 over the first warmup_steps steps. The decay
 * is measured from step 0 as the contract of optim.h states, so a warm-up
 * only replaces the first part of the line.
 */
rp_schedule rp_schedule_linear(float lr, int64_t warmup_steps, int64_t total_steps)
{
    rp_schedule s = rp_schedule_constant(lr);
    s.kind = RP_SCHED_LINEAR;
    s.warmup_steps = warmup_steps < 0 ? 0 : warmup_steps;
    s.total_steps = total_steps;
    return s;
}

/*
 * The rate at `step` (0-based; a negative step counts as 0). During the
 * warm-up, step < warmup_steps, the rate rises linearly from
 * base_lr*warmup_start towards base_lr. After it:
 *   CONSTANT: base_lr;
 *   STEP:     base_lr * gamma^k, k the number of milestones <= step (the
 *             milestones are absolute step numbers, in any order; all
 *             n_milestones are read, none if the array is NULL);
 *   COSINE:   min_lr + (base_lr - min_lr) * (1 + cos(pi*p)) / 2 with
 *             p = (step - warmup) / (total - warmup) clamped to [0, 1], so
 *             the rate stays at min_lr past total_steps (and is min_lr at
 *             once if total_steps <= warmup_steps);
 *   LINEAR:   base_lr * (1 - step / total), 0 from total_steps on (and at
 *             once if total_steps <= 0).
 * Returns 0 for a NULL schedule. Pure and thread-safe.
 */
float rp_schedule_lr(const rp_schedule *s, int64_t step)
{
    if (!s) return 0.0f;
    if (step < 0) step = 0;
    double base = (double)s->base_lr;

    if (step < s->warmup_steps) {
        double start = (double)s->warmup_start;
        double frac = (double)step / (double)s->warmup_steps;
        return (float)(base * (start + (1.0 - start) * frac));
    }

    switch (s->kind) {
    case RP_SCHED_CONSTANT:
        return s->base_lr;
    case RP_SCHED_STEP: {
        int n = s->milestones ? s->n_milestones : 0;
        double rate = base;
        for (int i = 0; i < n; i++) {
            if (s->milestones[i] <= step) rate *= (double)s->gamma;
        }
        return (float)rate;
    }
    case RP_SCHED_COSINE: {
        double span = (double)(s->total_steps - s->warmup_steps);
        double p = span > 0.0 ? (double)(step - s->warmup_steps) / span : 1.0;
        if (p < 0.0) p = 0.0;
        if (p > 1.0) p = 1.0;
        double lo = (double)s->min_lr;
        return (float)(lo + (base - lo) * (1.0 + cos(M_PI * p)) * 0.5);
    }
    case RP_SCHED_LINEAR:
        if (s->total_steps <= 0 || step >= s->total_steps) return 0.0f;
        return (float)(base * (1.0 - (double)step / (double)s->total_steps));
    }
    return s->base_lr;
}

/*
 * Checks what rp_schedule_lr() relies on, so that a schedule built by hand
 * fails here with the field named rather than giving a quietly wrong rate.
 */
rp_status rp_schedule_check(const rp_schedule *s)
{
    if (!s) return RP_ERROR(RP_ERR_INVALID, "schedule is NULL");
    if (s->kind != RP_SCHED_CONSTANT && s->kind != RP_SCHED_STEP && s->kind != RP_SCHED_COSINE &&
        s->kind != RP_SCHED_LINEAR)
        return RP_ERROR(RP_ERR_INVALID, "schedule kind %d: not an rp_sched_kind", (int)s->kind);
    const struct {
        const char *name;
        float value;
    } floats[] = {{"base_lr", s->base_lr},
                  {"min_lr", s->min_lr},
                  {"gamma", s->gamma},
                  {"warmup_start", s->warmup_start}};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (!isfinite(floats[i].value))
            return RP_ERROR(RP_ERR_INVALID, "schedule %s %g: must be finite", floats[i].name,
                            (double)floats[i].value);
    if (s->warmup_steps < 0)
        return RP_ERROR(RP_ERR_INVALID, "schedule warmup_steps %lld: must be >= 0",
                        (long long)s->warmup_steps);
    if (s->kind == RP_SCHED_STEP && s->n_milestones < 0)
        return RP_ERROR(RP_ERR_INVALID, "schedule n_milestones %d: must be >= 0", s->n_milestones);
    if (s->kind == RP_SCHED_STEP && s->n_milestones > 0 && !s->milestones)
        return RP_ERROR(RP_ERR_INVALID, "schedule n_milestones %d but milestones is NULL",
                        s->n_milestones);
    return RP_OK;
}

/*
 * The linear scaling rule (Goyal et al., 2017): base_lr * global_batch /
 * reference_batch. A non-positive batch size gives base_lr unchanged, since
 * there is no sensible ratio to apply.
 */
float rp_lr_scale(float base_lr, int global_batch, int reference_batch)
{
    if (global_batch <= 0 || reference_batch <= 0) return base_lr;
    return (float)((double)base_lr * (double)global_batch / (double)reference_batch);
}
