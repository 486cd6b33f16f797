// Dev tool, not part of the build: llama.cpp's pooled embedding of a text,
// normalized as llama-embedding --embd-normalize 2 does
// (common_embd_normalize), printed as a JSON array with every float's
// digits (%.9g). llama-embedding prints the same vector with 7 decimals
// but its asynchronous log has been seen to stop before the end of the
// JSON; this asks llama.h directly: the text tokenized with special
// tokens (BOS) added and parsed, as llama-embedding does, one batch, one
// sequence. Build as dump_logits.cpp (scripts/llamacpp/README.md);
// usage: dump_embedding MODEL TEXT mean|cls|last [threads]; NOREPACK=1: as
// llama.cpp's --no-repack (no repacked weight layouts).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: dump_embedding MODEL TEXT mean|cls|last [threads]\n");
        return 1;
    }
    const std::string pooling = argv[3];
    const int threads = argc > 4 ? atoi(argv[4]) : 1;
    enum llama_pooling_type type = LLAMA_POOLING_TYPE_MEAN;
    if (pooling == "cls") type = LLAMA_POOLING_TYPE_CLS;
    else if (pooling == "last") type = LLAMA_POOLING_TYPE_LAST;
    else if (pooling != "mean") return 1;
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    if (getenv("NOREPACK")) mp.use_extra_bufts = false;  // llama.cpp's --no-repack
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 2;
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const std::string text = argv[2];
    std::vector<llama_token> toks(text.size() + 16);
    const int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), toks.data(),
                                 static_cast<int32_t>(toks.size()), true, true);
    if (n <= 0) return 3;
    toks.resize(static_cast<size_t>(n));
    auto cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.embeddings = true;
    cp.pooling_type = type;
    llama_context* ctx = llama_init_from_model(model, cp);
    llama_batch b = llama_batch_init(512, 0, 1);
    b.n_tokens = n;
    for (int i = 0; i < n; ++i) {
        b.token[i] = toks[static_cast<size_t>(i)];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    if (llama_decode(ctx, b)) return 4;
    const float* e = llama_get_embeddings_seq(ctx, 0);
    if (!e) return 5;
    const int d = llama_model_n_embd(model);
    double sum = 0.0;  // common_embd_normalize(.., 2)
    for (int i = 0; i < d; ++i) sum += e[i] * e[i];
    sum = std::sqrt(sum);
    const float norm = sum > 0.0 ? 1.0 / sum : 0.0f;
    printf("{\"n_tokens\": %d, \"embedding\": [", n);
    for (int i = 0; i < d; ++i) printf("%s%.9g", i ? "," : "", static_cast<double>(e[i] * norm));
    printf("]}\n");
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
