"""Checkpoints: round trips, resume equivalence, mismatches, corrupt files and atomic writes."""
import errno
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import minflux as mf
from minflux import optim
from minflux.files import FileWriteError
from minflux.io import CheckpointError, CheckpointMismatch

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


class Net(mf.nn.Module):
    """A small model with every kind of leaf: layers, a tied array, a non-trainable buffer, dropout."""

    def __init__(self, seed):
        r = np.random.default_rng(seed)
        self.embed = mf.nn.Embedding(7, 4, rng=r)
        self.cell = mf.nn.LSTMCell(4, 5, rng=r)
        self.norm = mf.nn.LayerNorm(5)
        self.drop = mf.nn.Dropout(0.2, rng=np.random.default_rng(seed + 100))
        self.out = mf.nn.Dense(5, 7, rng=r)
        self.lookup = {"a/b": self.out.b}           # tied to out.b, under a key with a slash
        self.seen = np.zeros(3, np.int64)           # an integer buffer

    def __call__(self, ids, state=None):
        h, state = self.cell(self.embed(ids), state)
        return self.out(self.drop(self.norm(h))), state


def loss_fn(model, ids, targets):
    logits, _ = model(ids)
    return mf.mean(mf.sum(logits * logits, axis=-1)) - mf.mean(mf.take(logits.reshape(-1), targets))


def batch(step):
    r = np.random.default_rng(1000 + step)
    return r.integers(0, 7, size=6), r.integers(0, 42, size=6)


def train(model, state, steps, start=0):
    for t in range(start, start + steps):
        ids, targets = batch(t)
        g = mf.gradient(loss_fn, model, ids, targets)[0]
        optim.update(state, model, g)


def rule():
    return optim.chain(optim.ClipNorm(0.5), optim.Adam(lr=0.01))


def arrays(tree):
    return [a for _, a in mf.tree.named_leaves(tree, trainable_only=False)]


def test_round_trip_is_bit_for_bit(tmp_path):
    model = Net(0)
    state = optim.setup(rule(), model)
    train(model, state, 3)
    optim.adjust(state, lr=0.003)
    optim.freeze(state.out)
    rng = np.random.default_rng(5)
    rng.random(3)
    path = mf.save(tmp_path / "c.h5", model=model, opt_state=state, step=3, rng=rng,
                   config={"hidden": 5, "layers": [1, 2], "name": "x", "lr": None},
                   carry=(np.ones((2, 5), np.float32), {"z": np.arange(4)}))
    fresh = Net(1)
    fresh_state = optim.setup(rule(), fresh)
    cell_W = fresh.cell.Wx
    meta = mf.load(path, model=fresh, opt_state=fresh_state)
    assert fresh.cell.Wx is cell_W                                      # filled in place
    assert fresh.lookup["a/b"] is fresh.out.b                           # ties survive
    for a, b in zip(arrays(model), arrays(fresh)):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    for (name, a), (_, b) in zip(optim.named_state_leaves(state), optim.named_state_leaves(fresh_state)):
        assert a.rule == b.rule and a.frozen == b.frozen
        for x, y in zip(mf.tree.leaves(a.state), mf.tree.leaves(b.state)):
            assert np.array_equal(x, y)
        assert a.state[1][2] == b.state[1][2] == 3                      # Adam's step counter
    assert fresh_state.out.W.rule.rules[1].lr == 0.003 and fresh_state.out.W.frozen
    assert meta["step"] == 3 and meta["config"] == {"hidden": 5, "layers": [1, 2], "name": "x", "lr": None}
    assert meta["rng"].random() == rng.random()                         # the generator's state
    carry = meta["carry"]
    assert isinstance(carry, tuple) and carry[0].dtype == np.float32 and carry[1]["z"].tolist() == [0, 1, 2, 3]
    ids = np.array([1, 2, 3])
    np.testing.assert_array_equal(model(ids)[0], fresh(ids)[0])         # same outputs, bit for bit


def test_resume_equivalence(tmp_path):
    k = 4
    straight = Net(0)
    straight_state = optim.setup(rule(), straight)
    train(straight, straight_state, 2 * k)

    first = Net(0)
    first_state = optim.setup(rule(), first)
    train(first, first_state, k)
    path = mf.save(tmp_path / "resume.h5", model=first, opt_state=first_state, step=k, dropout_rng=first.drop.rng)
    resumed = Net(3)
    resumed_state = optim.setup(rule(), resumed)
    meta = mf.load(path, model=resumed, opt_state=resumed_state)
    resumed.drop.rng = meta["dropout_rng"]
    train(resumed, resumed_state, k, start=meta["step"])
    for a, b in zip(arrays(straight), arrays(resumed)):
        assert np.array_equal(a, b)
    for a, b in zip(mf.tree.leaves(straight_state), mf.tree.leaves(resumed_state)):
        assert np.array_equal(a, b)


def test_mismatches_are_all_listed_and_nothing_changes(tmp_path):
    path = mf.save(tmp_path / "c.h5", model={"W": np.ones((2, 3), np.float32), "b": np.ones(3, np.float32),
                                             "old": np.ones(1, np.float32)})
    target = {"W": np.zeros((3, 3), np.float32), "b": np.zeros(3, np.float64), "new": np.zeros(1, np.float32)}
    with pytest.raises(CheckpointMismatch) as err:
        mf.load(path, model=target)
    text = str(err.value)
    assert "4 problems" in text
    assert "model array W: the checkpoint has float32[2, 3], the target float32[3, 3]" in text
    assert "model array b: the checkpoint has float32[3], the target float64[3]" in text
    assert "model array new: missing from the checkpoint" in text
    assert "model array old: in the checkpoint but not in the target" in text
    assert not target["W"].any() and not target["b"].any()


def test_optimiser_mismatches(tmp_path):
    model = {"W": np.ones(2)}
    path = mf.save(tmp_path / "c.h5", model=model, opt_state=optim.setup(optim.Adam(), model))
    target_state = optim.setup(optim.Momentum(), model)
    with pytest.raises(CheckpointMismatch, match="optimiser rule of W: the checkpoint has Adam, the target Momentum"):
        mf.load(path, opt_state=target_state)
    with pytest.raises(CheckpointMismatch, match="holds no optimiser state"):
        mf.load(mf.save(tmp_path / "m.h5", model=model), model=model, opt_state=target_state)


@pytest.mark.parametrize("damage", ["text", "truncated", "empty"])
def test_corrupt_files_give_a_clear_error_and_stay_untouched(tmp_path, damage):
    model = Net(0)
    path = tmp_path / "c.h5"
    mf.save(path, model=model, opt_state=optim.setup(optim.Adam(), model), step=1)
    raw = path.read_bytes()
    bad = {"text": b"this is not a checkpoint\n", "truncated": raw[: len(raw) // 2], "empty": b""}[damage]
    path.write_bytes(bad)
    target = Net(1)
    before = [a.copy() for a in arrays(target)]
    with pytest.raises(CheckpointError, match="not HDF5, is truncated or is damaged"):
        mf.load(path, model=target)
    assert path.read_bytes() == bad
    assert all(np.array_equal(a, b) for a, b in zip(before, arrays(target)))


def test_hdf5_that_is_not_a_checkpoint_and_newer_formats(tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = np.ones(2)
    with pytest.raises(CheckpointError, match="not a minflux checkpoint"):
        mf.load(other)
    newer = mf.save(tmp_path / "newer.h5", model={"x": np.ones(1)})
    with h5py.File(newer, "a") as f:
        f.attrs["format_version"] = 99
    with pytest.raises(CheckpointError, match="format version 99"):
        mf.load(newer, model={"x": np.ones(1)})
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        mf.load(tmp_path / "missing.h5")


def test_a_full_disk_leaves_the_old_checkpoint_intact_and_says_so(tmp_path, monkeypatch):
    path = tmp_path / "c.h5"
    mf.save(path, model=Net(0), step=1)
    old = path.read_bytes()
    real_write = os.write

    def disk_fills_up(fd, data):
        real_write(fd, bytes(data[:100]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_fills_up)
    with pytest.raises(FileWriteError) as caught:
        mf.save(path, model=Net(1), step=2)
    message = str(caught.value)
    assert f"cannot write {path}: no space left on the device" in message
    assert " free in " in message and "\n" not in message and ".tmp" not in message
    monkeypatch.undo()
    assert path.read_bytes() == old
    assert os.listdir(tmp_path) == ["c.h5"]                 # no temporary file left behind
    assert mf.load(path, model=Net(2))["step"] == 1


def test_every_single_bit_flip_is_refused_or_harmless(tmp_path):
    model, state = Net(0), optim.setup(rule(), Net(0))
    path = Path(mf.save(tmp_path / "c.h5", model=model, opt_state=state, step=3, note="x" * 40))
    raw = bytearray(path.read_bytes())
    reference = mf.io.read(path)
    flips = np.random.default_rng(0).choice(len(raw) * 8, size=120, replace=False)
    refused = 0
    for bit in flips:
        damaged = bytearray(raw)
        damaged[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(damaged))
        try:
            content = mf.io.read(path)
        except CheckpointError:
            refused += 1
            continue
        # a flip in bytes the format does not use (padding, free space) changes nothing
        assert content.meta == reference.meta
        for name, a in reference.model.items():
            assert np.array_equal(content.model[name], a), (bit, name)
        for name, leaf in reference.opt_state.items():
            assert content.opt_state[name]["rule"] == leaf["rule"], bit
            for x, y in zip(content.opt_state[name]["state"][1], leaf["state"][1]):
                assert np.array_equal(x, y), (bit, name)
    assert refused > 40


def test_a_damaged_checksum_says_damaged(tmp_path):
    path = Path(mf.save(tmp_path / "c.h5", model={"w": np.arange(4.0)}))
    raw = bytearray(path.read_bytes())
    offset = bytes(raw).index(np.arange(4.0).tobytes()) + 8   # inside the array's data
    raw[offset] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="is damaged: its contents do not match the checksum"):
        mf.load(path, model={"w": np.zeros(4)})


def test_checkpoints_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0o000)
    try:
        path = mf.save(tmp_path / "c.h5", model={"w": np.ones(1)})
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_a_checkpoint_another_process_holds_open_for_writing_still_reads(tmp_path):
    path = mf.save(tmp_path / "c.h5", model={"w": np.arange(3.0)}, step=5)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_OPEN, str(path)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        assert mf.io.read(path).meta == {"step": 5}
    finally:
        holder.kill()
        holder.wait()


HOLD_OPEN = """
import sys, time, h5py
f = h5py.File(sys.argv[1], "r+")
print("holding", flush=True)
time.sleep(60)
"""


def test_bad_metadata_is_rejected_before_writing(tmp_path):
    with pytest.raises(TypeError, match=r"metadata\['hook'\] is a function"):
        mf.save(tmp_path / "c.h5", model={"x": np.ones(1)}, hook=lambda: 0)
    with pytest.raises(TypeError, match="non-string key 1"):
        mf.save(tmp_path / "c.h5", table={1: 2})
    assert not os.listdir(tmp_path)


def test_read_without_a_target(tmp_path):
    path = mf.save(tmp_path / "c.h5", model={"w": np.arange(3.0)}, note="hi")
    content = mf.io.read(path)
    assert content.format_version == mf.io.FORMAT_VERSION and content.opt_state is None
    np.testing.assert_array_equal(content.model["w"], [0.0, 1.0, 2.0])
    assert mf.load(path) == {"note": "hi"}


@pytest.mark.gpu
def test_cupy_arrays_go_through_the_host_and_come_back_on_the_device(tmp_path):
    cupy = pytest.importorskip("cupy")
    if not mf.gpu_available():
        pytest.skip("no CUDA device")
    model = mf.to_device(Net(0), "gpu")
    state = optim.setup(rule(), model)
    path = mf.save(tmp_path / "c.h5", model=model, opt_state=state)
    fresh = mf.to_device(Net(1), "gpu")
    fresh_state = optim.setup(rule(), fresh)
    mf.load(path, model=fresh, opt_state=fresh_state)
    assert isinstance(fresh.cell.Wx, cupy.ndarray)
    assert isinstance(fresh_state.cell.Wx.state[1][0], cupy.ndarray)
    for a, b in zip(arrays(model), arrays(fresh)):
        assert np.array_equal(cupy.asnumpy(a), cupy.asnumpy(b))


def test_save_into_a_missing_folder_is_refused_naming_it(tmp_path):
    missing = tmp_path / "no" / "such"
    with pytest.raises(FileWriteError, match=f"the folder {missing} does not exist; nothing was written"):
        mf.save(missing / "c.h5", model={"w": np.ones(2)})
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileWriteError, match="is not a folder"):
        mf.save(tmp_path / "file" / "c.h5", model={"w": np.ones(2)})
