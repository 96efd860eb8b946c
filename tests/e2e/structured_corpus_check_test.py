"""The stdlib-only corpus check of the GPU machine (tests/e2e/structured_corpus_check.py, run there by
`scripts/gpu_run.sh corpus`) run here on the CPU, in a Python without site-packages (`-I -S`: the
standard library only, as on the GPU machine): it passes on the real server, and it fails when the
answers are wrong (no constraint; or well-formed answers to the wrong schema, pattern, choice list
or tool parameters). Its JSON Schema validator (tests/e2e/schema_subset.py) is checked against the `jsonschema`
package on instances generated from every corpus schema, valid and broken, and on format strings."""
import json
import random
import re
import subprocess
import sys

import jsonschema
import pytest

from conftest import BINARY, TINY_MODEL
from schema_subset import Unsupported, parse_json, validate, validate_text
from structured_corpus import SCHEMAS

DRIVER = [sys.executable, "-I", "-S", str(__import__("pathlib").Path(__file__).with_name("structured_corpus_check.py"))]


def driver(*args):
    p = subprocess.run([*DRIVER, "--binary", BINARY, "--model", str(TINY_MODEL), "--device", "cpu", *map(str, args)],
                       capture_output=True, text=True, timeout=900)
    print(p.stdout[-4000:], p.stderr[-2000:])
    return p.returncode, p.stdout


def test_every_corpus_answer_is_valid_on_the_cpu():
    rc, out = driver()
    assert rc == 0 and "PASS" in out, out
    assert re.search(r"1320 requests in [\d.]+ s, 0 invalid", out), out
    for kind, n in (("json", 400), ("regex", 200), ("grammar", 200), ("choice", 120), ("tools", 400)):
        assert re.search(rf"{kind}\s+{n}/{n} valid", out), (kind, out)


def test_the_check_fails_on_wrong_answers():
    # Well-formed answers to the neighbouring schema / pattern / list / tools: most must be caught.
    rc, out = driver("--shift", "1")
    assert rc == 1 and "FAIL" in out, out
    invalid = int(re.search(r"(\d+) invalid", out)[1])
    assert invalid >= 900, out
    assert re.search(r"INVALID json #\d+ \w+: \$", out), out  # caught by the schema validator itself
    tools_valid = int(re.search(r"tools\s+(\d+)/400 valid", out)[1])
    assert tools_valid <= 200, out  # tool calls with the neighbour's parameters
    # The model's free text.
    rc, out = driver("--no-constraints", "--limit", "3", "--kinds", "json,regex")
    assert rc == 1 and re.search(r"12 requests in [\d.]+ s, 12 invalid", out), out


# ---- the validator against jsonschema -----------------------------------------------------------

def js_valid(schema, value):
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).is_valid(value)


def resolve(root, s):
    while isinstance(s, dict) and "$ref" in s:
        s = root["$defs"][s["$ref"].split("/")[-1]] if s["$ref"] != "#" else root
    return s


def sample(root, s, rng, depth=0):
    """A JSON value shaped by schema `s` (valid most of the time), sometimes broken on purpose."""
    s = resolve(root, s)
    if rng.random() < 0.12:  # a wrong value of a random kind
        return rng.choice([None, True, 0, -3, 2.5, "", "zz", "2024-02-30", [], [1, "a"], {}, {"x": 1}])
    if s is True or s == {}:
        return rng.choice([1, "a", None, [True]])
    if "const" in s:
        return s["const"]
    if "enum" in s:
        return rng.choice(s["enum"])
    if "anyOf" in s:
        return sample(root, rng.choice(s["anyOf"]), rng, depth + 1)
    t = s.get("type")
    t = rng.choice(t) if isinstance(t, list) else t
    if t == "object":
        props = s.get("properties", {})
        out = {k: sample(root, v, rng, depth + 1) for k, v in props.items() if k in s.get("required", []) or rng.random() < 0.6}
        if rng.random() < 0.15 and out:
            out.pop(rng.choice(list(out)))
        if rng.random() < 0.15:
            out["extra"] = 1
        return out
    if t == "array":
        prefix = s.get("prefixItems", [])
        n = rng.randint(s.get("minItems", 0), s.get("maxItems", 3) + (1 if rng.random() < 0.15 else 0))
        items = s.get("items", True)
        return [sample(root, prefix[i], rng, depth + 1) if i < len(prefix)
                else (sample(root, items, rng, depth + 1) if items is not False else 1) for i in range(n)]
    if t == "string":
        fmt = {"date": ["2024-01-31", "2023-02-29", "2024-1-01"], "time": ["12:30:00Z", "23:59:60+01:00", "24:00:00Z", "12:00:00"],
               "date-time": ["2024-01-31T12:30:00.5Z", "2024-01-31 12:30:00Z", "2024-01-31t12:30:00z"],
               "uuid": ["123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"],
               "ipv4": ["10.0.0.1", "256.0.0.1", "01.2.3.4", "1.2.3"], "email": ["a@x.io", "a.b+c@d-e.fg", "@x.io", "a@"]}
        if "format" in s:
            return rng.choice(fmt[s["format"]])
        if "pattern" in s:
            return rng.choice(["abc", "123-45", "maybe", "Ab Cd", "ab@x.io", "ABCDEF", "12-345", "#a0b1c2", ""])
        lo, hi = s.get("minLength", 0), s.get("maxLength", 6)
        return "é" * rng.randint(max(0, lo - 1), hi + 1)
    if t in ("integer", "number"):
        lo = s.get("minimum", s.get("exclusiveMinimum", -50))
        hi = s.get("maximum", s.get("exclusiveMaximum", 50))
        v = rng.choice([lo, hi, (lo + hi) / 2, lo - 1, hi + 1, round(rng.uniform(lo, hi), 3)])
        return int(v) if t == "integer" and rng.random() < 0.8 else v
    if t == "boolean":
        return rng.random() < 0.5
    if t == "null":
        return None
    return rng.choice([1, "s", None])


# jsonschema's format checker leaves `time` and `date-time` unchecked without the rfc3339-validator
# package and calls anything with an "@" an email; the validator here checks RFC 3339 and RFC 5321.
LAX_IN_JSONSCHEMA = ("time", "date-time", "email")


def test_the_validator_agrees_with_jsonschema_on_the_corpus():
    rng = random.Random(7)
    checked = valid = 0
    for i, schema in enumerate(SCHEMAS):
        lax = any(f'"format": "{f}"' in json.dumps(schema) for f in LAX_IN_JSONSCHEMA)
        for _ in range(40):
            v = sample(schema, schema, rng)
            ours = not validate(schema, v)
            theirs = js_valid(schema, v)
            if lax:
                assert not ours or theirs, (i, schema, v)  # never laxer
            else:
                assert ours == theirs, (i, schema, v, validate(schema, v))
            checked += 1
            valid += ours
    # Both outcomes are well represented.
    assert checked == 8000 and 1500 < valid < 6500, valid


@pytest.mark.parametrize("fmt,good,bad", [
    ("date", ["2024-02-29", "1999-12-31"], ["2023-02-29", "2024-13-01", "2024-1-01", "24-01-01", "2024-01-01T"]),
    ("time", ["00:00:00Z", "23:59:60+14:00", "12:30:00.123-05:30", "01:02:03z"],
     ["24:00:00Z", "12:60:00Z", "12:00:00", "12:00Z", "12:00:00+25:00", "12:00:00+01"]),
    ("date-time", ["2024-01-31T12:30:00Z", "2024-01-31t12:30:00.5+01:00"], ["2024-01-31 12:30:00Z", "2024-01-31T25:00:00Z", "2024-01-31"]),
    ("uuid", ["123e4567-e89b-12d3-a456-426614174000", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF"],
     ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400", "{123e4567-e89b-12d3-a456-426614174000}"]),
    ("ipv4", ["0.0.0.0", "255.255.255.255"], ["256.0.0.1", "01.2.3.4", "1.2.3", "1.2.3.4.5", " 1.2.3.4"]),
    ("email", ["a@x.io", "a.b+c@d-e.fg", "\"a b\"@x", "x@[10.0.0.1]"], ["@x.io", "a@", "a@@b", "a..b@x", "a b@x", "a@-x.io"]),
])
def test_formats(fmt, good, bad):
    s = {"type": "string", "format": fmt}
    for g in good:
        assert validate(s, g) == [], (fmt, g)
    for b in bad:
        assert validate(s, b), (fmt, b)


def test_strict_json_and_unsupported_keywords():
    assert validate_text({"type": "integer"}, "3") == []
    assert validate_text({"type": "integer"}, "3.0") == []  # 2020-12: a zero fractional part
    assert validate_text({"type": "integer"}, "true")
    assert validate_text({"const": 1}, "true") and validate_text({"enum": [False]}, "0")
    assert validate_text({"const": {"k": [1, 2]}}, '{"k": [1.0, 2]}') == []
    for text in ("NaN", "Infinity", '{"a": 1, "a": 2}', "1 2", "", "[1,]", "{'a': 1}", "-0.1e+800"):
        assert validate_text({}, text), text
    with pytest.raises(ValueError):
        parse_json('{"a": 1, "a": 1}')
    for schema in ({"type": "integer", "multipleOf": 3}, {"not": {}}, {"type": "string", "format": "hostname"},
                   {"$ref": "other.json#/x"}, {"type": "decimal"}):
        with pytest.raises(Unsupported):
            validate(schema, "x")
