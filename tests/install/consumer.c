/* A program outside the tree that uses an installed libojas. With the
 * argument "cuda" it instead tries a CUDA engine and prints the outcome
 * ("cuda: OJ_OK" or "cuda: <status>: <message>"; exit 0 either way), which
 * tests/install/check.sh reads to see whether the module was found. */
#include <ojas/ojas.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    oj_engine *eng = NULL;
    oj_error err = {0};
    if (argc > 1 && strcmp(argv[1], "cuda") == 0) {
        oj_engine_config c = oj_engine_config_default();
        c.device = (oj_device){OJ_DEVICE_CUDA, 0};
        oj_status st = oj_engine_create(&c, &eng, &err);
        printf("cuda: %s%s%s\n", oj_status_name(st), st ? ": " : "", err.message);
        oj_engine_free(eng);
        return 0;
    }
    if (oj_engine_create(NULL, &eng, &err) != OJ_OK) {
        fprintf(stderr, "engine: %s\n", err.message);
        return 1;
    }
    int64_t shape[1] = {3};
    oj_tensor *t = oj_ones(eng, 1, shape, OJ_F32);
    oj_tensor *s = oj_sum_all(t);
    double v = oj_item(s);
    oj_release(s);
    oj_release(t);
    oj_engine_free(eng);
    if (v != 3.0) {
        fprintf(stderr, "sum of three ones is %g\n", v);
        return 1;
    }
    puts("installed libojas works");
    return 0;
}
