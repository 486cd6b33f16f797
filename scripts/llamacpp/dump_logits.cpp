// Dev tool, not part of the build: dumps llama.cpp's logits for every
// position of a prompt (the format of `tandem run --dump-logits`), and with
// DUMPDIR=dir every f32 tensor of the graph (name.bin: a line "ne0 ne1 ne2
// ne3" then the floats), to compare Tandem with llama.cpp op by op.
// Build against a llama.cpp checkout built with -DGGML_NATIVE=ON (see
// scripts/llamacpp/README.md); usage: dump_logits MODEL TEXTFILE OUT [threads] [n_greedy].
#include <string>
#include <vector>
#include <cstdlib>
#include <cstdio>
// dev tool: dump all-position logits of a prompt (file of token ids or text) with libllama
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"
#include <map>
static std::map<std::string,int> seen;
static bool cb(struct ggml_tensor * t, bool ask, void *) {
  if (ask) return true;
  const char* dir = getenv("DUMPDIR"); if (!dir || t->type != GGML_TYPE_F32) return true;
  std::string name = t->name; int k = seen[name]++; if (k) name += "#" + std::to_string(k);
  for (auto& c : name) if (c=='/'||c==' ') c='_';
  std::vector<float> buf(ggml_nelements(t)); if (!ggml_is_contiguous(t)) return true; ggml_backend_tensor_get(t, buf.data(), 0, ggml_nbytes(t));
  FILE* f = fopen((std::string(dir)+"/"+name+".bin").c_str(),"wb"); fprintf(f,"%lld %lld %lld %lld\n",(long long)t->ne[0],(long long)t->ne[1],(long long)t->ne[2],(long long)t->ne[3]); fwrite(buf.data(),4,buf.size(),f); fclose(f); return true; }

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
int main(int argc, char** argv) {
    if (argc < 4) { fprintf(stderr, "usage: dump MODEL TEXTFILE OUT [threads] [greedy_n]\n"); return 1; }
    int threads = argc > 4 ? atoi(argv[4]) : 2;
    int greedy = argc > 5 ? atoi(argv[5]) : 0;
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 2;
    const llama_vocab* vocab = llama_model_get_vocab(model);
    std::ifstream in(argv[2], std::ios::binary); std::stringstream ss; ss << in.rdbuf(); std::string text = ss.str();
    std::vector<llama_token> toks(text.size() + 16);
    int n = llama_tokenize(vocab, text.data(), text.size(), toks.data(), toks.size(), true, false);
    toks.resize(n);
    auto cp = llama_context_default_params();
    cp.n_ctx = 512; cp.n_batch = 512; cp.n_ubatch = 512; cp.n_threads = threads; cp.n_threads_batch = threads;
    if (getenv("DUMPDIR")) { cp.cb_eval = cb; cp.cb_eval_user_data = nullptr; }
    if (getenv("NOFA")) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context* ctx = llama_init_from_model(model, cp);
    llama_batch b = llama_batch_init(512, 0, 1);
    b.n_tokens = n;
    for (int i = 0; i < n; ++i) { b.token[i] = toks[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1; }
    if (llama_decode(ctx, b)) return 3;
    int V = llama_vocab_n_tokens(vocab);
    FILE* f = fopen(argv[3], "wb");
    for (int i = 0; i < n; ++i) fwrite(llama_get_logits_ith(ctx, i), 4, V, f);
    fclose(f);
    fprintf(stderr, "tokens:"); for (int t : toks) fprintf(stderr, " %d", t); fprintf(stderr, "\n");
    int pos = n; llama_token last;
    { const float* l = llama_get_logits_ith(ctx, n - 1); int bi = 0; for (int j = 1; j < V; ++j) if (l[j] > l[bi]) bi = j; last = bi; }
    if (greedy) fprintf(stderr, "greedy:");
    for (int g = 0; g < greedy; ++g) {
        char piece[256]; int k = llama_token_to_piece(vocab, last, piece, sizeof piece, 0, false); piece[k > 0 ? k : 0] = 0;
        fprintf(stderr, " %d[%s]", last, piece);
        llama_batch b1 = llama_batch_get_one(&last, 1);
        if (llama_decode(ctx, b1)) return 4;
        const float* l = llama_get_logits_ith(ctx, -1); int bi = 0; for (int j = 1; j < V; ++j) if (l[j] > l[bi]) bi = j; last = bi; ++pos;
    }
    if (greedy) fprintf(stderr, "\n");
    return 0;
}
