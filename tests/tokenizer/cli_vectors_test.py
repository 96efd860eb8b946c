"""`pagoda tokenize --no-bos --file` on every golden vector of ../shared/tokenizers/vocab-vectors,
`pagoda detokenize` on the reference ids, and the command line's error handling."""
import os

import gguf
import pytest

from tokenizer_cli_util import (BINARY, VECTOR_VOCABS, VOCABS, detokenize, load_vectors, parallel_map, run,
                                tokenize)


def vocab_path(name):
    return os.path.join(VOCABS, f"ggml-vocab-{name}.gguf")


def test_every_vector_file_is_tested():
    names = sorted(f[len("ggml-vocab-"):-len(".gguf.inp")] for f in os.listdir(VOCABS) if f.endswith(".gguf.inp"))
    assert names == sorted(VECTOR_VOCABS)


@pytest.mark.parametrize("name", VECTOR_VOCABS)
def test_tokenize_vectors(name):
    texts, expected = load_vectors(name)
    assert len(texts) == len(expected) >= 40
    got = parallel_map(lambda t: tokenize(vocab_path(name), t), texts)
    bad = [(i, texts[i], expected[i], got[i]) for i in range(len(texts)) if got[i] != expected[i]]
    assert not bad, f"{len(bad)} mismatches, first: {bad[0]}"


# One vocabulary per kind (byte-level, SentencePiece, with user-defined tokens); every vector's
# decode is also checked in C++ (vocab_vectors_test.cc).
@pytest.mark.parametrize("name", ["gpt-2", "llama-spm", "deepseek-coder"])
def test_detokenize_reference_ids(name):
    texts, expected = load_vectors(name)
    got = parallel_map(lambda ids: detokenize(vocab_path(name), ids), expected)
    bad = [(i, texts[i], got[i]) for i in range(len(texts)) if got[i] != texts[i]]
    assert not bad, f"{len(bad)} mismatches, first: {bad[0]}"


def test_bos_is_added_per_model_settings():
    # The reference for BOS and add_bos_token: the GGUF metadata, read with the gguf library.
    for name in ["llama-spm", "gpt-2"]:
        fields = gguf.GGUFReader(vocab_path(name)).fields
        add_bos = bool(fields["tokenizer.ggml.add_bos_token"].contents()) if "tokenizer.ggml.add_bos_token" in fields else False
        bos = int(fields["tokenizer.ggml.bos_token_id"].contents())
        plain = tokenize(vocab_path(name), "Hello world")
        with_bos = tokenize(vocab_path(name), "Hello world", bos=True)
        assert with_bos == ([bos] + plain if add_bos else plain), name


def test_text_option_and_file_bytes_are_kept():
    model = vocab_path("gpt-2")
    r = run(["tokenize", "--model", model, "--no-bos", "--text", "Hello world"])
    assert r.returncode == 0
    assert [int(x) for x in r.stdout.split()] == tokenize(model, "Hello world")
    # Trailing newline and spaces in the file are part of the text.
    assert tokenize(model, "Hello \n") != tokenize(model, "Hello")
    assert detokenize(model, tokenize(model, "Hello \n")) == "Hello \n"
    # Empty text: an empty line.
    r = run(["tokenize", "--model", model, "--no-bos", "--text", ""])
    assert r.returncode == 0 and r.stdout == b"\n"


@pytest.mark.parametrize("args,needle", [
    (["tokenize", "--model", "/nonexistent/model.gguf", "--text", "hi"], b"no such file"),
    (["tokenize", "--model", "MODEL", "--file", "/nonexistent/input.txt"], b"cannot open"),
    (["tokenize", "--model", "MODEL"], b"--text or --file"),
    (["tokenize", "--model", "MODEL", "--text", "a", "--file", "x"], b"excludes"),
    (["tokenize", "--text", "hi"], b"--model"),
    (["detokenize", "--model", "MODEL", "--ids", "1 2 x"], b"not an integer"),
    (["detokenize", "--model", "MODEL", "--ids", "99999999999"], b"out of range"),
    (["detokenize", "--model", "MODEL", "--ids", "50257"], b"outside the vocabulary"),
    (["detokenize", "--model", "MODEL", "--ids", "-1"], b"outside the vocabulary"),
    (["detokenize", "--model", os.path.join(os.path.dirname(os.path.abspath(__file__))), "--ids", "1"], b"error"),
])
def test_errors_are_messages_not_crashes(args, needle):
    args = [vocab_path("gpt-2") if a == "MODEL" else a for a in args]
    r = run(args)
    assert r.returncode > 0, (r.returncode, r.stderr)
    assert needle in r.stderr.lower() or needle in r.stderr, r.stderr


def test_garbage_model_file(tmp_path):
    for name, data in [("junk.gguf", b"GGUF\x03\x00\x00\x00" + os.urandom(64)), ("junk.model", os.urandom(256)),
                       ("empty.model", b"")]:
        p = tmp_path / name
        p.write_bytes(data)
        r = run(["tokenize", "--model", str(p), "--text", "hi"])
        assert r.returncode == 1 and r.stderr.startswith(b"error: "), (name, r.returncode, r.stderr)


def test_binary_exists():
    assert os.path.exists(BINARY), BINARY
