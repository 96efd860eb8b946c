// JSON Schema (the draft 2020-12 subset of OpenAI's strict mode and vLLM) -> Grammar whose
// language is JSON text valid against the schema.
//
// Supported: type (one or a list), enum, const, properties / required (properties in schema
// order, optional ones may be left out), additionalProperties (false, true or a schema; absent
// counts as false, as strict mode requires), items, prefixItems, minItems / maxItems, anyOf /
// oneOf (as alternatives; oneOf branches are not made disjoint), allOf of one schema, $ref to
// "#", "#/$defs/..." and "#/definitions/..." (recursion allowed), string minLength / maxLength /
// pattern / format (date, time, date-time, uuid, email, ipv4), integer and number minimum /
// maximum / exclusiveMinimum / exclusiveMaximum, nullable (OpenAPI). Annotations (title,
// description, default, examples, $schema, $id, $comment ...) and unknown keywords are ignored.
// Keywords we cannot enforce (multipleOf, uniqueItems, contains, patternProperties,
// propertyNames, minProperties, maxProperties, dependentRequired, if/then/else, not) are an
// error naming the keyword: a constraint is never silently weakened.
//
// Output shape: compact JSON, with at most one space after ':' and ','. Integers have at most 18
// digits, fractions at most 15, exponents at most 3 (a bounded language keeps every output
// finite); a number with bounds is generated as an integer within them.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "grammar/grammar.h"

namespace pagoda::grammar {

Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema);
// Parses `schema_text` as JSON first (errors say where).
Result<Grammar> compile_json_schema_text(std::string_view schema_text);
// Any JSON object (response_format json_object).
Result<Grammar> json_object_grammar();
// Expressions for embedding (tool calls): rules are defined in `b` under `prefix`-named rules;
// returns the expression for one value of the schema.
Result<ExprPtr> add_json_schema(GrammarBuilder* b, const nlohmann::ordered_json& schema, std::string_view prefix);

// A JSON string literal (quoted, escaped) matching exactly `text`.
std::string json_quote(std::string_view text);

}  // namespace pagoda::grammar
