"""Reliability: health checks, bad input, interruption and safe loading. Each failure must give a clear
message naming the bad value and the fix, a non-zero exit code, and lose nothing already saved."""

from __future__ import annotations

import os
import signal
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import pytorch_lightning
import torch
from pytorch_lightning.callbacks import ModelCheckpoint as StandaloneModelCheckpoint
from support import (
    FAST,
    RunCLI,
    kept_environ,
    main,
    project_cli,
    run_dirs,
    run_main,
    run_module,
    start_module,
    wait_for_file,
)

from runwright.base import seeded_split
from runwright.callbacks import CHECKS, HealthCheck
from runwright.checkpointing import AtomicCheckpointIO
from runwright.errors import CheckpointError, ConfigError, HealthCheckError
from runwright.parser import MODULE_PATH


# ---------------------------------------------------------------------------------- health checks
@pytest.mark.parametrize(
    "args, check, named",
    [
        (["--model.backbone=helpers.HiddenListBackbone"], "hidden_modules", "backbone.blocks[0] (Conv2d)"),
        (["--model.backbone=helpers.DetachedBackbone"], "missing_grads", "backbone.stem.weight"),
        (["--data=helpers.NaNInputImages"], "input_finite", "NaN"),
        (["--data=helpers.FewerClassesImages"], "label_range", "outside [0, 3)"),
        (["--data=helpers.ColumnLabelImages"], "label_shape", "shape [16, 1]"),
        (["--model=helpers.GradInValidationClassifier"], "eval_no_grad", "output['logits']"),
    ],
)
def test_health_check_names_the_broken_thing(
    run_cli: RunCLI, args: list[str], check: str, named: str
) -> None:
    with pytest.raises(HealthCheckError, match=rf"'{check}' failed") as caught:
        run_cli("fit", *args)
    assert named in str(caught.value)
    assert f"--health.disable=[{check}]" in str(caught.value)


def test_a_disabled_check_lets_training_run(run_cli: RunCLI) -> None:
    cli = run_cli("fit", "--model.backbone=helpers.DetachedBackbone", "--health.disable=[missing_grads]")
    assert cli.trainer.state.finished
    with pytest.raises(ConfigError, match="unknown check"):
        HealthCheck(disable=["no_such_check"])
    assert len(CHECKS) == 7


def test_non_finite_loss_stops_at_once_and_keeps_the_last_good_checkpoint(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(
            [
                "fit",
                *FAST,
                "--model=helpers.NaNLossClassifier",
                "--model.nan_at_step=3",
                "--trainer.max_epochs=3",
            ]
        )
    assert caught.value.code == 1
    err = capsys.readouterr().err
    assert "health check 'loss_finite' failed" in err and "nan at global step 3" in err
    assert (
        "LR then" in err and "--model.lr_scheduler.init_args.warmup_steps" in err and "Traceback" not in err
    )
    (run,) = run_dirs(workdir / "logs")
    assert f"the last good checkpoint is {run.resolve() / 'checkpoints' / 'last.ckpt'}." in err
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 2 and last["epoch"] == 0, "the last good checkpoint (end of epoch 0) stays"
    assert all(torch.isfinite(t).all() for t in last["state_dict"].values() if t.is_floating_point())


def test_input_check_ignores_nan_padding_behind_a_mask_but_not_real_nan() -> None:
    check, trainer = HealthCheck(disable=["label_range", "label_shape"]), SimpleNamespace(training=True)
    padded = torch.nn.utils.rnn.pad_sequence([torch.ones(3, 1), torch.ones(1, 1)], True, float("nan"))
    lengths = torch.tensor([3, 1])
    mask = torch.arange(3) < lengths.unsqueeze(1)  # True at real data
    check.on_train_batch_start(trainer, torch.nn.Module(), (padded, mask, lengths, torch.zeros(2)), 0)
    padded[0, 1, 0] = float("nan")  # a NaN inside the real data
    with pytest.raises(HealthCheckError, match="1 NaN and 0 Inf values outside the padding mask"):
        check.on_train_batch_start(trainer, torch.nn.Module(), (padded, mask, lengths, torch.zeros(2)), 1)


# ---------------------------------------------------------------------------------- bad config
class TutorialModule(pytorch_lightning.LightningModule):
    """A model as older tutorials write one (``import pytorch_lightning as pl``): a subclass of the
    ``pytorch_lightning`` package's LightningModule, which is not ``lightning.pytorch``'s."""


class TutorialData(pytorch_lightning.LightningDataModule):
    """A DataModule as older tutorials write one."""


class TutorialCheckpoint(StandaloneModelCheckpoint):
    """A callback built on ``pytorch_lightning``'s ModelCheckpoint."""


BAD_FILES = {
    "bad_key.yaml": "trainer:\n  max_epohcs: 3\n",
    "bad_class.yaml": "model:\n  class_path: fixture_task.TinyClasifier\n",
    "bad_short_class.yaml": "model:\n  class_path: TinyClasifier\n",
    "bad_argument.yaml": "model:\n  init_args:\n    lr_scheduler_intervl: step\n",
    "tutorial_module.yaml": "model:\n  class_path: TutorialModule\n",
    "bad_callback.yaml": "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks."
    "EarlyStopping\n      init_args:\n        monitr: val/loss\n",
}


MEAN, TINY, TINY_CNN, INTERVAL = (
    "; did you mean `%s`?",
    "fixture_task.TinyC",
    "fixture_task.TinyCNN",
    "lr_scheduler_interval",
)


def standalone(path: str, base: str, at: str = "") -> str:
    """The line for ``path``, a class built on ``pytorch_lightning.<base>`` (``callbacks.ModelCheckpoint``),
    given where a ``lightning.pytorch`` class is needed (``at``: the file it is in)."""
    module, _, name = f"lightning.pytorch.{base}".rpartition(".")
    return (
        f"`{path}`{at} is built on pytorch_lightning.{base}, which is not lightning.pytorch.{base} (another "
        f"package's copy of it): import `from {module} import {name}` in its module, not pytorch_lightning"
    )


#: Bad configs (arguments of ``fit``) and the one ``error:`` line each gives (``None``: jsonargparse's own
#: message, naming the bad value).
BAD_CONFIGS: list[tuple[list[str], str | None]] = [
    # a misspelt key or class name: the closest valid name, and the file it is in
    (
        ["--trainer.max_epohcs=3"],
        "unrecognized argument `--trainer.max_epohcs`" + MEAN % "--trainer.max_epochs",
    ),
    (
        ["--trainer.max_epoch=3"],
        "unrecognized argument `--trainer.max_epoch`" + MEAN % "--trainer.max_epochs",
    ),
    (
        ["-c", "bad_key.yaml"],
        "unknown key `trainer.max_epohcs` (in bad_key.yaml)" + MEAN % "trainer.max_epochs",
    ),
    (["--model.backbone=fixture_task.TinyCN"], "`fixture_task.TinyCN` does not exist" + MEAN % TINY_CNN),
    (
        ["-c", "bad_class.yaml"],
        f"`{TINY}lasifier` does not exist (in bad_class.yaml)" + MEAN % f"{TINY}lassifier",
    ),
    (  # a short class name: the closest of the imported subclasses of the argument's type
        ["--model=TinyClasifier"],
        "no LightningModule subclass is named `TinyClasifier`" + MEAN % "TinyClassifier",
    ),
    (
        ["-c", "bad_short_class.yaml"],
        "no LightningModule subclass is named `TinyClasifier` (in bad_short_class.yaml)"
        + MEAN % "TinyClassifier",
    ),
    (["--model.backbone=TinyCN"], "no Module subclass is named `TinyCN`" + MEAN % "TinyCNN"),  # a factory
    (["--model.optimizer=Adamw"], "no Optimizer subclass is named `Adamw`" + MEAN % "AdamW"),  # any case
    (["--data=Zzz"], "no LightningDataModule subclass is named `Zzz`" + MODULE_PATH),  # none close
    (  # a name two classes have: their paths, not the name that jsonargparse would refuse
        ["--model.backbone=Sigmod"],
        "no Module subclass is named `Sigmod`; did you mean `torch.nn.Sigmoid` or "
        "`torch.ao.nn.quantized.Sigmoid`?",
    ),
    (  # neither the base class nor a private one (lightning's _MockOptimizer) is offered
        ["--model.optimizer=MockOptimizer"],
        "no Optimizer subclass is named `MockOptimizer`" + MODULE_PATH,
    ),
    (
        ["--model.init_args.lr_scheduler_intervl=step"],
        "unknown key `lr_scheduler_intervl`" + MEAN % INTERVAL,
    ),
    (["--model.lr_scheduler_intervl=step"], "unknown key `lr_scheduler_intervl`" + MEAN % INTERVAL),
    (
        ["-c", "bad_argument.yaml"],
        "unknown key `lr_scheduler_intervl` (in bad_argument.yaml)" + MEAN % INTERVAL,
    ),
    (["-c", "bad_callback.yaml"], "unknown key `monitr` (in bad_callback.yaml)" + MEAN % "monitor"),
    (
        ["--model.backbone=fixture_task.NoSuchNet"],
        "`fixture_task.NoSuchNet` does not exist",
    ),  # none close
    (  # a class of another kind: the kind it must be
        ["--model=torch.nn.Linear"],
        "`torch.nn.Linear` is not a subclass of lightning.pytorch.LightningModule",
    ),
    (
        ["--trainer.callbacks+=fixture_task.TinyClassifier"],
        "`fixture_task.TinyClassifier` is not a subclass of lightning.pytorch.Callback",
    ),
    (  # a class built on pytorch_lightning, as older tutorials import Lightning: both classes, the import
        ["--model=test_reliability.TutorialModule"],
        standalone("test_reliability.TutorialModule", "LightningModule"),
    ),
    (["--model=TutorialModule"], standalone("test_reliability.TutorialModule", "LightningModule")),
    (
        ["-c", "tutorial_module.yaml"],
        standalone("test_reliability.TutorialModule", "LightningModule", " (in tutorial_module.yaml)"),
    ),
    (
        ["--data=test_reliability.TutorialData"],
        standalone("test_reliability.TutorialData", "LightningDataModule"),
    ),
    (
        ["--trainer.callbacks+=test_reliability.TutorialCheckpoint"],
        standalone("test_reliability.TutorialCheckpoint", "callbacks.ModelCheckpoint"),
    ),
    (
        ["--trainer.logger=pytorch_lightning.loggers.CSVLogger"],
        "`pytorch_lightning.loggers.CSVLogger` is another package's copy of "
        "lightning.pytorch.loggers.CSVLogger: give `lightning.pytorch.loggers.CSVLogger`",
    ),
    (["--config", "no_such_config.yaml"], None),  # jsonargparse's own message for the rest, one line
    (["--trainer.max_epochs=three"], None),
    (["--seed_everything=abc"], None),
]
#: One of each kind of bad config above, run as a whole ``fit``: an unrecognized argument, an unknown key in
#: a file, a class path that does not exist, a short class name no class has, a class of another kind, a
#: class built on pytorch_lightning, jsonargparse's own message.
WHOLE_COMMAND = [BAD_CONFIGS[i] for i in (0, 2, 3, 5, 17, 19, 26)]


def assert_one_error_line(err: str, args: list[str], error: str | None) -> None:
    """``err`` holds one line besides the usage and the tip: ``error: <error>`` (``error`` ``None``: one
    naming the last argument's value)."""
    (line,) = [line for line in err.splitlines() if not line.startswith(("usage:", "tip:"))]
    if error is not None:
        assert line == f"error: {error}", err
    else:
        assert line.startswith("error: ") and args[-1].partition("=")[2 if "=" in args[-1] else 0] in line


@pytest.fixture(scope="module")
def fit_parser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The parser of a CLI of the fixture task built once (without a subcommand or a logger: its config
    parsed and its classes built, nothing run), for the cases whose point is the error line."""
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("parser"))
    try:
        with kept_environ(), warnings.catch_warnings():
            return project_cli([*FAST, "--trainer.logger=false"], run=False).parser
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("args, error", BAD_CONFIGS)
def test_a_bad_config_is_one_line_naming_the_fix(
    fit_parser: Any, workdir: Path, capsys: pytest.CaptureFixture[str], args: list[str], error: str | None
) -> None:
    for name, text in BAD_FILES.items():
        (workdir / name).write_text(text)
    capsys.readouterr()
    with pytest.raises(SystemExit) as caught:
        fit_parser.parse_args(args)
    assert caught.value.code == 2
    assert_one_error_line(capsys.readouterr().err, args, error)


@pytest.mark.parametrize("args, error", WHOLE_COMMAND)
def test_bad_config_exits_2_with_one_line_naming_the_fix_without_a_run_folder(
    run_cli: RunCLI, workdir: Path, capsys: pytest.CaptureFixture[str], args: list[str], error: str | None
) -> None:
    for name, text in BAD_FILES.items():
        (workdir / name).write_text(text)
    with pytest.raises(SystemExit) as caught:
        run_cli("fit", *args)
    assert caught.value.code == 2
    assert_one_error_line(capsys.readouterr().err, args, error)
    assert not (workdir / "logs").exists()


@pytest.mark.parametrize(
    "args, named",
    [
        (["--data.batch_size=-1"], "batch_size=-1: must be at least 1"),
        (["--data.num_workers=-1"], "num_workers=-1: must be 0"),
        (["--trainer.accelerator=gpu"], "building the run failed: MisconfigurationException"),
        (  # (the default warmup-cosine is sized in steps: the setting that leaves none is named)
            ["--trainer.limit_train_batches=0"],
            "this run has -1 .*--trainer.limit_train_batches=0",
        ),
    ],
)
def test_a_value_its_class_rejects_is_a_config_error_without_a_run_folder(
    run_cli: RunCLI, workdir: Path, args: list[str], named: str
) -> None:
    if "gpu" in args[0] and torch.cuda.is_available():
        pytest.skip("a GPU is there, so the accelerator is fine")
    with pytest.raises(ConfigError, match=named):
        run_cli("fit", *args)
    assert not (workdir / "logs").exists() or not run_dirs(workdir / "logs")


def test_split_fractions_that_leave_no_training_split_are_named() -> None:
    """BaseDataModule's helpers for a DataModule that splits one dataset (as the digits example does)."""
    assert [len(part) for part in seeded_split(10, [0.2, 0.3], seed=0)] == [2, 3, 5]
    with pytest.raises(ValueError, match=r"fractions\[0\]=1.5"):
        seeded_split(10, [1.5], seed=0)


def test_an_optimizer_argument_it_rejects_is_a_clean_error_with_exit_2(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["fit", *FAST, "--model.optimizer.init_args.lr=-1"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "error: model.optimizer / model.lr_scheduler: Invalid learning rate: -1.0" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------------------------- bad checkpoints
@pytest.fixture
def good_checkpoint(fitted: Callable[..., Path]) -> Path:
    return fitted() / "checkpoints" / "last.ckpt"


def test_truncated_checkpoint_is_named(
    run_cli: RunCLI, good_checkpoint: Path, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truncated = workdir / "truncated.ckpt"
    truncated.write_bytes(good_checkpoint.read_bytes()[: good_checkpoint.stat().st_size // 2])
    before = len(run_dirs(workdir / "logs"))
    with pytest.raises(SystemExit) as caught:
        run_cli("test", f"--ckpt_path={truncated}")
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "truncated.ckpt" in err and "truncated or corrupt" in err
    assert len(run_dirs(workdir / "logs")) == before, "no run folder for a failed command"


def test_checkpoint_that_needs_unpickling_is_refused_without_the_trust_flag(
    run_cli: RunCLI, good_checkpoint: Path, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Also pins that the checkpoint is read once, by the engine: LightningCLI would read its
    hyperparameters itself with ``weights_only=True`` (and fail here) if it saw ``ckpt_path``."""
    checkpoint = torch.load(good_checkpoint, weights_only=True)
    checkpoint["extra"] = Path("an arbitrary python object")
    unsafe = workdir / "unsafe.ckpt"
    torch.save(checkpoint, unsafe)
    with pytest.raises(SystemExit) as caught:
        run_cli("test", f"--ckpt_path={unsafe}")
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "unsafe.ckpt" in err and "--weights_only=false" in err
    cli = run_cli("test", f"--ckpt_path={unsafe}", "--weights_only=false")  # explicit trust
    assert "test/acc" in cli.trainer.callback_metrics


def test_checkpoint_of_another_model_names_the_first_mismatched_key(
    run_cli: RunCLI, good_checkpoint: Path, workdir: Path
) -> None:
    checkpoint = torch.load(good_checkpoint, weights_only=True)
    del checkpoint["hyper_parameters"]  # so the config's model is used, as with a foreign checkpoint
    checkpoint["state_dict"]["head.weight"] = torch.zeros(5, 128)
    foreign = workdir / "foreign.ckpt"
    torch.save(checkpoint, foreign)
    before = len(run_dirs(workdir / "logs"))
    with pytest.raises(CheckpointError, match=r"foreign\.ckpt.*'head\.weight' has shape \(5, 128\)"):
        run_cli("test", f"--ckpt_path={foreign}")
    assert len(run_dirs(workdir / "logs")) == before


# ---------------------------------------------------------------------------------- crashes and writes
def test_checkpoint_writes_are_atomic(tmp_path: Path) -> None:
    target = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"value": torch.tensor(1)}, target)
    with pytest.raises(Exception):  # noqa: B017 - pickling a lambda fails half-way through the write
        io.save_checkpoint({"value": torch.tensor(2), "bad": lambda: None}, target)
    assert torch.load(target, weights_only=True)["value"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"], "no temporary file left behind"


def test_a_crash_in_training_step_leaves_the_previous_last_checkpoint_intact(run_cli: RunCLI) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        run_cli(
            "fit", "--model=helpers.CrashingClassifier", "--model.crash_at_step=3", "--trainer.max_epochs=3"
        )
    (run,) = run_dirs(Path("logs"))
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 2
    assert not [p for p in (run / "checkpoints").iterdir() if ".tmp" in p.name]


# ---------------------------------------------------------------------------------- interruption
SIGNAL_RUN = [
    "--trainer.max_epochs=3",
    "--trainer.limit_train_batches=10",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
]


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_mid_epoch_saves_a_resumable_checkpoint_and_resume_finishes(
    tmp_path: Path, signum: int, code: int
) -> None:
    process = start_module(
        ["fit", *SIGNAL_RUN, "--run_name=run", "--trainer.callbacks+=helpers.SlowDown"], tmp_path
    )
    last = tmp_path / "logs" / "run" / "checkpoints" / "last.ckpt"
    wait_for_file(last, process)  # the end of epoch 0
    time.sleep(0.45)  # about 4 batches into epoch 1
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr
    assert "saved a resumable checkpoint" in stderr and "--ckpt_path last" in stderr
    assert "Traceback" not in stderr and "weights_only" not in stdout + stderr  # (no Lightning note)
    saved = torch.load(last, weights_only=True)
    assert 10 < saved["global_step"] < 20, "a mid-epoch checkpoint, taken when the signal arrived"
    run_module(["fit", *SIGNAL_RUN, "--run_name=resumed", "--ckpt_path=last"], cwd=tmp_path)
    resumed = torch.load(tmp_path / "logs" / "resumed" / "checkpoints" / "last.ckpt", weights_only=True)
    assert resumed["global_step"] == 30 and resumed["epoch"] == 2


@pytest.mark.slow
def test_two_runs_started_together_get_their_own_folders(tmp_path: Path) -> None:
    processes = [start_module(["fit", *FAST], tmp_path) for _ in range(2)]
    for process in processes:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
    folders = run_dirs(tmp_path / "logs")
    assert len(folders) == 2
    for folder in folders:
        assert (folder / "checkpoints" / "last.ckpt").is_file() and (folder / "config.yaml").is_file()


INTERRUPTED = [
    "fit",
    *FAST,
    "--trainer.max_epochs=3",
    "--trainer.limit_train_batches=4",
    "--trainer.num_sanity_val_steps=1",
    "--run_name=run",
    "--trainer.callbacks+=helpers.SignalAt",
]


def test_ctrl_c_in_the_sanity_check_stops_at_the_first_training_batch_with_a_checkpoint(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main([*INTERRUPTED, "--trainer.callbacks.epoch=-1"], capsys)
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 130 and line.startswith("error: interrupted by SIGINT in epoch 1/3 (step 1); saved"), err
    saved = torch.load(workdir / "logs" / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 1


@pytest.mark.parametrize("at", ["epoch 2", "sanity check"])
def test_a_second_ctrl_c_aborts_without_saving_in_one_line(
    at: str, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C twice: exit 130 and one line; the checkpoint of epoch 1 stays as it was; a run that had
    saved none leaves no folder."""
    where = ["--trainer.callbacks.epoch=1", "--trainer.callbacks.batch=1"] if at == "epoch 2" else []
    code, _, err = run_main(
        [*INTERRUPTED, *(where or ["--trainer.callbacks.epoch=-1"]), "--trainer.callbacks.times=2"], capsys
    )
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    last = workdir / "logs" / "run" / "checkpoints" / "last.ckpt"
    assert code == 130, err
    if at == "epoch 2":
        assert line == (
            f"error: aborted by a second SIGINT in epoch 2/3 (step 6), without saving: {last}, the last "
            "checkpoint saved before, resumes with the same command plus --ckpt_path last"
        )
        assert torch.load(last, weights_only=True)["global_step"] == 4
    else:
        assert line.endswith("without saving: no checkpoint of this run was saved before"), line
        assert not (workdir / "logs" / "run").exists()


@pytest.mark.slow
def test_a_second_ctrl_c_while_the_interruption_checkpoint_is_saved_is_one_line(tmp_path: Path) -> None:
    """Ctrl-C, then Ctrl-C again while ``last.ckpt`` is being written: one ``error:`` line, exit 130, no
    traceback, and the ``last.ckpt`` of epoch 1 as it was (the save is aborted; its file is written
    atomically)."""
    args = [*INTERRUPTED, "--trainer.callbacks.epoch=1", "--trainer.callbacks.batch=1"]
    result = run_module([*args, "--trainer.callbacks+=helpers.SignalDuringSave"], cwd=tmp_path, check=False)
    last = tmp_path / "logs" / "run" / "checkpoints" / "last.ckpt"
    assert result.returncode == 130 and "Traceback" not in result.stderr, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        f"error: aborted by a second SIGINT in epoch 2/3 (step 6), without saving: {last}, the last "
        "checkpoint saved before, resumes with the same command plus --ckpt_path last"
    ]
    assert torch.load(last, weights_only=True)["global_step"] == 4


@pytest.mark.parametrize("command", ["validate", "test", "predict"])
def test_ctrl_c_in_an_evaluation_stops_at_once_with_one_line_and_no_folder(
    command: str, fitted: Callable[..., Path], workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fitted()
    args = [command, *FAST, "--ckpt_path=best", "--trainer.callbacks+=helpers.SignalInEvaluation"]
    code, _, err = run_main(args, capsys)
    assert code == 130, err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: interrupted by SIGINT in {command}, which saves nothing"
    ]
    assert [run.name for run in run_dirs(workdir / "logs")] == ["trained"]
