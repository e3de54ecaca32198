/* Learning-rate schedules: factors of the base lr per step. */
#include <math.h>

#include "ojas/optim.h"

static oj_lr_schedule make(oj_lr_kind kind, int64_t warmup) {
    oj_lr_schedule s = {0};
    s.kind = kind;
    s.warmup_steps = warmup;
    s.gamma = 1.0;
    s.step_size = 1;
    return s;
}

oj_lr_schedule oj_lr_constant(int64_t warmup_steps) { return make(OJ_LR_CONSTANT, warmup_steps); }

oj_lr_schedule oj_lr_cosine(int64_t warmup_steps, int64_t total_steps, double min_ratio) {
    oj_lr_schedule s = make(OJ_LR_COSINE, warmup_steps);
    s.total_steps = total_steps;
    s.min_ratio = min_ratio;
    return s;
}

oj_lr_schedule oj_lr_wsd(int64_t warmup_steps, int64_t total_steps, int64_t decay_steps,
                         double min_ratio) {
    oj_lr_schedule s = make(OJ_LR_WSD, warmup_steps);
    s.total_steps = total_steps;
    s.decay_steps = decay_steps;
    s.min_ratio = min_ratio;
    return s;
}

oj_lr_schedule oj_lr_step(int64_t warmup_steps, int64_t step_size, double gamma) {
    oj_lr_schedule s = make(OJ_LR_STEP, warmup_steps);
    s.step_size = step_size;
    s.gamma = gamma;
    return s;
}

#define BAD(...) oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, __VA_ARGS__)

oj_status oj_lr_schedule_check(const oj_lr_schedule *s, oj_error *err) {
    if (s == NULL) return BAD("lr schedule: NULL");
    if ((unsigned)s->kind > OJ_LR_STEP) return BAD("lr schedule: unknown kind %d", (int)s->kind);
    if (s->warmup_steps < 0)
        return BAD("lr schedule: warmup_steps %lld < 0", (long long)s->warmup_steps);
    if (s->kind == OJ_LR_COSINE || s->kind == OJ_LR_WSD) {
        if (s->total_steps <= s->warmup_steps)
            return BAD("lr schedule: total_steps %lld must exceed warmup_steps %lld",
                       (long long)s->total_steps, (long long)s->warmup_steps);
        if (!(s->min_ratio >= 0 && s->min_ratio <= 1))
            return BAD("lr schedule: min_ratio %g must be in [0, 1]", s->min_ratio);
    }
    if (s->kind == OJ_LR_WSD &&
        (s->decay_steps <= 0 || s->decay_steps > s->total_steps - s->warmup_steps))
        return BAD("lr schedule: wsd decay_steps %lld must be in [1, total_steps - warmup_steps = "
                   "%lld]",
                   (long long)s->decay_steps, (long long)(s->total_steps - s->warmup_steps));
    if (s->kind == OJ_LR_STEP) {
        if (s->step_size <= 0)
            return BAD("lr schedule: step_size %lld must be > 0", (long long)s->step_size);
        if (!(isfinite(s->gamma) && s->gamma >= 0))
            return BAD("lr schedule: gamma %g must be finite and >= 0", s->gamma);
    }
    return OJ_OK;
}

double oj_lr_schedule_factor(const oj_lr_schedule *s, int64_t step) {
    if (oj_lr_schedule_check(s, NULL) != OJ_OK) return NAN;
    if (step < 0) step = 0;
    if (step < s->warmup_steps) return (double)(step + 1) / (double)s->warmup_steps;
    switch (s->kind) {
    case OJ_LR_CONSTANT: return 1.0;
    case OJ_LR_COSINE: {
        if (step >= s->total_steps) return s->min_ratio;
        double t = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
        return s->min_ratio + (1.0 - s->min_ratio) * 0.5 * (1.0 + cos(M_PI * t));
    }
    case OJ_LR_WSD: {
        int64_t start = s->total_steps - s->decay_steps;
        if (step < start) return 1.0;
        if (step >= s->total_steps) return s->min_ratio;
        double t = (double)(step - start) / (double)s->decay_steps;
        return 1.0 - (1.0 - s->min_ratio) * t;
    }
    case OJ_LR_STEP: return pow(s->gamma, (double)((step - s->warmup_steps) / s->step_size));
    }
    return NAN;
}
