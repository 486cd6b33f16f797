// The smallest valid list of chat messages the request tests send (OpenAI,
// Ollama and Anthropic routes alike): one user turn.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tandem::testing {

inline nlohmann::json user_turn(const std::string& text = "hi") {
    return nlohmann::json::array({{{"role", "user"}, {"content", text}}});
}

}  // namespace tandem::testing
