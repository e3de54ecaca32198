/* Shared pieces of the ojas command line: subcommand entry points and small
 * helpers for option parsing and files. */
#ifndef OJAS_CLI_H
#define OJAS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit codes. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Each subcommand gets argv starting at its own name (argv[0] = "tokenizer"). */
typedef int (*cli_main)(int argc, char **argv);

int cmd_tokenizer(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* True if arg is -h or --help. */
bool cli_is_help(const char *arg);
/* Print "ojas: " + message to stderr. Returns code. */
int cli_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Parse an integer / a double option value; on failure print an error
 * naming opt and return false. */
bool cli_parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_double(const char *opt, const char *s, double *out);
/* The value of option argv[*i] (advancing *i), or NULL with an error. */
const char *cli_value(int argc, char **argv, int *i);

/* A subcommand of a command: `ojas <cmd> <name> ...` runs fn(argc - 1,
 * argv + 1). */
typedef struct cli_sub {
    const char *name;
    cli_main fn;
} cli_sub;
/* Run the subcommand argv[1] of command `cmd` from subs[0..n): with no
 * argument, usage to stderr and CLI_USAGE; with --help/-h, usage to stdout
 * and CLI_OK; an unknown name is CLI_USAGE naming the valid ones. */
int cli_dispatch(int argc, char **argv, const char *cmd, const char *usage, const cli_sub *subs,
                 int n);
/* Read a whole file ("-" or NULL: stdin) into a malloc'd buffer (NUL
 * added, not counted). NULL with an error printed on failure. */
char *cli_read_all(const char *path, size_t *len);

#endif
