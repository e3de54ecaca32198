/* File helpers for src/data: mkdir -p and write-to-temp-then-rename. */
#ifndef OJAS_DATA_FSUTIL_H
#define OJAS_DATA_FSUTIL_H

#include <stdio.h>

#include "ojas/core.h"

/* Create dir and its parents (mode 0777 & umask). OJ_ERR_IO on failure. */
oj_status oj_data_mkdirs(const char *dir, oj_error *err);

/* A file being written to "<path>.tmp.<pid>"; commit fsyncs it and renames
 * it over path, abort removes it. */
typedef struct oj_atomic_file {
    FILE *f;
    char *path, *tmp;
} oj_atomic_file;

oj_status oj_atomic_open(oj_atomic_file *af, const char *path, oj_error *err);
oj_status oj_atomic_commit(oj_atomic_file *af, oj_error *err);
void oj_atomic_abort(oj_atomic_file *af);

#endif
