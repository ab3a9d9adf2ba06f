"""Corpus loaders on small files written in each real format, and the missing-file errors."""
import zipfile
from pathlib import Path

import numpy as np
import pytest

from minflux_train.data import DatasetNotFoundError, load_corpus, ptb_symbols

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

REAL_PTB = Path(__file__).resolve().parents[3] / "shared" / "data" / "ptb-char"


def write_ptb(folder: Path, lines_per_split: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, sentences in lines_per_split.items():
        text = "".join(" " + " ".join("_".join(s.split(" "))) + " \n" for s in sentences)
        (folder / f"ptb.char.{split}.txt").write_text(text)
    return folder


def test_ptb_symbols_turn_line_ends_into_end_of_line_symbols():
    assert ptb_symbols(" a _ c a t \n t h e _ N \n") == "a_cat\nthe_N\n"
    assert ptb_symbols("a b\r\n\nc") == "ab\n\nc\n"  # an empty line is still one line end


def test_ptb_symbols_rejects_words_that_are_not_single_characters():
    with pytest.raises(ValueError, match=r"f\.txt:2: 'ab' is not a single character"):
        ptb_symbols("a\nab c\n", "f.txt")


def test_ptb_loader_on_small_files(tmp_path):
    folder = write_ptb(tmp_path / "ptb", {"train": ["the cat sat", "a dog"], "valid": ["the dog"],
                                          "test": ["a cat ran x"]})
    corpus = load_corpus("ptb", str(folder), cache_dir=None)
    assert corpus.vocab.symbols == tuple(sorted(set("thecatsatadog_rnx\n")))
    assert corpus.vocab.decode(corpus.split("train")) == "the_cat_sat\na_dog\n"
    assert corpus.vocab.decode(corpus.split("valid")) == "the_dog\n"
    assert corpus.vocab.decode(corpus.split("test")) == "a_cat_ran_x\n"


@pytest.mark.skipif(not (REAL_PTB / "ptb.char.valid.txt").is_file(), reason="real PTB files absent")
def test_ptb_loader_on_the_real_files(tmp_path):
    folder = tmp_path / "ptb"
    folder.mkdir()
    for split, source in [("train", "valid"), ("valid", "valid"), ("test", "test")]:
        (folder / f"ptb.char.{split}.txt").symlink_to(REAL_PTB / f"ptb.char.{source}.txt")
    corpus = load_corpus("ptb", str(folder), cache_dir=None)
    assert len(corpus.vocab) == 50  # 49 characters of the standard character set + end of line
    valid_text = (REAL_PTB / "ptb.char.valid.txt").read_text()
    valid = corpus.vocab.decode(corpus.split("valid"))
    assert valid.count("\n") == valid_text.count("\n") == 3370
    assert len(valid) == sum(len(line.split()) + 1 for line in valid_text.split("\n")[:3370])
    assert " " not in corpus.vocab.symbols and "_" in corpus.vocab.symbols
    assert valid.startswith("consumers_may_want_to_move_their_telephones")


def text8_like(n: int) -> str:
    words = "anarchism originated as a term of abuse first used against early working class radicals"
    text = (words + " ") * (n // (len(words) + 1) + 1)
    return text[:n]


def test_text8_plain_and_zipped_split_90_5_5(tmp_path):
    text = text8_like(2000)
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "text8").write_text(text)
    (tmp_path / "zipped").mkdir()
    with zipfile.ZipFile(tmp_path / "zipped" / "text8.zip", "w") as z:
        z.writestr("text8", text)
    plain = load_corpus("text8", str(tmp_path / "plain"), cache_dir=None)
    zipped = load_corpus("text8", str(tmp_path / "zipped"), cache_dir=None)
    assert [len(plain.split(s)) for s in ("train", "valid", "test")] == [1800, 100, 100]
    assert len(plain.vocab) == len(set(text)) and plain.vocab.kind == "chars"
    for s in ("train", "valid", "test"):
        assert np.array_equal(plain.split(s), zipped.split(s))
    assert plain.vocab.decode(np.concatenate([plain.split(s) for s in ("train", "valid", "test")])) == text


def test_enwik8_is_bytes_plain_or_zipped(tmp_path):
    data = ("<page><title>Zürich</title><text>naïve café — ok</text></page>\n" * 40).encode()
    (tmp_path / "enwik8").write_bytes(data)
    with zipfile.ZipFile(tmp_path / "enwik8.zip", "w") as z:
        z.writestr("enwik8", data)
    plain = load_corpus("enwik8", str(tmp_path / "enwik8"), cache_dir=None)
    zipped = load_corpus("enwik8", str(tmp_path / "enwik8.zip"), cache_dir=None)
    assert plain.vocab.kind == "bytes" and len(plain.vocab) == len(set(data))
    whole = np.concatenate([plain.split(s) for s in ("train", "valid", "test")])
    assert bytes(plain.vocab.symbols[t] for t in whole) == data
    assert len(plain.split("train")) == int(0.9 * len(data))
    assert np.array_equal(whole, np.concatenate([zipped.split(s) for s in ("train", "valid", "test")]))


def test_text_file_and_folder_as_chars_or_bytes(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.txt").write_text("second file é\n")
    (tmp_path / "docs" / "a.txt").write_text("first file\n")
    (tmp_path / "docs" / ".hidden").write_text("never read")
    chars = load_corpus("text", str(tmp_path / "docs"), split=(0.6, 0.4, 0.0), cache_dir=None)
    joined = "first file\nsecond file é\n"
    assert chars.vocab.decode(np.concatenate([chars.split("train"), chars.split("valid")])) == joined
    assert len(chars.splits["test"]) == 0
    as_bytes = load_corpus("text", str(tmp_path / "docs" / "b.txt"), encoding="bytes",
                           split=(0.5, 0.25, 0.25), cache_dir=None)
    assert as_bytes.vocab.kind == "bytes" and 0xC3 in as_bytes.vocab.symbols  # first byte of é


@pytest.mark.parametrize("n, fractions, sizes", [(15, (0.9, 0.1, 0.0), [13, 2, 0]),
                                                (19, (0.9, 0.1, 0.0), [17, 2, 0]),
                                                (25, (0.9, 0.05, 0.05), [22, 1, 2])])
def test_text_split_cuts_at_int_of_the_fraction(tmp_path, n, fractions, sizes):
    """The conventional ``data[:int(0.9 * len(data))]``: 0.9 * 15 = 13.5 gives 13 (``round`` gave 14),
    and the valid split ends at ``int((0.9 + 0.05) * 25)`` = 23."""
    (tmp_path / "t.txt").write_text(("ab" * n)[:n])
    corpus = load_corpus("text", str(tmp_path / "t.txt"), split=fractions, cache_dir=None)
    assert [len(corpus.splits[s]) for s in ("train", "valid", "test")] == sizes


def test_text_that_is_not_utf8_names_the_file_and_the_fix(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.txt is not UTF-8 text.*offset 3.*encoding = \"bytes\""):
        load_corpus("text", str(tmp_path / "latin1.txt"), cache_dir=None)


def test_bad_split_fractions_are_an_error(tmp_path):
    (tmp_path / "t.txt").write_text("abcdef")
    with pytest.raises(ValueError, match="sum to 1"):
        load_corpus("text", str(tmp_path / "t.txt"), split=(0.5, 0.1, 0.1), cache_dir=None)


def test_default_corpus_is_pythons_documentation_topics():
    import pydoc_data.topics as topics

    corpus = load_corpus("default", cache_dir=None)
    total = sum(len(corpus.splits[s]) for s in ("train", "valid", "test"))
    expected = "\n\n".join(topics.topics[k] for k in sorted(topics.topics))
    assert total == len(expected) > 300_000
    assert corpus.vocab.decode(corpus.split("valid")[:200]) == expected[len(corpus.split("train")):][:200]


@pytest.mark.parametrize("corpus, names, url", [
    ("ptb", ["ptb.char.train.txt", "ptb.char.valid.txt", "ptb.char.test.txt"], "simple-examples.tgz"),
    ("text8", ["text8", "text8.zip"], "http://mattmahoney.net/dc/text8.zip"),
    ("enwik8", ["enwik8", "enwik8.zip"], "http://mattmahoney.net/dc/enwik8.zip"),
])
def test_missing_dataset_names_file_place_and_source(tmp_path, corpus, names, url):
    with pytest.raises(DatasetNotFoundError) as info:
        load_corpus(corpus, str(tmp_path / "nowhere"), cache_dir=None)
    message = str(info.value)
    for name in names:
        assert str(tmp_path / "nowhere" / name) in message
    assert url in message and "MB" in message and "data.path" in message


def test_missing_text_file_is_named(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="missing.txt"):
        load_corpus("text", str(tmp_path / "missing.txt"), cache_dir=None)


def test_unknown_corpus_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown corpus 'wiki'.*ptb.*text8"):
        load_corpus("wiki", cache_dir=None)
