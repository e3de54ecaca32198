/* Shared pieces of the ojas command line: subcommand entry points and small
 * helpers for option parsing and files. */
#ifndef OJAS_CLI_H
#define OJAS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <getopt.h>

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
int cmd_export(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_quantize(int argc, char **argv);

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
/* Parse a byte count: a positive integer with an optional suffix K, M, G or
 * T (powers of 1024, case-insensitive, an optional "iB" or "B" after it);
 * on failure or overflow print an error naming opt and return false. */
bool cli_parse_bytes(const char *opt, const char *s, int64_t *out);

/* Option parsing for one subcommand, on glibc's getopt_long: "--key=value",
 * "--key value", "-kvalue", "-k value", clustered flags, long options
 * abbreviated to a unique prefix, and "--" ending the options. Options and
 * other arguments may be mixed; the other arguments end up, in order, in
 * argv[optind..argc) once cli_getopt has returned -1. */
typedef struct cli_getopt_state {
    const char *cmd;                /* "train", "tokenizer encode": prefixes errors */
    const char *shortopts;          /* getopt's short option string ("ho:j:") */
    const struct option *longopts;  /* zero-terminated; long-only options use val >= 256 */
    bool started;                   /* false before the first call */
} cli_getopt_state;
/* The next option of argv[1..argc) (argv[0] is the subcommand's name):
 * its val (optarg holds its value), -1 when the options are done, or '?'
 * after printing one line that names what was wrong: an unknown or
 * ambiguous option, a value missing, or a value given to a flag. The
 * caller then returns CLI_USAGE. */
int cli_getopt(cli_getopt_state *g, int argc, char **argv);
/* One line "CMD: unexpected argument 'ARG' (see 'ojas CMD --help')";
 * returns CLI_USAGE. */
int cli_unexpected(const char *cmd, const char *arg);

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

#include "ojas/ojas.h"

/* The checkpoint `ckpt` names (a checkpoint directory, or a run directory:
 * its newest that verifies; oj_checkpoint_find) into dir [len] and its
 * state.json's config into *run; when newer checkpoints under it failed
 * verification, a one-line warning on stderr naming `cmd`, how many, the
 * newest's reason and the one used. Errors those of oj_checkpoint_find and
 * oj_train_config_from_checkpoint, in e. */
oj_status cli_find_checkpoint(const char *cmd, const char *ckpt, char *dir, size_t len,
                              oj_train_config *run, oj_error *e);

/* The model of a training checkpoint as the trainer built it: run's model
 * config with the vocabulary of tok when the run named a tokenizer_dir
 * (tok may be NULL: then the config's own), created on eng and loaded from
 * the checkpoint directory dir. *m owned by the caller; on failure *m is
 * NULL and e names what failed (the config, the engine's message, or the
 * checkpoint). */
oj_status cli_gpt_from_checkpoint(oj_engine *eng, const oj_train_config *run,
                                  const oj_tokenizer *tok, const char *dir, oj_gpt **m,
                                  oj_error *e);

/* True after printing "CMD: 'SRC' is a nanolab model, which has no LACKS
 * (gpt2 and llama-family models VERB): ..." with the remedy (train a gpt2
 * preset or fine-tune with --init-from) when m is a nanolab model: export
 * and quantize say so before the writers' own, remedy-less refusals. */
bool cli_refuse_nanolab(const oj_gpt *m, const char *cmd, const char *src, const char *lacks,
                        const char *verb);

/* True after printing "CMD: 'SRC' is already QTYPE: ..." when m was loaded
 * quantized (a GGUF file's quantized tensors): quantizing it again to t
 * would round its weights twice, a model neither file holds. llama.cpp's
 * llama-quantize refuses the same without --allow-requantize. */
bool cli_refuse_requantize(const oj_gpt *m, const char *cmd, const char *src, oj_qtype t);

/* Put the ids that tok's post-processor places before one text
 * (tokenizer.json's TemplateProcessing: Llama's BOS; oj_tokenizer_template)
 * before the encoded prompt ids, as transformers' tokenizer(text) does,
 * unless ids already start with them (the prompt spelled them out). Other
 * tokenizers have none: ids unchanged. false only when out of memory. */
bool cli_add_template_prefix(const oj_tokenizer *tok, oj_tokens *ids);

/* Monotonic seconds (CLOCK_MONOTONIC), for the commands' timings. */
double cli_now(void);

#endif
