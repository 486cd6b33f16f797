#include "runtime/serving/text_stream.h"

#include <algorithm>

namespace tandem::serve {

size_t complete_utf8_prefix(std::string_view s) {
    size_t i = s.size();
    size_t back = 0;
    while (i > 0 && back < 4) {
        const auto c = static_cast<unsigned char>(s[i - 1]);
        if ((c & 0xC0) != 0x80) {  // a lead byte (or ASCII)
            size_t need = 1;
            if ((c & 0xE0) == 0xC0) need = 2;
            else if ((c & 0xF0) == 0xE0) need = 3;
            else if ((c & 0xF8) == 0xF0) need = 4;
            return back + 1 >= need ? s.size() : i - 1;
        }
        --i;
        ++back;
    }
    return s.size();
}

TextStream::TextStream(std::vector<std::string> stop) : stop_(std::move(stop)) {
    std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
}

std::string TextStream::push(std::string_view piece) {
    if (stopped_) return {};
    pending_.append(piece);
    // The earliest stop string wholly inside pending_ ends the text there.
    size_t cut = std::string::npos;
    const std::string* found = nullptr;
    for (const std::string& s : stop_) {
        const size_t at = pending_.find(s);
        if (at < cut) {
            cut = at;
            found = &s;
        }
    }
    if (found != nullptr) {
        stopped_ = true;
        stop_string_ = *found;
        std::string out = pending_.substr(0, cut);
        pending_.clear();
        sent_ += out;
        return out;
    }
    // Hold back the longest tail that is the start of some stop string.
    size_t hold = 0;
    for (const std::string& s : stop_) {
        for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n) {
            if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
                hold = n;
                break;
            }
        }
    }
    const size_t ready = complete_utf8_prefix(std::string_view(pending_).substr(0, pending_.size() - hold));
    std::string out = pending_.substr(0, ready);
    pending_.erase(0, ready);
    sent_ += out;
    return out;
}

std::string TextStream::finish() {
    std::string out = stopped_ ? std::string() : std::move(pending_);
    pending_.clear();
    sent_ += out;
    return out;
}

}  // namespace tandem::serve
