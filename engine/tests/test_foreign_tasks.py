"""Foreign tasks through every command: code written as Lightning's docs, examples and tutorials and
lightning-hydra-template write it (``foreign_tasks/``, none of runwright's classes) run through ``fit``,
``validate``, ``test --ckpt_path best``, ``predict``, ``fit --ckpt_path last``, ``export``, ``report``,
``lr_find``, a 2-trial ``sweep`` and a 2-process DDP ``fit``. Each cell (one test id per task and command)
asserts the right result (the best score is the best logged value of the monitor and ``best.ckpt`` is its
epoch's; a predictions row per sample and loader; export's parity check; the report's plots, or one line
per plot skipped; the step a resume ends at; every validation sample counted once under DDP) or, where
the task cannot do what the command asks, exactly one ``error:`` line naming the fix and no new run
folder (exit code 2 for bad input). Never a traceback.

One ``fit`` per task is shared by the cells (:func:`trained`, run once per session, copied by
:func:`fitted`); the ``sweep``, DDP and resume cells are ``slow``. Every command starts with the tasks'
modules not imported, as in a new process (the engine imports the classes a checkpoint names)."""

from __future__ import annotations

import csv
import inspect
import os
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from support import kept_environ, run_dirs, run_main, run_module

from runwright.commands.report import PLOTS
from runwright.runs import class_of

#: Trainer settings of every run that trains: two epochs of two batches, every evaluation batch.
EPOCHS = 2
TRAIN = [
    f"--trainer.max_epochs={EPOCHS}",
    "--trainer.limit_train_batches=2",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.log_every_n_steps=1",
]
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
MNIST_DATA = ["--data=foreign_tasks.mnist.MyDataModule", "--data.batch_size=32"]


@dataclass(frozen=True)
class Task:
    """A foreign task as a user runs it.

    Args:
        model: Its model, data and ``--checkpoint.*`` options (what its checkpoints bring back).
        trainer: Its trainer options (given again to every command that trains, as the engine's README
            says for a resume).
        refuses: Command (``ddp``: the DDP fit) -> a word the one ``error:`` line must contain (the thing
            to add or set), with the exit code when it is not 2 (bad input): ``(word, code)``.
        predict_rows: Samples of each predict loader.
        val_samples: Samples of all validation loaders (``None``: no validation loop).
        classifier: Its test batches are ``(x, y)`` and ``forward(x)`` gives class logits.
        search_space: The sweep's search space; objective: the sweep's objective options.
    """

    model: list[str]
    trainer: list[str] = field(default_factory=list)
    refuses: dict[str, str | tuple[str, int]] = field(default_factory=dict)
    predict_rows: tuple[int, ...] = ()
    val_samples: int | None = None
    classifier: bool = False
    search_space: dict[str, Any] = field(default_factory=dict)
    objective: list[str] = field(default_factory=list)

    def option(self, key: str) -> str | None:
        """The value of ``--<key>=`` in :attr:`model` (``None`` if absent or null)."""
        values = [arg.partition("=")[2] for arg in self.model if arg.startswith(f"--{key}=")]
        return None if not values or values[-1] == "null" else values[-1]

    @property
    def monitor(self) -> str | None:
        """The key ``--checkpoint.monitor`` names (``None``: the latest epoch's is best)."""
        return self.option("checkpoint.monitor")

    @property
    def model_class(self) -> type:
        return class_of(str(self.option("model")))


def log_uniform(low: float, high: float) -> dict[str, Any]:
    return {"name": "FloatDistribution", "attributes": {"low": low, "high": high, "log": True}}


NO_DATA = {"predict": "predict_dataloader"}
NO_EVALUATION = {"validate": "validation_step", "test": "test_step", **NO_DATA}
CLIP = {"trainer.gradient_clip_val": log_uniform(0.5, 1.0)}  # (BoringModel has no hyperparameter)
TASKS = {
    # lightning.pytorch.demos: dataloaders on the model, no DataModule, bare tensors, nothing logged
    "boring": Task(
        [
            "--model=lightning.pytorch.demos.boring_classes.BoringModel",
            "--data=null",
            "--checkpoint.monitor=null",
        ],
        refuses={"sweep": "objective.metric"},
        predict_rows=(64,),
        val_samples=64,
        search_space=CLIP,
    ),
    # several loaders per evaluation split, an IterableDataset in each, a metric per loader
    "several": Task(
        [
            "--model=foreign_tasks.boring.SeveralLoadersModel",
            "--data=foreign_tasks.boring.SeveralLoaders",
            "--checkpoint.monitor=val_loss/dataloader_idx_0",
            "--checkpoint.mode=min",
        ],
        predict_rows=(15, 15),
        val_samples=30,
        search_space=CLIP,
    ),
    # manual optimization, two optimizers, no validation, images through self.loggers, num_classes data
    "gan": Task(
        [
            "--model=foreign_tasks.gan.GAN",
            "--data=foreign_tasks.mnist.TinyMNISTDataModule",
            "--data.val_split=32",
            "--data.num_workers=0",
            "--data.batch_size=32",
            "--data.seed=42",
        ],
        ["--trainer.gradient_clip_val=null", "--trainer.logger=lightning.pytorch.loggers.TensorBoardLogger"],
        # (DDP: its discriminator's weights get no gradient in the generator's backward)
        refuses={**NO_EVALUATION, "lr_find": "lr_find", "ddp": "ddp_find_unused_parameters_true"},
        search_space={"model.lr": log_uniform(1e-4, 1e-3)},
        objective=["--objective.metric=g_loss", "--objective.direction=minimize"],
    ),
    # forward takes [B, 784], batches are ([B, 1, 28, 28], y); *_loss logged on_step and on_epoch
    "autoencoder": Task(
        [
            "--model=foreign_tasks.autoencoder.LitAutoEncoder",
            *MNIST_DATA,
            "--checkpoint.monitor=val_loss",
            "--checkpoint.mode=min",
        ],
        refuses={"export": "example_input_array"},
        predict_rows=(45,),
        val_samples=32,
        search_space={"model.learning_rate": log_uniform(1e-3, 1e-2)},
    ),
    # a module argument the checkpoint leaves out (save_hyperparameters(ignore=["backbone"]))
    "backbone": Task(
        [
            "--model=foreign_tasks.backbone.LitClassifier",
            "--model.backbone=foreign_tasks.backbone.Backbone",
            "--model.backbone.hidden_dim=24",
            "--model.learning_rate=0.01",
            *MNIST_DATA,
            "--checkpoint.monitor=valid_loss",
            "--checkpoint.mode=min",
        ],
        predict_rows=(45,),
        val_samples=32,
        classifier=True,
        search_space={"model.learning_rate": log_uniform(1e-3, 1e-2)},
    ),
    # forward(inputs, target) with an example_input_array, a train loader on the model, nothing logged
    "transformer": Task(
        ["--model=foreign_tasks.transformer.LightningTransformer", "--model.vocab_size=64", "--data=null"],
        # torch.export (so ONNX too) and TorchScript's trace fail on nn.Transformer's causal-mask check
        refuses={
            **NO_EVALUATION,
            "sweep": "objective.metric",
            "export": ("exporting LightningTransformer failed", 1),
        },
        search_space=CLIP,
    ),
    # its own val/acc_best, a num_classes property the model does not take, OptimizerCallable partials
    "hydra": Task(
        [
            "--model=foreign_tasks.hydra_template.CLIMNISTLitModule",
            "--model.net=foreign_tasks.hydra_template.SimpleDenseNet",
            "--model.net.lin1_size=16",
            "--model.net.lin2_size=16",
            "--model.net.lin3_size=16",
            "--model.optimizer=torch.optim.Adam",
            "--model.optimizer.lr=0.001",
            "--model.optimizer.weight_decay=0.0",
            "--model.scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau",
            "--model.scheduler.patience=10",
            "--model.compile=false",
            "--data=foreign_tasks.hydra_template.MNISTDataModule",
            "--data.train_val_test_split=[64, 45, 32]",
            "--data.batch_size=32",
            "--checkpoint.monitor=val/acc",
            "--checkpoint.mode=max",
        ],
        refuses=NO_DATA,
        val_samples=45,
        classifier=True,
        search_space={"model.optimizer.init_args.lr": log_uniform(1e-4, 1e-2)},
    ),
    # dict batches into forward(**inputs), metrics logged in on_validation_epoch_end
    "glue": Task(
        [
            "--model=foreign_tasks.glue.GLUETransformer",
            "--model.model_name_or_path=tiny",
            "--model.num_labels=2",
            "--model.task_name=mrpc",
            "--model.learning_rate=0.01",
            "--data=foreign_tasks.glue.GLUEDataModule",
            "--data.model_name_or_path=tiny",
            "--data.max_seq_length=16",
            "--data.train_batch_size=16",
            "--data.eval_batch_size=16",
            "--checkpoint.monitor=accuracy",
            "--checkpoint.mode=max",
        ],
        refuses={**NO_DATA, "export": "example_input_array"},
        val_samples=21,
        search_space={"model.learning_rate": log_uniform(1e-3, 1e-2)},
    ),
}


@dataclass
class Fit:
    """A finished ``fit`` command: its exit code and output, and its run folder (``None``: none)."""

    code: int
    out: str
    err: str
    run: Path | None


@pytest.fixture(scope="session")
def fits() -> dict[str, Fit | BaseException]:
    """The shared ``fit`` of each task, filled by :func:`trained` (an exception it raised stands for it)."""
    return {}


@pytest.fixture(autouse=True)
def new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks' modules (and Lightning's demos) not imported, as in a new process; put back after."""
    for name in list(sys.modules):
        if name.split(".")[0] == "foreign_tasks" or name.startswith("lightning.pytorch.demos"):
            monkeypatch.delitem(sys.modules, name)


@pytest.fixture
def trained(
    fits: dict[str, Fit | BaseException],
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> Any:
    """``trained(name)``: the task's shared ``fit`` (``TRAIN``), run the first time it is asked for, in a
    folder of its own; raises what that ``fit`` raised."""

    def fit(name: str) -> Fit:
        if name not in fits:
            task, folder, cwd = TASKS[name], tmp_path_factory.mktemp(name), os.getcwd()
            os.chdir(folder)
            try:
                with kept_environ():
                    code, out, err = run_main(["fit", *task.model, *task.trainer, *TRAIN], capsys)
                runs = run_dirs(folder / "logs") if (folder / "logs").is_dir() else []
                fits[name] = Fit(code, out, err, runs[0] if len(runs) == 1 else None)
            except Exception as error:
                fits[name] = error
            finally:
                os.chdir(cwd)
        if isinstance(result := fits[name], BaseException):
            raise result
        return result

    return fit


@pytest.fixture
def fitted(trained: Any, workdir: Path) -> Any:
    """``fitted(name)``: a copy of the task's shared run in ``logs/`` of the test's working directory
    (fails when that ``fit`` did); returns the copy's folder."""

    def copy(name: str) -> Path:
        try:
            fit = trained(name)
        except Exception as error:
            pytest.fail(f"the task's fit failed: {type(error).__name__}: {error}")
        if fit.code != 0 or fit.run is None:
            pytest.fail(f"the task's fit failed (exit {fit.code}): {last_line(fit.err)}")
        return Path(shutil.copytree(fit.run, workdir / "logs" / fit.run.name))

    return copy


def last_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1]


def metric(run: Path, key: str) -> list[tuple[int, float]]:
    """``(epoch, value)`` of each ``metrics.csv`` row with ``key`` (else ``<key>_epoch``: Lightning's name for
    a value logged with ``on_step=True`` too)."""
    with (run / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    column = key if any(row.get(key) for row in rows) else f"{key}_epoch"
    return [(int(row["epoch"]), float(row[column])) for row in rows if row.get(column)]


def best_logged(run: Path, task: Task) -> tuple[int, float]:
    """The epoch and value of the best logged value of the task's monitor (the first epoch of a tie)."""
    values = metric(run, str(task.monitor))
    best = (max if task.option("checkpoint.mode") == "max" else min)(value for _, value in values)
    return next(epoch for epoch, value in values if value == best), best


def assert_refused(code: int, err: str, word: str, logs: Path, before: set[Path], exit_code: int = 2) -> None:
    """One ``error:`` line naming ``word``, ``exit_code``, no traceback, no new folder in ``logs``."""
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == exit_code and len(errors) == 1 and word in errors[0], f"exit {code}\n{err}"
    assert "Traceback" not in err
    assert folders(logs) == before, "a run folder was left behind"


def assert_clean(code: int, err: str) -> None:
    assert code == 0 and "Traceback" not in err and "error:" not in err, f"exit {code}\n{err}"


def checkpoint_used(out: str) -> Path:
    """The checkpoint a command names in its ``--ckpt_path: PATH`` line, resolved."""
    (line,) = [line for line in out.splitlines() if line.startswith("--ckpt_path: ")]
    return Path(line.removeprefix("--ckpt_path: ")).resolve()


def folders(logs: Path) -> set[Path]:
    return set(logs.iterdir()) if logs.is_dir() else set()


def refused_or_run(
    name: str, command: str, args: list[str], workdir: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[str, list[Path]] | None:
    """Run ``command ARGS``; when the task refuses the command assert the refusal and return ``None``,
    else assert a clean exit and return its stdout and the new folders in ``logs/``."""
    logs, task = workdir / "logs", TASKS[name]
    before = folders(logs)
    code, out, err = run_main([command, *args], capsys)
    if command in task.refuses:
        refusal = task.refuses[command]
        word, exit_code = refusal if isinstance(refusal, tuple) else (refusal, 2)
        assert_refused(code, err, word, logs, before, exit_code)
        return None
    assert_clean(code, err)
    return out, sorted(folders(logs) - before)


@pytest.mark.parametrize("name", TASKS)
def test_fit(name: str, trained: Any) -> None:
    """The best checkpoint is the best epoch's, its score the best logged; with no monitor (or no
    validation) the latest epoch's, said in one line; metrics.csv is in the run folder; the checkpoint's
    hyperparameters are only the model's arguments."""
    task, fit = TASKS[name], trained(name)
    assert_clean(fit.code, fit.err)
    assert fit.run is not None and (fit.run / "metrics.csv").is_file()
    best = fit.run / "checkpoints" / "best.ckpt"
    checkpoint = torch.load(best, weights_only=True, map_location="cpu")
    (line,) = [line for line in fit.out.splitlines() if line.startswith("Best checkpoint (")]
    if task.monitor:
        epoch, value = best_logged(fit.run, task)
        assert line == f"Best checkpoint ({task.monitor}={value:.4f}): {best}"
        assert checkpoint["epoch"] == epoch
    else:
        assert "latest epoch" in line and line.endswith(f": {best}"), line
        assert checkpoint["epoch"] == EPOCHS - 1
    parameters = inspect.signature(task.model_class).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        saved = {key for key in checkpoint.get("hyper_parameters", {}) if not key.startswith("_")}
        assert saved <= set(parameters), (
            f"not arguments of {task.model_class.__name__}: {saved - set(parameters)}"
        )
    if name == "hydra":  # its own running maximum, not another value under its key
        accuracies = [value for _, value in metric(fit.run, "val/acc")]
        assert [value for _, value in metric(fit.run, "val/acc_best")] == [
            max(accuracies[: i + 1]) for i in range(len(accuracies))
        ]


@pytest.mark.parametrize("name", TASKS)
def test_validate(name: str, fitted: Any, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``validate --ckpt_path best`` evaluates the best checkpoint: its monitor is the best logged value."""
    run, task = fitted(name), TASKS[name]
    result = refused_or_run(name, "validate", ["--ckpt_path=best", *QUIET], workdir, capsys)
    if result is None:
        return
    out = result[0]
    assert checkpoint_used(out) == run / "checkpoints" / "best.ckpt"
    if task.monitor:
        (line,) = [line for line in out.splitlines() if line.startswith("validate: ")]
        assert f" {task.monitor}={best_logged(run, task)[1]:.4f}" in f" {line.removeprefix('validate: ')}"


@pytest.mark.parametrize("name", TASKS)
def test_test_best(name: str, fitted: Any, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``test --ckpt_path best`` tests the run's best checkpoint."""
    run = fitted(name)
    result = refused_or_run(name, "test", ["--ckpt_path=best", *QUIET], workdir, capsys)
    if result is not None:
        assert checkpoint_used(result[0]) == run / "checkpoints" / "best.ckpt"


def prediction_rows(run: Path) -> list[int]:
    """Rows per predict loader: of ``predictions.csv`` (by its ``dataloader_idx`` column when it has one),
    or of one ``predictions_<i>.csv`` per loader."""
    files = sorted(
        run.glob("predictions*.csv"), key=lambda path: [int(n) for n in re.findall(r"\d+", path.name)]
    )
    if len(files) != 1:
        return [sum(1 for _ in csv.DictReader(path.open(newline=""))) for path in files]
    counts = Counter(row.get("dataloader_idx", "0") for row in csv.DictReader(files[0].open(newline="")))
    return [counts[key] for key in sorted(counts, key=int)]


@pytest.mark.parametrize("name", TASKS)
def test_predict(name: str, fitted: Any, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``predict --ckpt_path best`` writes a row per sample of each predict loader."""
    fitted(name)
    result = refused_or_run(name, "predict", ["--ckpt_path=best", *QUIET], workdir, capsys)
    if result is not None:
        assert prediction_rows(result[1][0]) == list(TASKS[name].predict_rows)


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_resume(name: str, fitted: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """``fit --ckpt_path last`` with one more epoch continues the run: its last.ckpt is that epoch's, one
    epoch's optimizer steps later."""
    run, task = fitted(name), TASKS[name]
    last = run / "checkpoints" / "last.ckpt"
    before = torch.load(last, weights_only=True, map_location="cpu")
    args = ["fit", "--ckpt_path=last", *task.trainer, *TRAIN, f"--trainer.max_epochs={EPOCHS + 1}"]
    code, out, err = run_main(args, capsys)
    assert_clean(code, err)
    assert f"Run folder: {run}" in out
    after = torch.load(last, weights_only=True, map_location="cpu")
    steps_per_epoch = before["global_step"] // (before["epoch"] + 1)
    assert (after["epoch"], after["global_step"]) == (EPOCHS, before["global_step"] + steps_per_epoch)


@pytest.mark.parametrize("name", TASKS)
def test_export(name: str, fitted: Any, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``export --ckpt_path best`` writes the model and its parity check against eager PyTorch passes."""
    fitted(name)
    result = refused_or_run(name, "export", ["--ckpt_path=best", "--format=torch_export"], workdir, capsys)
    if result is not None:
        out, (run,) = result
        assert "Parity check passed" in out and (run / "model.pt2").is_file(), out


@pytest.mark.parametrize("name", TASKS)
def test_report(name: str, fitted: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """``report RUN`` writes each plot or says in one line why it skips it: the loss plot whenever the run
    logged a loss, the confusion matrix for a classifier of ``(x, y)`` batches only."""
    run, task = fitted(name), TASKS[name]
    code, out, err = run_main(["report", str(run)], capsys)
    assert_clean(code, err)
    for plot in [*PLOTS, "confusion_matrix"]:
        path = run / "report" / f"{plot}.png"
        said = [line for line in out.splitlines() if line.startswith(f"skipped {plot}.png: ")]
        assert path.is_file() != bool(said) and len(said) <= 1, f"{plot}: {out}"
    header = (run / "metrics.csv").read_text().partition("\n")[0]
    assert (run / "report" / "loss.png").is_file() or "loss" not in header
    assert (run / "report" / "confusion_matrix.png").is_file() == task.classifier, out


@pytest.mark.parametrize("name", TASKS)
def test_lr_find(name: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``lr_find`` records the range test, suggests an LR and says where to put it."""
    task = TASKS[name]
    args = [*task.model, *task.trainer, *TRAIN, "--tune.num_training=10"]
    result = refused_or_run(name, "lr_find", args, workdir, capsys)
    if result is None:
        return
    out, (run,) = result
    assert re.search(r"^Suggested LR: [0-9.e+-]+", out, re.MULTILINE), out
    rows = (run / "lr_find.csv").read_text().splitlines()
    assert rows[0] == "lr,loss" and 5 <= len(rows) - 1 <= 10 and (run / "lr_find.png").is_file()
    assert (run / "suggested_lr.yaml").is_file() or "has no optimizer, lr or learning_rate argument" in out


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_sweep(name: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 2-trial ``sweep``: each trial's value is the best logged value of the monitor in its run (or, for
    an objective given, the metric's last value)."""
    task = TASKS[name]
    config = workdir / "study.yaml"
    config.write_text(yaml.safe_dump({"search_space": task.search_space, "n_trials": 2}))
    args = ["--config", str(config), *task.model, *task.trainer, *TRAIN]
    if refused_or_run(name, "sweep", [*args, *task.objective], workdir, capsys) is None:
        return
    with (workdir / "logs" / "study_sweep" / "trials.csv").open(newline="") as handle:
        trials = list(csv.DictReader(handle))
    assert [trial["state"] for trial in trials] == ["COMPLETE", "COMPLETE"]
    for trial in trials:
        run = Path(trial["user_attrs_run_dir"])
        if task.objective:
            expected = metric(run, task.objective[0].partition("=")[2])[-1][1]
        else:
            expected = best_logged(run, task)[1]
        assert float(trial["value"]) == pytest.approx(expected, abs=1e-6), run


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_ddp_fit(name: str, workdir: Path) -> None:
    """A 2-process DDP ``fit`` (CPU, a process of its own) trains, writes best.ckpt, and validates every
    sample once."""
    task = TASKS[name]
    ddp = ["--trainer.strategy=ddp", "--trainer.accelerator=cpu", "--trainer.devices=2"]
    count = ["--trainer.callbacks+=foreign_tasks.CountValSamples"]
    args = ["fit", *task.model, *task.trainer, *TRAIN, *ddp, *count]
    result = run_module(args, cwd=workdir, timeout=300, check=False)
    if "ddp" in task.refuses:
        assert_refused(result.returncode, result.stderr, str(task.refuses["ddp"]), workdir / "logs", set())
        return
    assert_clean(result.returncode, result.stderr)
    (run,) = run_dirs(workdir / "logs")
    assert (run / "checkpoints" / "best.ckpt").is_file()
    counted = run / "val_samples.txt"
    assert (counted.read_text() if counted.is_file() else None) == (
        None if task.val_samples is None else f"{task.val_samples}\n"
    )


def test_the_hydra_templates_optimizer_type_is_one_error_line(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The template's module as it is (``optimizer: torch.optim.Optimizer``, Hydra's partial): one line
    naming ``OptimizerCallable``, exit 2, no run folder."""
    args = [arg.replace("CLIMNISTLitModule", "MNISTLitModule") for arg in TASKS["hydra"].model]
    code, _, err = run_main(["fit", *args, *TRAIN], capsys)
    assert_refused(code, err, "OptimizerCallable", workdir / "logs", set())
