#!/usr/bin/env python3
"""Generates the Hugging Face tokenizer test data under testdata/tokenizer/ (run by hand).

    .venv-ref/bin/python tools/make_tokenizer_testdata.py [--shared ../shared] [--models models]

There is no hub access, so the Hugging Face files are built here from vocabularies that are at
hand, with the `tokenizers` library (and transformers' converters), and the expected ids of a
corpus are what that library produces. Everything written is small (a few hundred KB in all):

  corpus.json                  the test strings: hand-written cases and seeded random strings
  gpt2-small/json/             byte-level BPE: GPT-2's first 4000 merges as tokenizer.json
  gpt2-small/bpe/              the same as vocab.json + merges.txt + tokenizer_config.json
  qwen2-style/bpe/             qwen2-style as vocab.json + merges.txt naming Qwen2Tokenizer (own expected.json)
  llama3-style/                that vocabulary with Llama 3's Split regex, ignore_merges, BOS
  qwen2-style/                 ... with Qwen2's regex and <|im_start|>-style special tokens
  deepseek-llm-style/          ... with DeepSeek LLM's chain of Split patterns and Digits
  gpt4o-style/                 ... with GPT-4o's regex (runs on Pagoda's ICU fallback)
  tok512-legacy/               stories260K's tok512.model as the BPE tokenizer.json transformers
                               writes for Llama (legacy: Prepend + Replace normalizer, byte fallback)
  tok512-metaspace/            the same, non-legacy (Metaspace pre-tokenizer and decoder)
  smollm2/expected.json        ids of models/SmolLM2-135M-Instruct.Q4_1.gguf's tokenizer, read by
                               transformers' GGUF loader, with SmolLM2's pre-tokenizer
                               (Digits(individual) + ByteLevel, as its tokenizer.json and
                               llama.cpp's "smollm" family); no tokenizer files are committed.

  pre_tokenizer_cases.json     pieces of small inputs under each pre-tokenizer type and option
                               (ByteLevel pieces are in the library's byte-level characters)

Each expected.json holds, for every corpus string, the ids without special tokens ("ids"), with
them ("ids_special") and the library's decode of "ids" ("decoded").
"""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "testdata", "tokenizer")

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
GPT4O_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                 r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                 r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK_LLM_PATTERNS = [
    r"[\r\n]",
    r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-""\u1f7d" r"ᾀ-ᾴᾶ-ᾼ""\u1fbe" r"ῂ-ῄῆ-ῌῐ-""\u1fd3" r"ῖ-""\u1fdb" r"ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ""\u2126" r"ℨ""\u212a" r"-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+$",
    r"[一-龥ࠀ-一가-퟿]+",
]

HAND_WRITTEN = [
    "", " ", "  ", "\t", "\n", "\n\n", "\r\n", " \n ", "Hello world", " Hello world", "Hello World!",
    "   leading and trailing   ", "a  b   c    d", "tabs\tand\tnewlines\nmixed \t\n  ",
    "I'm you're we've they'll she'd it's don't", "I'M YOU'RE WE'VE THEY'LL SHE'D IT'S DON'T",
    "'s 'S 'ſ 're 'Re 'RE 'll 'LL", "x'sy 'x' ''s", "  'hello' \"quoted\" `code`",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "int main() { printf(\"%d\\n\", 42); return 0; }", "if (a != b && c <= d) { x += y; }",
    "<html><body><p class=\"x\">Text</p></body></html>", "https://example.com/path?q=1&r=two#frag",
    "1 12 123 1234 12345 123456 1234567", "3.14159 2,718 1e-10 0x1F 007", "２０２４年 ٣٤٥ ²³ Ⅻ ⅻ ½",
    "Привет, как дела? Всё хорошо.", "Ελληνικά γράμματα και τόνοι", "日本語のテキストとカタカナ、ひらがな。",
    "中文文本，包括标点符号。我想在apple工作1314151天～", "한국어 텍스트와 띄어쓰기", "ภาษาไทยไม่มีช่องว่าง",
    "हिन्दी भाषा में पाठ", "العربية من اليمين إلى اليسار", "עברית גם כן", "Tiếng Việt có dấu: Cửa Việt",
    "naïve café résumé Führer Ångström", "e\u0301 a\u0308 combining marks", "🦙 🚀 😀😃😄 👍🏽",
    "👨‍👩‍👧‍👦 family 🏳️‍🌈 flag ❤️ heart", "emoji123🙂abc", "non\u00a0breaking\u2002spaces\u3000here",
    "line\u2028separator\u2029paragraph", "\u000b\u000c\u0085 odd whitespace", "zero\u200bwidth\u200djoiner",
    "!!!!!! ...... ?????? ------", "$100 + €50 = ¥? ±5% ©®™", "a.b,c;d:e!f?g", "(parens) [brackets] {braces}",
    "<|endoftext|>", "text<|endoftext|>more", "<|im_start|>user\nHi<|im_end|>", "<s>Hello</s>",
    "<|begin_of_text|>Hi<|eot_id|>", "Ÿ ÿ ĳ ǅ ǈ", "\u0300 leading combining", "🦙" * 20,
    "word " * 30, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    " " * 40 + "x", "\n" * 10 + "y", "Mixed English, русский, 中文, and emoji 🎉 in one line.",
]

# Characters the random strings are drawn from, grouped so every class is exercised.
ALPHABET = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " " * 12, "\t\n\r\u000b\u000c",
    "\u0085\u00a0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000", "'''sStTmMdDlLrRvVeEſK",
    "!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~", "¡¿«»—–…·•‘’“”„", "€£¥¢±×÷©®™°§¶", "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿĳœß",
    "\u0300\u0301\u0308\u0327\u064b\u093f", "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГД", "αβγδεζηθικλμνξοπρστυφχψω",
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年", "あいうえおかきくけこアイウエオカキクケコ", "가나다라마바사아자차카타파하",
    "กขคงจฉชซญฎ", "अआइईउऊकखगघ", "ابتثجحخدذرز", "٠١٢٣٤٥٦٧٨٩０１２３４５６７８９²³¹¼½¾ⅠⅡⅢⅻ",
    "😀😁😂🤣😃🦙🚀🎉👍🏽❤️✅\u200d\ufe0f", "\u200b\u200c\u200e\ufeff", "\u0378\u0380\U000e0001\ue000",
]


def random_strings(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(1, 40)
        s = []
        for _ in range(length):
            group = rng.choice(ALPHABET)
            s.append(rng.choice(group))
        out.append("".join(s))
    return out


def read_gguf_vocab(path):
    r = gguf.GGUFReader(path)
    f = r.fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.tokens"].data]
    merges = [bytes(f["tokenizer.ggml.merges"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.merges"].data]
    return tokens, merges


def small_gpt2(shared, num_merges):
    """GPT-2's 256 byte tokens and first `num_merges` merges, plus <|endoftext|>."""
    tokens, merges = read_gguf_vocab(os.path.join(shared, "tokenizers/vocab-vectors/ggml-vocab-gpt-2.gguf"))
    keep = tokens[: 256 + num_merges]
    vocab = {t: i for i, t in enumerate(keep)}
    pairs = []
    for m in merges[:num_merges]:
        a, b = m.split(" ", 1)
        assert a in vocab and b in vocab and a + b in vocab, m
        pairs.append((a, b))
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, pairs


def byte_level_tokenizer(vocab, pairs, pre, ignore_merges=False):
    tok = Tokenizer(models.BPE(vocab=dict(vocab), merges=list(pairs), ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    return tok


def expected(tok, corpus, source):
    ids = [tok.encode(s, add_special_tokens=False).ids for s in corpus]
    ids_special = [tok.encode(s, add_special_tokens=True).ids for s in corpus]
    decoded = [tok.decode(i, skip_special_tokens=False) for i in ids]
    return {"source": source, "ids": ids, "ids_special": ids_special, "decoded": decoded}


def write_json(path, obj, compact=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def save_tokenizer(tok, directory, config=None):
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"), pretty=False)
    if config is not None:
        write_json(os.path.join(directory, "tokenizer_config.json"), config)


def added_tokens_decoder(tokens):
    return {str(i): {"content": t, "special": True, "lstrip": False, "rstrip": False, "normalized": False,
                     "single_word": False} for t, i in tokens}


def make_gpt2_family(shared, corpus):
    vocab, pairs = small_gpt2(shared, 4000)
    eot = vocab["<|endoftext|>"]

    # gpt2-small: tokenizer.json, and vocab.json + merges.txt.
    tok = byte_level_tokenizer(vocab, pairs, pre_tokenizers.ByteLevel(add_prefix_space=False))
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    config = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
              "add_bos_token": False, "add_prefix_space": False,
              "added_tokens_decoder": added_tokens_decoder([("<|endoftext|>", eot)])}
    save_tokenizer(tok, os.path.join(OUT, "gpt2-small/json"), config)
    bpe_dir = os.path.join(OUT, "gpt2-small/bpe")
    os.makedirs(bpe_dir, exist_ok=True)
    write_json(os.path.join(bpe_dir, "vocab.json"), vocab, compact=True)
    with open(os.path.join(bpe_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in pairs:
            f.write(f"{a} {b}\n")
    write_json(os.path.join(bpe_dir, "tokenizer_config.json"), config)
    # The vocab.json + merges.txt form, loaded by the library the way GPT-2's files are.
    from_files = Tokenizer(models.BPE.from_file(os.path.join(bpe_dir, "vocab.json"), os.path.join(bpe_dir, "merges.txt")))
    from_files.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    from_files.decoder = decoders.ByteLevel()
    from_files.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    e_json = expected(tok, corpus, "gpt2-small/json")
    e_bpe = expected(from_files, corpus, "gpt2-small/bpe")
    assert e_json["ids"] == e_bpe["ids"], "tokenizer.json and vocab.json+merges.txt disagree"
    write_json(os.path.join(OUT, "gpt2-small/expected.json"), e_json, compact=True)

    # llama3-style: Llama 3's regex, ignore_merges, special tokens, BOS through TemplateProcessing.
    v3 = dict(vocab)
    del v3["<|endoftext|>"]
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
    for s in specials:
        v3[s] = len(v3)
    tok = byte_level_tokenizer(
        v3, pairs, pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated"),
                                            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ignore_merges=True)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", v3["<|begin_of_text|>"])])
    save_tokenizer(tok, os.path.join(OUT, "llama3-style"))
    write_json(os.path.join(OUT, "llama3-style/expected.json"), expected(tok, corpus, "llama3-style"), compact=True)

    # qwen2-style: Qwen2's regex; <|im_start|> etc.; no BOS.
    vq = dict(vocab)
    for s in ["<|im_start|>", "<|im_end|>"]:
        vq[s] = len(vq)
    tok = byte_level_tokenizer(
        vq, pairs, pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PATTERN), "isolated"),
                                            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    save_tokenizer(tok, os.path.join(OUT, "qwen2-style"),
                   {"eos_token": "<|im_end|>", "bos_token": None, "pad_token": "<|endoftext|>", "add_bos_token": False})
    write_json(os.path.join(OUT, "qwen2-style/expected.json"), expected(tok, corpus, "qwen2-style"), compact=True)

    # deepseek-llm-style: a chain of Split patterns (Pagoda's class-sequence engine) and Digits.
    steps = [pre_tokenizers.Split(Regex(p), "isolated") for p in DEEPSEEK_LLM_PATTERNS]
    steps += [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    tok = byte_level_tokenizer(vocab, pairs, pre_tokenizers.Sequence(steps))
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    save_tokenizer(tok, os.path.join(OUT, "deepseek-llm-style"))
    write_json(os.path.join(OUT, "deepseek-llm-style/expected.json"), expected(tok, corpus, "deepseek-llm-style"), compact=True)

    # gpt4o-style: a regex outside the hand-written and simple engines (ICU fallback), with a
    # prefix space added by ByteLevel.
    tok = byte_level_tokenizer(
        vocab, pairs, pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(GPT4O_PATTERN), "isolated"),
                                               pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False)]))
    save_tokenizer(tok, os.path.join(OUT, "gpt4o-style"))
    write_json(os.path.join(OUT, "gpt4o-style/expected.json"), expected(tok, corpus, "gpt4o-style"), compact=True)


def make_qwen2_vocab_merges(corpus):
    """qwen2-style/bpe: the qwen2-style vocabulary as a Qwen2 checkpoint without tokenizer.json ships it
    (vocab.json + merges.txt + tokenizer_config.json naming Qwen2Tokenizer). transformers' Qwen2Tokenizer
    normalizes to NFC and splits with Qwen2's regex before the byte-level BPE; the reference is that
    pipeline in the tokenizers library, over the same files."""
    src = os.path.join(OUT, "qwen2-style")
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    bpe_dir = os.path.join(src, "bpe")
    os.makedirs(bpe_dir, exist_ok=True)
    vocab = tj["model"]["vocab"]
    write_json(os.path.join(bpe_dir, "vocab.json"), vocab, compact=True)
    with open(os.path.join(bpe_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for m in tj["model"]["merges"]:
            a, b = m if isinstance(m, list) else m.split(" ")
            f.write(f"{a} {b}\n")
    specials = [t["content"] for t in tj["added_tokens"]]
    write_json(os.path.join(bpe_dir, "tokenizer_config.json"),
               {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "bos_token": None,
                "pad_token": "<|endoftext|>", "add_bos_token": False, "add_prefix_space": False,
                "added_tokens_decoder": added_tokens_decoder([(t["content"], t["id"]) for t in tj["added_tokens"]])})
    tok = Tokenizer(models.BPE.from_file(os.path.join(bpe_dir, "vocab.json"), os.path.join(bpe_dir, "merges.txt")))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PATTERN), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    write_json(os.path.join(bpe_dir, "expected.json"), expected(tok, corpus, "qwen2-style/bpe"), compact=True)


def make_tok512(shared, corpus):
    """tok512.model as the Hugging Face BPE files transformers writes for Llama tokenizers: vocab in
    piece order, merges from transformers' generate_merges, byte fallback, fuse_unk. The legacy
    form normalizes with Prepend + Replace and decodes with Replace/ByteFallback/Fuse/Strip; the
    non-legacy form uses a Metaspace pre-tokenizer (prepend_scheme "first") and decoder."""
    import sentencepiece as spm
    from transformers.convert_slow_tokenizer import generate_merges
    from tokenizers import normalizers
    sp = spm.SentencePieceProcessor(model_file=os.path.join(shared, "models/stories260K/tok512.model"))
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    specials = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)]
    merges = generate_merges(vocab, skip_tokens=set(specials))
    for name, legacy in [("tok512-legacy", True), ("tok512-metaspace", False)]:
        tok = Tokenizer(models.BPE(vocab=dict(vocab), merges=list(merges), unk_token="<unk>", fuse_unk=True,
                                   byte_fallback=True, dropout=None))
        if legacy:
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
            tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                             decoders.Strip(" ", 1, 0)])
        else:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
            tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="first"),
                                             decoders.ByteFallback(), decoders.Fuse()])
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", vocab["<s>"])])
        save_tokenizer(tok, os.path.join(OUT, name), {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                                      "add_bos_token": True, "add_eos_token": False, "legacy": legacy})
        write_json(os.path.join(OUT, name, "expected.json"), expected(tok, corpus, name), compact=True)


def make_smollm2(models_dir, corpus):
    from transformers import AutoTokenizer
    path = os.path.join(models_dir, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        print("skipping smollm2: no", path, file=sys.stderr)
        return
    hf = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    tok = hf.backend_tokenizer
    converted = [tok.encode(s, add_special_tokens=False).ids for s in corpus]
    # SmolLM2's tokenizer.json splits digits before the ByteLevel regex; transformers' GGUF
    # conversion leaves that step out.
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    e = expected(tok, corpus, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
    e["note"] = ("transformers GGUF conversion + Digits(individual_digits) pre-tokenizer; "
                 f"the conversion without Digits differs on {sum(a != b for a, b in zip(converted, e['ids']))} strings")
    write_json(os.path.join(OUT, "smollm2/expected.json"), e, compact=True)


def make_pre_tokenizer_cases():
    """Pieces that the library's pre-tokenizers produce for small inputs (pre_tokenize_str)."""
    inputs = ["xaayaz a", "axaayaz a", "a  b ", " hello  world", "a12b345 ６７", "a,,b$c!?", "", "   ", "aaa",
              "tab\tnew\nline  end ", "'s 'S 'ſx Hello's", "Ünïcödé wörds 123"]
    cases = []

    def add(kind, params, pre):
        for text in inputs:
            pieces = [p for p, _ in pre.pre_tokenize_str(text)]
            cases.append({"kind": kind, "params": params, "input": text, "pieces": pieces})

    for behavior in ["isolated", "removed", "merged_with_previous", "merged_with_next", "contiguous"]:
        for invert in [False, True]:
            for pattern, is_regex in [("a", False), (" ", False), (r"\s+", True), (r"a+", True)]:
                pat = Regex(pattern) if is_regex else pattern
                add("Split", {"pattern": pattern, "regex": is_regex, "behavior": behavior, "invert": invert},
                    pre_tokenizers.Split(pat, behavior, invert=invert))
    for individual in [False, True]:
        add("Digits", {"individual_digits": individual}, pre_tokenizers.Digits(individual_digits=individual))
    for behavior in ["isolated", "contiguous", "merged_with_next"]:
        add("Punctuation", {"behavior": behavior}, pre_tokenizers.Punctuation(behavior))
    add("WhitespaceSplit", {}, pre_tokenizers.WhitespaceSplit())
    for scheme in ["always", "first", "never"]:
        for split in [False, True]:
            add("Metaspace", {"prepend_scheme": scheme, "split": split},
                pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=split))
    for prefix in [False, True]:
        add("ByteLevel", {"add_prefix_space": prefix}, pre_tokenizers.ByteLevel(add_prefix_space=prefix, use_regex=True))
    write_json(os.path.join(OUT, "pre_tokenizer_cases.json"), cases, compact=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    args = ap.parse_args()
    corpus = HAND_WRITTEN + random_strings(300, seed=20240607)
    write_json(os.path.join(OUT, "corpus.json"), corpus)
    make_gpt2_family(args.shared, corpus)
    make_qwen2_vocab_merges(corpus)
    make_tok512(args.shared, corpus)
    make_smollm2(args.models, corpus)
    make_pre_tokenizer_cases()
    print("wrote", OUT)


if __name__ == "__main__":
    main()
