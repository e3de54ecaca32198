/* ojas info: what this machine and this build offer. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ojas/core.h"

/* The "model name" and whether each ISA flag of interest is listed. */
static void cpu_info(char *model, size_t len, char *isa, size_t isa_len) {
    static const char *flags[] = {"avx2", "fma", "avx512f", "avx512bw", "avx512_bf16"};
    snprintf(model, len, "unknown");
    isa[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL) return;
    static char line[8192];
    bool got_model = false, got_flags = false;
    while ((!got_model || !got_flags) && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (c == NULL) continue;
        c += 2;
        c[strcspn(c, "\n")] = 0;
        if (!got_model && strncmp(line, "model name", 10) == 0) {
            snprintf(model, len, "%s", c);
            got_model = true;
        } else if (!got_flags && strncmp(line, "flags", 5) == 0) {
            size_t pos = 0;
            for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
                char pat[32];
                snprintf(pat, sizeof pat, " %s ", flags[i]);
                char padded[8200];
                snprintf(padded, sizeof padded, " %s ", c);
                pos += (size_t)snprintf(isa + pos, isa_len - pos, "%s%s=%s", i ? " " : "",
                                        flags[i], strstr(padded, pat) ? "yes" : "no");
            }
            got_flags = true;
        }
    }
    fclose(f);
}

int cmd_info(int argc, char **argv) {
    static const struct option lo[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int opt;
    cli_getopt_state g = {.cmd = "info", .shortopts = "h", .longopts = lo};
    while ((opt = cli_getopt(&g, argc, argv)) != -1) {
        if (opt != 'h')
            return CLI_USAGE;
        puts("usage: ojas info\nPrint the CPU model and ISA extensions, usable threads, memory,\n"
             "and the CUDA devices this build can open.\n  -h, --help   this help");
        return CLI_OK;
    }
    if (optind < argc)
        return cli_unexpected("info", argv[optind]);
    char model[256], isa[256];
    cpu_info(model, sizeof model, isa, sizeof isa);
    printf("ojas %s\n", OJ_VERSION_STRING);
    printf("cpu: %s\n", model);
    printf("isa: %s\n", isa);
    oj_engine *eng = NULL;
    oj_error e = {0};
    oj_engine_config c = oj_engine_config_default();
    if (oj_engine_create(&c, &eng, &e) == OJ_OK) {
        printf("threads: %d usable\n", oj_engine_threads(eng));
        oj_engine_free(eng);
    }
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    printf("memory: %.1f GiB\n", (double)pages * (double)psz / (1024.0 * 1024 * 1024));
    c.device.type = OJ_DEVICE_CUDA;
    oj_error ce = {0};
    if (oj_engine_create(&c, &eng, &ce) == OJ_OK) {
        printf("cuda: device 0 opened\n");
        oj_engine_free(eng);
    } else {
        printf("cuda: none (%s)\n", ce.message);
    }
    return CLI_OK;
}
