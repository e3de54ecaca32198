/* Checkpoint hashes: XXH3 64-bit from Debian's libxxhash. */
#include <xxhash.h>

#include "io/io_internal.h"

uint64_t oj__xxh3(const void *data, size_t len) {
    return (uint64_t)XXH3_64bits(data, len);
}
