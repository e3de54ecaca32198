/* Peak memory of a fine-tune step, full vs LoRA: two AdamW steps (forward,
 * backward, step; B 1, T 128, f32) on a llama-family model of the
 * Qwen2.5-0.5B shape (24 layers, C 896, 14 heads / 2 kv, MLP 4864,
 * V 151936, q/k/v biases, tied head: 494M parameters), LoRA r 16 alpha 32
 * on every linear. Prints each run's oj_engine_max_memory_allocated and
 * the ratio. Usage: bench_lora_memory [N_LAYER] (default 24); needs about
 * 12 GiB of memory for the full run at 24 layers. */
#include <stdio.h>
#include <stdlib.h>

#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/ops.h"
#include "ojas/optim.h"

enum { B = 1, T = 128 };

/* Peak bytes of the run, or -1 with the error printed. */
static double run(bool lora, int n_layer) {
    oj_engine *eng = NULL;
    oj_engine_config ec = oj_engine_config_default();
    oj_error e = {0};
    if (oj_engine_create(&ec, &eng, &e)) {
        fprintf(stderr, "bench_lora_memory: %s\n", e.message);
        return -1;
    }
    oj_gpt_config c = {.family = OJ_LLAMA, .vocab_size = 151936, .block_size = 512,
                       .n_layer = n_layer, .n_head = 14, .n_kv_head = 2, .n_embd = 896,
                       .mlp_hidden = 4864, .norm_eps = 1e-6, .rope_theta = 1e6,
                       .init_std = 0.02, .qkv_bias = true};
    oj_gpt *m = NULL;
    oj_optim *o = NULL;
    double peak = -1;
    oj_gpt_lora_config lc = {.r = 16, .alpha = 32};
    if (oj_gpt_create(eng, &c, 1, &m) || (lora && oj_gpt_lora_add(m, &lc, 2, &e))) {
        fprintf(stderr, "bench_lora_memory: %s\n", e.status ? e.message : oj_last_error(eng));
        goto done;
    }
    oj_named_tensors ps = lora ? oj_gpt_lora_params(m) : oj_gpt_state_dict(m);
    int64_t n = 0;
    for (int64_t i = 0; i < ps.n; i++) n += oj_numel(ps.tensors[i]);
    o = oj_optim_create(eng);
    oj_optim_hparams hp = oj_adamw_hparams(1e-4, 0);
    if (o == NULL || oj_optim_add_group(o, &hp, &ps) < 0) goto fail;
    int32_t ids[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (i * 7919) % 151936, tg[i] = (i * 104729) % 151936;
    const int64_t sh[2] = {B, T};
    for (int s = 0; s < 2; s++) { /* the second step holds the optimizer state */
        oj_scope_begin(eng);
        oj_tensor *x = oj_from_host(eng, 2, sh, OJ_I32, ids, sizeof ids);
        oj_tensor *y = oj_from_host(eng, 2, sh, OJ_I32, tg, sizeof tg);
        oj_tensor *loss = x && y ? oj_gpt_loss(m, x, y) : NULL;
        bool ok = loss && oj_backward(loss, false) == OJ_OK;
        oj_scope_end(eng);
        if (!ok || oj_optim_step(o, NULL)) goto fail;
        oj_optim_zero_grad(o);
    }
    peak = (double)oj_engine_max_memory_allocated(eng);
    printf("%-5s %lld layers: optimizer over %.2fM parameters, peak allocated %.1f MiB\n",
           lora ? "lora" : "full", (long long)n_layer, (double)n / 1e6, peak / 1048576.0);
    goto done;
fail:
    fprintf(stderr, "bench_lora_memory: %s\n", oj_last_error(eng));
done:
    oj_optim_free(o);
    oj_gpt_free(m);
    oj_engine_free(eng);
    return peak;
}

int main(int argc, char **argv) {
    int n_layer = argc > 1 ? atoi(argv[1]) : 24;
    if (n_layer < 1) {
        fprintf(stderr, "usage: bench_lora_memory [N_LAYER >= 1]\n");
        return 2;
    }
    double lora = run(true, n_layer), full = run(false, n_layer);
    if (lora < 0 || full < 0) return 1;
    printf("LoRA / full peak: %.2fx\n", lora / full);
    return 0;
}
