/* A program outside the tree that uses an installed libojas. */
#include <ojas/ojas.h>
#include <stdio.h>

int main(void) {
    oj_engine *eng = NULL;
    oj_error err = {0};
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
