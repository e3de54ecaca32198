/* The loss curve: a gnuplot script generated from metrics.jsonl (the data
 * inline as datablocks, so the script can be re-run by hand in the run's
 * directory), rendered to loss.svg by gnuplot when it is installed. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "train/train_internal.h"

extern char **environ;

static bool have_gnuplot(void) {
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    while (*path) {
        const char *c = strchr(path, ':');
        size_t n = c ? (size_t)(c - path) : strlen(path);
        char p[4200];
        snprintf(p, sizeof p, "%.*s/gnuplot", (int)n, n ? path : ".");
        if (access(p, X_OK) == 0)
            return true;
        path += n + (c != NULL);
    }
    return false;
}

/* Write the script; *n_points receives the number of train + val points. */
static oj_status write_script(const char *out_dir, int64_t *n_points, oj_error *err) {
    char mpath[4200], gpath[4200];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", out_dir);
    snprintf(gpath, sizeof gpath, "%s/loss.gp", out_dir);
    oj_error e2 = {0};
    FILE *in = oj__fopen_regular(mpath, NULL, &e2); /* a FIFO would block */
    if (!in)
        return oj_error_set(err, OJ_ERR_IO, "plot: %s", e2.message);
    oj__atomic_file af;
    oj_status st = oj__atomic_open(&af, gpath, err);
    if (st) {
        fclose(in);
        return st;
    }
    FILE *o = af.f;
    /* two passes over the file: train points, then val points */
    fputs("# Loss curve of an ojas training run, from metrics.jsonl.\n"
          "# Re-render in this directory with: gnuplot loss.gp\n"
          "# or draw it in the terminal with:  gnuplot -e ascii=1 loss.gp\n"
          "if (exists('ascii')) {\n"
          "  set terminal dumb size 100,30\n"
          "  set output\n"
          "} else {\n"
          "  set terminal svg size 960,560 dynamic enhanced font 'sans,12' background rgb 'white'\n"
          "  set output 'loss.svg'\n"
          "}\n"
          "set title 'ojas train'\n"
          "set xlabel 'step'\n"
          "set ylabel 'loss (nats per token)'\n"
          "set grid\n"
          "set key top right\n",
          o);
    int64_t counts[2] = {0, 0};
    double ema = NAN;
    char *line = NULL;
    size_t cap = 0;
    for (int pass = 0; pass < 2; pass++) {
        fputs(pass == 0 ? "$train << EOD\n" : "$val << EOD\n", o);
        rewind(in);
        while (getline(&line, &cap, in) > 0) {
            json_t *r = json_loads(line, 0, NULL);
            const char *type = json_string_value(json_object_get(r, "type"));
            json_t *s = json_object_get(r, "step");
            json_t *v = json_object_get(r, pass == 0 ? "loss" : "val_loss");
            if (type && json_is_integer(s) && json_is_number(v) &&
                strcmp(type, pass == 0 ? "train" : "eval") == 0) {
                double y = json_number_value(v);
                if (pass == 0) {
                    ema = isnan(ema) ? y : 0.9 * ema + 0.1 * y;
                    fprintf(o, "%lld %.6g %.6g\n", (long long)json_integer_value(s), y, ema);
                } else {
                    fprintf(o, "%lld %.6g\n", (long long)json_integer_value(s), y);
                }
                counts[pass]++;
            }
            json_decref(r);
        }
        fputs("EOD\n", o);
    }
    free(line);
    fclose(in);
    const char *sep = "plot ";
    if (counts[0]) {
        fprintf(o, "%s$train using 1:2 with lines lw 1 lc rgb '#b0c4de' title 'train', \\\n"
                   "     $train using 1:3 with lines lw 2 lc rgb '#1f5fa8' title 'train (EMA 0.9)'",
                sep);
        sep = ", \\\n     ";
    }
    if (counts[1])
        fprintf(o, "%s$val using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#d62728' title 'val'",
                sep);
    fputc('\n', o);
    if ((st = oj__atomic_commit(&af, err)))
        return st;
    *n_points = counts[0] + counts[1];
    return OJ_OK;
}

oj_status oj_train_plot(const char *out_dir, oj_error *err) {
    if (!out_dir)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "plot: NULL out_dir");
    int64_t n = 0;
    oj_status st = write_script(out_dir, &n, err);
    if (st)
        return st;
    if (n == 0)
        return OJ_OK; /* nothing to draw yet */
    if (!have_gnuplot())
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "gnuplot is not installed (apt-get install gnuplot-nox): %s/loss.gp "
                            "written, loss.svg not drawn",
                            out_dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addchdir_np(&fa, out_dir);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    char *argv[] = {"gnuplot", "loss.gp", NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return oj_error_set(err, OJ_ERR_IO, "plot: cannot run gnuplot: %s", strerror(rc));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return oj_error_set(err, OJ_ERR_IO, "plot: waiting for gnuplot: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return oj_error_set(err, OJ_ERR_IO,
                            "plot: gnuplot failed (status %d); run 'gnuplot loss.gp' in %s to see why",
                            status, out_dir);
    return OJ_OK;
}
