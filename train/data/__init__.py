"""Character corpora, their HDF5 token cache, and batching for truncated backpropagation through time.

>>> from minflux_train.data import load_corpus
>>> corpus = load_corpus("default", cache_dir=None)
>>> len(corpus.vocab) > 50 and len(corpus.split("train")) > 100_000
True
"""
from .batching import StreamBatcher, Window
from .cache import load_cached
from .corpora import CORPORA, SPLITS, Corpus, corpus_source, ptb_symbols, split_fractions
from .load import load_corpus
from .sources import DATASETS, DatasetNotFoundError
from .vocabulary import Vocabulary

__all__ = ["CORPORA", "DATASETS", "SPLITS", "Corpus", "DatasetNotFoundError", "StreamBatcher",
           "Vocabulary", "Window", "corpus_source", "load_cached", "load_corpus", "ptb_symbols",
           "split_fractions"]
