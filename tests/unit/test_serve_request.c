// test: OpenAI request bodies parse to their fields with OpenAI's
// defaults; malformed JSON, wrong types and values out of range are
// refused with one line naming the field; chat templates are recognised
// from tokenizer_config.json (ChatML, Qwen2.5, Llama 3 / 3.1 / 3.2) and
// render what the models' Jinja templates render; others are refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/serve.h"

static oj_status parse(const char *body, bool chat, oj_serve_request *r, char *err) {
    return oj_serve_request_parse(body, strlen(body), chat, r, err, 256);
}

static void test_completion_fields(void **state) {
    (void)state;
    oj_serve_request r;
    char err[256] = "";
    assert_int_equal(parse("{\"prompt\": \"hi\"}", false, &r, err), OJ_OK);
    assert_string_equal(r.prompt, "hi");
    assert_int_equal(r.max_tokens, 16); /* OpenAI's default for completions */
    assert_true(r.temperature == 1.0 && r.top_p == 1.0 && r.n == 1 && !r.stream);
    assert_int_equal(r.logprobs, -1);
    assert_false(r.has_seed);
    oj_serve_request_free(&r);
    assert_int_equal(parse("{\"model\": \"m\", \"prompt\": [3, 1, 4], \"max_tokens\": 5, "
                           "\"temperature\": 0, \"top_p\": 0.5, \"top_k\": 7, \"n\": 3, "
                           "\"seed\": 9, \"stream\": true, \"stop\": [\"a\", \"bc\"], "
                           "\"logprobs\": 2}",
                           false, &r, err),
                     OJ_OK);
    assert_string_equal(r.model, "m");
    assert_null(r.prompt);
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 4);
    assert_true(r.max_tokens == 5 && r.temperature == 0 && r.top_p == 0.5 && r.top_k == 7);
    assert_true(r.n == 3 && r.has_seed && r.seed == 9 && r.stream && r.logprobs == 2);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[1], "bc");
    oj_serve_request_free(&r);
    assert_int_equal(parse("{\"prompt\": [\"one\"], \"stop\": \"x\"}", false, &r, err), OJ_OK);
    assert_string_equal(r.prompt, "one");
    assert_int_equal(r.n_stop, 1);
    oj_serve_request_free(&r);
    assert_int_equal(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], "
                           "\"max_completion_tokens\": 4, \"logprobs\": true}",
                           true, &r, err),
                     OJ_OK);
    assert_int_equal(r.n_messages, 1);
    assert_int_equal(r.max_tokens, 4);
    assert_int_equal(r.logprobs, 0);
    oj_serve_request_free(&r);
    assert_int_equal(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}", true, &r,
                           err),
                     OJ_OK);
    assert_int_equal(r.max_tokens, -1); /* chat: up to the context */
    oj_serve_request_free(&r);
}

static void refused(const char *body, bool chat, const char *needle) {
    oj_serve_request r;
    char err[256] = "";
    assert_int_equal(parse(body, chat, &r, err), OJ_ERR_INVALID_ARGUMENT);
    if (strstr(err, needle) == NULL) fail_msg("'%s': '%s' lacks '%s'", body, err, needle);
    assert_null(strchr(err, '\n'));
    assert_null(r.prompt);
    assert_null(r.roles);
    oj_serve_request_free(&r);
}

static void test_refusals(void **state) {
    (void)state;
    refused("{\"prompt\": \"x\", ", false, "not valid JSON");
    refused("[1]", false, "JSON object");
    refused("{\"prompt\": \"x\", \"prompt\": \"y\"}", false, "duplicate");
    refused("{}", false, "'prompt' is required");
    refused("{\"prompt\": \"\"}", false, "'prompt' is empty");
    refused("{\"prompt\": []}", false, "'prompt' is empty");
    refused("{\"prompt\": 3}", false, "'prompt' must be");
    refused("{\"prompt\": [1, -2]}", false, "entry 1");
    refused("{\"prompt\": [\"a\", \"b\"]}", false, "batches of prompts");
    refused("{\"prompt\": \"x\", \"max_tokens\": \"5\"}", false, "'max_tokens' must be an integer");
    refused("{\"prompt\": \"x\", \"max_tokens\": -1}", false, "'max_tokens' is -1");
    refused("{\"prompt\": \"x\", \"temperature\": 3}", false, "'temperature' is 3");
    /* a value just past a bound is named as given, not rounded onto it */
    refused("{\"prompt\": \"x\", \"temperature\": 2.0000001}", false,
            "'temperature' is 2.0000001");
    refused("{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", false,
            "'stream_options' needs 'stream': true");
    refused("{\"prompt\": \"x\", \"stream\": true, \"stream_options\": 1}", false,
            "'stream_options' must be an object");
    refused("{\"prompt\": \"x\", \"top_p\": \"a\"}", false, "'top_p' must be a number");
    refused("{\"prompt\": \"x\", \"top_k\": 1.5}", false, "'top_k' must be an integer");
    refused("{\"prompt\": \"x\", \"n\": 0}", false, "'n' is 0");
    refused("{\"prompt\": \"x\", \"stream\": 1}", false, "'stream' must be true or false");
    refused("{\"prompt\": \"x\", \"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\"]}", false, "at most 4");
    refused("{\"prompt\": \"x\", \"stop\": [\"\"]}", false, "non-empty string");
    refused("{\"prompt\": \"x\", \"logprobs\": 6}", false, "'logprobs' is 6");
    refused("{\"prompt\": \"x\", \"model\": 1}", false, "'model' must be a string");
    refused("{\"messages\": []}", true, "non-empty array");
    refused("{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", true, "'tool'");
    /* a quoted value's control characters do not break the message's line */
    refused("{\"messages\": [{\"role\": \"assist\\nt\\u0001\", \"content\": \"x\"}]}", true,
            "'assist?t?'");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": [1]}]}", true,
            "'messages[0].content' must be a string");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 1}", true,
            "'logprobs' must be true or false");
    refused("{\"prompt\": \"\xff\"}", false, "not valid JSON");
}

static oj_chat_template detect(const char *json, oj_status want, const char *needle) {
    oj_chat_template t = OJ_CHAT_LLAMA3;
    char err[256] = "";
    assert_int_equal(oj_chat_template_detect(json, json ? strlen(json) : 0, &t, err, sizeof err),
                     want);
    if (needle && strstr(err, needle) == NULL) fail_msg("'%s' lacks '%s'", err, needle);
    return t;
}

#define CHATML_T "{\"chat_template\": \"{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\\\n' + m['content'] + '<|im_end|>\\\\n'}}{% endfor %}\"}"
#define LLAMA3_T "{\"chat_template\": \"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\\\n\\\\n'+ message['content'] | trim + '<|eot_id|>' %}{% endfor %}\"}"

static void test_templates(void **state) {
    (void)state;
    assert_int_equal(detect(CHATML_T, OJ_OK, NULL), OJ_CHAT_CHATML);
    assert_int_equal(detect(LLAMA3_T, OJ_OK, NULL), OJ_CHAT_LLAMA3);
    assert_int_equal(detect("{\"chat_template\": \"<|im_start|><|im_end|>You are Qwen, created by "
                            "Alibaba Cloud. You are a helpful assistant.\"}",
                            OJ_OK, NULL),
                     OJ_CHAT_QWEN25);
    assert_int_equal(detect("{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}, "
                            "{\"name\": \"default\", \"template\": \"<|start_header_id|> "
                            "<|eot_id|> Cutting Knowledge Date\"}]}",
                            OJ_OK, NULL),
                     OJ_CHAT_LLAMA31);
    assert_int_equal(detect("{\"chat_template\": \"<|start_header_id|><|eot_id|>Cutting Knowledge "
                            "Date strftime_now\"}",
                            OJ_OK, NULL),
                     OJ_CHAT_LLAMA32);
    assert_int_equal(detect("{\"chat_template\": \"[INST] {{ m }} [/INST]\\n\"}",
                            OJ_ERR_INVALID_ARGUMENT, "it begins '[INST] {{ m }} [/INST] '"),
                     OJ_CHAT_NONE);
    detect("{\"eos_token\": \"x\"}", OJ_ERR_INVALID_ARGUMENT, "no chat_template");
    detect("{", OJ_ERR_CORRUPT, "not valid JSON");
    detect(NULL, OJ_ERR_INVALID_ARGUMENT, "no tokenizer_config.json");

    oj_serve_request r;
    char err[256];
    assert_int_equal(parse("{\"messages\": [{\"role\": \"system\", \"content\": \" Be brief. \"}, "
                           "{\"role\": \"user\", \"content\": \"Hi\"}]}",
                           true, &r, err),
                     OJ_OK);
    char *s = oj_chat_render(OJ_CHAT_CHATML, &r);
    assert_string_equal(s, "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\nHi"
                           "<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    s = oj_chat_render(OJ_CHAT_QWEN25, &r); /* a system message: no default one */
    assert_string_equal(s, "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\nHi"
                           "<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    s = oj_chat_render(OJ_CHAT_LLAMA3, &r);
    assert_string_equal(s, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe "
                           "brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi"
                           "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
    s = oj_chat_render(OJ_CHAT_LLAMA31, &r);
    assert_string_equal(s, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                           "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe "
                           "brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi"
                           "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
    assert_null(oj_chat_render(OJ_CHAT_NONE, &r));
    oj_serve_request_free(&r);
    assert_int_equal(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", true, &r,
                           err),
                     OJ_OK);
    s = oj_chat_render(OJ_CHAT_QWEN25, &r);
    assert_string_equal(s, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                           "helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                           "<|im_start|>assistant\n");
    free(s);
    s = oj_chat_render(OJ_CHAT_LLAMA32, &r);
    assert_non_null(strstr(s, "Today Date: "));
    assert_non_null(strstr(s, "\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi"));
    free(s);
    oj_serve_request_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_fields),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
