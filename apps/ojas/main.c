/* ojas: the command-line entry. Each subcommand lives in cmd_<name>.c and
 * is listed in the table below. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ojas/core.h"

static const struct {
    const char *name;
    cli_main run;
    const char *help;
} k_commands[] = {
    {"tokenizer", cmd_tokenizer, "encode, decode or train a GPT-2 byte-level BPE tokenizer"},
    {"data", cmd_data, "prepare token shards from text files"},
    {"train", cmd_train, "train a GPT on token shards, with checkpoints and resume"},
    {"generate", cmd_generate, "sample text from a checkpoint, a model directory or a GGUF file"},
    {"serve", cmd_serve, "serve a model over HTTP (OpenAI API, continuous batching)"},
    {"info", cmd_info, "show the CPU, its ISA, threads, memory and CUDA devices"},
    {"bench", cmd_bench, "time training steps of a GPT preset on this machine"},
    {"export", cmd_export, "write a Hugging Face model directory from a checkpoint or model"},
    {"quantize", cmd_quantize, "write a model as a GGUF file with quantized weights"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: ojas <command> [options]   (ojas <command> --help for more)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(f, "  %-10s %s\n", k_commands[i].name, k_commands[i].help);
    fprintf(f, "\n  --version  print the version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (cli_is_help(argv[1])) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("ojas %s\n", OJ_VERSION_STRING);
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (strcmp(argv[1], k_commands[i].name) == 0)
            return k_commands[i].run(argc - 1, argv + 1);
    return cli_error(CLI_USAGE, "unknown command '%s' (run 'ojas --help' for the list)", argv[1]);
}
