#include "runtime/serving/generate.h"

#include "runtime/engine/session.h"

namespace tandem::serving {

spec::Stats generate(Session& session, std::span<const int32_t> prompt, std::vector<float> logits,
                     const GenerateOptions& o, const spec::Emit& emit) {
    if (o.proposer != nullptr) {
        int64_t settled = 0;
        const spec::Emit bounded = [&](int32_t token) {
            ++settled;
            return emit(token) && (o.max_tokens < 0 || settled < o.max_tokens);
        };
        return spec::generate(session, prompt, std::move(logits), o.sampling, *o.proposer, o.spec, o.max_tokens,
                              o.n_ubatch, bounded);
    }
    spec::Stats st;
    const auto n_vocab = static_cast<size_t>(session.n_vocab());
    Sampler sampler(o.sampling);
    for (int32_t t : prompt) sampler.accept_prompt(t);
    while (o.max_tokens < 0 || st.generated < o.max_tokens) {
        const int32_t next = sampler.sample(std::span<float>(logits).last(n_vocab));
        ++st.generated;
        if (!emit(next)) break;
        sampler.accept(next);
        if (o.max_tokens >= 0 && st.generated >= o.max_tokens) break;
        if (session.n_past() >= session.n_ctx()) {
            st.context_full = true;
            break;
        }
        const int32_t one[1] = {next};
        session.eval(one, false, logits);
        ++st.target_passes;
        if (o.on_step_logits) o.on_step_logits(std::span<const float>(logits).last(n_vocab));
    }
    return st;
}

}  // namespace tandem::serving
