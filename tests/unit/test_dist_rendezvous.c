// test: a process group without MPI (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT): the TCP rendezvous hands rank 0's 128-byte id to every
// rank, refuses ranks that disagree on the world size, and ends by its
// deadline with a message naming the address; the environment is read
// and checked by name; a CPU engine cannot bind such a group (its
// collectives need MPI).
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dist/dist_internal.h"
#include "ojas/dist.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A TCP port that was free a moment ago. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t n = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* In a child: join as `rank` of `world` and exit 0 when the id received
 * is the pattern (byte i = i * 7 + 1), 2 on a refusal naming the
 * disagreement, 1 otherwise. */
static pid_t child(int port, int rank, int world) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid)
        return pid;
    unsigned char id[128] = {0};
    oj_error err = {0};
    oj_status st = oj__dist_rendezvous("127.0.0.1", port, rank, world, 10, id, &err);
    if (st == OJ_ERR_INVALID_ARGUMENT && strstr(err.message, "disagree on RANK/WORLD_SIZE"))
        _exit(2);
    for (int i = 0; !st && i < 128; i++)
        if (id[i] != (unsigned char)(i * 7 + 1))
            _exit(1);
    _exit(st ? 1 : 0);
}

static int exit_code(pid_t pid) {
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// test: rank 0 hands its id to ranks 1 and 2 (which may start first)
static void test_id_reaches_every_rank(void **state) {
    (void)state;
    int port = free_port();
    pid_t a = child(port, 1, 3), b = child(port, 2, 3);
    usleep(200000); /* the others are already retrying */
    unsigned char id[128];
    for (int i = 0; i < 128; i++)
        id[i] = (unsigned char)(i * 7 + 1);
    oj_error err = {0};
    assert_int_equal(oj__dist_rendezvous("127.0.0.1", port, 0, 3, 10, id, &err), OJ_OK);
    assert_int_equal(exit_code(a), 0);
    assert_int_equal(exit_code(b), 0);
}

// test: a rank of another world size is refused, on both sides, by name
static void test_world_mismatch_refused(void **state) {
    (void)state;
    int port = free_port();
    pid_t a = child(port, 1, 3);
    unsigned char id[128] = {0};
    oj_error err = {0};
    assert_int_equal(oj__dist_rendezvous("127.0.0.1", port, 0, 2, 10, id, &err),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "reached by a rank 1 of world size 3"));
    assert_int_equal(exit_code(a), 2);
}

// test: a rank that finds no rank 0 stops at its deadline naming the
// address; a rank 0 that hears from nobody says how many it heard from
static void test_deadlines_name_what_is_missing(void **state) {
    (void)state;
    int port = free_port();
    unsigned char id[128] = {0};
    oj_error err = {0};
    double t0 = now_s();
    assert_int_equal(oj__dist_rendezvous("127.0.0.1", port, 1, 2, 1, id, &err), OJ_ERR_IO);
    assert_true(now_s() - t0 < 5);
    char want[96];
    snprintf(want, sizeof want, "rank 1 of 2 could not reach rank 0 at 127.0.0.1:%d", port);
    assert_non_null(strstr(err.message, want));
    oj_error e2 = {0};
    t0 = now_s();
    assert_int_equal(oj__dist_rendezvous("127.0.0.1", port, 0, 2, 1, id, &e2), OJ_ERR_IO);
    assert_true(now_s() - t0 < 5);
    assert_non_null(strstr(e2.message, "rank 0 heard from 0 of the 1 other ranks"));
    oj_error e3 = {0};
    assert_int_equal(oj__dist_rendezvous("127.0.0.1", 0, 0, 2, 1, id, &e3),
                     OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e3.message, "rank 0 of 2 needs rank 0's address and a port"));
}

// test: a world of one meets nobody: it needs no address and no port
// (RANK=0 WORLD_SIZE=1 sets neither MASTER_ADDR nor MASTER_PORT) and
// leaves rank 0's id as it is
static void test_world_of_one_needs_no_port(void **state) {
    (void)state;
    unsigned char id[128];
    for (int i = 0; i < 128; i++)
        id[i] = (unsigned char)(i * 7 + 1);
    oj_error err = {0};
    assert_int_equal(oj__dist_rendezvous("127.0.0.1", 0, 0, 1, 1, id, &err), OJ_OK);
    assert_int_equal(oj__dist_rendezvous(NULL, 0, 0, 1, 1, id, &err), OJ_OK);
    for (int i = 0; i < 128; i++)
        assert_int_equal(id[i], (unsigned char)(i * 7 + 1));
    assert_int_equal(oj__dist_rendezvous(NULL, 0, 1, 1, 1, id, &err), OJ_ERR_INVALID_ARGUMENT);
}

/* In a child: connect to rank 0 on `port` (retrying while it does not
 * listen yet) after `delay_s`, then say nothing for `hold_s` and exit. */
static pid_t silent_peer(int port, double delay_s, double hold_s) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid)
        return pid;
    usleep((useconds_t)(delay_s * 1e6));
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    for (int i = 0; i < 100; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            usleep((useconds_t)(hold_s * 1e6));
            _exit(0);
        }
        if (fd >= 0)
            close(fd);
        usleep(50000);
    }
    _exit(1);
}

/* In a child: after `delay_s`, join as `rank` of `world` (child()'s exit
 * codes). */
static pid_t late_child(int port, int rank, int world, double delay_s) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid)
        return pid;
    usleep((useconds_t)(delay_s * 1e6));
    child(port, rank, world); /* forks again: wait for that one */
    int status = 0;
    pid_t c = wait(&status);
    _exit(c > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

// test: a peer that connects to rank 0 and says nothing (a health check, a
// port scan that holds the socket) does not hold the rendezvous until its
// deadline: the rank that comes after it still gets the id
static void test_silent_peer_does_not_stall(void **state) {
    (void)state;
    int port = free_port();
    pid_t quiet = silent_peer(port, 0.2, 12);
    pid_t a = late_child(port, 1, 2, 1.0);
    unsigned char id[128];
    for (int i = 0; i < 128; i++)
        id[i] = (unsigned char)(i * 7 + 1);
    oj_error err = {0};
    double t0 = now_s();
    oj_status st = oj__dist_rendezvous("127.0.0.1", port, 0, 2, 8, id, &err);
    if (st)
        fprintf(stderr, "%s\n", err.message);
    assert_int_equal(st, OJ_OK);
    assert_true(now_s() - t0 < 6);
    assert_int_equal(exit_code(a), 0);
    kill(quiet, SIGKILL);
    exit_code(quiet);
}

// test: a rank whose MASTER_PORT is held by another program (it answers
// with bytes that are no rendezvous reply) is told so, not that the ranks
// disagree on RANK/WORLD_SIZE
static void test_foreign_listener_named(void **state) {
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t n = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    assert_int_equal(listen(fd, 4), 0);
    int port = ntohs(a.sin_port);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* an HTTP server, say */
        int c = accept(fd, NULL, NULL);
        char buf[12], junk[140];
        memset(junk, 'H', sizeof junk);
        if (c >= 0 && recv(c, buf, sizeof buf, MSG_WAITALL) == (ssize_t)sizeof buf)
            send(c, junk, sizeof junk, MSG_NOSIGNAL);
        usleep(200000);
        _exit(0);
    }
    close(fd);
    unsigned char id[128] = {0};
    oj_error err = {0};
    assert_int_equal(oj__dist_rendezvous("127.0.0.1", port, 1, 2, 5, id, &err), OJ_ERR_IO);
    assert_null(strstr(err.message, "disagree"));
    assert_non_null(strstr(err.message, "is not an ojas rank 0"));
    assert_int_equal(exit_code(pid), 0);
}

static void clear_env(void) {
    const char *vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

// test: RANK / WORLD_SIZE make a group without MPI; bad values are named;
// a CPU engine is refused (its collectives need MPI)
static void test_env_group(void **state) {
    (void)state;
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE")) {
        skip(); /* under an MPI launcher the MPI group wins */
    }
    clear_env();
    oj_dist *d = NULL;
    oj_error err = {0};
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "2", 1);
    assert_true(oj_dist_launched());
    assert_int_equal(oj_dist_init(10, &d, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "RANK=2 is not a rank of WORLD_SIZE=2"));
    oj_error e2 = {0};
    setenv("RANK", "1", 1);
    assert_int_equal(oj_dist_init(10, &d, &e2), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e2.message, "needs MASTER_ADDR"));
    /* a MASTER_ADDR longer than a host name can be is refused, not cut short */
    char longaddr[400];
    memset(longaddr, 'a', sizeof longaddr - 1);
    longaddr[sizeof longaddr - 1] = '\0';
    setenv("MASTER_ADDR", longaddr, 1);
    setenv("MASTER_PORT", "29511", 1);
    oj_error el = {0};
    assert_int_equal(oj_dist_init(10, &d, &el), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(el.message, "MASTER_ADDR of 399 bytes"));
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("LOCAL_RANK", "1", 1);
    oj_error e3 = {0};
    assert_int_equal(oj_dist_init(10, &d, &e3), OJ_OK);
    assert_int_equal(oj_dist_rank(d), 1);
    assert_int_equal(oj_dist_world_size(d), 2);
    assert_int_equal(oj_dist_local_rank(d), 1);
    assert_true(oj_dist_active(d));
    assert_false(oj_dist_mpi(d));
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    oj_error e4 = {0};
    assert_int_equal(oj_dist_bind(d, eng, &e4), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(e4.message, "a CPU engine's collectives need MPI"));
    /* the records go through NCCL, which a CPU engine cannot give */
    char mine = 1, all[2];
    oj_error e5 = {0};
    assert_int_not_equal(oj_dist_exchange(d, &mine, 1, all, "a test", &e5), OJ_OK);
    oj_dist_free(d);
    oj_engine_free(eng);
    clear_env();
}

// test: RANK=0 WORLD_SIZE=1 without MASTER_ADDR / MASTER_PORT is a group
// of one: its records and barriers return at once, and its abort exits
// with the code without touching MPI (never initialised here: an MPI call
// would end the child otherwise)
static void test_env_world_of_one(void **state) {
    (void)state;
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE")) {
        skip(); /* under an MPI launcher the MPI group wins */
    }
    clear_env();
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    oj_dist *d = NULL;
    oj_error err = {0};
    assert_int_equal(oj_dist_init(10, &d, &err), OJ_OK);
    assert_int_equal(oj_dist_world_size(d), 1);
    assert_true(oj_dist_active(d));
    assert_false(oj_dist_mpi(d));
    int mine = 42, all = 0;
    assert_int_equal(oj_dist_exchange(d, &mine, sizeof mine, &all, "a test", &err), OJ_OK);
    assert_int_equal(all, 42);
    assert_int_equal(oj_dist_barrier(d, "a test", &err), OJ_OK);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        oj_dist_abort(d, 5);
        _exit(1);
    }
    assert_int_equal(exit_code(pid), 5);
    oj_dist_free(d);
    clear_env();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_reaches_every_rank),
        cmocka_unit_test(test_world_mismatch_refused),
        cmocka_unit_test(test_deadlines_name_what_is_missing),
        cmocka_unit_test(test_world_of_one_needs_no_port),
        cmocka_unit_test(test_silent_peer_does_not_stall),
        cmocka_unit_test(test_foreign_listener_named),
        cmocka_unit_test(test_env_group),
        cmocka_unit_test(test_env_world_of_one),
    };
    return cmocka_run_group_tests_name("dist_rendezvous", tests, NULL, NULL);
}
