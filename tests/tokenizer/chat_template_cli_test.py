"""`pagoda chat-template` against transformers' renderings (testdata/chat_templates/*.json, written by
tools/make_chat_template_refs.py): the SmolLM2 GGUF (template and bos/eos from its metadata) and a
Hugging Face directory fixture (tokenizer_config.json with named templates and AddedToken objects).
CTest sets PAGODA_BINARY, PAGODA_TESTDATA_DIR and PAGODA_MODELS_DIR."""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("PAGODA_BINARY", os.path.join(ROOT, "build", "pagoda"))
TESTDATA = os.environ.get("PAGODA_TESTDATA_DIR", os.path.join(ROOT, "testdata"))
MODELS = os.environ.get("PAGODA_MODELS_DIR", os.path.join(ROOT, "models"))
REFS = os.path.join(TESTDATA, "chat_templates")
SMOLLM2 = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")


def load(name):
    with open(os.path.join(REFS, name), encoding="utf-8") as f:
        return json.load(f)


def model_cases(name):
    for t in load("models.json")["templates"]:
        if t["name"] == name:
            return t["cases"]
    raise KeyError(name)


def run_cli(tmp_path, model, case, tools_flag=False):
    """Runs the CLI for a reference case; tools go in the messages file or in --tools."""
    payload = {"messages": case["messages"]}
    args = [BINARY, "chat-template", "--model", model]
    if case.get("tools") is not None:
        if tools_flag:
            (tmp_path / "tools.json").write_text(json.dumps(case["tools"]), encoding="utf-8")
            args += ["--tools", str(tmp_path / "tools.json")]
        else:
            payload["tools"] = case["tools"]
    (tmp_path / "messages.json").write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
    args += ["--messages", str(tmp_path / "messages.json")]
    if case.get("extra_context"):
        (tmp_path / "context.json").write_text(json.dumps(case["extra_context"]), encoding="utf-8")
        args += ["--context", str(tmp_path / "context.json")]
    if case["add_generation_prompt"]:
        args.append("--add-generation-prompt")
    return subprocess.run(args, capture_output=True, timeout=60)


def check(proc, case):
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}"
    if "expected" in case:
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout == case["expected"].encode("utf-8")  # exact bytes, no added newline
    else:
        assert proc.returncode == 1, proc.stdout.decode()
        assert proc.stdout == b""
        if case["error_type"] == "TemplateError":
            assert case["error"] in proc.stderr.decode()


@pytest.mark.parametrize("case", model_cases("smollm2-135m-instruct"), ids=lambda c: c["name"])
def test_smollm2_gguf(tmp_path, case):
    if not os.path.exists(SMOLLM2):
        pytest.skip(f"{SMOLLM2} is absent (scripts/fetch_models.sh fetches it)")
    check(run_cli(tmp_path, SMOLLM2, case), case)


@pytest.mark.parametrize("case", load("hf_dir_refs.json")["cases"], ids=lambda c: c["name"])
def test_hf_directory(tmp_path, case):
    check(run_cli(tmp_path, os.path.join(REFS, "hf_dir"), case, tools_flag=case["name"].endswith("+gen")), case)


def test_raise_exception_is_an_error_exit(tmp_path):
    with open(os.path.join(REFS, "templates", "gemma-2-2b-it.jinja"), encoding="utf-8") as f:
        (tmp_path / "chat_template.jinja").write_text(f.read(), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text('{"bos_token": "<bos>", "eos_token": "<eos>"}')
    case = next(c for c in model_cases("gemma-2-2b-it") if c["name"] == "system_user")
    assert case["error_type"] == "TemplateError"
    proc = run_cli(tmp_path, str(tmp_path), case)
    check(proc, case)
    assert b"raised an exception at 1:" in proc.stderr
    ok = next(c for c in model_cases("gemma-2-2b-it") if c["name"] == "no_system_multi_turn+gen")
    check(run_cli(tmp_path, str(tmp_path), ok), ok)


@pytest.mark.parametrize(
    "model,messages,needle",
    [
        ("/nonexistent/model.gguf", '[{"role": "user", "content": "hi"}]', b"does not exist"),
        ("HF", "{not json", b"not valid JSON"),
        ("HF", "[]", b"empty conversation"),
        ("HF", '{"no_messages": 1}', b"messages"),
        ("BADTEMPLATE", '[{"role": "user", "content": "hi"}]', b"syntax error"),
        ("NOTGGUF", '[{"role": "user", "content": "hi"}]', b"pagoda chat-template:"),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path, model, messages, needle):
    if model == "HF":
        model = os.path.join(REFS, "hf_dir")
    elif model == "BADTEMPLATE":
        (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}\n{{ m.role + }}\n{% endfor %}")
        model = str(tmp_path)
    elif model == "NOTGGUF":
        (tmp_path / "model.gguf").write_bytes(b"GGUF\x03\x00\x00\x00garbage")
        model = str(tmp_path / "model.gguf")
    (tmp_path / "m.json").write_text(messages)
    proc = subprocess.run(
        [BINARY, "chat-template", "--model", model, "--messages", str(tmp_path / "m.json")], capture_output=True, timeout=60
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stdout == b""
    assert needle in proc.stderr, proc.stderr


def test_missing_required_option():
    proc = subprocess.run([BINARY, "chat-template", "--messages", "x.json"], capture_output=True, timeout=60)
    assert proc.returncode != 0 and proc.returncode > 0


def write_template_dir(path, template):
    path.mkdir()
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template, "bos_token": "<s>",
                                                            "eos_token": "</s>"}), encoding="utf-8")
    messages = path / "messages.json"
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    return str(path), str(messages)


def test_large_single_line_template_parses_in_linear_time(tmp_path):
    # 400 KB on one line, if-blocks nested 150 deep (issue 25: the column of every token was counted
    # from the line start, so this took minutes; it is linear now). The bound is ~20x above the
    # linear parse on a loaded 2-core runner and far below the quadratic one.
    depth = 150
    unit = "{% if true %}" * depth + "a" + "{% endif %}" * depth
    template = unit * (400_000 // len(unit) + 1)
    model, messages = write_template_dir(tmp_path / "big", template)
    proc = subprocess.run([BINARY, "chat-template", "--model", model, "--messages", messages],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "a" * (400_000 // len(unit) + 1)


def test_oversized_and_too_deep_templates_are_clear_errors(tmp_path):
    model, messages = write_template_dir(tmp_path / "huge", "x" * ((1 << 20) + 1))
    proc = subprocess.run([BINARY, "chat-template", "--model", model, "--messages", messages],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode != 0 and "at most 1048576" in proc.stderr, proc.stderr
    model, messages = write_template_dir(tmp_path / "deep", "{% if true %}" * 300 + "a" + "{% endif %}" * 300)
    proc = subprocess.run([BINARY, "chat-template", "--model", model, "--messages", messages],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode != 0 and "nesting deeper than 200" in proc.stderr, proc.stderr
