/* ojas train */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ojas/io.h"
#include "ojas/train.h"

static const char k_usage[] =
    "usage: ojas train --config FILE --out DIR [--overwrite] [options]\n"
    "       ojas train --resume DIR --out DIR [options]\n"
    "\n"
    "  train a GPT on token shards (data_dir/train_*.bin, val_*.bin from 'ojas data\n"
    "  prepare'); write checkpoints DIR/ckpt-NNNNNN, DIR/metrics.jsonl (one JSON\n"
    "  object per step and eval) and the loss curve DIR/loss.svg (gnuplot)\n"
    "      --config FILE      JSON object of config keys (below)\n"
    "      --out DIR          run directory (created if missing); a new run refuses a\n"
    "                         non-empty one. One trainer at a time (DIR/.lock)\n"
    "      --overwrite        first remove the previous run's files from DIR\n"
    "                         (checkpoints, latest, metrics.jsonl, loss.*, abandoned-*);\n"
    "                         refused, removing nothing, if DIR holds anything else\n"
    "      --resume DIR       continue from a checkpoint directory or the newest good\n"
    "                         one under a run directory (config and weights from that\n"
    "                         one checkpoint); without --config its stored config is\n"
    "                         used. Bit-identical under exact numerics. Checkpoints of\n"
    "                         --out that do not lead to it (the later steps of an\n"
    "                         abandoned branch) move to --out/abandoned-stepN/\n"
    "      --device D         cpu | cuda | cuda:N (never falls back to another device)\n"
    "      --threads N        CPU threads (0: all usable CPUs)\n"
    "      --numerics M       fast | exact (bit-reproducible, any thread count)\n"
    "      --seed S           model init and data order\n"
    "      --set KEY=VALUE    override any config key (repeatable), e.g.\n"
    "                         --set max_steps=200 --set betas=0.9,0.95\n"
    "      --no-progress      plain log lines even on a terminal\n"
    "      --no-plot          do not run gnuplot\n"
    "\n"
    "  Options apply in order after the config file. SIGINT/SIGTERM finish the\n"
    "  current step, write a checkpoint and exit 0 (a second Ctrl-C aborts).\n"
    "  MFU = (6 N + 12 L T C) * tokens/s / peak_flops, where peak_flops is the\n"
    "  config value or, when 0, the measured f32 matmul throughput of the engine.\n"
    "\n"
    "config keys and their defaults:\n";

static volatile sig_atomic_t g_stop = 0;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
    static const char msg[] = "\nojas: stopping after this step (again to abort)\n";
    ssize_t r = write(2, msg, sizeof msg - 1);
    (void)r;
}

static void install_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second signal takes the default action */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void usage(FILE *f) {
    fputs(k_usage, f);
    oj_train_config d = oj_train_config_default();
    char *js = oj_train_config_to_json(&d);
    if (js) {
        fputs(js, f);
        fputc('\n', f);
        free(js);
    }
    char names[512];
    fprintf(f,
            "values: model %s; optimizer muon | adamw; schedule cosine | wsd | constant;\n"
            "        dtype f32 | bf16 | f16 (bf16/f16 autocast, for the GPU); numerics fast | "
            "exact;\n        device cpu | cuda | cuda:N; cuda_graph needs device cuda and grad_accum 1\n",
            oj_gpt_preset_list(names, sizeof names));
}

int cmd_train(int argc, char **argv) {
    const char *config = NULL, *out = NULL, *resume = NULL;
    bool progress = isatty(fileno(stdout)), plot = true, overwrite = false;
    /* first pass: the files; overrides are applied in order afterwards */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            usage(stdout);
            return CLI_OK;
        }
        bool takes = !strcmp(a, "--config") || !strcmp(a, "--out") || !strcmp(a, "--resume") ||
                     !strcmp(a, "--device") || !strcmp(a, "--threads") ||
                     !strcmp(a, "--numerics") || !strcmp(a, "--seed") || !strcmp(a, "--set");
        if (!strcmp(a, "--no-progress")) {
            progress = false;
            continue;
        }
        if (!strcmp(a, "--no-plot")) {
            plot = false;
            continue;
        }
        if (!strcmp(a, "--overwrite")) {
            overwrite = true;
            continue;
        }
        if (!takes)
            return cli_error(CLI_USAGE, "train: unknown %s '%s' (see 'ojas train --help')",
                             a[0] == '-' ? "option" : "argument", a);
        const char *v = cli_value(argc, argv, &i);
        if (!v)
            return CLI_USAGE;
        if (!strcmp(a, "--config"))
            config = v;
        else if (!strcmp(a, "--out"))
            out = v;
        else if (!strcmp(a, "--resume"))
            resume = v;
    }
    if (!out)
        return cli_error(CLI_USAGE, "train: --out DIR is required");
    if (!config && !resume)
        return cli_error(CLI_USAGE, "train: --config FILE (or --resume DIR) is required");
    if (resume && overwrite)
        return cli_error(CLI_USAGE, "train: --resume continues a run and --overwrite replaces one: "
                                    "give one of them");

    oj_train_config cfg = oj_train_config_default();
    oj_error err = {0};
    /* one checkpoint for both the stored config and the weights */
    char resume_dir[4096];
    if (resume) {
        int skipped = 0;
        oj_error why = {0};
        if (oj_checkpoint_find(resume, resume_dir, sizeof resume_dir, &skipped, &why, &err))
            return cli_error(CLI_FAIL, "train: %s", err.message);
        if (skipped)
            printf("warning: skipped %d newer checkpoint(s) under %s that failed verification "
                   "(the newest: %s)\n",
                   skipped, resume, why.message);
        resume = resume_dir;
    }
    if (config ? oj_train_config_load(&cfg, config, &err)
               : oj_train_config_from_checkpoint(resume, &cfg, &err))
        return cli_error(CLI_FAIL, "train: %s", err.message);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--no-progress") || !strcmp(a, "--no-plot") || !strcmp(a, "--overwrite"))
            continue;
        const char *v = argv[++i];
        char buf[2048];
        if (!strcmp(a, "--set"))
            snprintf(buf, sizeof buf, "%s", v);
        else if (!strcmp(a, "--config") || !strcmp(a, "--out") || !strcmp(a, "--resume"))
            continue;
        else
            snprintf(buf, sizeof buf, "%s=%s", a + 2, v); /* --device cuda -> device=cuda */
        if (oj_train_config_set(&cfg, buf, &err))
            return cli_error(CLI_USAGE, "train: %s", err.message);
    }
    if (oj_train_config_check(&cfg, &err))
        return cli_error(CLI_USAGE, "train: %s", err.message);

    install_handlers();
    oj_train_options opts = {.out_dir = out, .resume = resume, .log = stdout,
                             .progress_bar = progress, .plot = plot, .stop = &g_stop,
                             .overwrite = overwrite};
    oj_train_result res;
    oj_status st = oj_train(&cfg, &opts, &res, &err);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (st)
        return cli_error(CLI_FAIL, "train: %s", err.message);
    static const char *const why[] = {"done", "time limit", "stopped by signal"};
    printf("%s: step %lld, %.2fM tokens", why[res.stop], (long long)res.step,
           (double)res.tokens / 1e6);
    /* A resume that finds max_steps already reached runs no step: no train
     * loss or speed to report. */
    if (!isnan(res.train_loss))
        printf(", train loss %.4f", res.train_loss);
    if (!isnan(res.val_loss))
        printf(", val loss %.4f", res.val_loss);
    if (!isnan(res.val_bpb))
        printf(", val bpb %.4f", res.val_bpb);
    if (isfinite(res.tokens_per_s))
        printf(", %.0f tokens/s", res.tokens_per_s);
    printf(", %.1fs, peak %.1f MB\n", res.elapsed_s, (double)res.peak_bytes / 1e6);
    return CLI_OK;
}
