"""The structured-output corpora (stdlib only, so that the GPU machine's bare python3 can use them:
tests/e2e/structured_corpus_check.py): 200 JSON schemas (a generated corpus covering every keyword
the grammar engine supports, plus real-world shapes; bench/schemas/corpus holds the same, one file
each), 100 bounded patterns each as a Python regex and as the same language in GBNF, and 60
choice lists. Deterministic: the generators are seeded."""
import json
import random
import re

# ---- a generated corpus of schemas -------------------------------------------------------------

def leaf(rng):
    kind = rng.choice(["string", "strlen", "pattern", "format", "integer", "intrange", "number", "numrange",
                       "boolean", "null", "enum", "const", "types"])
    if kind == "string":
        return {"type": "string", "maxLength": rng.randint(0, 8)}
    if kind == "strlen":
        lo = rng.randint(0, 4)
        return {"type": "string", "minLength": lo, "maxLength": lo + rng.randint(0, 4)}
    if kind == "pattern":
        return {"type": "string", "pattern": rng.choice(["^[a-z]{1,5}$", "^\\d{3}-\\d{2}$", "^(yes|no|maybe)$",
                                                         "^[A-Z][a-z]{0,3}( [A-Z][a-z]{0,3})?$", "^\\w{2,4}@x\\.io$"])}
    if kind == "format":
        return {"type": "string", "format": rng.choice(["date", "time", "date-time", "uuid", "ipv4", "email"])}
    if kind == "integer":
        return {"type": "integer"}
    if kind == "intrange":
        lo = rng.randint(-500, 500)
        s = {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 1000)}
        if rng.random() < 0.3:
            s = {"type": "integer", "exclusiveMinimum": lo, "exclusiveMaximum": lo + rng.randint(2, 50)}
        return s
    if kind == "number":
        return {"type": "number"}
    if kind == "numrange":
        lo = rng.uniform(-100, 100)
        return {"type": "number", "minimum": round(lo, 2), "maximum": round(lo + rng.uniform(1, 100), 2)}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "null":
        return {"type": "null"}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", 3, None, True, "a\"b", "é"], rng.randint(1, 4))}
    if kind == "const":
        return {"const": rng.choice(["fixed", 42, False, {"k": [1, 2]}])}
    return {"type": ["integer", "null"]} if rng.random() < 0.5 else {"type": ["string", "boolean"], "maxLength": 3}


def schema_of(rng, depth):
    r = rng.random()
    if depth >= 2 or r < 0.3:
        return leaf(rng)
    if r < 0.6:
        n = rng.randint(1, 4)
        props = {f"p{i}_{rng.choice('abcxyz')}": schema_of(rng, depth + 1) for i in range(n)}
        s = {"type": "object", "properties": props,
             "required": rng.sample(list(props), rng.randint(0, len(props)))}
        # (additionalProperties with a schema lets a greedy random model add keys until max_tokens:
        # covered by the unit tests, not here.)
        if rng.random() < 0.5:
            s["additionalProperties"] = False
        return s
    if r < 0.8:
        lo = rng.randint(0, 2)
        s = {"type": "array", "items": schema_of(rng, depth + 1), "minItems": lo, "maxItems": lo + rng.randint(0, 2)}
        if rng.random() < 0.2:
            s = {"type": "array", "prefixItems": [leaf(rng), leaf(rng)], "items": False}
        return s
    if r < 0.9 or depth > 0:  # "#/$defs/..." resolves against the root: definitions only there
        return {"anyOf": [leaf(rng), schema_of(rng, depth + 1)]}
    return {"$defs": {"item": leaf(rng)}, "type": "object",
            "properties": {"first": {"$ref": "#/$defs/item"}, "rest": {"type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 2}},
            "required": ["first", "rest"], "additionalProperties": False}


SCHEMAS = [schema_of(random.Random(i), 0) for i in range(184)] + [
    # Real-world shapes (OpenAI strict-mode examples, recursion).
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "date": {"type": "string", "format": "date"},
                                      "participants": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}},
     "required": ["name", "date", "participants"], "additionalProperties": False},
    {"type": "object", "properties": {"steps": {"type": "array", "maxItems": 2, "items": {
        "type": "object", "properties": {"explanation": {"type": "string", "maxLength": 8}, "output": {"type": "string", "maxLength": 5}},
        "required": ["explanation", "output"], "additionalProperties": False}}, "final_answer": {"type": "string", "maxLength": 6}},
     "required": ["steps", "final_answer"], "additionalProperties": False},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                                          "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}},
                        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
    {"type": "object", "properties": {"ui": {"anyOf": [{"type": "object", "properties": {"kind": {"const": "button"}, "label": {"type": "string", "maxLength": 5}},
                                                        "required": ["kind", "label"], "additionalProperties": False},
                                                       {"type": "object", "properties": {"kind": {"const": "text"}, "body": {"type": "string", "maxLength": 5}},
                                                        "required": ["kind", "body"], "additionalProperties": False}]}},
     "required": ["ui"], "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"},
                                      "alpha": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["color", "hex"]},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}, "ip": {"type": "string", "format": "ipv4"},
                                      "when": {"type": "string", "format": "date-time"}, "n": {"type": ["integer", "null"]}},
     "required": ["id", "ip", "when", "n"], "additionalProperties": False},
    {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string", "maxLength": 3}, "v": {"type": "boolean"}},
                                "required": ["k", "v"], "additionalProperties": False}, "minItems": 1, "maxItems": 3},
    {"type": "object", "additionalProperties": False},
    {"type": "string", "maxLength": 0},
    {"type": "integer", "minimum": 7, "maximum": 7},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 3},
    {"enum": [{"a": 1}, [1, 2], "x"]},
    {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 3}, {"enum": ["a", "b"]}], "items": {"type": "boolean"}, "maxItems": 4},
    {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {"c": {"const": 1}}, "required": ["c"]}}, "required": ["b"]}}, "required": ["a"]},
    {"type": "object", "properties": {"free": {}}, "required": ["free"], "additionalProperties": False},
    {"type": "boolean"},
]
assert len(SCHEMAS) == 200


# ---- generated corpora of regular expressions, grammars and choice lists ------------------------

WORDS = ["cat", "dog", "a", "zz", "42", "x-y", "Ok", "no", "yes", "é"]
CLASSES = ["[a-z]", "[0-9]", "[A-F0-9]", "[xyz]", "[a-c0-2]"]


def rx_of(rng, depth):
    """(python regex, GBNF expression, longest match in characters) of one random bounded pattern."""
    r = rng.random()
    if depth >= 2 or r < 0.35:
        if rng.random() < 0.5:
            w = rng.choice(WORDS)
            return re.escape(w), json.dumps(w, ensure_ascii=False), len(w)
        c = rng.choice(CLASSES)
        return c, c, 1
    if r < 0.6:
        parts = [rx_of(rng, depth + 1) for _ in range(rng.randint(2, 3))]
        return "".join(p[0] for p in parts), " ".join(p[1] for p in parts), sum(p[2] for p in parts)
    if r < 0.8:
        parts = [rx_of(rng, depth + 1) for _ in range(rng.randint(2, 3))]
        return ("(" + "|".join(p[0] for p in parts) + ")", "(" + " | ".join(p[1] for p in parts) + ")",
                max(p[2] for p in parts))
    inner = rx_of(rng, depth + 1)
    lo = rng.randint(0, 2)
    hi = lo + rng.randint(0, 2)
    if hi == 0:
        hi = 1
    return f"({inner[0]}){{{lo},{hi}}}", f"({inner[1]}){{{lo},{hi}}}", inner[2] * hi


def pattern_corpus(n, seed):
    out, rng = [], random.Random(seed)
    while len(out) < n:
        py, gbnf, longest = rx_of(rng, 0)
        if 0 < longest <= 40:
            out.append((py, gbnf))
    return out


PATTERNS = pattern_corpus(100, 1234)  # each as a regex and as the same language in GBNF
CHOICES = [random.Random(i).sample(WORDS + ["cathedral", "dogma", "yesterday", "new york", "a b c"], random.Random(i).randint(2, 5))
           for i in range(60)]
