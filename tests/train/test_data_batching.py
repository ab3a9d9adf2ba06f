"""Truncated-BPTT batching: B contiguous streams, windows overlapping by one token."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minflux_train.data import StreamBatcher

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(2, 300), batch=st.integers(1, 12), seq=st.integers(1, 40))
def test_every_target_is_predicted_exactly_once(n, batch, seq):
    if n - 1 < batch:
        with pytest.raises(ValueError, match="cannot fill"):
            StreamBatcher(np.arange(n), batch, seq)
        return
    batcher = StreamBatcher(np.arange(n), batch, seq)
    windows = list(batcher)
    targets = np.concatenate([w.targets.ravel() for w in windows])
    assert sorted(targets.tolist()) == list(range(1, n))
    assert batcher.targets_per_epoch == n - 1
    for w in windows:
        assert np.array_equal(w.targets, w.inputs + 1)  # each input is the token just before its target
        assert w.steps <= seq and (w.streams == batch or w is windows[-1])
    for before, after in zip(windows, windows[1:]):  # overlap by one: last target -> next first input
        rows = after.streams
        assert np.array_equal(before.targets[:rows, -1], after.inputs[:, 0])
    assert [w.first for w in windows] == [True] + [False] * (len(windows) - 1)


@given(n=st.integers(2, 300), batch=st.integers(1, 12), seq=st.integers(1, 40))
def test_dropping_the_tail_loses_fewer_than_batch_targets_and_keeps_full_batches(n, batch, seq):
    if n - 1 < batch:
        return
    batcher = StreamBatcher(np.arange(n), batch, seq, drop_tail=True)
    targets = np.concatenate([w.targets.ravel() for w in batcher])
    assert len(set(targets.tolist())) == len(targets) == batcher.targets_per_epoch
    assert n - 1 - batch < len(targets) <= n - 1
    assert all(w.streams == batch for w in batcher)


def test_streams_are_contiguous_and_windows_are_addressable():
    tokens = np.arange(100, 121)  # 21 tokens, 20 targets, 4 streams of 5
    batcher = StreamBatcher(tokens, batch_size=4, seq_len=2)
    assert len(batcher) == 3
    w = batcher.window(1)
    assert w.inputs.tolist() == [[102, 103], [107, 108], [112, 113], [117, 118]]
    assert w.targets.tolist() == [[103, 104], [108, 109], [113, 114], [118, 119]]
    assert batcher.window(2).targets.tolist() == [[105], [110], [115], [120]]
    with pytest.raises(IndexError):
        batcher.window(3)
