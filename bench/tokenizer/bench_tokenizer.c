/* Tokenizer throughput: encode the King James Bible with ojas and, in the
 * same run, with npm tiktoken (Rust compiled to WASM) and js-tiktoken (pure
 * JavaScript) under node; single-threaded and as a multi-threaded batch of
 * ~64 KiB documents. Reports MB/s (10^6 bytes of UTF-8 input per second,
 * best of N runs) and the ratios, and checks that the token counts agree.
 *
 *   bench_tokenizer [--smoke] [--text FILE] [--vocab DIR] [--encoding NAME]
 *                   [--repeats N] [--threads N] [--no-peers] [--out FILE.md]
 *
 * --encoding cl100k_base|o200k_base: tiktoken's encoding of that name instead
 * of GPT-2's: ojas loads the .tiktoken rank file that tiktoken_peer.mjs
 * writes from js-tiktoken's ranks, the peers encode with that encoding, and
 * @huggingface/tokenizers (tokenizers.js) joins them on a tokenizer.json of
 * the same ranks (one thread, the same ~64 KiB documents as the batch rows).
 * --smoke: the first 256 KiB, one run each (CI: a few seconds). Paths default
 * to the source tree this binary was built from (build/bin/ -> ../../).
 * "Cold" runs load a fresh tokenizer first (empty piece cache); "warm" runs
 * encode the same text again with the cache filled. */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "ojas/data.h"

static char g_root[PATH_MAX];

static char *read_file(const char *path, size_t *len) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "cat '%s'", path);
    return read_cmd(cmd, len);
}

typedef struct row {
    char name[96];
    int threads;
    double seconds, mbps, cpu_mbps; /* cpu_mbps: bytes per CPU second, 0 if not measured */
    long long tokens;
} row;

static row g_rows[32];
static int g_nrows;

static void add_row(const char *name, int threads, double s, double cpu, double mb,
                    long long tokens) {
    row *r = &g_rows[g_nrows++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->threads = threads;
    r->seconds = s;
    r->mbps = mb / s;
    r->cpu_mbps = cpu > 0 ? mb / cpu : 0;
    r->tokens = tokens;
}

static const row *find_row(const char *prefix, int threads) {
    for (int i = 0; i < g_nrows; i++)
        if (strncmp(g_rows[i].name, prefix, strlen(prefix)) == 0 && g_rows[i].threads == threads)
            return &g_rows[i];
    return NULL;
}

static oj_tokenizer *load(const char *vocab, bool pcre2) {
    oj_tokenizer *tok;
    oj_error err = {0};
    if (oj_tokenizer_load(vocab, &tok, &err) ||
        (pcre2 && oj_tokenizer_set_pretokenizer(tok, OJ_PRETOK_PCRE2, &err))) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.message);
        exit(1);
    }
    return tok;
}

static void check(oj_status st, const oj_error *err) {
    if (st) {
        fprintf(stderr, "bench_tokenizer: %s\n", err->message);
        exit(1);
    }
}

int main(int argc, char **argv) {
    bool smoke = false, peers = true;
    const char *text_path = NULL, *vocab = NULL, *out_md = NULL, *encoding = "gpt2";
    int repeats = 5, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--smoke") == 0)
            smoke = true;
        else if (strcmp(argv[i], "--no-peers") == 0)
            peers = false;
        else if (strcmp(argv[i], "--text") == 0 && i + 1 < argc)
            text_path = argv[++i];
        else if (strcmp(argv[i], "--vocab") == 0 && i + 1 < argc)
            vocab = argv[++i];
        else if (strcmp(argv[i], "--encoding") == 0 && i + 1 < argc)
            encoding = argv[++i];
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out_md = argv[++i];
        else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_tokenizer [--smoke] [--text FILE] [--vocab DIR] "
                            "[--encoding NAME] [--repeats N] [--threads N] [--no-peers] "
                            "[--out FILE.md]\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (smoke)
        repeats = 1;
    if (repeats < 1)
        repeats = 1;
    find_root(g_root, sizeof g_root, "tests/peer/tiktoken_peer.mjs");
    char vocab_buf[PATH_MAX + 32], enc_dir[] = "/tmp/ojas-bench-enc-XXXXXX";
    bool gpt2 = strcmp(encoding, "gpt2") == 0;
    if (!gpt2) {
        if (strcmp(encoding, "cl100k_base") != 0 && strcmp(encoding, "o200k_base") != 0) {
            fprintf(stderr, "bench_tokenizer: --encoding %s: expected gpt2, cl100k_base or "
                            "o200k_base\n", encoding);
            return 2;
        }
        char cmd[4 * PATH_MAX + 64];
        if (!mkdtemp(enc_dir)) {
            perror("bench_tokenizer: mkdtemp");
            return 1;
        }
        snprintf(cmd, sizeof cmd,
                 "node '%s/tests/peer/tiktoken_peer.mjs' ranks %s '%s/%s.tiktoken' && "
                 "node '%s/tests/peer/tiktoken_peer.mjs' tokenizer-json %s '%s/hf'",
                 g_root, encoding, enc_dir, encoding, g_root, encoding, enc_dir);
        if (system(cmd) != 0) {
            fprintf(stderr, "bench_tokenizer: cannot write %s's rank file (node and "
                            "third_party/npm: run scripts/deps.sh)\n", encoding);
            return 1;
        }
        if (!vocab)
            vocab = enc_dir;
    }
    if (!vocab) {
        snprintf(vocab_buf, sizeof vocab_buf, "%s/third_party/gpt2", g_root);
        vocab = vocab_buf;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (threads <= 0)
        threads = ncpu > 1 ? (int)ncpu : 2;

    size_t n = 0;
    char *text = text_path ? read_file(text_path, &n)
                           : read_cmd("bible 'gen1:1-rev22:21' 2>/dev/null", &n);
    const char *source = text_path ? text_path : "King James Bible (bible-kjv, gen1:1-rev22:21)";
    if (!text) {
        if (!smoke) {
            fprintf(stderr, "bench_tokenizer: no text (install bible-kjv or pass --text FILE)\n");
            return 1;
        }
        /* smoke without the Bible: a synthetic text */
        n = 1 << 18;
        text = malloc(n + 1);
        for (size_t i = 0; i < n; i++)
            text[i] = (char)("the LORD said unto him, 42 times\n"[i % 33]);
        text[n] = 0;
        source = "synthetic text";
    }
    if (smoke && n > (1u << 18)) {
        const char *nl = memchr(text + (1 << 18), '\n', n - (1 << 18));
        n = nl ? (size_t)(nl - text) + 1 : n;
        text[n] = 0;
    }
    double mb = (double)n / 1e6;
    char tmp_text[] = "/tmp/ojas-bench-XXXXXX";
    int fd = mkstemp(tmp_text);
    if (fd < 0 || write(fd, text, n) != (ssize_t)n) {
        fprintf(stderr, "bench_tokenizer: cannot write a temporary copy of the text\n");
        return 1;
    }
    close(fd);
    printf("text: %s, %zu bytes%s; %d run(s) each, best kept\n", source, n,
           smoke ? " (smoke: first 256 KiB)" : "", repeats);

    oj_error err = {0};
    double t0 = now_s();
    oj_tokenizer *tok = load(vocab, false);
    double load_s = now_s() - t0;
    oj_tokenizer_free(tok);

    /* single thread, cold and warm: best wall time and best thread CPU time */
    long long ntok = 0;
    double best[3] = {1e30, 1e30, 1e30}, best_cpu[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < repeats; r++)
        for (int k = 0; k < (gpt2 ? 3 : 2); k++) { /* 0 cold, 1 warm, 2 PCRE2 cold */
            if (k != 1)
                tok = load(vocab, k == 2);
            oj_tokens ids = {0};
            double c0 = cpu_s();
            t0 = now_s();
            check(oj_tokenizer_encode(tok, text, n, OJ_ENCODE_SPECIAL_AS_TEXT, &ids, &err), &err);
            double dt = now_s() - t0, dc = cpu_s() - c0;
            best[k] = dt < best[k] ? dt : best[k];
            best_cpu[k] = dc < best_cpu[k] ? dc : best_cpu[k];
            ntok = (long long)ids.len;
            oj_tokens_free(&ids);
            if (k != 0)
                oj_tokenizer_free(tok);
        }
    add_row("ojas (cold: fresh tokenizer)", 1, best[0], best_cpu[0], mb, ntok);
    add_row("ojas (warm: piece cache filled)", 1, best[1], best_cpu[1], mb, ntok);
    if (gpt2)
        add_row("ojas, PCRE2 pre-tokeniser (cold)", 1, best[2], best_cpu[2], mb, ntok);

    /* batch of documents on 1 and `threads` threads, cold */
    const char **docs;
    size_t *lens;
    size_t nd = make_docs(text, n, 65536, &docs, &lens); /* 64 KiB, as tiktoken_peer.mjs */
    int tlist[2] = {1, threads};
    long long nbatch = 0;
    for (int k = 0; k < 2; k++) {
        if (k == 1 && threads == 1)
            break;
        double bt = 1e30, bc = 1e30;
        for (int r = 0; r < repeats; r++) {
            tok = load(vocab, false);
            oj_tokens *outs = calloc(nd, sizeof *outs);
            double c0 = process_cpu_s();
            t0 = now_s();
            check(oj_tokenizer_encode_batch(tok, nd, docs, lens, OJ_ENCODE_SPECIAL_AS_TEXT,
                                            tlist[k], outs, &err),
                  &err);
            double dt = now_s() - t0, dc = process_cpu_s() - c0;
            bt = dt < bt ? dt : bt;
            bc = dc < bc ? dc : bc;
            nbatch = 0;
            for (size_t i = 0; i < nd; i++) {
                nbatch += (long long)outs[i].len;
                oj_tokens_free(&outs[i]);
            }
            free(outs);
            oj_tokenizer_free(tok);
        }
        char name[96];
        snprintf(name, sizeof name, "ojas batch of %zu documents (cold)", nd);
        add_row(name, tlist[k], bt, bc, mb, nbatch);
    }

    /* peers */
    char node_version[64] = "";
    bool peers_ok = false;
    if (peers) {
        char cmd[2 * PATH_MAX];
        snprintf(cmd, sizeof cmd, "node '%s/tests/peer/tiktoken_peer.mjs' bench '%s' %d %d %s",
                 g_root, tmp_text, repeats, threads, encoding);
        size_t jl;
        char *js = read_cmd(cmd, &jl);
        json_error_t je;
        json_t *root = js ? json_loads(js, 0, &je) : NULL;
        json_t *arr = root ? json_object_get(root, "peers") : NULL;
        if (arr && json_is_array(arr)) {
            peers_ok = true;
            snprintf(node_version, sizeof node_version, "%s",
                     json_string_value(json_object_get(root, "node")));
            size_t i;
            json_t *p;
            json_array_foreach(arr, i, p) {
                const char *name = json_string_value(json_object_get(p, "name"));
                int th = (int)json_integer_value(json_object_get(p, "threads"));
                double s = json_number_value(json_object_get(p, "seconds"));
                long long tk = (long long)json_integer_value(json_object_get(p, "tokens"));
                json_t *cj = json_object_get(p, "cpu_seconds");
                double cpu = cj ? json_number_value(cj) : 0;
                char label[96];
                if (th > 1)
                    snprintf(label, sizeof label, "%s, %d worker_threads", name, th);
                else
                    snprintf(label, sizeof label, "%s", name);
                add_row(label, th, s, cpu, mb, tk);
                if (tk != (th > 1 ? nbatch : ntok)) {
                    fprintf(stderr, "bench_tokenizer: %s gave %lld tokens, ojas %lld\n", name, tk,
                            th > 1 ? nbatch : ntok);
                    return 1;
                }
            }
        } else
            printf("peers: not run (node or third_party/npm missing: run scripts/deps.sh)\n");
        json_decref(root);
        free(js);
    }
    if (peers && peers_ok && !gpt2) {
        /* @huggingface/tokenizers on the same ranks as tokenizer.json: the
         * documents of the batch rows, one thread */
        char cmd[3 * PATH_MAX];
        snprintf(cmd, sizeof cmd,
                 "node '%s/tests/peer/hf_tokenizers_peer.mjs' bench '%s/hf' '%s' %d 65536",
                 g_root, enc_dir, tmp_text, repeats);
        size_t jl;
        char *js = read_cmd(cmd, &jl);
        json_error_t je;
        json_t *root = js ? json_loads(js, 0, &je) : NULL;
        json_t *p = root ? json_object_get(root, "peer") : NULL;
        if (p) {
            const char *name = json_string_value(json_object_get(p, "name"));
            long long tk = (long long)json_integer_value(json_object_get(p, "tokens"));
            char label[96];
            snprintf(label, sizeof label, "%s (tokenizer.json), ~64 KiB documents", name);
            add_row(label, 1, json_number_value(json_object_get(p, "seconds")),
                    json_number_value(json_object_get(p, "cpu_seconds")), mb, tk);
            if (tk != nbatch) {
                fprintf(stderr, "bench_tokenizer: %s gave %lld tokens, ojas %lld\n", name, tk,
                        nbatch);
                return 1;
            }
        } else
            printf("@huggingface/tokenizers: not run (third_party/npm: run scripts/deps.sh)\n");
        json_decref(root);
        free(js);
    }
    if (!gpt2) {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", enc_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench_tokenizer: could not remove %s\n", enc_dir);
    }
    unlink(tmp_text);

    /* report */
    printf("\n%-52s %7s %9s %8s %9s %9s\n", "encoder", "threads", "seconds", "MB/s",
           "CPU MB/s", "tokens");
    for (int i = 0; i < g_nrows; i++) {
        char cpu[32] = "-";
        if (g_rows[i].cpu_mbps > 0)
            snprintf(cpu, sizeof cpu, "%.2f", g_rows[i].cpu_mbps);
        printf("%-52s %7d %9.4f %8.2f %9s %9lld\n", g_rows[i].name, g_rows[i].threads,
               g_rows[i].seconds, g_rows[i].mbps, cpu, g_rows[i].tokens);
    }
    char load_what[64];
    snprintf(load_what, sizeof load_what, gpt2 ? "encoder.json + vocab.bpe" : "%s.tiktoken",
             encoding);
    printf("ojas tokenizer load (%s): %.1f ms\n", load_what, load_s * 1e3);
    const row *ours = find_row("ojas (cold", 1), *tk1 = find_row("tiktoken", 1);
    const row *js1 = find_row("js-tiktoken", 1);
    const row *omt = threads > 1 ? find_row("ojas batch", threads) : NULL;
    const row *tkmt = threads > 1 ? find_row("tiktoken", threads) : NULL;
    char ratio[1024] = "";
    if (peers_ok && tk1 && js1) {
        snprintf(ratio, sizeof ratio,
                 "single thread: ojas %.1f MB/s = %.1fx tiktoken (WASM) %.2f MB/s, %.1fx "
                 "js-tiktoken %.2f MB/s (per CPU second: %.1fx and %.1fx)",
                 ours->mbps, ours->mbps / tk1->mbps, tk1->mbps, ours->mbps / js1->mbps, js1->mbps,
                 tk1->cpu_mbps > 0 ? ours->cpu_mbps / tk1->cpu_mbps : 0,
                 js1->cpu_mbps > 0 ? ours->cpu_mbps / js1->cpu_mbps : 0);
        const row *hf = find_row("@huggingface", 1), *ob1 = find_row("ojas batch", 1);
        if (hf && ob1) {
            size_t l = strlen(ratio);
            snprintf(ratio + l, sizeof ratio - l,
                     "; on the same documents, ojas %.1f MB/s = %.1fx @huggingface/tokenizers "
                     "%.2f MB/s (per CPU second: %.1fx)",
                     ob1->mbps, ob1->mbps / hf->mbps, hf->mbps,
                     hf->cpu_mbps > 0 ? ob1->cpu_mbps / hf->cpu_mbps : 0);
        }
        printf("\n%s\n", ratio);
        if (omt && tkmt)
            printf("batch on %d threads: ojas %.1f MB/s = %.1fx tiktoken on %d worker_threads "
                   "(%.2f MB/s)\n",
                   threads, omt->mbps, omt->mbps / tkmt->mbps, threads, tkmt->mbps);
    }
    if (out_md) {
        FILE *f = fopen(out_md, "w");
        if (!f) {
            perror(out_md);
            return 1;
        }
        char cpu[256] = "unknown";
        FILE *ci = fopen("/proc/cpuinfo", "r");
        char line[512];
        while (ci && fgets(line, sizeof line, ci))
            if (strncmp(line, "model name", 10) == 0) {
                char *c = strchr(line, ':');
                snprintf(cpu, sizeof cpu, "%.200s", c ? c + 2 : line);
                cpu[strcspn(cpu, "\n")] = 0;
                break;
            }
        if (ci)
            fclose(ci);
        time_t now = time(NULL);
        char date[32];
        strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
        struct utsname un;
        uname(&un);
        if (gpt2)
            fprintf(f, "# Tokenizer benchmark\n\n");
        else
            fprintf(f, "# Tokenizer benchmark: tiktoken %s\n\n", encoding);
        fprintf(f, "- date: %s\n- machine: %s, %ld logical CPUs, %s %s\n", date, cpu, ncpu,
                un.sysname, un.release);
        fprintf(f, "- command: `");
        for (int i = 0; i < argc; i++)
            fprintf(f, i ? " %s" : "%s", argv[i]);
        fprintf(f, "` (from the repository root, after `make build`)\n");
        fprintf(f, "- text: %s, %zu bytes; best of %d run(s)\n", source, n, repeats);
        if (peers_ok)
            fprintf(f, "- peers: node %s running tests/peer/tiktoken_peer.mjs in the same run\n",
                    node_version);
        double la[3] = {0, 0, 0};
        if (getloadavg(la, 3) > 0)
            fprintf(f, "- load average when the run ended: %.2f %.2f %.2f (other work shared the "
                       "machine; the CPU-time column is immune to that, the wall-time one is not)\n",
                    la[0], la[1], la[2]);
        fprintf(f,
                "\nMB/s = 10^6 input bytes per second of wall time (best run). CPU MB/s = per "
                "second of CPU time: the encoding thread's (ojas, one thread), all threads' (ojas "
                "batch), the node process's (peers, one thread). Cold: a freshly loaded "
                "tokenizer, so the piece cache starts empty and fills during the run (the peers "
                "keep no such cache); warm: the same text encoded again. Batch: the text cut "
                "into ~64 KiB documents after a newline, the same cut for every encoder; ojas "
                "spreads them with oj_tokenizer_encode_batch, node with worker_threads. The run "
                "checks that every encoder gives the same token count.\n");
        fprintf(f, "\n| encoder | threads | seconds | MB/s | CPU MB/s | tokens |\n"
                   "|---|---:|---:|---:|---:|---:|\n");
        for (int i = 0; i < g_nrows; i++) {
            char cpus[32] = "-";
            if (g_rows[i].cpu_mbps > 0)
                snprintf(cpus, sizeof cpus, "%.2f", g_rows[i].cpu_mbps);
            fprintf(f, "| %s | %d | %.4f | %.2f | %s | %lld |\n", g_rows[i].name,
                    g_rows[i].threads, g_rows[i].seconds, g_rows[i].mbps, cpus, g_rows[i].tokens);
        }
        fprintf(f, "\nojas tokenizer load (%s): %.1f ms.\n", load_what, load_s * 1e3);
        if (*ratio) {
            fprintf(f, "\n**Ratio.** %s.", ratio);
            if (omt && tkmt)
                fprintf(f, " Batch on %d threads: ojas %.1f MB/s = %.1fx tiktoken on %d "
                           "worker_threads (%.2f MB/s).",
                        threads, omt->mbps, omt->mbps / tkmt->mbps, threads, tkmt->mbps);
            fprintf(f, "\n");
        }
        fclose(f);
        printf("wrote %s\n", out_md);
    }
    free(docs);
    free(lens);
    free(text);
    return 0;
}
