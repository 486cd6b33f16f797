// Reading a text the user names (a prompt, a perplexity text): a path, or
// "-" for standard input, as llama.cpp's -f. Untrusted: a directory, a
// device that never ends (/dev/zero) or a file of gigabytes is refused on
// one line naming it, instead of growing memory without bound.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::tools {

// The cap on a text's size: 64 MiB, or TANDEM_MAX_TEXT_MB megabytes.
uint64_t max_text_bytes();

// The whole text of path ("-": standard input); `what` names it in errors
// ("prompt file"). Throws tandem::Error naming the path and why.
std::string read_text_input(const std::string& path, const char* what);

// A text file as llama.cpp's -f reads it for perplexity and imatrix:
// read_text_input, less one trailing newline (or token counts, and at a
// chunk boundary the chunk count, would differ from llama.cpp's).
std::string read_llama_text_file(const std::string& path);

}  // namespace tandem::tools
