// test: world size 1 through NCCL (`mpirun -np 1 ojas train --device cuda`)
// gives the bits of the plain one-process run: losses, grad norms and
// checkpoint files byte for byte under exact numerics, with ZeRO-1 and
// grad_accum 2 too, and as a CUDA graph step; prints the median step time
// of both runs, eager and graph (the NCCL path's cost).
// Skips (77) without a CUDA device or without MPI. OJAS_GPU_TEST_ON_CPU=1
// runs the same on the CPU engine (MPI transport) as a self-check.
#include <stdbool.h>

#include "../unit/cli_testutil.h"
#include "gpu_testutil.h"

#ifdef OJAS_MPIEXEC
static char g_dir[256];
static bool g_on_cpu;
static int ojas(const char *args, char **out) { return ct_ojas(g_dir, args, out, NULL); }

static int mpi1(const char *args, char **out) {
    char cmd[8192], p[400];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && " OJAS_MPIEXEC " --allow-run-as-root -np 1 '%s' %s >mpi.txt 2>&1",
             g_dir, CT_OJAS, args);
    int rc = system(cmd);
    if (out) {
        snprintf(p, sizeof p, "%s/mpi.txt", g_dir);
        *out = ct_slurp(p);
    }
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void same_file(const char *a, const char *b, const char *rel) {
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/%s/%s", g_dir, a, rel);
    snprintf(pb, sizeof pb, "%s/%s/%s", g_dir, b, rel);
    char *x = ct_slurp(pa), *y = ct_slurp(pb);
    assert_non_null(x);
    assert_non_null(y);
    FILE *f = fopen(pa, "rb"), *g = fopen(pb, "rb");
    fseek(f, 0, SEEK_END);
    fseek(g, 0, SEEK_END);
    long n = ftell(f), m = ftell(g);
    fclose(f);
    fclose(g);
    if (n != m || memcmp(x, y, (size_t)n))
        fail_msg("%s and %s differ", pa, pb);
    free(x);
    free(y);
}

static const char *dev(void) { return g_on_cpu ? "cpu" : "cuda"; }

/* The "done: ..." line of a run's output. */
static void say_done(const char *what, const char *out) {
    const char *d = out ? strstr(out, "done: ") : NULL;
    printf("%s: %.*s\n", what, d ? (int)strcspn(d, "\n") : 4, d ? d : "none");
}

static void pair(const char *extra, const char *a, const char *b) {
    char args[1024];
    char *out = NULL;
    snprintf(args, sizeof args,
             "train -c c.json -o %s --device %s --numerics exact --no-progress --no-plot %s", a,
             dev(), extra);
    assert_int_equal(ojas(args, &out), 0);
    say_done(a, out);
    free(out);
    snprintf(args, sizeof args,
             "train -c c.json -o %s --device %s --numerics exact --no-progress --no-plot %s", b,
             dev(), extra);
    int rc = mpi1(args, &out);
    if (rc)
        fail_msg("mpirun -np 1 failed (%d): %s", rc, out);
    if (!strstr(out, g_on_cpu ? "data parallel: 1 ranks (mpi)" : "data parallel: 1 ranks (nccl)"))
        fail_msg("not through the collectives: %s", out);
    /* ZeRO-1 keeps the shard exchange; otherwise one rank sums by all-reduce */
    if (!strstr(out, strstr(extra, "zero=1") ? "summed in rank order"
                                              : "summed in place by all-reduce"))
        fail_msg("not the expected gradient path: %s", out);
    say_done(b, out);
    free(out);
    for (int s = 2; s <= 4; s += 2) {
        char rel[64];
        snprintf(rel, sizeof rel, "ckpt-%06d/model.safetensors", s);
        same_file(a, b, rel);
        snprintf(rel, sizeof rel, "ckpt-%06d/optimizer.safetensors", s);
        same_file(a, b, rel);
    }
}

// test: grad_accum 1, plain vs NCCL world size 1
static void test_ws1_equals_plain(void **state) {
    (void)state;
    pair("", "plain", "nccl");
}

// test: grad_accum 2 with ZeRO-1 (one rank holds every shard)
static void test_ws1_accum_zero(void **state) {
    (void)state;
    pair("--set grad_accum=2 --set zero=1", "plain2", "nccl2");
}

/* The median of the "step_s" values of g_dir/run/metrics.jsonl's train
 * records after the first `skip`. */
static double median_step_s(const char *run, int skip) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", g_dir, run);
    char *s = ct_slurp(p);
    assert_non_null(s);
    double v[1024];
    int n = 0, seen = 0;
    for (char *line = strtok(s, "\n"); line && n < 1024; line = strtok(NULL, "\n")) {
        char *at = strstr(line, "\"step_s\":");
        if (!strstr(line, "\"type\":\"train\"") || !at || seen++ < skip)
            continue;
        v[n++] = atof(at + 9);
    }
    free(s);
    assert_true(n > 0);
    for (int i = 1; i < n; i++) /* insertion sort: a few dozen values */
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    return v[n / 2];
}

/* The median step time of gpt2-124m (B 4, T 256; the CPU self-check: the
 * fixture's tiny model) trained plain and at world size 1 through NCCL,
 * with `extra` config, printed with their ratio (not asserted: a shared
 * GPU's timing is noisy). */
static void time_pair(const char *extra, const char *label) {
    const char *model = g_on_cpu ? "nanolab-tiny --set seq_len=32" : "gpt2-124m --set seq_len=256";
    const char *args = "train -c c.json -o %s --device %s --no-progress --no-plot "
                       "--set model=%s --set max_steps=40 "
                       "--set eval_every=0 --set ckpt_every=0 --set keep_last=1 %s";
    char a[1024], ra[64], rb[64];
    char *out = NULL;
    snprintf(ra, sizeof ra, "tplain%s", label);
    snprintf(rb, sizeof rb, "tnccl%s", label);
    snprintf(a, sizeof a, args, ra, dev(), model, extra);
    if (ojas(a, &out))
        fail_msg("plain run failed: %s", out);
    free(out);
    snprintf(a, sizeof a, args, rb, dev(), model, extra);
    int rc = mpi1(a, &out);
    if (rc)
        fail_msg("mpirun -np 1 failed (%d): %s", rc, out);
    free(out);
    double p = median_step_s(ra, 5), q = median_step_s(rb, 5);
    printf("%s B 4, %s step, median after 5: plain %.2f ms, world size 1 through %s %.2f ms "
           "(ratio %.3f, %+.1f%%)\n",
           g_on_cpu ? "nanolab-tiny T 32" : "gpt2-124m T 256", label, p * 1e3,
           g_on_cpu ? "MPI" : "NCCL", q * 1e3, q / p, (q / p - 1) * 100);
}

// test: the eager step time, plain against world size 1 through NCCL
// (the NCCL path's cost), printed
static void test_ws1_step_time(void **state) {
    (void)state;
    time_pair("", "eager");
}

// test: a CUDA graph step (`cuda_graph`) at world size 1 through NCCL
// gives the plain graph run's bits (the captured backward writes the
// gradient arena, the all-reduce runs after each replay)
static void test_ws1_graph_equals_plain(void **state) {
    (void)state;
    if (g_on_cpu) {
        printf("skipped on the CPU: cuda_graph needs a CUDA engine\n");
        return;
    }
    pair("--set cuda_graph=1", "gplain", "gnccl");
}

// test: a group without MPI (RANK=0 WORLD_SIZE=1, as torchrun sets them
// for one process: no MASTER_ADDR / MASTER_PORT, the rendezvous skipped,
// the records through NCCL) gives the plain run's bits; the CLI's stderr
// is printed when it fails
static void test_ws1_env_group_equals_plain(void **state) {
    (void)state;
    if (g_on_cpu) {
        printf("skipped on the CPU: a group without MPI needs CUDA engines\n");
        return;
    }
    char args[1024];
    char *out = NULL, *err = NULL;
    const char *common = "train -c c.json --device cuda --numerics exact --no-progress "
                         "--no-plot";
    snprintf(args, sizeof args, "%s -o eplain", common);
    assert_int_equal(ct_ojas_logged(g_dir, args, &out), 0);
    free(out);
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    snprintf(args, sizeof args, "%s -o eenv", common);
    int rc = ct_ojas(g_dir, args, &out, &err);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    /* rank 0's log (the "data parallel" line) is on stdout, errors on stderr */
    if (rc || !out || !strstr(out, "data parallel: 1 ranks (nccl)"))
        fail_msg("RANK=0 WORLD_SIZE=1 ojas train failed (%d) or not through NCCL:\n"
                 "stdout: %s\nstderr: %s",
                 rc, out ? out : "(none)", err ? err : "(none)");
    say_done("eenv", out);
    free(out);
    free(err);
    for (int st = 2; st <= 4; st += 2) {
        char rel[64];
        snprintf(rel, sizeof rel, "ckpt-%06d/model.safetensors", st);
        same_file("eplain", "eenv", rel);
        snprintf(rel, sizeof rel, "ckpt-%06d/optimizer.safetensors", st);
        same_file("eplain", "eenv", rel);
    }
}

// test: the graph step time, plain against world size 1 through NCCL
static void test_ws1_graph_step_time(void **state) {
    (void)state;
    if (g_on_cpu) {
        printf("skipped on the CPU: cuda_graph needs a CUDA engine\n");
        return;
    }
    time_pair("--set cuda_graph=1", "graph");
}

static int setup(void **state) {
    (void)state;
    if (ct_run_fixture(g_dir, sizeof g_dir, "gpudist"))
        return -1;
    if (ojas("tokenizer train --vocab-size 300 --threads 1 --out tok corpus.txt", NULL) ||
        ojas("data prepare --vocab tok --out data --threads 1 corpus.txt", NULL))
        return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}
#endif

int main(void) {
#ifndef OJAS_MPIEXEC
    printf("skipped: built without MPI (OJAS_MPI=OFF)\n");
    return 77;
#else
    if (gpu_test_probe(true, &g_on_cpu) != 0)
        return 77;
    /* as test_dist_train: containers, and OpenMPI's own never-freed
     * allocations under a sanitizer build */
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    setenv("LSAN_OPTIONS",
           "suppressions=" OJAS_SOURCE_DIR "/tests/unit/lsan_openmpi.supp:fast_unwind_on_malloc=0",
           0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ws1_equals_plain),
        cmocka_unit_test(test_ws1_accum_zero),
        cmocka_unit_test(test_ws1_step_time),
        cmocka_unit_test(test_ws1_graph_equals_plain),
        cmocka_unit_test(test_ws1_graph_step_time),
        cmocka_unit_test(test_ws1_env_group_equals_plain),
    };
    return cmocka_run_group_tests_name("gpu_dist", tests, setup, teardown);
#endif
}
