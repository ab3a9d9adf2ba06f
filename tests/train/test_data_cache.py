"""The HDF5 token cache: hit, stale, corrupt, and atomic writes."""
import os

import h5py
import numpy as np
import pytest

import minflux_train.data.cache as cache
from minflux_train.data import load_corpus

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("the quick brown fox jumps over the lazy dog\n" * 20)
    return path


def load(path, cache_dir):
    return load_corpus("text", str(path), cache_dir=cache_dir)


def same_tokens(a, b):
    return all(np.array_equal(a.splits[s], b.splits[s]) for s in ("train", "valid", "test"))


def test_second_load_is_a_hit_and_never_rebuilds(text_file, tmp_path, monkeypatch):
    first = load(text_file, tmp_path / "cache")
    assert first.cache_status == "missing" and first.cache_file.is_file()
    monkeypatch.setattr("minflux_train.data.corpora.TextCorpus.build",
                        lambda self, files: pytest.fail("a valid cache must not be rebuilt"))
    second = load(text_file, tmp_path / "cache")
    assert second.cache_status == "hit" and same_tokens(first, second)
    assert second.vocab == first.vocab


def test_changed_source_makes_the_cache_stale(text_file, tmp_path):
    load(text_file, tmp_path / "cache")
    stat = os.stat(text_file)
    text_file.write_text(text_file.read_text().replace("fox", "cat"))  # same size
    os.utime(text_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same modification time too
    second = load(text_file, tmp_path / "cache")
    assert second.cache_status == "stale"
    assert "c" in second.vocab.symbols and "cat" in second.vocab.decode(second.split("train"))
    assert load(text_file, tmp_path / "cache").cache_status == "hit"


def test_touched_source_is_stale_too(text_file, tmp_path):
    load(text_file, tmp_path / "cache")
    os.utime(text_file, ns=(1, 1))
    assert load(text_file, tmp_path / "cache").cache_status == "stale"


def test_truncated_cache_is_rebuilt(text_file, tmp_path):
    first = load(text_file, tmp_path / "cache")
    data = first.cache_file.read_bytes()
    first.cache_file.write_bytes(data[: len(data) // 2])
    second = load(text_file, tmp_path / "cache")
    assert second.cache_status.startswith("corrupt") and same_tokens(first, second)
    assert load(text_file, tmp_path / "cache").cache_status == "hit"


def test_garbage_cache_is_rebuilt(text_file, tmp_path):
    first = load(text_file, tmp_path / "cache")
    first.cache_file.write_bytes(b"not an HDF5 file at all")
    second = load(text_file, tmp_path / "cache")
    assert second.cache_status.startswith("corrupt") and same_tokens(first, second)


def test_tokens_altered_inside_a_valid_hdf5_file_fail_the_checksum(text_file, tmp_path):
    first = load(text_file, tmp_path / "cache")
    with h5py.File(first.cache_file, "r+") as f:
        f["tokens"]["train"][0] = (f["tokens"]["train"][0] + 1) % len(first.vocab)
    second = load(text_file, tmp_path / "cache")
    assert "checksum" in second.cache_status and same_tokens(first, second)


def test_a_failed_write_leaves_the_previous_cache_and_no_temporary_file(text_file, tmp_path, monkeypatch):
    first = load(text_file, tmp_path / "cache")
    before = first.cache_file.read_bytes()
    text_file.write_text("different text entirely\n" * 10)

    def broken_create_dataset(self, *args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(h5py.Group, "create_dataset", broken_create_dataset)
    second = load(text_file, tmp_path / "cache")  # builds, fails to cache, still returns the data
    assert second.cache_status == "stale" and "d" in second.vocab.symbols
    assert first.cache_file.read_bytes() == before
    assert sorted(p.name for p in first.cache_file.parent.iterdir()) == [first.cache_file.name]


def test_cache_writes_go_through_a_temporary_file(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace
    monkeypatch.setattr(cache.os, "replace", lambda a, b: (seen.append((str(a), str(b))), real_replace(a, b)))
    target = tmp_path / "c.h5"
    cache.write_cache(target, {"k": 1}, cache.Vocabulary.from_text("ab"), {"train": np.array([0, 1], np.uint8)})
    assert seen == [(str(target) + f".tmp{os.getpid()}", str(target))]
    assert cache.read_cache(target, {"k": 1})[1] == "hit" and cache.read_cache(target, {"k": 2})[1] == "stale"


def test_the_cache_goes_under_the_cache_root_not_the_working_directory(text_file, tmp_path, monkeypatch):
    from minflux_train.config import load_config
    from minflux_train.runs import corpus_for

    monkeypatch.setenv("MINFLUX_CACHE_DIR", str(tmp_path / "root"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    cfg = load_config(None, ["data.corpus=text", f"data.path={str(text_file)!r}"])
    corpus = corpus_for(cfg)
    assert corpus.cache_status == "missing" and corpus.cache_file.is_file()
    assert corpus.cache_file.parent == tmp_path / "root" / "datasets"
    assert oct((tmp_path / "root" / "datasets").stat().st_mode & 0o777) == "0o700"
    assert list(work.iterdir()) == []
    assert corpus_for(cfg).cache_status == "hit"
    assert corpus_for(load_config(None, ["data.corpus=text", f"data.path={str(text_file)!r}",
                                         "data.cache=false"])).cache_status == "disabled"
    elsewhere = corpus_for(load_config(None, ["data.corpus=text", f"data.path={str(text_file)!r}",
                                              f"data.cache_dir={str(tmp_path / 'mine')!r}"]))
    assert elsewhere.cache_file.parent == tmp_path / "mine"
