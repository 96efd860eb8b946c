"""Hugging Face formats through the command line against the `tokenizers` library, live: the
byte-level BPE of testdata/tokenizer/gpt2-small as tokenizer.json and as vocab.json + merges.txt
(both loaded by the library too), and the Llama 3 / Qwen2 style and tok512 tokenizer.json files.
The committed expected ids of every file are checked by hf_reference_test.cc."""
import os

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from tokenizer_cli_util import TESTDATA, corpus, detokenize, parallel_map, tokenize

HF = os.path.join(TESTDATA, "tokenizer")
TEXTS = corpus()[:70] + corpus()[-40:]


def library_from_vocab_merges(d):
    tok = Tokenizer(models.BPE.from_file(os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return tok


@pytest.mark.parametrize("form", ["json", "bpe"])
def test_gpt2_small_matches_library(form):
    d = os.path.join(HF, "gpt2-small", form)
    lib = Tokenizer.from_file(os.path.join(d, "tokenizer.json")) if form == "json" else library_from_vocab_merges(d)
    # The library recognizes special tokens in text; the CLI does not (no --parse-special), so
    # compare on texts without them.
    texts = [t for t in TEXTS if "<|" not in t]
    got = parallel_map(lambda t: tokenize(d, t), texts)
    for t, g in zip(texts, got):
        assert g == lib.encode(t, add_special_tokens=False).ids, t
    for t in texts[:30]:
        ids = lib.encode(t, add_special_tokens=False).ids
        assert detokenize(d, ids) == lib.decode(ids), t


@pytest.mark.parametrize("name", ["llama3-style", "qwen2-style", "tok512-legacy", "tok512-metaspace"])
def test_tokenizer_json_matches_library(name):
    d = os.path.join(HF, name)
    lib = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    texts = [t for t in TEXTS if "<" not in t][:60]
    got = parallel_map(lambda t: tokenize(d, t, bos=True), texts)
    for t, g in zip(texts, got):
        assert g == lib.encode(t, add_special_tokens=True).ids, t
