/* Tandem's C API: a model opened once, text generated from it by any number
 * of threads at once (each call takes a free sequence, and the calls that
 * run together share each pass over the weights), a sequence's cache saved
 * and restored, and nothing printed. The serving library under the CLI
 * (runtime/serving/) does the work: loading and placing the model as
 * `tandem run` does, and the slot scheduler `tandem serve` uses, so a
 * greedy generation here is the text `tandem run --temp 0` prints.
 *
 * Errors: a call that fails returns NULL or -1, and tandem_last_error()
 * says why in one line (naming the C field at fault, as "n_seq"). Every
 * function but tandem_last_error() takes a model from tandem_open().
 *
 * The library is libtandem.so (target tandem_capi). With a GPU, the CUDA
 * plugin resolves its engine functions from the global scope: load
 * libtandem.so with RTLD_GLOBAL when you dlopen it (Python:
 * ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)). */
#ifndef TANDEM_H
#define TANDEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tandem_model tandem_model;

typedef struct tandem_open_params {
    const char* model_path;   /* a GGUF file */
    int32_t n_ctx;            /* positions per sequence; 0: the model's, at most 4096 */
    int32_t n_seq;            /* sequences side by side (generations at once), 1..64 */
    int32_t n_threads;        /* 0: the physical cores */
    int32_t n_gpu_layers;     /* layers on the accelerator; -1: as the planner chooses */
    const char* device;       /* NULL or "": the CPU alone; "cuda0"; "cpu2" (the stand-in) */
    uint64_t vram_bytes;      /* what the accelerator may use; 0: what it has free */
} tandem_open_params;

/* One sequence, the model's context, every core, the CPU alone. */
tandem_open_params tandem_open_params_default(void);

/* NULL on failure (see tandem_last_error). */
tandem_model* tandem_open(const tandem_open_params* params);
/* Waits for generations still running on other threads to end (they end
 * with finish reason "cancelled"), then frees everything. NULL is allowed. */
void tandem_close(tandem_model* model);

/* This thread's last failure, one line; "" when the last call succeeded. */
const char* tandem_last_error(void);

int32_t tandem_n_ctx(const tandem_model* model); /* positions per sequence */
int32_t tandem_n_seq(const tandem_model* model);
int32_t tandem_n_vocab(const tandem_model* model);
int32_t tandem_n_embd(const tandem_model* model); /* an embedding's floats */

/* The tokens of text (with the model's BOS first when add_bos is nonzero
 * and the model adds one). Returns their count; when that is more than
 * capacity, only capacity were written: call again with more room. -1 on
 * failure. */
int32_t tandem_tokenize(tandem_model* model, const char* text, int32_t add_bos, int32_t* tokens, int32_t capacity);

typedef struct tandem_generate_params {
    int32_t max_tokens;      /* -1: until the end of generation or the sequence's context is full */
    float temperature;       /* 0: greedy */
    int32_t top_k;           /* 0: off */
    float top_p;             /* 1: off */
    float min_p;             /* 0: off */
    float repeat_penalty;    /* 1: off */
    uint64_t seed;
    int32_t ignore_eos;      /* nonzero: keep going past end-of-generation tokens */
    int32_t cache_prompt;    /* nonzero: reuse what a free sequence already holds of the prompt */
    int32_t add_bos;         /* nonzero: the model's BOS before the prompt, where it adds one */
} tandem_generate_params;

/* Greedy, 128 tokens, prompt caching on, BOS as the model wants. */
tandem_generate_params tandem_generate_params_default(void);

/* Called with each piece of the completion as it comes (whole UTF-8
 * characters; not NUL-terminated). Return nonzero to stop generating. */
typedef int32_t (*tandem_text_callback)(const char* text, size_t length, void* user_data);

typedef struct tandem_result {
    int32_t sequence;           /* the sequence that served it */
    int32_t prompt_tokens;
    int32_t cached_tokens;      /* of prompt_tokens, reused from the sequence's cache */
    int32_t completion_tokens;
    char finish_reason[16];     /* "stop", "length" or "cancelled" */
} tandem_result;

/* Generates a completion of prompt (text), handing its pieces to callback
 * (may be NULL) on the calling thread. Blocks until done; several threads
 * may call at once, up to n_seq run together and the rest wait. Fills
 * result (may be NULL). 0 on success, -1 on failure. */
int32_t tandem_generate(tandem_model* model, const char* prompt, const tandem_generate_params* params,
                        tandem_text_callback callback, void* user_data, tandem_result* result);

/* Embeddings, as llama-server's /v1/embeddings makes them: the final
 * hidden states (after the output norm) of one sequence's tokens, pooled
 * into one vector and normalized. */
typedef struct tandem_embed_params {
    const char* pooling;  /* "mean" (over the tokens), "cls" (the first token's row) or "last" */
    int32_t normalize;    /* llama.cpp's --embd-normalize: 2 Euclidean length 1, -1 none, 0 the largest
                           * magnitude to 32760 (int16's range), p in 1..64 the p-norm 1 */
    int32_t add_bos;      /* text: nonzero: the model's BOS first, where it adds one (and EOS last,
                           * where its vocabulary asks for one) */
} tandem_embed_params;

/* Mean pooling, Euclidean normalization, BOS as the model wants. */
tandem_embed_params tandem_embed_params_default(void);

/* The embedding of text (tokenized with special tokens parsed, as the
 * server does; params may be NULL: the defaults) into embedding, which has
 * room for capacity floats. Returns the floats written, tandem_n_embd();
 * -1 on failure: a capacity below that (the message says how many are
 * needed), an unknown pooling, text of no tokens or more than a sequence
 * holds. Takes a free sequence as tandem_generate does (its cache is not
 * kept for a later prompt). */
int32_t tandem_embed(tandem_model* model, const char* text, const tandem_embed_params* params, float* embedding,
                     int32_t capacity);
/* The same for n_tokens token ids, each in [0, tandem_n_vocab()), taken
 * as they are (params->add_bos is not used). */
int32_t tandem_embed_tokens(tandem_model* model, const int32_t* tokens, int32_t n_tokens,
                            const tandem_embed_params* params, float* embedding, int32_t capacity);

/* The state of a free sequence (its cache and the tokens it holds) into
 * buffer. Returns the state's size in bytes; when that is more than size
 * (buffer may be NULL), nothing was written: call again with more room.
 * -1 on failure (no such sequence, or one busy generating). */
int64_t tandem_save_sequence(tandem_model* model, int32_t sequence, uint8_t* buffer, size_t size);
/* Replaces a free sequence's state with one tandem_save_sequence wrote
 * (from a model of the same file and context). Returns the tokens it now
 * holds; -1 on failure, the sequence then emptied. */
int32_t tandem_restore_sequence(tandem_model* model, int32_t sequence, const uint8_t* buffer, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* TANDEM_H */
