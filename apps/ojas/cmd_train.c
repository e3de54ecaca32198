/* ojas train */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ojas/dist.h"
#include "ojas/io.h"
#include "ojas/train.h"

static const char k_usage[] =
    "usage: ojas train -c FILE -o DIR [options]\n"
    "       ojas train -r DIR [-o DIR] [options]\n"
    "       ojas train --set model=PRESET --set data_dir=DIR [--set KEY=VALUE...] -o DIR\n"
    "\n"
    "  train a GPT on token shards (data_dir/train_*.bin, val_*.bin from 'ojas data\n"
    "  prepare'); write checkpoints DIR/ckpt-NNNNNN, DIR/metrics.jsonl (one JSON\n"
    "  object per step and eval) and the loss curve DIR/loss.svg (gnuplot)\n"
    "  -c, --config FILE      JSON object of config keys (below)\n"
    "  -o, --out DIR          run directory (created if missing, once the whole config,\n"
    "                         the data and the device have been checked); a new run\n"
    "                         refuses a non-empty one. One trainer at a time (DIR/.lock)\n"
    "  -r, --resume DIR       continue from a checkpoint directory or the newest good\n"
    "                         one under a run directory (config and weights from that\n"
    "                         one checkpoint); without --config its stored config is\n"
    "                         used. Without --out the run goes on in DIR (in RUN for\n"
    "                         RUN/ckpt-N or RUN/abandoned-stepS).\n"
    "                         Bit-identical under exact numerics. Checkpoints of\n"
    "                         --out that do not lead to it (the later steps of an\n"
    "                         abandoned branch) move to --out/abandoned-stepN/\n"
    "  -d, --device D         cpu | cuda | cuda:N (never falls back to another device)\n"
    "  -j, --threads N        CPU threads (0: all usable CPUs)\n"
    "  -s, --seed S           model init and data order\n"
    "      --numerics M       fast | exact (bit-reproducible, any thread count)\n"
    "      --init-from DIR    fine-tune a Hugging Face model directory (as 'ojas generate\n"
    "                         -m' reads it): its config.json is the model and a new run\n"
    "                         starts from its weights (= --set init_from=DIR)\n"
    "      --lora SPEC        LoRA on the --init-from model, e.g. r=16,alpha=32,targets=q,k,v,o\n"
    "                         (= --set optimizer=adamw --set lora_r=16 --set lora_alpha=32\n"
    "                         --set lora_targets=q,k,v,o; dropout=0 accepted); the adapter\n"
    "                         is written in PEFT's format to DIR/adapter\n"
    "      --set KEY=VALUE    override any config key (repeatable), e.g.\n"
    "                         --set max_steps=200 --set betas=0.9,0.95\n"
    "      --overwrite        first remove the previous run's files from DIR\n"
    "                         (checkpoints, latest, metrics.jsonl, loss.*, abandoned-*);\n"
    "                         refused, removing nothing, if DIR holds anything else\n"
    "      --no-progress      plain log lines even on a terminal (always under a\n"
    "                         launcher such as mpirun)\n"
    "      --no-plot          do not run gnuplot\n"
    "  -h, --help             this help\n"
    "\n"
    "  Options take their value as '--out DIR' or '--out=DIR' ('-o DIR', '-oDIR').\n"
    "  Without --config or --resume the config is the defaults below plus the\n"
    "  --set keys, which must give at least model (or init_from) and data_dir. Options apply in\n"
    "  order after the config file. SIGINT/SIGTERM finish the\n"
    "  current step, write a checkpoint and exit 0 (a second Ctrl-C aborts).\n"
    "  MFU = (6 N + 12 L T C) * tokens/s / peak_flops, where peak_flops is the\n"
    "  config value or, when 0, the measured f32 matmul throughput of a CUDA\n"
    "  engine; on the CPU, 0 means no MFU.\n"
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
            "exact;\n        device cpu | cuda | cuda:N; cuda_graph needs device cuda and one\n"
            "        micro-batch per rank (grad_accum = the world size; 1 without a launcher)\n",
            oj_gpt_preset_list(names, sizeof names));
}

enum { OPT_NUMERICS = 256, OPT_SET, OPT_OVERWRITE, OPT_NO_PROGRESS, OPT_NO_PLOT, OPT_INIT_FROM,
       OPT_LORA };

static const struct option k_long[] = {
    {"help", no_argument, NULL, 'h'},
    {"config", required_argument, NULL, 'c'},
    {"out", required_argument, NULL, 'o'},
    {"resume", required_argument, NULL, 'r'},
    {"device", required_argument, NULL, 'd'},
    {"threads", required_argument, NULL, 'j'},
    {"seed", required_argument, NULL, 's'},
    {"numerics", required_argument, NULL, OPT_NUMERICS},
    {"set", required_argument, NULL, OPT_SET},
    {"init-from", required_argument, NULL, OPT_INIT_FROM},
    {"lora", required_argument, NULL, OPT_LORA},
    {"overwrite", no_argument, NULL, OPT_OVERWRITE},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {"no-plot", no_argument, NULL, OPT_NO_PLOT},
    {NULL, 0, NULL, 0},
};

/* A config override from the command line, applied in order after the
 * config file: key=value (an option that names a key, as --device) or the
 * text of a --set (key NULL). */
typedef struct override {
    const char *key, *value;
} override;

/* The keys a config made from --set alone must give: what to train and on
 * what. The other keys' defaults are a complete recipe. */
static const char *const k_required[] = {"model", "data_dir"};

/* Whether an override gives `key` (the text before '=' of a --set). */
static bool sets_key(const override *o, const char *key) {
    const char *k = o->key ? o->key : o->value;
    size_t n = strlen(key);
    return strncmp(k, key, n) == 0 && (o->key ? k[n] == 0 : k[n] == '=');
}

/* --lora r=R,alpha=A,targets=T1,T2,...,dropout=D into cfg's optimizer
 * (adamw) and lora_* keys; a piece without '=' continues targets. */
static oj_status set_lora(oj_train_config *cfg, const char *spec, oj_error *err) {
    static const char *const keys[][2] = {
        {"r", "lora_r"}, {"alpha", "lora_alpha"}, {"targets", "lora_targets"}, {"dropout", "lora_dropout"}};
    char buf[1024], targets[512] = "", a[600];
    if (snprintf(buf, sizeof buf, "%s", spec) >= (int)sizeof buf)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "--lora: the spec is too long");
    oj_status st = oj_train_config_set(cfg, "optimizer=adamw", err);
    bool in_targets = false, any = false;
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p && !st; p = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(p, '=');
        if (eq == NULL) {
            if (!in_targets)
                return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                    "--lora: '%s' is not KEY=VALUE (r, alpha, targets, dropout)", p);
            size_t n = strlen(targets);
            snprintf(targets + n, sizeof targets - n, ",%s", p);
            continue;
        }
        *eq = '\0';
        size_t k = 0;
        while (k < 4 && strcmp(p, keys[k][0]) != 0) k++;
        if (k == 4)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "--lora: unknown key '%s' (r, alpha, targets, dropout)", p);
        in_targets = k == 2;
        any |= k == 0;
        if (in_targets) {
            snprintf(targets, sizeof targets, "%s", eq + 1);
            continue;
        }
        snprintf(a, sizeof a, "%s=%s", keys[k][1], eq + 1);
        st = oj_train_config_set(cfg, a, err);
    }
    if (!st && !any) return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "--lora: r=R is required");
    if (!st && targets[0]) {
        snprintf(a, sizeof a, "lora_targets=%s", targets);
        st = oj_train_config_set(cfg, a, err);
    }
    return st;
}

/* Whether PATH's last component is PREFIX<digits>; *dir_len gets the
 * length of the directory above it (0: none, the current directory). */
static bool last_is(const char *path, const char *prefix, size_t *dir_len) {
    size_t n = strlen(path), k = strlen(prefix);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    *dir_len = b > 1 ? b - 1 : b; /* "/" stays for /NAME */
    return n - b > k && !strncmp(path + b, prefix, k) &&
           strspn(path + b + k, "0123456789") >= n - b - k;
}

/* The run directory that `--resume DIR` without --out goes on in: DIR, or
 * for a run's checkpoint RUN/ckpt-N or abandoned branch RUN/abandoned-stepS
 * (or a checkpoint in one) RUN. A checkpoint directory named otherwise is
 * refused: its parent need not be a run. */
static int resume_run_dir(const char *resume, char out[4096]) {
    char p[4200];
    size_t len;
    snprintf(out, 4096, "%s", resume);
    snprintf(p, sizeof p, "%s/manifest.json", resume);
    if (access(p, F_OK) == 0) { /* a checkpoint directory */
        if (!last_is(out, "ckpt-", &len))
            return cli_error(CLI_USAGE, "train: --resume %s is a checkpoint outside a run "
                                        "directory (not RUN/ckpt-N): give --out DIR for the run",
                             resume);
        snprintf(out, 4096, "%.*s", (int)len, resume);
        if (!out[0])
            snprintf(out, 4096, ".");
    }
    if (last_is(out, "abandoned-step", &len)) {
        out[len] = '\0';
        if (!out[0])
            snprintf(out, 4096, ".");
    }
    return CLI_OK;
}

int cmd_train(int argc, char **argv) {
    const char *config = NULL, *out = NULL, *resume = NULL;
    /* a launcher (mpirun) gives its ranks a pseudo-terminal for stdout even
     * when the job's output goes to a file: plain lines there */
    bool progress = isatty(fileno(stdout)) && !oj_dist_launched(), plot = true, overwrite = false;
    override *ov = calloc((size_t)argc, sizeof *ov);
    int nov = 0, c;
    if (!ov)
        return cli_error(CLI_FAIL, "train: out of memory");
    cli_getopt_state g = {.cmd = "train", .shortopts = "hc:o:r:d:j:s:", .longopts = k_long};
    while ((c = cli_getopt(&g, argc, argv)) != -1) {
        switch (c) {
        case 'h':
            usage(stdout);
            free(ov);
            return CLI_OK;
        case 'c': config = optarg; break;
        case 'o': out = optarg; break;
        case 'r': resume = optarg; break;
        case 'd': ov[nov++] = (override){"device", optarg}; break;
        case 'j': ov[nov++] = (override){"threads", optarg}; break;
        case 's': ov[nov++] = (override){"seed", optarg}; break;
        case OPT_NUMERICS: ov[nov++] = (override){"numerics", optarg}; break;
        case OPT_SET: ov[nov++] = (override){NULL, optarg}; break;
        case OPT_INIT_FROM: ov[nov++] = (override){"init_from", optarg}; break;
        case OPT_LORA: ov[nov++] = (override){"lora", optarg}; break;
        case OPT_OVERWRITE: overwrite = true; break;
        case OPT_NO_PROGRESS: progress = false; break;
        case OPT_NO_PLOT: plot = false; break;
        default:
            free(ov);
            return CLI_USAGE;
        }
    }
    int rc = CLI_OK;
    char resume_out[4096];
    if (optind < argc)
        rc = cli_unexpected("train", argv[optind]);
    else if (!out && resume && resume[0]) { /* -r DIR alone: the run goes on where it was */
        rc = resume_run_dir(resume, resume_out);
        out = resume_out;
    }
    if (rc) {
        free(ov);
        return rc;
    }
    if (!out || !out[0])
        rc = cli_error(CLI_USAGE, "train: --out DIR is required (or --resume DIR to go on with "
                                  "that run)");
    else if (config && !config[0])
        rc = cli_error(CLI_USAGE, "train: --config needs a file name");
    else if (resume && !resume[0])
        rc = cli_error(CLI_USAGE, "train: --resume needs a directory");
    else if (resume && overwrite)
        rc = cli_error(CLI_USAGE, "train: --resume continues a run and --overwrite replaces one: "
                                  "give one of them");
    bool set_model = false, set_init = false;
    for (int i = 0; i < nov; i++) {
        set_model = set_model || sets_key(&ov[i], "model");
        set_init = set_init || sets_key(&ov[i], "init_from");
    }
    if (!rc && set_model && set_init) /* the preset would be ignored */
        rc = cli_error(CLI_USAGE, "train: --init-from DIR takes the model from DIR/config.json; "
                                  "leave --set model unset");
    if (!rc && !config && !resume) { /* a config from --set alone */
        char missing[64] = "", hint[128] = "";
        for (size_t k = 0; k < sizeof k_required / sizeof k_required[0]; k++) {
            bool given = false;
            for (int i = 0; i < nov && !given; i++) /* init_from gives the model */
                given = sets_key(&ov[i], k_required[k]) ||
                        (k == 0 && sets_key(&ov[i], "init_from"));
            if (!given) {
                size_t ml = strlen(missing), hl = strlen(hint);
                snprintf(missing + ml, sizeof missing - ml, "%s%s", ml ? " and " : "",
                         k_required[k]);
                snprintf(hint + hl, sizeof hint - hl, "%s--set %s=...", hl ? " " : "",
                         k_required[k]);
            }
        }
        if (missing[0])
            rc = cli_error(CLI_USAGE,
                           "train: without --config or --resume the config comes from --set, "
                           "which lacks %s (give %s)",
                           missing, hint);
    }

    oj_train_config cfg = oj_train_config_default();
    oj_error err = {0};
    /* one checkpoint for both the stored config and the weights */
    char resume_dir[4096];
    if (!rc && resume) {
        int skipped = 0;
        oj_error why = {0};
        if (oj_checkpoint_find(resume, resume_dir, sizeof resume_dir, &skipped, &why, &err)) {
            rc = cli_error(CLI_FAIL, "train: %s", err.message);
        } else {
            if (skipped)
                printf("warning: skipped %d newer checkpoint(s) under %s that failed "
                       "verification (the newest: %s)\n",
                       skipped, resume, why.message);
            resume = resume_dir;
        }
    }
    if (!rc && config && oj_train_config_load(&cfg, config, &err))
        rc = cli_error(CLI_FAIL, "train: %s", err.message);
    else if (!rc && !config && resume && oj_train_config_from_checkpoint(resume, &cfg, &err))
        rc = cli_error(CLI_FAIL, "train: %s", err.message);
    for (int i = 0; i < nov && !rc; i++) {
        char buf[2048];
        const char *a = ov[i].value;
        if (ov[i].key && strcmp(ov[i].key, "lora") == 0) {
            if (set_lora(&cfg, ov[i].value, &err))
                rc = cli_error(CLI_USAGE, "train: %s", err.message);
            continue;
        }
        if (ov[i].key) { /* --device cuda -> device=cuda */
            snprintf(buf, sizeof buf, "%s=%s", ov[i].key, ov[i].value);
            a = buf;
        }
        if (oj_train_config_set(&cfg, a, &err))
            rc = cli_error(CLI_USAGE, "train: %s", err.message);
    }
    free(ov);
    if (!rc && oj_train_config_check(&cfg, &err))
        rc = cli_error(CLI_USAGE, "train: %s", err.message);
    if (rc)
        return rc;

    /* under mpirun / srun: this process is one rank of a data-parallel run */
    oj_dist *dist = NULL;
    if (oj_dist_init(cfg.dist_timeout, &dist, &err))
        return cli_error(CLI_FAIL, "train: %s", err.message);
    const int rank = oj_dist_rank(dist);
    install_handlers();
    oj_train_options opts = {.out_dir = out, .resume = resume, .log = rank ? NULL : stdout,
                             .progress_bar = progress, .plot = plot, .stop = &g_stop,
                             .overwrite = overwrite, .dist = dist, .resume_hint = "--resume {}",
                             .overwrite_hint = "--overwrite", .out_hint = "--out"};
    oj_train_result res;
    oj_status st = oj_train(&cfg, &opts, &res, &err);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (st && oj_dist_active(dist)) { /* the others may wait on this rank: end them all */
        cli_error(CLI_FAIL, "train: rank %d of %d: %s", rank, oj_dist_world_size(dist),
                  err.message);
        oj_dist_abort(dist, CLI_FAIL);
    }
    oj_dist_free(dist);
    if (st)
        return cli_error(CLI_FAIL, "train: %s", err.message);
    if (rank)
        return CLI_OK;
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
