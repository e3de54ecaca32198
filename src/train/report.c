/* Reporting: metrics.jsonl (one object per step and eval), log lines, and a
 * progress bar redrawn in place on a terminal. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "train/train_internal.h"

/* A finite number, or null (JSON has no NaN). */
static json_t *num(double d) { return isfinite(d) ? json_real(d) : json_null(); }

/* Write the records of steps <= keep_step from `src` to `dst` (a resumed
 * run continues the curve; records past the checkpoint are from a run that
 * was cut short and are dropped). `src` may be `dst`. *eval_at gets
 * keep_step when an eval record of that step is kept, else stays. */
static oj_status keep_prefix(const char *src, const char *dst, int64_t keep_step, int64_t *eval_at,
                             oj_error *err) {
    struct stat sb;
    if (stat(src, &sb) != 0 && errno == ENOENT)
        return OJ_OK; /* nothing to keep */
    FILE *f = oj__fopen_regular(src, NULL, err); /* a FIFO would block */
    if (!f)
        return OJ_ERR_IO;
    oj__atomic_file af;
    oj_status st = oj__atomic_open(&af, dst, err);
    if (st) {
        fclose(f);
        return st;
    }
    FILE *o = af.f;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        json_t *r = json_loads(line, 0, NULL);
        json_t *s = json_object_get(r, "step");
        if (json_is_integer(s) && json_integer_value(s) <= keep_step) {
            fwrite(line, 1, (size_t)n, o);
            const char *type = json_string_value(json_object_get(r, "type"));
            if (json_integer_value(s) == keep_step && type && !strcmp(type, "eval"))
                *eval_at = keep_step;
        }
        json_decref(r);
    }
    free(line);
    fclose(f);
    return oj__atomic_commit(&af, err);
}

oj_status oj__train_metrics_open(oj_trainer *t, oj_error *err) {
    snprintf(t->metrics_path, sizeof t->metrics_path, "%s/metrics.jsonl", t->out_dir);
    oj_status st = OJ_OK;
    if (t->step == 0) {
        remove(t->metrics_path);
    } else {
        /* continue the metrics moved aside with an abandoned branch, this
         * directory's, or else the resumed run's */
        char src[4300];
        snprintf(src, sizeof src, "%s", t->metrics_src[0] ? t->metrics_src : t->metrics_path);
        if (access(src, F_OK) != 0 && t->resume_root[0])
            snprintf(src, sizeof src, "%s/metrics.jsonl", t->resume_root);
        st = keep_prefix(src, t->metrics_path, t->step, &t->eval_logged, err);
    }
    if (st)
        return st;
    t->metrics = fopen(t->metrics_path, "ab");
    if (!t->metrics)
        return oj_error_set(err, OJ_ERR_IO, "cannot open %s for writing", t->metrics_path);
    return OJ_OK;
}

static oj_status write_jsonl(oj_trainer *t, const oj_train_metrics *m, oj_error *err) {
    if (!t->metrics)
        return OJ_OK;
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string(m->is_eval ? "eval" : "train"));
    json_object_set_new(o, "step", json_integer(m->step));
    json_object_set_new(o, "tokens", json_integer(m->tokens));
    json_object_set_new(o, "elapsed_s", num(m->elapsed_s));
    if (m->is_eval) {
        json_object_set_new(o, "val_loss", num(m->val_loss));
        json_object_set_new(o, "val_bpb", num(m->val_bpb));
    } else {
        json_object_set_new(o, "loss", num(m->loss));
        json_object_set_new(o, "lr", num(m->lr));
        if (t->cfg.optimizer == OJ_TRAIN_MUON)
            json_object_set_new(o, "muon_lr", num(m->muon_lr));
        json_object_set_new(o, "grad_norm", num(m->grad_norm));
        json_object_set_new(o, "step_s", num(m->step_s));
        json_object_set_new(o, "tokens_per_s", num(m->tokens_per_s));
        json_object_set_new(o, "mfu", num(m->mfu));
        json_object_set_new(o, "peak_bytes", json_integer(m->peak_bytes));
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!s)
        return oj_error_set(err, OJ_ERR_CAPACITY, "%s: out of memory", t->metrics_path);
    errno = 0;
    bool bad = fputs(s, t->metrics) < 0 || fputc('\n', t->metrics) == EOF ||
               fflush(t->metrics) != 0 || ferror(t->metrics);
    free(s);
    if (bad) /* the run stops here: no record may go missing unnoticed */
        return oj_error_set(err, OJ_ERR_IO, "cannot write %s: %s (stopping; the last checkpoint "
                                            "is %s)",
                            t->metrics_path, errno ? strerror(errno) : "write error",
                            t->last_ckpt[0] ? t->last_ckpt : "none of this run");
    return OJ_OK;
}

static void fmt_duration(double s, char *buf, size_t len) {
    if (!isfinite(s) || s < 0)
        snprintf(buf, len, "?");
    else if (s < 60)
        snprintf(buf, len, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

static void fmt_rate(double r, char *buf, size_t len) {
    if (r >= 1e6)
        snprintf(buf, len, "%.2fM", r / 1e6);
    else if (r >= 1e3)
        snprintf(buf, len, "%.1fk", r / 1e3);
    else
        snprintf(buf, len, "%.0f", r);
}

static void clear_bar(oj_trainer *t) {
    if (t->bar_drawn) {
        fputs("\r\033[K", t->opts.log);
        t->bar_drawn = false;
    }
}

void oj__train_say(oj_trainer *t, const char *fmt, ...) {
    if (!t->opts.log)
        return;
    clear_bar(t);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(t->opts.log, fmt, ap);
    va_end(ap);
    fputc('\n', t->opts.log);
    fflush(t->opts.log);
}

static void log_step(oj_trainer *t, const oj_train_metrics *m) {
    FILE *f = t->opts.log;
    char rate[32], el[32], eta[32];
    fmt_rate(m->tokens_per_s, rate, sizeof rate);
    fmt_duration(m->elapsed_s, el, sizeof el);
    double left = (double)(m->max_steps - m->step) * t->step_ema;
    if (t->cfg.time_limit_seconds > 0 && t->cfg.time_limit_seconds - m->elapsed_s < left)
        left = t->cfg.time_limit_seconds - m->elapsed_s;
    fmt_duration(left, eta, sizeof eta);
    char mfu[32] = "";
    if (isfinite(m->mfu))
        snprintf(mfu, sizeof mfu, " | mfu %.1f%%", 100 * m->mfu);
    if (t->opts.progress_bar) {
        enum { W = 20 };
        double frac = m->max_steps > 0 ? (double)m->step / (double)m->max_steps : 1;
        if (t->cfg.time_limit_seconds > 0 && m->elapsed_s / t->cfg.time_limit_seconds > frac)
            frac = m->elapsed_s / t->cfg.time_limit_seconds;
        if (frac > 1)
            frac = 1;
        char bar[W + 1];
        int fill = (int)(frac * W + 0.5);
        for (int i = 0; i < W; i++)
            bar[i] = i < fill ? '#' : '-';
        bar[W] = 0;
        char val[48] = "";
        if (isfinite(t->last_val_bpb))
            snprintf(val, sizeof val, " | val %.3f (%.3f bpb)", t->last_val_loss, t->last_val_bpb);
        else if (isfinite(t->last_val_loss))
            snprintf(val, sizeof val, " | val %.3f", t->last_val_loss);
        fprintf(f, "\r\033[K[%s] %3.0f%% step %lld | loss %.4f%s | lr %.2e | %s tok/s%s | %s < %s",
                bar, 100 * frac, (long long)m->step, m->loss, val, m->lr, rate, mfu, el, eta);
        fflush(f);
        t->bar_drawn = true;
        return;
    }
    if (m->step % t->cfg.log_every != 0 && m->step != 1 && m->step != m->max_steps)
        return;
    fprintf(f,
            "step %lld/%lld | loss %.4f | lr %.2e | norm %.3f | %s tok/s%s | peak %.1f MB | %s "
            "(eta %s)\n",
            (long long)m->step, (long long)m->max_steps, m->loss, m->lr, m->grad_norm, rate, mfu,
            (double)m->peak_bytes / 1e6, el, eta);
    fflush(f);
}

oj_status oj__train_report(oj_trainer *t, const oj_train_metrics *m, oj_error *err) {
    /* a resumed run that ends where its checkpoint did evaluates again but
     * does not append a second copy of the eval record */
    bool logged = m->is_eval && m->step == t->eval_logged;
    oj_status st = logged ? OJ_OK : write_jsonl(t, m, err);
    if (st)
        return st;
    if (t->opts.on_metrics)
        t->opts.on_metrics(m, t->opts.ctx);
    if (!t->opts.log)
        return OJ_OK;
    if (!m->is_eval) {
        log_step(t, m);
        return OJ_OK;
    }
    if (isfinite(m->val_bpb))
        oj__train_say(t, "eval step %lld | val loss %.4f | val bpb %.4f", (long long)m->step,
                      m->val_loss, m->val_bpb);
    else
        oj__train_say(t, "eval step %lld | val loss %.4f", (long long)m->step, m->val_loss);
    return OJ_OK;
}
