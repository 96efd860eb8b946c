"""SentencePiece models through `pagoda tokenize` / `detokenize` against the sentencepiece library,
run side by side on a varied corpus (testdata/tokenizer/corpus.json: whitespace runs, code, many
scripts, emoji, numbers, the empty string, leading/trailing spaces, random strings).

  * Llama 2's tokenizer.model (../shared/tokenizers/llama2)
  * stories260K's tok512.model (which removes extra whitespace, as SentencePiece does)
  * stories260K.gguf, converted from tok512.model: "Once upon a time" with BOS
"""
import os

import pytest
import sentencepiece as spm

from tokenizer_cli_util import SHARED, corpus, detokenize, parallel_map, tokenize

LLAMA2 = os.path.join(SHARED, "tokenizers", "llama2", "tokenizer.model")
TOK512 = os.path.join(SHARED, "models", "stories260K", "tok512.model")
STORIES_GGUF = os.path.join(SHARED, "models", "stories260K", "stories260K.gguf")

# The hand-written part of the corpus and a slice of its random strings (each string is one
# process launch per model).
TEXTS = corpus()[:180]


@pytest.mark.parametrize("model", [LLAMA2, TOK512], ids=["llama2", "tok512"])
def test_encode_matches_sentencepiece(model):
    sp = spm.SentencePieceProcessor(model_file=model)
    expected = [sp.encode(t) for t in TEXTS]
    got = parallel_map(lambda t: tokenize(model, t), TEXTS)
    bad = [(i, TEXTS[i], expected[i], got[i]) for i in range(len(TEXTS)) if got[i] != expected[i]]
    assert not bad, f"{len(bad)} of {len(TEXTS)} differ, first: {bad[0]}"


@pytest.mark.parametrize("model", [LLAMA2, TOK512], ids=["llama2", "tok512"])
def test_decode_matches_sentencepiece(model):
    sp = spm.SentencePieceProcessor(model_file=model)
    ids = [sp.encode(t) for t in TEXTS[:90]]
    got = parallel_map(lambda i: detokenize(model, i, skip_special=True), ids)
    bad = [(k, ids[k], sp.decode(ids[k]), got[k]) for k in range(len(ids)) if got[k] != sp.decode(ids[k])]
    assert not bad, f"{len(bad)} differ, first: {bad[0]}"


def test_bos_matches_sentencepiece():
    for model in [LLAMA2, TOK512]:
        sp = spm.SentencePieceProcessor(model_file=model)
        assert tokenize(model, "Once upon a time", bos=True) == sp.encode("Once upon a time", add_bos=True)


def test_stories260k_gguf_once_upon_a_time():
    sp = spm.SentencePieceProcessor(model_file=TOK512)
    want = sp.encode("Once upon a time", add_bos=True)
    assert tokenize(STORIES_GGUF, "Once upon a time", bos=True) == want
    assert detokenize(STORIES_GGUF, want, skip_special=True) == "Once upon a time"


def test_stories260k_gguf_agrees_where_spacing_is_plain():
    # The GGUF conversion carries no remove_extra_whitespaces flag (llama.cpp keeps spaces), so
    # compare on texts without leading, trailing or doubled spaces.
    sp = spm.SentencePieceProcessor(model_file=TOK512)
    texts = [t for t in TEXTS if t and t == t.strip(" ") and "  " not in t][:60]
    got = parallel_map(lambda t: tokenize(STORIES_GGUF, t), texts)
    for t, g in zip(texts, got):
        assert g == sp.encode(t), t
