/* Fuzz target: the HTTP server's request parsing (oj_serve_request_parse)
 * and chat templates (oj_chat_template_detect, oj_chat_render).
 *
 * Input layout: one flags byte, then a request body. Flags bit 0 parses
 * it as a chat completion (else a completion); bit 1 also reads it as a
 * tokenizer_config.json. tests/fuzz/make_corpus_serve.py writes the seeds.
 *
 * Checks: a refusal is OJ_ERR_INVALID_ARGUMENT with a one-line message and
 * leaves the request empty; an accepted request has every field in its
 * documented range (max_tokens, temperature, top_p, top_k, n, 1..4
 * non-empty stop strings, logprobs) and a prompt (text or ids) or, for
 * chat, messages with a known role and a content, which both templates
 * render to a string that ends with the assistant's header. A template
 * detection is OK with a known template or a refusal with one line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "ojas/serve.h"

#define MAX_INPUT (1 << 16)

static void one_line(const char *s) {
    FZ_CHECK(s[0] != '\0');
    FZ_CHECK(strchr(s, '\n') == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > MAX_INPUT) return 0;
    const bool chat = data[0] & 1, config = data[0] & 2;
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    oj_serve_request r;
    char err[512] = "";
    oj_status st = oj_serve_request_parse(body, len, chat, &r, err, sizeof err);
    if (st != OJ_OK) {
        FZ_CHECK(st == OJ_ERR_INVALID_ARGUMENT);
        one_line(err);
        FZ_CHECK(r.prompt == NULL && r.prompt_ids == NULL && r.roles == NULL && r.n_stop == 0);
    } else {
        FZ_CHECK(r.chat == chat);
        FZ_CHECK(r.max_tokens >= -1 && r.max_tokens <= (1 << 24));
        FZ_CHECK(r.temperature >= 0 && r.temperature <= 2 && r.top_p >= 0 && r.top_p <= 1);
        FZ_CHECK(r.top_k >= 0 && r.n >= 1 && r.n <= 16 && r.logprobs >= -1 && r.logprobs <= 5);
        FZ_CHECK(r.n_stop >= 0 && r.n_stop <= 4);
        for (int i = 0; i < r.n_stop; i++) FZ_CHECK(r.stop[i] && r.stop[i][0]);
        if (chat) {
            FZ_CHECK(r.n_messages >= 1 && r.roles && r.contents);
            for (int64_t i = 0; i < r.n_messages; i++) FZ_CHECK(r.roles[i] && r.contents[i]);
            for (int t = OJ_CHAT_CHATML; t <= OJ_CHAT_LLAMA32; t++) {
                char *s = oj_chat_render((oj_chat_template)t, &r);
                FZ_CHECK(s != NULL);
                const bool chatml = t == OJ_CHAT_CHATML || t == OJ_CHAT_QWEN25;
                const char *tail = chatml ? "<|im_start|>assistant\n"
                                          : "assistant<|end_header_id|>\n\n";
                FZ_CHECK(strlen(s) >= strlen(tail) &&
                         strcmp(s + strlen(s) - strlen(tail), tail) == 0);
                free(s);
            }
        } else {
            FZ_CHECK((r.prompt != NULL) != (r.prompt_ids != NULL));
            FZ_CHECK(r.prompt_ids == NULL || r.n_prompt_ids >= 1);
            FZ_CHECK(r.prompt == NULL || r.prompt[0] != '\0');
        }
        FZ_CHECK(oj_chat_render(OJ_CHAT_NONE, &r) == NULL);
    }
    oj_serve_request_free(&r);
    if (config) {
        oj_chat_template t = OJ_CHAT_LLAMA3;
        char e2[512] = "";
        oj_status s2 = oj_chat_template_detect(body, len, &t, e2, sizeof e2);
        if (s2 == OJ_OK)
            FZ_CHECK(t >= OJ_CHAT_CHATML && t <= OJ_CHAT_LLAMA32);
        else {
            FZ_CHECK(s2 == OJ_ERR_INVALID_ARGUMENT || s2 == OJ_ERR_CORRUPT);
            FZ_CHECK(t == OJ_CHAT_NONE);
            one_line(e2);
        }
    }
    return 0;
}
