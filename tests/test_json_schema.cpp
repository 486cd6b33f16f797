// JSON Schema -> GBNF (runtime/grammar/json_schema.h): which JSON texts
// the converted grammar takes, and which keywords are refused.
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <random>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/grammar/json_schema.h"
#include "runtime/grammar/matcher.h"
#include "tests/grammar_sample.h"

namespace tandem::grammar {
namespace {

using ojson = nlohmann::ordered_json;

class Schema {
public:
    explicit Schema(const std::string& schema) : g_(compile_json_schema(ojson::parse(schema))) {}
    bool takes(const std::string& text) const {
        Matcher m(g_);
        return m.accept(text) && m.can_end();
    }
    bool starts(const std::string& text) const { return Matcher(g_).accept(text); }

private:
    std::shared_ptr<const Grammar> g_;
};

std::string refusal(const std::string& schema, std::string* path = nullptr) {
    try {
        json_schema_to_gbnf(ojson::parse(schema));
    } catch (const SchemaError& e) {
        if (path) *path = e.path();
        return e.what();
    }
    return "";
}

TEST(JsonSchema, ObjectWithRequiredAndOptional) {
    const Schema s(R"({"type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "nick": {"type": "string"}},
        "required": ["name", "age"], "additionalProperties": false})");
    EXPECT_TRUE(s.takes(R"({"name": "Ann", "age": 31})"));
    EXPECT_TRUE(s.takes(R"({"name":"Ann","age":31,"nick":"A"})"));
    EXPECT_TRUE(s.takes("{\n  \"name\": \"Ann\",\n  \"age\": -4\n}"));
    EXPECT_FALSE(s.takes(R"({"name": "Ann"})"));            // age is required
    EXPECT_FALSE(s.starts(R"({"age": 31)"));                // the schema's order
    EXPECT_FALSE(s.starts(R"({"name": "Ann", "age": 31, "x")"));  // no other keys
    EXPECT_FALSE(s.starts(R"({"name": 5)"));
    EXPECT_FALSE(s.starts(R"({"name": "Ann", "age": 3.5)"));
    EXPECT_FALSE(s.starts(R"({"name": "Ann", "age": 012)"));  // JSON has no leading zeros
}

TEST(JsonSchema, NothingRequired) {
    const Schema s(R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}})");
    EXPECT_TRUE(s.takes("{}"));
    EXPECT_TRUE(s.takes(R"({"a": true})"));
    EXPECT_TRUE(s.takes(R"({"b": null})"));
    EXPECT_TRUE(s.takes(R"({"a": false, "b": null})"));
    EXPECT_FALSE(s.starts(R"({,)"));
    EXPECT_FALSE(s.starts(R"({"b": null, "a")"));
}

TEST(JsonSchema, AdditionalProperties) {
    const Schema s(R"({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                       "additionalProperties": {"type": "number"}})");
    EXPECT_TRUE(s.takes(R"({"id": 1, "x": 2.5, "y": -1e3})"));
    EXPECT_FALSE(s.starts(R"({"id": 1, "x": "no")"));
}

TEST(JsonSchema, EnumsAndConst) {
    const Schema s(R"({"enum": ["red", "green", 3, null, {"k": [1]}]})");
    EXPECT_TRUE(s.takes(R"("red")"));
    EXPECT_TRUE(s.takes("3"));
    EXPECT_TRUE(s.takes("null"));
    EXPECT_TRUE(s.takes(R"({"k":[1]})"));
    EXPECT_FALSE(s.takes(R"("blue")"));
    const Schema c(R"({"const": "a \"quoted\" word"})");
    EXPECT_TRUE(c.takes(R"("a \"quoted\" word")"));
}

TEST(JsonSchema, ArraysWithBounds) {
    const Schema s(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})");
    EXPECT_FALSE(s.takes("[1]"));
    EXPECT_TRUE(s.takes("[1, 2]"));
    EXPECT_TRUE(s.takes("[1,2,3]"));
    EXPECT_FALSE(s.starts("[1, 2, 3,"));
    EXPECT_FALSE(s.starts("[\"a\""));
    const Schema any(R"({"type": "array"})");
    EXPECT_TRUE(any.takes("[]"));
    EXPECT_TRUE(any.takes(R"([1, "two", {"three": [3]}, null])"));
    const Schema none(R"({"type": "array", "maxItems": 0})");
    EXPECT_TRUE(none.takes("[]"));
    EXPECT_FALSE(none.starts("[1"));
}

TEST(JsonSchema, NestedDefsAndRecursiveRefs) {
    const Schema s(R"({
        "$defs": {
            "node": {"type": "object", "properties": {"v": {"type": "integer"},
                     "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                     "required": ["v", "kids"], "additionalProperties": false}
        },
        "$ref": "#/$defs/node"})");
    EXPECT_TRUE(s.takes(R"({"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
    EXPECT_FALSE(s.starts(R"({"v": 1, "kids": [{"v": 2}])"));
    const Schema old(R"({"definitions": {"x": {"type": "boolean"}}, "type": "object",
                         "properties": {"x": {"$ref": "#/definitions/x"}}, "required": ["x"]})");
    EXPECT_TRUE(old.takes(R"({"x": true})"));
}

TEST(JsonSchema, AnyOfAndTypeLists) {
    const Schema s(R"({"anyOf": [{"type": "string"}, {"type": "integer"}]})");
    EXPECT_TRUE(s.takes(R"("s")"));
    EXPECT_TRUE(s.takes("7"));
    EXPECT_FALSE(s.takes("true"));
    const Schema nullable(R"({"type": ["string", "null"]})");
    EXPECT_TRUE(nullable.takes("null"));
    EXPECT_TRUE(nullable.takes(R"("x")"));
    EXPECT_FALSE(nullable.takes("1"));
}

TEST(JsonSchema, Strings) {
    const Schema s(R"({"type": "string", "minLength": 2, "maxLength": 3})");
    EXPECT_FALSE(s.takes(R"("a")"));
    EXPECT_TRUE(s.takes(R"("ab")"));
    EXPECT_TRUE(s.takes(R"("a\nb")"));  // an escape is one character
    EXPECT_FALSE(s.starts(R"("abcd)"));
    const Schema any(R"({"type": "string"})");
    EXPECT_TRUE(any.takes(R"("é \u00e9 \\ \"")"));
    EXPECT_FALSE(any.starts("\"a\nb"));  // a raw line break is not JSON
    EXPECT_FALSE(any.starts(R"("\q)"));
    EXPECT_TRUE(any.takes(R"("\ud83d\ude00 \uFFFF")"));  // a surrogate pair
    EXPECT_FALSE(any.starts(R"("\udc00)"));                // a lone low surrogate
    EXPECT_FALSE(any.takes(R"("\ud83d")"));                // a high one with no low after it
}

TEST(JsonSchema, Formats) {
    EXPECT_TRUE(Schema(R"({"type": "string", "format": "date"})").takes(R"("2024-02-29")"));
    EXPECT_FALSE(Schema(R"({"type": "string", "format": "date"})").takes(R"("2024-13-01")"));
    for (const char* d : {"2000-02-29", "2024-02-29", "0004-02-29", "2023-02-28", "2023-04-30", "0001-12-31"}) {
        EXPECT_TRUE(Schema(R"({"type": "string", "format": "date"})").takes(std::string("\"") + d + "\"")) << d;
    }
    for (const char* d : {"2023-02-29", "1900-02-29", "2024-02-30", "2024-04-31", "2024-11-31", "0000-01-01"}) {
        EXPECT_FALSE(Schema(R"({"type": "string", "format": "date"})").takes(std::string("\"") + d + "\"")) << d;
    }
    EXPECT_TRUE(Schema(R"({"type": "string", "format": "time"})").takes(R"("23:59:01Z")"));
    EXPECT_TRUE(Schema(R"({"type": "string", "format": "date-time"})").takes(R"("2024-02-29T08:00:00.5+01:00")"));
    EXPECT_TRUE(Schema(R"({"type": "string", "format": "uuid"})").takes(R"("123e4567-e89b-12d3-a456-426614174000")"));
    EXPECT_FALSE(Schema(R"({"type": "string", "format": "uuid"})").takes(R"("123e4567")"));
    EXPECT_TRUE(Schema(R"({"type": "string", "format": "ipv4"})").takes(R"("192.168.0.255")"));
    EXPECT_FALSE(Schema(R"({"type": "string", "format": "ipv4"})").takes(R"("256.1.1.1")"));
    EXPECT_TRUE(Schema(R"({"type": "string", "format": "email"})").takes(R"("a.b@example.org")"));
}

TEST(JsonSchema, DurationHostnameAndIpv6) {
    const Schema duration(R"({"type": "string", "format": "duration"})");
    for (const char* t : {"P3Y6M4DT12H30M5S", "PT20M", "P2W", "P1D", "PT1H30M", "P1Y", "PT5S", "P1M2D"}) {
        EXPECT_TRUE(duration.takes(std::string("\"") + t + "\"")) << t;
    }
    for (const char* t : {"P", "PT", "P1H", "PT1H30S", "P1W2D", "1D", "P1.5D", "P1DT"}) {
        EXPECT_FALSE(duration.takes(std::string("\"") + t + "\"")) << t;
    }
    const Schema host(R"({"type": "string", "format": "hostname"})");
    for (const char* t : {"example.com", "a-b.c", "localhost", "x1.y2.z", "a.b.c.d.e.f.g.h"}) {
        EXPECT_TRUE(host.takes(std::string("\"") + t + "\"")) << t;
    }
    for (const char* t : {"-a.com", "a-.com", "a..b", "1.2.3.4", "a_b.com", "a.b.c.d.e.f.g.h.i", ".com", "com."}) {
        EXPECT_FALSE(host.takes(std::string("\"") + t + "\"")) << t;
    }
    const Schema ipv6(R"({"type": "string", "format": "ipv6"})");
    for (const char* t : {"2001:db8::1", "::", "::1", "fe80:0:0:0:0:0:0:1", "1:2:3:4:5:6::", "::1:2:3:4:5:6", "ABCD::"}) {
        EXPECT_TRUE(ipv6.takes(std::string("\"") + t + "\"")) << t;
    }
    for (const char* t : {"1:2:3:4:5:6:7::", "1::2::3", "12345::", ":::", "1:2:3:4:5:6:7", "g::1", "::1:2:3:4:5:6:7"}) {
        EXPECT_FALSE(ipv6.takes(std::string("\"") + t + "\"")) << t;
    }
}

TEST(JsonSchema, RandomFormatTextsAreValid) {
    std::mt19937 rng(3);
    const auto ipv6 = compile_json_schema(ojson::parse(R"({"type": "string", "format": "ipv6"})"));
    const auto host = compile_json_schema(ojson::parse(R"({"type": "string", "format": "hostname"})"));
    for (int i = 0; i < 300; ++i) {
        const auto a = testing::random_text(*ipv6, rng);
        ASSERT_TRUE(a.has_value());
        const std::string addr = ojson::parse(a->substr(0, a->rfind('"') + 1)).get<std::string>();
        in6_addr out{};
        EXPECT_EQ(inet_pton(AF_INET6, addr.c_str(), &out), 1) << addr;
        const auto h = testing::random_text(*host, rng);
        ASSERT_TRUE(h.has_value());
        const std::string name = ojson::parse(h->substr(0, h->rfind('"') + 1)).get<std::string>();
        EXPECT_LE(name.size(), 253u) << name;
        EXPECT_TRUE(std::regex_match(name, std::regex(R"(([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)*[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)")))
            << name;
    }
}

TEST(JsonSchema, RulesUnderAPrefixSitInABiggerGrammar) {
    const ojson a = ojson::parse(R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 3},
        "s": {"type": "string", "pattern": "^[a-z]+$"}}, "required": ["n", "s"]})");
    const ojson b = ojson::parse(R"({"type": "object", "properties": {"d": {"type": "string", "format": "date"}}})");
    const std::string ra = json_schema_rules(a, "args-0"), rb = json_schema_rules(b, "args-1");
    for (const std::string* rules : {&ra, &rb}) {
        size_t at = 0;
        for (size_t end; (end = rules->find('\n', at)) != std::string::npos; at = end + 1) {
            const std::string name = rules->substr(at, rules->find(" ::= ", at) - at);
            EXPECT_EQ(name.rfind(rules == &ra ? "args-0" : "args-1", 0), 0u) << name;
        }
    }
    const auto g = compile_grammar("root ::= args-0 | args-1\n" + ra + rb);
    const auto takes = [&](const std::string& t) {
        Matcher m(g);
        return m.accept(t) && m.can_end();
    };
    EXPECT_TRUE(takes(R"({"n": 2, "s": "abc"})"));
    EXPECT_TRUE(takes(R"({"d": "2024-01-31"})"));
    EXPECT_FALSE(takes(R"({"n": 4, "s": "abc"})"));
    EXPECT_FALSE(takes(R"({"n": 2, "s": "aBc"})"));
    EXPECT_EQ(json_schema_rules(a, "root"), json_schema_to_gbnf(a));
}

TEST(JsonSchema, NumbersAndWhitespaceAreBounded) {
    const Schema n(R"({"type": "number"})");
    EXPECT_TRUE(n.takes("-0.25e+10"));
    EXPECT_FALSE(n.starts("12345678901234567"));  // 17 digits
    EXPECT_TRUE(n.takes("9.5e99"));
    EXPECT_FALSE(n.takes("1e999"));  // past a double: parsers such as nlohmann refuse it
    const Schema o(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})");
    EXPECT_TRUE(o.takes("{\n    \"a\": 1\n}"));
    EXPECT_FALSE(o.starts("{    "));  // one space, or a line break and indentation
    EXPECT_FALSE(o.starts("{\n\n\n"));
}

TEST(JsonSchema, AnyValueAndJsonObject) {
    const Schema any("{}");
    EXPECT_TRUE(any.takes("[1, {\"a\": null}]"));
    Matcher m(compile_grammar(json_object_gbnf()));
    EXPECT_TRUE(m.accepts(R"({"x": [1, 2], "y": {"z": "w"}})"));
    EXPECT_FALSE(m.accepts("[1]"));
}

TEST(JsonSchema, UnsupportedKeywordsAreRefusedByName) {
    std::string path;
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"n": {"type": "integer", "uniqueItems": true}}})", &path)
                  .find("'properties.n': keyword 'uniqueItems' is not supported"),
              std::string::npos);
    EXPECT_EQ(path, "properties.n");
    for (const char* k : {"allOf", "not", "patternProperties", "uniqueItems", "prefixItems", "minProperties", "if"}) {
        EXPECT_NE(refusal(std::string(R"({")") + k + R"(": 1})").find(std::string("keyword '") + k + "'"),
                  std::string::npos)
            << k;
    }
    EXPECT_NE(refusal(R"({"type": "string", "format": "uri"})").find("format \"uri\" is not supported"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "string", "pattern": "^a$", "maxLength": 3})").find("together are not supported"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"$ref": "http://example.com/s.json"})").find("only local references"), std::string::npos);
    EXPECT_NE(refusal(R"({"$ref": "#/$defs/missing"})").find("names nothing"), std::string::npos);
    EXPECT_NE(refusal(R"({"type": "array", "minItems": 3, "maxItems": 1})").find("maxItems"), std::string::npos);
    EXPECT_NE(refusal(R"({"type": "money"})").find("unknown type 'money'"), std::string::npos);
}

TEST(JsonSchema, SelfReferenceThatConsumesNothingIsAGrammarError) {
    EXPECT_THROW(compile_json_schema(ojson::parse(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})")),
                 GrammarError);
}

}  // namespace
}  // namespace tandem::grammar
