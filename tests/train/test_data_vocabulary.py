import numpy as np
import pytest

from minflux_train.data import Vocabulary

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def test_chars_round_trip_including_non_ascii():
    text = "naïve ☃ text\n"
    vocab = Vocabulary.from_text(text)
    assert vocab.symbols == tuple(sorted(set(text)))
    tokens = vocab.encode(text)
    assert tokens.dtype == np.uint8
    assert [vocab.symbols[t] for t in tokens] == list(text)
    assert vocab.decode(tokens) == text


def test_bytes_round_trip_and_invalid_utf8_is_replaced_on_decode():
    data = "é!".encode()
    vocab = Vocabulary.from_bytes(data)
    assert vocab.symbols == (0x21, 0xA9, 0xC3)
    assert vocab.encode(data).tolist() == [2, 1, 0]
    assert vocab.decode([2, 1]) == "é" and vocab.decode([1]) == "\ufffd"


def test_unknown_symbol_is_named():
    with pytest.raises(ValueError, match=r"'z' is not in the vocabulary \(2 symbols: 'a', 'b'\)"):
        Vocabulary.from_text("ab").encode("abz")


def test_large_vocabulary_uses_a_wider_dtype_and_json_round_trips():
    text = "".join(chr(0x4E00 + i) for i in range(300))
    vocab = Vocabulary.from_text(text)
    assert vocab.token_dtype == np.uint16
    assert vocab.encode(text).tolist() == list(range(300))
    assert Vocabulary.from_json(vocab.to_json()) == vocab
