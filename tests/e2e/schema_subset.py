"""A JSON Schema (draft 2020-12) validator for the subset the structured-output corpora use, in the
standard library only, for machines without the `jsonschema` package (the GPU machine:
tests/e2e/structured_corpus_check.py). tests/e2e/structured_corpus_check_test.py checks that it
agrees with `jsonschema` (Draft202012Validator with its format checker) on every corpus schema.

Keywords: type, enum, const, properties, required, additionalProperties, items, prefixItems,
minItems, maxItems, anyOf, $ref (local JSON pointers) / $defs, minLength, maxLength, pattern,
format (date, time, date-time, uuid, ipv4, email), minimum, maximum, exclusiveMinimum,
exclusiveMaximum; title / description / $schema / $id / $comment / default / examples are
annotations. Any other keyword raises Unsupported: a keyword this file does not check is never
passed over silently.

    errors = validate_text(schema, text)   # [] when `text` is one JSON value valid against `schema`
"""
import datetime
import ipaddress
import json
import math
import re

ANNOTATIONS = {"title", "description", "$schema", "$id", "$comment", "default", "examples"}
CHECKED = {"type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
           "minItems", "maxItems", "anyOf", "$ref", "$defs", "minLength", "maxLength", "pattern", "format",
           "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}


class Unsupported(ValueError):
    """The schema uses a keyword (or a format, or a $ref form) this validator does not implement."""


def parse_json(text):
    """One strict JSON value: no NaN / Infinity, no number beyond a double's range (RFC 8259
    section 6: clients read it as infinity or fail), no duplicate object keys, nothing after it
    but whitespace. Raises ValueError."""
    def no_constant(name):
        raise ValueError(f"{name} is not JSON")

    def finite(s):
        v = float(s)
        if math.isinf(v):
            raise ValueError(f"the number {s} is beyond a double's range")
        return v

    def pairs(items):
        out = {}
        for k, v in items:
            if k in out:
                raise ValueError(f"duplicate key {k!r}")
            out[k] = v
        return out

    return json.loads(text, parse_constant=no_constant, parse_float=finite, object_pairs_hook=pairs)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def json_type_ok(v, t):
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "number":
        return is_number(v)
    if t == "integer":  # 2020-12: any number with a zero fractional part
        return is_number(v) and (isinstance(v, int) or (math.isfinite(v) and v == int(v)))
    raise Unsupported(f"type {t!r}")


def json_equal(a, b):
    """JSON equality: 1 == 1.0, but true is not 1; arrays and objects element by element."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if is_number(a) and is_number(b):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})\Z", re.ASCII)
TIME = re.compile(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))\Z", re.ASCII)
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
# RFC 5321 Mailbox, dot-atom or quoted local part; a domain of LDH labels or an address literal.
ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
LOCAL = rf"(?:{ATEXT}(?:\.{ATEXT})*|\"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*\")"
LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DOMAIN = rf"(?:{LABEL}(?:\.{LABEL})*|\[[^\[\]\\]+\])"
EMAIL = re.compile(rf"{LOCAL}@{DOMAIN}\Z")


def date_ok(s):
    m = DATE.match(s)
    if not m:
        return False
    try:
        datetime.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return False
    return True


def time_ok(s):
    """RFC 3339 full-time; second 60 (a leap second) allowed."""
    m = TIME.match(s)
    if not m:
        return False
    if int(m[1]) > 23 or int(m[2]) > 59 or int(m[3]) > 60:
        return False
    return m[6] is None or (int(m[6]) <= 23 and int(m[7]) <= 59)


def format_ok(fmt, s):
    if fmt == "date":
        return date_ok(s)
    if fmt == "time":
        return time_ok(s)
    if fmt == "date-time":
        parts = re.split("[Tt]", s, maxsplit=1)
        return len(parts) == 2 and date_ok(parts[0]) and time_ok(parts[1])
    if fmt == "uuid":
        return UUID.match(s) is not None
    if fmt == "ipv4":
        try:
            ipaddress.IPv4Address(s)
        except ValueError:
            return False
        return True
    if fmt == "email":
        return EMAIL.match(s) is not None
    raise Unsupported(f"format {fmt!r}")


def resolve(root, ref):
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        raise Unsupported(f"$ref {ref!r} (only local JSON pointers)")
    node = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise Unsupported(f"$ref {ref!r} does not resolve")
    return node


def errors_of(schema, v, root, path="$"):
    """Every violation of `schema` by `v` (a list of 'path: reason'); [] when valid."""
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here"]
    if not isinstance(schema, dict):
        raise Unsupported(f"schema {schema!r}")
    unknown = set(schema) - CHECKED - ANNOTATIONS
    if unknown:
        raise Unsupported(f"keyword(s) {sorted(unknown)}")
    errs = []
    if "$ref" in schema:
        errs += errors_of(resolve(root, schema["$ref"]), v, root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(json_type_ok(v, t) for t in types):
            return errs + [f"{path}: {json.dumps(v)[:60]} is not of type {types}"]
    if "enum" in schema and not any(json_equal(v, e) for e in schema["enum"]):
        errs.append(f"{path}: {json.dumps(v)[:60]} is not one of {schema['enum']}")
    if "const" in schema and not json_equal(v, schema["const"]):
        errs.append(f"{path}: {json.dumps(v)[:60]} is not {json.dumps(schema['const'])}")
    if "anyOf" in schema and all(errors_of(s, v, root, path) for s in schema["anyOf"]):
        errs.append(f"{path}: matches none of anyOf")
    if isinstance(v, str):
        if "minLength" in schema and len(v) < schema["minLength"]:
            errs.append(f"{path}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(v) > schema["maxLength"]:
            errs.append(f"{path}: longer than {schema['maxLength']}")
        if "pattern" in schema and re.search(schema["pattern"], v) is None:
            errs.append(f"{path}: {v!r} does not match {schema['pattern']!r}")
        if "format" in schema and not format_ok(schema["format"], v):
            errs.append(f"{path}: {v!r} is not a {schema['format']}")
    if is_number(v):
        if "minimum" in schema and v < schema["minimum"]:
            errs.append(f"{path}: {v} < minimum {schema['minimum']}")
        if "maximum" in schema and v > schema["maximum"]:
            errs.append(f"{path}: {v} > maximum {schema['maximum']}")
        if "exclusiveMinimum" in schema and v <= schema["exclusiveMinimum"]:
            errs.append(f"{path}: {v} <= exclusiveMinimum {schema['exclusiveMinimum']}")
        if "exclusiveMaximum" in schema and v >= schema["exclusiveMaximum"]:
            errs.append(f"{path}: {v} >= exclusiveMaximum {schema['exclusiveMaximum']}")
    if isinstance(v, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in v:
                errs.append(f"{path}: required property {k!r} missing")
        for k, x in v.items():
            if k in props:
                errs += errors_of(props[k], x, root, f"{path}.{k}")
            elif "additionalProperties" in schema:
                errs += errors_of(schema["additionalProperties"], x, root, f"{path}.{k}")
    if isinstance(v, list):
        prefix = schema.get("prefixItems", [])
        for i, x in enumerate(v):
            if i < len(prefix):
                errs += errors_of(prefix[i], x, root, f"{path}[{i}]")
            elif "items" in schema:
                errs += errors_of(schema["items"], x, root, f"{path}[{i}]")
        if "minItems" in schema and len(v) < schema["minItems"]:
            errs.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(v) > schema["maxItems"]:
            errs.append(f"{path}: more than {schema['maxItems']} items")
    return errs


def validate(schema, value):
    """Violations of `schema` (the root, for $ref) by the parsed `value`."""
    return errors_of(schema, value, schema)


def validate_text(schema, text):
    """Violations of `schema` by `text`, which must be exactly one strict JSON value."""
    try:
        value = parse_json(text)
    except ValueError as e:
        return [f"not JSON: {e}"]
    return validate(schema, value)
