/* A C program over tandem.h, for the CApi tests (tests/capi/same_text.py):
 *
 *   capi_generate MODEL N_PREDICT PROMPT
 *
 * prints the greedy completion of PROMPT (N_PREDICT tokens at most) and a
 * newline on stdout, as `tandem run --temp 0 --no-display-prompt` does.
 * Before that it checks what a C caller relies on, each failure one line
 * on stderr and exit 1: a bad open fails with a message naming the field;
 * tokenize reports the count it needs; a sequence saved and restored into
 * another holds the same tokens, and the same prompt then reuses them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/serving/tandem.h"

static int failures = 0;

static void check(int ok, const char* what) {
    if (!ok) {
        fprintf(stderr, "FAIL: %s (last error: %s)\n", what, tandem_last_error());
        failures++;
    }
}

struct text {
    char* data;
    size_t size;
};

static int32_t append(const char* piece, size_t length, void* user) {
    struct text* t = (struct text*)user;
    char* grown = (char*)realloc(t->data, t->size + length + 1);
    if (grown == NULL) return 1; /* stop */
    memcpy(grown + t->size, piece, length);
    t->data = grown;
    t->size += length;
    t->data[t->size] = '\0';
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL N_PREDICT PROMPT\n", argv[0]);
        return 2;
    }
    tandem_open_params op = tandem_open_params_default();

    /* Bad input: NULL, and a message naming the C field. */
    op.model_path = argv[1];
    op.n_seq = 0;
    check(tandem_open(&op) == NULL, "tandem_open with n_seq 0 fails");
    check(strstr(tandem_last_error(), "n_seq") != NULL, "the error names n_seq");
    op.n_seq = 2;
    op.model_path = "/nonexistent/model.gguf";
    check(tandem_open(&op) == NULL, "tandem_open of a missing file fails");
    check(strstr(tandem_last_error(), "nothing there") != NULL, "the error says the file is not there");

    op.model_path = argv[1];
    op.n_ctx = 512;
    tandem_model* model = tandem_open(&op);
    if (model == NULL) {
        fprintf(stderr, "tandem_open: %s\n", tandem_last_error());
        return 1;
    }
    check(tandem_n_seq(model) == 2, "two sequences");
    check(tandem_n_ctx(model) == 512, "512 positions each");

    const int32_t n_needed = tandem_tokenize(model, argv[3], 1, NULL, 0);
    check(n_needed > 0, "the prompt has tokens");
    int32_t* tokens = (int32_t*)calloc((size_t)n_needed, sizeof(int32_t));
    check(tandem_tokenize(model, argv[3], 1, tokens, n_needed) == n_needed, "tokenize fills what it asked for");
    free(tokens);

    tandem_generate_params gp = tandem_generate_params_default();
    gp.max_tokens = atoi(argv[2]);
    struct text out = {NULL, 0};
    tandem_result r;
    if (tandem_generate(model, argv[3], &gp, append, &out, &r) != 0) {
        fprintf(stderr, "tandem_generate: %s\n", tandem_last_error());
        return 1;
    }
    printf("%s\n", out.data != NULL ? out.data : "");
    fflush(stdout);
    check(r.prompt_tokens == n_needed, "the result counts the prompt's tokens");
    check(r.completion_tokens > 0 && r.completion_tokens <= gp.max_tokens, "the completion is within max_tokens");

    /* Save the sequence that served, restore it into the other. */
    const int64_t size = tandem_save_sequence(model, r.sequence, NULL, 0);
    check(size > 0, "a served sequence has a state");
    uint8_t* state = (uint8_t*)malloc((size_t)size);
    check(tandem_save_sequence(model, r.sequence, state, (size_t)size) == size, "save writes its size");
    const int32_t other = 1 - r.sequence;
    const int32_t held = tandem_restore_sequence(model, other, state, (size_t)size);
    check(held == r.prompt_tokens + r.completion_tokens - 1 || held == r.prompt_tokens + r.completion_tokens,
          "the restored sequence holds the prompt and the completion");
    check(tandem_restore_sequence(model, other, state, 3) == -1, "a truncated state is refused");
    check(tandem_save_sequence(model, 7, NULL, 0) == -1, "no sequence 7");
    free(state);
    free(out.data);
    tandem_close(model);
    return failures == 0 ? 0 : 1;
}
