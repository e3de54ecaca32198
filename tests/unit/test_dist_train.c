// test: data-parallel `ojas train` under `mpirun -np 2` on the CPU:
// under exact numerics 2 ranks give the bits of one process with the same
// grad_accum (losses, grad norms, checkpoint files byte for byte), with
// ZeRO-1 on and off; checkpoints resume across world sizes (2 -> 1, 1 -> 2);
// a killed or hung rank ends the job within 30 s with a message naming it.
// Also the group of one (no launcher) and its collectives.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "cli_testutil.h"
#include "ojas/dist.h"
#include "ojas/ops.h"

#ifdef OJAS_MPIEXEC
static char g_dir[256];
#define MPIRUN OJAS_MPIEXEC " --allow-run-as-root --oversubscribe -np 2 "

static int ojas(const char *args, char **out, char **err) { return ct_ojas(g_dir, args, out, err); }

/* `mpirun -np 2 ojas ARGS` in g_dir, output in mpi.txt. */
static int mpi_ojas(const char *args, char **out) {
    char cmd[8192], p[400];
    snprintf(cmd, sizeof cmd, "cd '%s' && " MPIRUN "'%s' %s >mpi.txt 2>&1", g_dir, CT_OJAS, args);
    int rc = system(cmd);
    if (out) {
        snprintf(p, sizeof p, "%s/mpi.txt", g_dir);
        *out = ct_slurp(p);
    }
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int setup(void **state) {
    (void)state;
    if (ct_run_fixture(g_dir, sizeof g_dir, "dist"))
        return -1;
    if (ojas("tokenizer train --vocab-size 300 --threads 1 --out tok corpus.txt", NULL, NULL) ||
        ojas("data prepare --vocab tok --out data --threads 1 corpus.txt", NULL, NULL))
        return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The whole of g_dir/a/rel and g_dir/b/rel are the same bytes (a stronger
 * check than equal sha256 sums). */
static void same_file(const char *a, const char *b, const char *rel) {
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/%s/%s", g_dir, a, rel);
    snprintf(pb, sizeof pb, "%s/%s/%s", g_dir, b, rel);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    if (!fa || !fb)
        fail_msg("cannot open %s or %s", pa, pb);
    long na, nb;
    fseek(fa, 0, SEEK_END);
    fseek(fb, 0, SEEK_END);
    na = ftell(fa);
    nb = ftell(fb);
    rewind(fa);
    rewind(fb);
    char *ba = malloc((size_t)na + 1), *bb = malloc((size_t)nb + 1);
    assert_int_equal(fread(ba, 1, (size_t)na, fa), (size_t)na);
    assert_int_equal(fread(bb, 1, (size_t)nb, fb), (size_t)nb);
    fclose(fa);
    fclose(fb);
    if (na != nb || memcmp(ba, bb, (size_t)na))
        fail_msg("%s and %s differ", pa, pb);
    free(ba);
    free(bb);
}

/* The values of `key` in the train records of g_dir/run/metrics.jsonl, as
 * printed, one per line, into buf. */
static void train_values(const char *run, const char *key, char *buf, size_t n) {
    char p[600], pat[64];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", g_dir, run);
    snprintf(pat, sizeof pat, "\"%s\":", key);
    char *s = ct_slurp(p);
    assert_non_null(s);
    buf[0] = 0;
    size_t len = 0;
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        char *at = strstr(line, pat);
        if (!strstr(line, "\"type\":\"train\"") || !at)
            continue;
        at += strlen(pat);
        size_t w = strcspn(at, ",}");
        len += (size_t)snprintf(buf + len, n - len, "%.*s\n", (int)w, at);
    }
    free(s);
    assert_true(len > 0);
}

static void same_run(const char *a, const char *b) {
    char va[4096], vb[4096];
    train_values(a, "loss", va, sizeof va);
    train_values(b, "loss", vb, sizeof vb);
    assert_string_equal(va, vb);
    train_values(a, "grad_norm", va, sizeof va);
    train_values(b, "grad_norm", vb, sizeof vb);
    assert_string_equal(va, vb);
    same_file(a, b, "ckpt-000004/model.safetensors");
    same_file(a, b, "ckpt-000004/optimizer.safetensors");
    same_file(a, b, "ckpt-000002/model.safetensors");
    same_file(a, b, "ckpt-000002/optimizer.safetensors");
}

#define EXACT "--numerics exact --no-progress --no-plot --set grad_accum=2 "

/* The reference: one process, grad_accum 2 (made once). */
static void one_process(void) {
    static bool done;
    if (done)
        return;
    assert_int_equal(ojas("train -c c.json -o one " EXACT, NULL, NULL), 0);
    done = true;
}

static char g_self[4096]; /* this test's executable (argv[0], absolute) */

// test: under mpirun the group's MPI gives MPI_THREAD_MULTIPLE, so the NCCL
// watchdog thread may call MPI_Abort while the main thread is inside MPI
// (each rank of `mpirun -np 2 test_dist_train --mpi-threads` prints it)
static void test_mpi_thread_multiple(void **state) {
    (void)state;
    char cmd[8192], p[400];
    snprintf(cmd, sizeof cmd, "cd '%s' && " MPIRUN "'%s' --mpi-threads >threads.txt 2>&1", g_dir,
             g_self);
    int rc = system(cmd);
    snprintf(p, sizeof p, "%s/threads.txt", g_dir);
    char *out = ct_slurp(p);
    if (rc != 0 || !out || !strstr(out, "rank 0: MPI_THREAD_MULTIPLE 1") ||
        !strstr(out, "rank 1: MPI_THREAD_MULTIPLE 1"))
        fail_msg("mpirun %d: %s", rc, out ? out : "(no output)");
    free(out);
}

// test: 2 ranks (one micro-batch each) = 1 process with grad_accum 2, bit for bit
static void test_two_ranks_equal_one_process(void **state) {
    (void)state;
    one_process();
    char *out = NULL;
    int rc = mpi_ojas("train -c c.json -o two " EXACT, &out);
    if (rc)
        fail_msg("mpirun failed (%d): %s", rc, out);
    assert_non_null(strstr(out, "data parallel: 2 ranks (mpi)"));
    assert_non_null(strstr(out, "summed in rank order")); /* EXACT: never the all-reduce */
    free(out);
    same_run("one", "two");
}

// test: under mpirun, whose ranks' stdout is a pseudo-terminal even when
// the job's output goes to a file, the log is plain lines (no progress bar
// drawn with carriage returns and escape codes)
static void test_mpirun_log_is_plain(void **state) {
    (void)state;
    char *out = NULL;
    int rc = mpi_ojas("train -c c.json -o plain --numerics exact --no-plot --set grad_accum=2", &out);
    if (rc)
        fail_msg("mpirun failed (%d): %s", rc, out);
    if (strchr(out, '\r') || strstr(out, "\x1b["))
        fail_msg("the log under mpirun holds a progress bar: %s", out);
    assert_non_null(strstr(out, "step 4/4"));
    free(out);
}

// test: one rank with 2 micro-batches under EXACT takes the all-reduce
// path (its rank-order sum is its own gradient): the first micro-batch's
// gradient written into the arena by backward, the second formed whole
// and added, as one process adds them; the bits equal one process's
static void test_one_rank_allreduce_exact(void **state) {
    (void)state;
    one_process();
    char cmd[8192], p[400];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && " OJAS_MPIEXEC " --allow-run-as-root -np 1 '%s' train -c c.json -o "
             "onerank " EXACT ">mpi1.txt 2>&1",
             g_dir, CT_OJAS);
    int rc = system(cmd);
    snprintf(p, sizeof p, "%s/mpi1.txt", g_dir);
    char *out = ct_slurp(p);
    if (rc || !out || !strstr(out, "data parallel: 1 ranks (mpi)") ||
        !strstr(out, "gradients summed in place by all-reduce"))
        fail_msg("mpirun -np 1 failed (%d) or not through the all-reduce path: %s", rc, out);
    free(out);
    same_run("one", "onerank");
}

// test: under FAST numerics the 2 ranks take the all-reduce path (the
// gradients summed in place in one arena by MPI_Allreduce, in buckets of
// 64 KiB queued from the backward as their gradients are final); with one
// micro-batch per rank the sum is one addition, which MPI and one process
// with grad_accum 2 make alike, so the bits still equal one process's
static void test_two_ranks_allreduce_fast(void **state) {
    (void)state;
#define FAST "--numerics fast --no-progress --no-plot --set grad_accum=2 " \
             "--set dist_bucket_bytes=65536 "
    assert_int_equal(ojas("train -c c.json -o onefast " FAST, NULL, NULL), 0);
    char *out = NULL;
    int rc = mpi_ojas("train -c c.json -o twofast " FAST, &out);
    if (rc)
        fail_msg("mpirun failed (%d): %s", rc, out);
    if (!strstr(out, "gradients summed in place by all-reduce"))
        fail_msg("not through the all-reduce path: %s", out);
    free(out);
    same_run("onefast", "twofast");
#undef FAST
}

// test: the all-reduce path makes one host exchange per step (its record,
// after the step: losses, stop flags, the next step's schedule), counted
// by the exchanges OJAS_DIST_TRACE=1 names on stderr
static void test_allreduce_one_exchange_per_step(void **state) {
    (void)state;
    setenv("OJAS_DIST_TRACE", "1", 1);
    char *out = NULL;
    int rc = mpi_ojas("train -c c.json -o trace --numerics fast --no-progress --no-plot "
                      "--set grad_accum=2 --set max_steps=4 --set eval_every=0 --set ckpt_every=0",
                      &out);
    unsetenv("OJAS_DIST_TRACE");
    if (rc || !out || !strstr(out, "gradients summed in place by all-reduce"))
        fail_msg("mpirun failed (%d) or not through the all-reduce path: %s", rc, out);
    for (int r = 0; r < 2; r++) {
        char tag[64];
        snprintf(tag, sizeof tag, "ojas: dist: rank %d exchange (", r);
        int any = 0, per_step[5] = {0};
        for (const char *l = out; (l = strstr(l, tag)) != NULL; l++) {
            any++;
            const char *eol = strchr(l, '\n'), *s = strstr(l, "step ");
            if (s && (!eol || s < eol)) {
                int step = atoi(s + 5);
                if (step < 1 || step > 4)
                    fail_msg("an exchange of step %d in a run of 4: %s", step, out);
                per_step[step]++;
            }
        }
        if (!any)
            fail_msg("rank %d traced no exchange: %s", r, out);
        for (int s = 1; s <= 4; s++)
            if (per_step[s] != 1)
                fail_msg("rank %d made %d host exchanges in step %d (want 1): %s", r, per_step[s],
                         s, out);
    }
    free(out);
}

// test: a group from RANK / WORLD_SIZE (torchrun's variables, no MPI)
// with CPU ranks is refused by name: CPU collectives need MPI; the refusal
// leaves no run directory behind, as every refused start does
static void test_env_group_cpu_refused(void **state) {
    (void)state;
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    char *out = NULL, *err = NULL;
    int rc = ojas("train -c c.json -o envcpu --no-progress --no-plot", &out, &err);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    assert_int_not_equal(rc, 0);
    if (!err || !strstr(err, "a CPU engine's collectives need MPI"))
        fail_msg("not refused by name: %s %s", out, err);
    char p[400];
    struct stat sb;
    snprintf(p, sizeof p, "%s/envcpu", g_dir);
    if (stat(p, &sb) == 0)
        fail_msg("the refused start left the run directory 'envcpu' behind");
    free(out);
    free(err);
}

// test: ZeRO-1 (optimizer state sharded), with the gradient exchanged in
// 40 kB buckets (about a dozen), gives the same bits
static void test_zero1_same_bits(void **state) {
    (void)state;
    one_process();
    char *out = NULL;
    int rc = mpi_ojas("train -c c.json -o zero " EXACT "--set zero=1 --set optimizer=muon "
                      "--set dist_bucket_bytes=40000", &out);
    if (rc)
        fail_msg("mpirun failed (%d): %s", rc, out);
    assert_non_null(strstr(out, "ZeRO-1 on"));
    free(out);
    same_run("one", "zero");
}

// test: a 2-rank checkpoint resumes in 1 process, and a 1-process one in 2
// ranks (ZeRO-1 too), each ending with the bits of the uninterrupted run
static void test_resume_across_world_sizes(void **state) {
    (void)state;
    one_process();
    char *out = NULL;
    assert_int_equal(mpi_ojas("train -c c.json -o two2 " EXACT, &out), 0);
    free(out);
    assert_int_equal(ojas("train -r two2/ckpt-000002 -o r21 --no-progress --no-plot", NULL, NULL),
                     0);
    same_file("one", "r21", "ckpt-000004/model.safetensors");
    same_file("one", "r21", "ckpt-000004/optimizer.safetensors");
    assert_int_equal(mpi_ojas("train -r one/ckpt-000002 -o r12 --no-progress --no-plot", &out), 0);
    free(out);
    same_file("one", "r12", "ckpt-000004/model.safetensors");
    same_file("one", "r12", "ckpt-000004/optimizer.safetensors");
    assert_int_equal(
        mpi_ojas("train -r one/ckpt-000002 -o r12z --no-progress --no-plot --set zero=1", &out), 0);
    free(out);
    same_file("one", "r12z", "ckpt-000004/model.safetensors");
    same_file("one", "r12z", "ckpt-000004/optimizer.safetensors");
}

// test: grad_accum that the world size does not divide is refused by name
static void test_grad_accum_not_multiple(void **state) {
    (void)state;
    char *out = NULL;
    int rc = mpi_ojas("train -c c.json -o bad --no-progress --no-plot --set grad_accum=3", &out);
    assert_int_not_equal(rc, 0);
    if (!strstr(out, "grad_accum 3 is not a multiple of the world size 2"))
        fail_msg("no clear error: %s", out);
    free(out);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The PID of the child of `parent` whose environment says rank `rank`;
 * 0 when none (yet). */
static pid_t rank_pid(pid_t parent, int rank) {
    DIR *d = opendir("/proc");
    struct dirent *de;
    pid_t found = 0;
    char want[48];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    while (d && !found && (de = readdir(d))) {
        pid_t pid = (pid_t)atoi(de->d_name);
        if (pid <= 0)
            continue;
        char p[64], buf[512];
        snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(p, "r");
        if (!f)
            continue;
        int ppid = 0;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *rp = strrchr(buf, ')'); /* "pid (comm) state ppid ..." */
        if (!rp || sscanf(rp + 2, "%*c %d", &ppid) != 1 || ppid != parent)
            continue;
        snprintf(p, sizeof p, "/proc/%d/environ", (int)pid);
        char *env = NULL;
        f = fopen(p, "rb");
        if (f) {
            env = calloc(1, 1 << 20);
            size_t m = fread(env, 1, (1 << 20) - 1, f);
            fclose(f);
            for (size_t i = 0; i < m; i += strlen(env + i) + 1)
                if (!strcmp(env + i, want))
                    found = pid;
        }
        free(env);
    }
    if (d)
        closedir(d);
    return found;
}

/* Start a long 2-rank run (output in `log`), wait until it trains, send
 * rank 1 `sig`, and return the seconds until mpirun exits; its output in
 * *out and exit code in *rc. */
static double hurt_rank1(int sig, const char *extra, const char *log, char **out, int *rc) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && exec " MPIRUN "'%s' train -c c.json -o %s.run --no-progress --no-plot "
             "--set grad_accum=2 --set max_steps=1000000 --set ckpt_every=0 --set eval_every=0 "
             "--set log_every=1 %s >%s 2>&1",
             g_dir, CT_OJAS, log, extra, log);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* training: rank 0 has logged a step */
    char p[600];
    snprintf(p, sizeof p, "%s/%s", g_dir, log);
    pid_t victim = 0;
    for (int i = 0; i < 600; i++) {
        char *s = ct_slurp(p);
        bool stepping = s && strstr(s, "step 2/");
        free(s);
        if (stepping && (victim = rank_pid(pid, 1)))
            break;
        usleep(100000);
    }
    if (!victim) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("the run did not start training within 60 s");
    }
    double t0 = now_s();
    kill(victim, sig);
    int status = 0;
    pid_t r = 0;
    while ((r = waitpid(pid, &status, WNOHANG)) == 0 && now_s() - t0 < 60)
        usleep(50000);
    double dt = now_s() - t0;
    if (r == 0) { /* never a silent hang: clean up, then fail */
        kill(pid, SIGKILL);
        kill(victim, SIGKILL);
        waitpid(pid, &status, 0);
    }
    if (sig == SIGSTOP)
        kill(victim, SIGKILL);
    *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    *out = ct_slurp(p);
    return dt;
}

// test: killing rank 1 ends rank 0 within 30 s, and the launcher names rank 1
static void test_killed_rank_ends_job(void **state) {
    (void)state;
    char *out = NULL;
    int rc = 0;
    double dt = hurt_rank1(SIGKILL, "", "kill.txt", &out, &rc);
    if (dt > 30)
        fail_msg("the job took %.0f s to end after rank 1 was killed: %s", dt, out);
    assert_int_not_equal(rc, 0);
    if (!strstr(out, "rank 1"))
        fail_msg("no message names rank 1: %s", out);
    free(out);
}

// test: a rank that hangs (stopped) is named by rank 0 after dist_timeout,
// and the job ends within 30 s
static void test_hung_rank_named(void **state) {
    (void)state;
    char *out = NULL;
    int rc = 0;
    double dt = hurt_rank1(SIGSTOP, "--set dist_timeout=3", "hang.txt", &out, &rc);
    if (dt > 30)
        fail_msg("the job took %.0f s to end after rank 1 hung: %s", dt, out);
    assert_int_not_equal(rc, 0);
    if (!strstr(out, "ojas: dist: rank 0 of 2: ") || !strstr(out, "for rank 1: it died or hangs"))
        fail_msg("rank 0 did not name rank 1: %s", out);
    free(out);
}
#endif

// test: without a launcher the group is one process, and its collectives
// copy (alltoall, allgather) or leave the data as it is (allgatherv)
static void test_group_of_one(void **state) {
    (void)state;
    if (oj_dist_launched())
        skip();
    oj_dist *d = NULL;
    oj_error err = {0};
    assert_int_equal(oj_dist_init(0, &d, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "timeout"));
    assert_int_equal(oj_dist_init(10, &d, &err), OJ_OK);
    assert_int_equal(oj_dist_rank(d), 0);
    assert_int_equal(oj_dist_world_size(d), 1);
    assert_false(oj_dist_active(d));
    assert_string_equal(oj_dist_transport(d), "none");
    int v = 42, all = 0;
    assert_int_equal(oj_dist_exchange(d, &v, sizeof v, &all, "test", &err), OJ_OK);
    assert_int_equal(all, 42);
    assert_int_equal(oj_dist_barrier(d, "test", &err), OJ_OK);
    oj_engine *eng = NULL;
    oj_engine_config ec = oj_engine_config_default();
    ec.threads = 1;
    assert_int_equal(oj_engine_create(&ec, &eng, &err), OJ_OK);
    int64_t n = 6;
    oj_tensor *a = oj_arange(eng, 0, 6, 1, OJ_F32), *b = oj_zeros(eng, 1, &n, OJ_F32);
    err = (oj_error){0};
    assert_int_equal(oj_dist_alltoall(d, a, b, &err), OJ_ERR_STATE); /* not bound */
    assert_non_null(strstr(err.message, "not bound"));
    assert_int_equal(oj_dist_bind(d, eng, &err), OJ_OK);
    assert_int_equal(oj_dist_alltoall(d, a, b, &err), OJ_OK);
    float got[6];
    assert_int_equal(oj_to_host(b, got, sizeof got), OJ_OK);
    for (int i = 0; i < 6; i++)
        assert_true(got[i] == (float)i);
    int64_t off[2] = {0, 6};
    assert_int_equal(oj_dist_allgatherv(d, b, off, &err), OJ_OK);
    off[1] = 5;
    assert_int_equal(oj_dist_allgatherv(d, b, off, &err), OJ_ERR_INVALID_ARGUMENT);
    oj_tensor *c = oj_zeros(eng, 1, (int64_t[]){5}, OJ_F32);
    assert_int_equal(oj_dist_allgather(d, a, c, &err), OJ_ERR_SHAPE);
    oj_release(a);
    oj_release(b);
    oj_release(c);
    oj_engine_free(eng);
    oj_dist_free(d);
}

// test: a group from RANK/WORLD_SIZE refuses CPU engines with one
// message, whether asked before anything is made (oj_dist_check_device,
// what the trainer asks) or at oj_dist_bind; CUDA devices and the group of
// one pass the check
static void test_env_group_check_device(void **state) {
    (void)state;
    if (oj_dist_launched())
        skip();
    oj_error err = {0}, err2 = {0};
    const oj_device cpu = {OJ_DEVICE_CPU, 0}, cuda = {OJ_DEVICE_CUDA, 0};
    assert_int_equal(oj_dist_check_device(NULL, cpu, &err), OJ_OK);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    oj_dist *d = NULL;
    oj_status st = oj_dist_init(10, &d, &err);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    assert_int_equal(st, OJ_OK);
    assert_true(oj_dist_active(d));
    assert_false(oj_dist_mpi(d));
    assert_int_equal(oj_dist_check_device(d, cuda, &err), OJ_OK);
    assert_int_equal(oj_dist_check_device(d, cpu, &err), OJ_ERR_UNSUPPORTED);
    if (!strstr(err.message, "a CPU engine's collectives need MPI") ||
        !strstr(err.message, "start the ranks with mpirun"))
        fail_msg("the refusal does not say why and what to do: %s", err.message);
    oj_engine *eng = NULL;
    oj_engine_config ec = oj_engine_config_default();
    ec.threads = 1;
    assert_int_equal(oj_engine_create(&ec, &eng, &err2), OJ_OK);
    assert_int_equal(oj_dist_bind(d, eng, &err2), OJ_ERR_UNSUPPORTED);
    assert_string_equal(err2.message, err.message);
    oj_engine_free(eng);
    oj_dist_free(d);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--mpi-threads") == 0) { /* a rank of test_mpi_thread_multiple */
        oj_dist *d = NULL;
        oj_error err = {0};
        if (oj_dist_init(30, &d, &err) != OJ_OK) {
            fprintf(stderr, "oj_dist_init: %s\n", err.message);
            return 1;
        }
        printf("rank %d: MPI_THREAD_MULTIPLE %d\n", oj_dist_rank(d), oj_dist_mpi_threads(d));
        fflush(stdout);
        oj_dist_free(d);
        return 0;
    }
#ifdef OJAS_MPIEXEC
    if (!realpath(argv[0], g_self))
        snprintf(g_self, sizeof g_self, "%s", argv[0]);
#endif
    /* containers often forbid the cross-process reads OpenMPI's shared
     * memory transport tries first: copy through the shared segment */
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    /* sanitizer builds: OpenMPI's own never-freed allocations are not
     * ojas's leaks (full unwinding, so that their stacks reach libmpi's
     * frames through its dlopen'd components) */
    setenv("LSAN_OPTIONS",
           "suppressions=" OJAS_SOURCE_DIR "/tests/unit/lsan_openmpi.supp:fast_unwind_on_malloc=0",
           0);
    const struct CMUnitTest group[] = {cmocka_unit_test(test_group_of_one),
                                       cmocka_unit_test(test_env_group_check_device)};
    int failed = cmocka_run_group_tests_name("dist_group", group, NULL, NULL);
#ifdef OJAS_MPIEXEC
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ranks_equal_one_process),
        cmocka_unit_test(test_mpi_thread_multiple),
        cmocka_unit_test(test_mpirun_log_is_plain),
        cmocka_unit_test(test_two_ranks_allreduce_fast),
        cmocka_unit_test(test_allreduce_one_exchange_per_step),
        cmocka_unit_test(test_one_rank_allreduce_exact),
        cmocka_unit_test(test_env_group_cpu_refused),
        cmocka_unit_test(test_zero1_same_bits),
        cmocka_unit_test(test_resume_across_world_sizes),
        cmocka_unit_test(test_grad_accum_not_multiple),
        cmocka_unit_test(test_killed_rank_ends_job),
        cmocka_unit_test(test_hung_rank_named),
    };
    failed += cmocka_run_group_tests_name("dist_train", tests, setup, teardown);
#else
    printf("dist_train: skipped (built without MPI: OJAS_MPI=OFF)\n");
#endif
    return failed;
}
