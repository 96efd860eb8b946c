#!/usr/bin/env python3
"""Regenerates the chat-template references under testdata/chat_templates/ (run in .venv-ref).

Every expected string comes from Hugging Face transformers itself: a PreTrainedTokenizerFast built
around a two-token vocabulary, with the model's bos/eos tokens and `chat_template` set, renders each
conversation with `apply_chat_template(..., tokenize=False)` (transformers.utils.chat_template_utils
underneath: jinja2's ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, its tojson,
raise_exception and strftime_now). The clock strftime_now reads is fixed to REF_NOW so the outputs
are deterministic; the C++ tests pass the same time.

Writes:
  models.json    for each template in templates/: bos/eos tokens and, per conversation x
                 add_generation_prompt, the expected rendering or the expected error
  features.json  small templates exercising one interpreter feature each (messages = FEATURE_MESSAGES)

Usage: .venv-ref/bin/python tools/make_chat_template_refs.py
"""
import copy
import datetime as _dt
import json
import os
import sys

import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "testdata", "chat_templates")
REF_NOW = _dt.datetime(2024, 7, 26, 10, 30, 5)


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return REF_NOW


ctu.datetime = _FixedDatetime  # strftime_now() reads datetime.now() from this module

# template file -> (bos_token, eos_token) as in the model's tokenizer_config.json (None: absent)
TEMPLATES = {
    "llama-3-8b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.1-8b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.2-3b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.3-70b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5-7b-instruct": (None, "<|im_end|>"),
    "qwen3-0.6b": (None, "<|im_end|>"),
    "smollm2-135m-instruct": ("<|im_start|>", "<|im_end|>"),
    "smollm3-3b": (None, "<|im_end|>"),
    "mistral-7b-instruct-v0.1": ("<s>", "</s>"),
    "mixtral-8x7b-instruct-v0.1": ("<s>", "</s>"),
    "mistral-nemo-instruct-2407": ("<s>", "</s>"),
    "gemma-7b-it": ("<bos>", "<eos>"),
    "gemma-2-2b-it": ("<bos>", "<eos>"),
    "phi-3-mini-4k-instruct": ("<s>", "<|endoftext|>"),
    "phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "hermes-2-pro-llama-3-8b-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "deepseek-r1-distill-qwen-32b": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "granite-3.3-2b-instruct": ("<|end_of_text|>", "<|end_of_text|>"),
    "functionary-medium-v3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "gpt-oss-120b": ("<|startoftext|>", "<|return|>"),
    # More real templates, for breadth (Markup via |safe, generators, macros, namespaces, ...)
    "functionary-medium-v3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "deepseek-v3.1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "qwq-32b": (None, "<|im_end|>"),
    "command-r7b-12-2024-tool_use": ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    "kimi-k2": ("[BOS]", "[EOS]"),
    "glm-4.6": (None, "<|endoftext|>"),
    "nemotron-nano-v2": ("<s>", "</s>"),
    "mistral-small-3.2-24b-instruct-2506": ("<s>", "</s>"),
    "llama-cpp-deepseek-r1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "City name, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["location"],
            },
        },
    }
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
CONVERSATIONS = [
    # name, messages, tools, extra_context
    ("single_user", [{"role": "user", "content": "Hello!"}], None, {}),
    ("system_user", [SYSTEM, {"role": "user", "content": "What is 2+2?"}], None, {}),
    (
        "multi_turn",
        [
            SYSTEM,
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Tell me a joke."},
            {"role": "assistant", "content": "Why did the chicken cross the road?"},
            {"role": "user", "content": "Why?"},
        ],
        None,
        {},
    ),
    (
        "no_system_multi_turn",
        [
            {"role": "user", "content": "First question"},
            {"role": "assistant", "content": "First answer"},
            {"role": "user", "content": "Second question"},
        ],
        None,
        {},
    ),
    (
        "unicode_and_whitespace",
        [
            {"role": "system", "content": "  Réponds en français.\n"},
            {"role": "user", "content": "Héllo wörld — 你好 😀 \"quotes\" \\ back\tslash\n\n  "},
            {"role": "assistant", "content": "  Bonjour ! ✓  "},
            {"role": "user", "content": "Ünïcödé\r\nline2"},
        ],
        None,
        {},
    ),
    (
        "content_list",
        [
            {"role": "user", "content": [{"type": "text", "text": "Describe this:"}, {"type": "text", "text": " two parts."}]},
        ],
        None,
        {},
    ),
    (
        "tool_calls",
        [
            SYSTEM,
            {"role": "user", "content": "What's the weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call12345",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"unit": "celsius", "location": "Paris"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temperature\": 21.5, \"unit\": \"celsius\"}"},
            {"role": "assistant", "content": "It is 21.5 °C in Paris."},
            {"role": "user", "content": "Thanks"},
        ],
        TOOLS,
        {},
    ),
    (
        "tool_calls_empty_content",
        [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call54321",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"location": "Oslo"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call54321", "name": "get_weather", "content": "-3 degrees"},
        ],
        TOOLS,
        {},
    ),
    (
        "tools_no_system",
        [{"role": "user", "content": "Weather in Tokyo in fahrenheit?"}],
        TOOLS,
        {},
    ),
    (
        "reasoning",
        [
            {"role": "user", "content": "Think, then answer: 3*7?"},
            {"role": "assistant", "content": "21", "reasoning_content": "3 times 7 is 21."},
            {"role": "user", "content": "And 3*8?"},
        ],
        None,
        {},
    ),
    (
        "extra_context",
        [SYSTEM, {"role": "user", "content": "Date?"}],
        None,
        {"date_string": "01 Jan 2025", "enable_thinking": False},
    ),
    # Breaks role alternation: templates that check it must raise.
    (
        "bad_alternation",
        [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
        None,
        {},
    ),
    ("assistant_first", [{"role": "assistant", "content": "I speak first"}, {"role": "user", "content": "ok"}], None, {}),
]


def make_tokenizer(bos, eos):
    vocab = {"<unk>": 0}
    for t in (bos, eos):
        if t is not None and t not in vocab:
            vocab[t] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    kwargs = {}
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    return PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)


def render(tok, template, messages, tools, agp, extra):
    tok.chat_template = template
    try:
        out = tok.apply_chat_template(
            copy.deepcopy(messages), tools=copy.deepcopy(tools), add_generation_prompt=agp, tokenize=False, **extra
        )
        return {"expected": out}
    except Exception as e:  # the C++ side must fail too
        return {"error_type": type(e).__name__, "error": str(e)}


def model_refs():
    out = []
    for name, (bos, eos) in TEMPLATES.items():
        path = os.path.join("templates", name + ".jinja")
        with open(os.path.join(OUT, path), encoding="utf-8", newline="") as f:
            template = f.read()
        tok = make_tokenizer(bos, eos)
        cases = []
        for conv, messages, tools, extra in CONVERSATIONS:
            for agp in (False, True):
                case = {
                    "name": f"{conv}{'+gen' if agp else ''}",
                    "messages": messages,
                    "tools": tools,
                    "extra_context": extra,
                    "add_generation_prompt": agp,
                }
                case.update(render(tok, template, messages, tools, agp, extra))
                cases.append(case)
        out.append({"name": name, "file": path, "bos_token": bos, "eos_token": eos, "cases": cases})
        ok = sum(1 for c in cases if "expected" in c)
        print(f"{name}: {ok} renderings, {len(cases) - ok} errors", file=sys.stderr)
    return out


FEATURE_MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "yo"},
]
FEATURE_CONTEXT = {"d": {"a": 1, "b": [1, 2]}, "s": "Hello World", "n": 7, "f": 2.5, "items": ["b", "a", "c"]}


def feature_refs():
    path = os.path.join(OUT, "feature_templates.txt")
    with open(path, encoding="utf-8", newline="") as f:
        templates = [t for t in f.read().split("\n====\n") if t.strip()]
    tok = make_tokenizer("<s>", "</s>")
    cases = []
    for i, t in enumerate(templates):
        case = {"id": i, "template": t}
        case.update(render(tok, t, FEATURE_MESSAGES, None, False, FEATURE_CONTEXT))
        cases.append(case)
    return cases


# A Hugging Face model directory as transformers loads it: tokenizer_config.json with a list of named
# chat templates (the CLI takes "default", or "tool_use" when tools are given) and special tokens as
# AddedToken objects. Its expected renderings come from AutoTokenizer.from_pretrained on that folder.
HF_DIR = os.path.join(OUT, "hf_dir")
HF_DIR_TEMPLATES = {"default": "llama-3.1-8b-instruct", "tool_use": "hermes-2-pro-llama-3-8b-tool_use"}


def hf_dir_refs():
    from transformers import AutoTokenizer

    os.makedirs(HF_DIR, exist_ok=True)
    bos, eos = "<|begin_of_text|>", "<|eot_id|>"
    make_tokenizer(bos, eos).backend_tokenizer.save(os.path.join(HF_DIR, "tokenizer.json"))
    templates = []
    for name, file in HF_DIR_TEMPLATES.items():
        with open(os.path.join(OUT, "templates", file + ".jinja"), encoding="utf-8", newline="") as f:
            templates.append({"name": name, "template": f.read()})
    added = lambda t: {"__type": "AddedToken", "content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": added(bos),
        "eos_token": added(eos),
        "chat_template": templates,
        "model_max_length": 131072,
    }
    with open(os.path.join(HF_DIR, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    tok = AutoTokenizer.from_pretrained(HF_DIR)
    cases = []
    for conv, messages, tools, extra in CONVERSATIONS:
        if extra:
            continue
        for agp in (False, True):
            case = {"name": f"{conv}{'+gen' if agp else ''}", "messages": messages, "tools": tools, "add_generation_prompt": agp}
            try:
                case["expected"] = tok.apply_chat_template(
                    copy.deepcopy(messages), tools=copy.deepcopy(tools), add_generation_prompt=agp, tokenize=False
                )
            except Exception as e:
                case.update({"error_type": type(e).__name__, "error": str(e)})
            cases.append(case)
    return cases


def main():
    header = {
        "generator": "tools/make_chat_template_refs.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "now": REF_NOW.isoformat(),
    }
    with open(os.path.join(OUT, "models.json"), "w", encoding="utf-8") as f:
        json.dump({**header, "templates": model_refs()}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "hf_dir_refs.json"), "w", encoding="utf-8") as f:
        json.dump({**header, "cases": hf_dir_refs()}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "features.json"), "w", encoding="utf-8") as f:
        json.dump(
            {**header, "messages": FEATURE_MESSAGES, "context": FEATURE_CONTEXT, "cases": feature_refs()},
            f,
            ensure_ascii=False,
            indent=1,
        )
        f.write("\n")


if __name__ == "__main__":
    main()
