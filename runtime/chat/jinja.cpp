#include "runtime/chat/jinja.h"

#include "runtime/chat/jinja_ast.h"
#include "runtime/chat/jinja_eval.h"
#include "runtime/common/error.h"

namespace tandem::chat::jinja {
namespace {

Dict context_dict(const Value& v) {
    if (v.is_dict()) return v.as_dict();
    if (v.is_none()) return {};
    throw Error("jinja: the render context must be a JSON object, found '" + v.type_name() + "'");
}

}  // namespace

Template Template::parse(std::string source) {
    Template t;
    t.program_ = parse_program(normalize_source(source));
    t.source_ = std::make_shared<const std::string>(std::move(source));
    return t;
}

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
    return render(context_dict(from_json(context)), options);
}

std::string Template::render(const nlohmann::json& context, const RenderOptions& options) const {
    return render(context_dict(from_json(context)), options);
}

std::string Template::render(const Dict& context, const RenderOptions& options) const {
    Interpreter interp(*program_, options);
    return interp.run(context);
}

}  // namespace tandem::chat::jinja
