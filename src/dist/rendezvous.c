/* The rendezvous of a process group started without MPI (RANK,
 * WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as torchrun sets them): rank 0
 * hands its 128-byte ncclUniqueId to every other rank over plain TCP.
 * Rank 0 listens on MASTER_PORT (every interface) and accepts world - 1
 * connections, dropping a peer that sends no hello within RDV_HELLO_S or
 * sends one that is not ours; each rank connects to MASTER_ADDR:MASTER_PORT (retrying
 * while rank 0 is not yet listening), says who it is, and reads the id.
 * Every wait has the group's deadline. NCCL's own bootstrap then connects
 * the ranks; ojas moves nothing else over these sockets. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist_internal.h"

#define RDV_MAGIC 0x4f4a524eu /* "OJRN" */
#define RDV_HELLO_S 2.0       /* seconds rank 0 waits for a connected peer's hello */

/* [magic, rank, world] from a rank, [magic, world, status] + id back */
typedef struct {
    uint32_t magic;
    int32_t rank, world;
} hello;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Move n bytes on fd (send or receive) before `deadline`; 0, or -1 with
 * errno (ETIMEDOUT past the deadline, ECONNRESET when the peer closed). */
static int xfer_all(int fd, void *buf, size_t n, bool out, double deadline) {
    char *p = buf;
    while (n) {
        double left = deadline - now_s();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd pf = {fd, (short)(out ? POLLOUT : POLLIN), 0};
        int r = poll(&pf, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            continue;
        ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k < 0)
            return -1;
        if (k == 0) {
            errno = ECONNRESET;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static oj_status serve(int port, int world, double timeout_s, const unsigned char id[128],
                       oj_error *err) {
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    bool v6 = fd >= 0;
    if (!v6)
        fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return oj_error_set(err, OJ_ERR_IO, "dist rendezvous: rank 0: socket: %s",
                            strerror(errno));
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) { /* both families on one socket */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 a = {0};
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons((uint16_t)port);
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    } else {
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons((uint16_t)port);
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    }
    if (rc || listen(fd, world)) {
        oj_status st = oj_error_set(err, OJ_ERR_IO,
                                    "dist rendezvous: rank 0 cannot listen on port %d "
                                    "(MASTER_PORT): %s",
                                    port, strerror(errno));
        close(fd);
        return st;
    }
    double deadline = now_s() + timeout_s;
    bool *seen = calloc((size_t)world, sizeof *seen);
    oj_status st = seen ? OJ_OK : oj_error_set(err, OJ_ERR_CAPACITY, "dist rendezvous: out of memory");
    for (int got = 1; !st && got < world;) {
        double left = deadline - now_s();
        struct pollfd pf = {fd, POLLIN, 0};
        int r = left > 0 ? poll(&pf, 1, (int)(left * 1000) + 1) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            st = oj_error_set(err, OJ_ERR_IO,
                              "dist rendezvous: rank 0 heard from %d of the %d other ranks on "
                              "port %d within %.0f s (the timeout): a rank did not start, or "
                              "cannot reach MASTER_ADDR:MASTER_PORT",
                              got - 1, world - 1, port, timeout_s);
            break;
        }
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            continue;
        hello h;
        unsigned char reply[12 + 128];
        /* a rank sends its hello as it connects: a peer silent for longer
         * is no rank and must not hold the others back until the deadline */
        double said_by = now_s() + RDV_HELLO_S < deadline ? now_s() + RDV_HELLO_S : deadline;
        if (xfer_all(c, &h, sizeof h, false, said_by) || h.magic != RDV_MAGIC) {
            close(c); /* not one of ours (a port scan, a stale job): ignore it */
            continue;
        }
        int32_t status = 0;
        if (h.world != world || h.rank <= 0 || h.rank >= world || seen[h.rank])
            status = 1;
        uint32_t m = RDV_MAGIC;
        int32_t w = world;
        memcpy(reply, &m, 4);
        memcpy(reply + 4, &w, 4);
        memcpy(reply + 8, &status, 4);
        memcpy(reply + 12, id, 128);
        xfer_all(c, reply, sizeof reply, true, deadline);
        close(c);
        if (status) {
            st = oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                              "dist rendezvous: rank 0 (WORLD_SIZE %d) was reached by a rank "
                              "%d of world size %d%s: the ranks disagree on RANK/WORLD_SIZE",
                              world, h.rank, h.world,
                              h.rank > 0 && h.rank < world && seen[h.rank] ? " a second time"
                                                                          : "");
            break;
        }
        seen[h.rank] = true;
        got++;
    }
    free(seen);
    close(fd);
    return st;
}

static oj_status join(const char *addr, int port, int rank, int world, double timeout_s,
                      unsigned char id[128], oj_error *err) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gr = getaddrinfo(addr, ps, &hints, &res);
    if (gr)
        return oj_error_set(err, OJ_ERR_IO,
                            "dist rendezvous: rank %d cannot resolve MASTER_ADDR %s: %s", rank,
                            addr, gai_strerror(gr));
    double deadline = now_s() + timeout_s;
    int last = 0;
    oj_status st = OJ_ERR_IO;
    while (st == OJ_ERR_IO && now_s() < deadline) {
        for (struct addrinfo *ai = res; ai && st == OJ_ERR_IO; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
            if (fd < 0) {
                last = errno;
                continue;
            }
            if (connect(fd, ai->ai_addr, ai->ai_addrlen)) {
                last = errno;
                close(fd);
                continue;
            }
            hello h = {RDV_MAGIC, rank, world};
            unsigned char reply[12 + 128];
            if (xfer_all(fd, &h, sizeof h, true, deadline) ||
                xfer_all(fd, reply, sizeof reply, false, deadline)) {
                last = errno;
                close(fd);
                continue;
            }
            close(fd);
            uint32_t m;
            int32_t w, status;
            memcpy(&m, reply, 4);
            memcpy(&w, reply + 4, 4);
            memcpy(&status, reply + 8, 4);
            if (m != RDV_MAGIC) {
                freeaddrinfo(res);
                return oj_error_set(err, OJ_ERR_IO,
                                    "dist rendezvous: rank %d of %d: %s:%d (MASTER_ADDR:"
                                    "MASTER_PORT) is not an ojas rank 0 (it answered something "
                                    "else): another program holds that port",
                                    rank, world, addr, port);
            }
            if (status) {
                freeaddrinfo(res);
                return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                    "dist rendezvous: rank %d of %d: rank 0 at %s:%d refused it "
                                    "(its WORLD_SIZE is %d): the ranks disagree on "
                                    "RANK/WORLD_SIZE",
                                    rank, world, addr, port, (int)w);
            }
            memcpy(id, reply + 12, 128);
            st = OJ_OK;
        }
        if (st)
            usleep(100000); /* rank 0 may not listen yet */
    }
    freeaddrinfo(res);
    if (st)
        return oj_error_set(err, OJ_ERR_IO,
                            "dist rendezvous: rank %d of %d could not reach rank 0 at %s:%d "
                            "(MASTER_ADDR:MASTER_PORT) within %.0f s (the timeout): %s",
                            rank, world, addr, port, timeout_s,
                            last ? strerror(last) : "no answer");
    return OJ_OK;
}

oj_status oj__dist_rendezvous(const char *addr, int port, int rank, int world, double timeout_s,
                              unsigned char id[128], oj_error *err) {
    if (!id || world < 1 || rank < 0 || rank >= world || !(timeout_s > 0))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "dist rendezvous: bad arguments (rank %d of %d, timeout %g s)", rank,
                            world, timeout_s);
    if (world == 1) /* nobody to meet: no address or port (RANK=0 WORLD_SIZE=1 sets none) */
        return OJ_OK;
    if (!addr || port <= 0 || port > 65535)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "dist rendezvous: rank %d of %d needs rank 0's address and a port in "
                            "1 .. 65535 (MASTER_ADDR, MASTER_PORT): got %s and %d",
                            rank, world, addr ? addr : "none", port);
    return rank == 0 ? serve(port, world, timeout_s, id, err)
                     : join(addr, port, rank, world, timeout_s, id, err);
}
