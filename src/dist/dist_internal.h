/* Pieces of src/dist shared with its tests. */
#ifndef OJAS_DIST_INTERNAL_H
#define OJAS_DIST_INTERNAL_H

#include <stdbool.h>

#include "ojas/core.h"

/* The rendezvous of a group started without MPI (rendezvous.c): rank 0
 * (which holds `id`, 128 bytes: an ncclUniqueId) listens on `port` and
 * sends id to each of the world - 1 other ranks, which connect to
 * addr:port (retrying until rank 0 listens) and receive it into `id`.
 * Each says its rank and world size; rank 0 refuses a mismatch, and both
 * sides name it. Every wait ends by timeout_s with OJ_ERR_IO naming the
 * address and what did not come. A world of one returns at once, needing
 * no address or port (addr may be NULL, port 0). Errors:
 * OJ_ERR_INVALID_ARGUMENT (bad arguments, ranks that disagree), OJ_ERR_IO
 * (sockets, timeouts, an address that does not resolve). */
oj_status oj__dist_rendezvous(const char *addr, int port, int rank, int world, double timeout_s,
                              unsigned char id[128], oj_error *err);

#endif /* OJAS_DIST_INTERNAL_H */
