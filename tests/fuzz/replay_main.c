/* A main() for the fuzz targets built without libFuzzer: feed every file
 * named on the command line, and every regular file in every directory
 * named (in name order), to LLVMFuzzerTestOneInput once. Used by the
 * `<target>_smoke` tests over tests/fuzz/corpus/<target>/ and to replay a
 * crash file. Exits non-zero when an argument cannot be read; a finding
 * aborts inside the target. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            fprintf(stderr, "%s: out of memory\n", path);
            return -1;
        }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        cap *= 2;
        uint8_t *nb = realloc(buf, cap);
        if (!nb) free(buf);
        buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: read error\n", path);
        free(buf);
        return -1;
    }
    /* an exact-size copy, so ASan sees reads past the end */
    uint8_t *exact = malloc(len ? len : 1);
    if (len) memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv) {
    long files = 0;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            perror(argv[i]);
            rc = 1;
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) {
            if (run_file(argv[i]) != 0) rc = 1;
            else files++;
            continue;
        }
        struct dirent **list;
        int n = scandir(argv[i], &list, NULL, by_name);
        if (n < 0) {
            perror(argv[i]);
            rc = 1;
            continue;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], list[k]->d_name);
            if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
                if (run_file(path) != 0) rc = 1;
                else files++;
            }
            free(list[k]);
        }
        free(list);
    }
    printf("replayed %ld inputs\n", files);
    if (files == 0 && argc > 1) rc = 1;
    return rc;
}
