"""TensorBoard event files of a run (train.tensorboard = true), read back; without tensorboardX the
setting is a one-line error before training starts."""
import struct
import sys

import pytest

from minflux_train.__main__ import main
from minflux_train.runs import RunDir

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def read_events(folder):
    """Every event of the event files in ``folder``, in order, as TensorBoard reads them: a session
    restarted at step P (a purge event) hides the earlier events of steps >= P."""
    event_pb2 = pytest.importorskip("tensorboardX.proto.event_pb2")
    events = []
    for file in sorted(folder.glob("events.out.tfevents.*")):
        data, at = file.read_bytes(), 0
        while at < len(data):  # TFRecord: length, its CRC, the Event, its CRC
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            if event.HasField("session_log") and event.session_log.status == event.session_log.START:
                events = [e for e in events if e.step < event.step]
            events.append(event)
    return events


def scalars(events):
    """{tag: [(step, value), ...]} of the scalar summaries."""
    out = {}
    for event in events:
        for value in event.summary.value:
            if value.HasField("simple_value"):
                out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def texts(events):
    return [value.tensor.string_val[0].decode() for event in events for value in event.summary.value
            if value.HasField("tensor") and value.tensor.string_val]


def test_a_run_writes_loss_bpc_lr_boundary_rates_and_the_sample_as_tensorboard_events(cfg, tmp_path,
                                                                                    tiny_model):
    pytest.importorskip("tensorboardX")
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=12", "--set",
                 "train.tensorboard=true", "--set", "optim.schedule=cosine", "--quiet"]) == 0
    run = RunDir(out)
    records = run_records(run)
    board = scalars(read_events(out / "tensorboard"))
    train = [r for r in records if r["kind"] == "train"]
    for tag, key in (("train/loss", "loss"), ("train/bpc", "bpc"), ("train/lr", "lr")):
        assert [s for s, _ in board[tag]] == [r["step"] for r in train], tag
        assert [v for _, v in board[tag]] == pytest.approx([r[key] for r in train], rel=1e-6), tag
    assert [v for _, v in board["train/boundary_rate/layer_1"]] == pytest.approx(
        [r["boundary_rates"][0] for r in train], rel=1e-6)
    valid = [(r["step"], r["bpc"]) for r in records if r["kind"] == "valid"]
    end = records[-1]
    assert [s for s, _ in board["valid/bpc"]] == [s for s, _ in valid] + [12]
    assert [v for _, v in board["valid/bpc"]] == pytest.approx([v for _, v in valid] + [end["valid_bpc"]],
                                                               rel=1e-6)
    assert [s for s, _ in board["valid/boundary_rate/layer_1"]] == [5, 10, 12]
    assert texts(read_events(out / "tensorboard")) == [run.sample.read_text()]
    assert "train/grad_norm" not in board  # the step keeps the norm on the device (see train.board)


def run_records(run):
    import json

    return [json.loads(line) for line in run.metrics.read_text().splitlines()]


def test_a_resumed_run_has_one_point_per_step_in_each_curve(cfg, tmp_path, tiny_model, interrupt):
    pytest.importorskip("tensorboardX")
    out = tmp_path / "run"
    interrupt.kill_at(11)  # logged steps 10 (after the checkpoint of step 9), then killed
    args = ["--set", "train.max_steps=14", "--set", "train.tensorboard=true", "--quiet"]
    with pytest.raises(SystemExit):
        main(["--config", str(cfg), "--out", str(out), *args])
    interrupt.stop()
    assert main(["--out", str(out), "--resume", *args]) == 0
    board = scalars(read_events(out / "tensorboard"))
    assert [s for s, _ in board["train/bpc"]] == [2, 4, 6, 8, 10, 12, 14]
    train = [r for r in run_records(RunDir(out)) if r["kind"] == "train"]
    assert [v for _, v in board["train/bpc"]] == pytest.approx([r["bpc"] for r in train], rel=1e-6)


def test_tensorboard_without_tensorboardx_is_one_line_before_training(cfg, tmp_path, tiny_model,
                                                                     monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import tensorboardX raises ImportError
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.tensorboard=true"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("error: train.tensorboard = true needs the tensorboardX package, which is not installed: "
                   "pip install 'minflux[tensorboard]' (or pip install tensorboardX), or set "
                   "train.tensorboard = false")
    assert not out.exists()


def test_tensorboard_is_off_by_default(cfg, tmp_path, tiny_model):
    assert main(["--config", str(cfg), "--out", str(tmp_path / "run"), "--set", "train.max_steps=3",
                 "--quiet"]) == 0
    assert not (tmp_path / "run" / "tensorboard").exists()
