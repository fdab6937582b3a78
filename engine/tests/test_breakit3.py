"""User sequences found to break after the engine's rewrite in less code (each test names what a user
did and what must hold)."""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import RunCLI
from support import kept_environ, main
from test_tuning import QUICK


def test_a_resume_after_a_deleted_record_overwrites_no_other_record(
    run_cli: RunCLI, fitted: Callable[..., Path]
) -> None:
    """A run resumed twice (``config.resume-1.yaml``, ``config.resume-2.yaml``) whose first resume's records
    the user deleted resumes again: it writes a record under a free name and leaves every other record
    byte for byte (it must not fail on, nor overwrite, ``*.resume-2.yaml``)."""
    run = fitted()
    for stem in ("config", "provenance"):  # as after two resumes and deleting the first one's records
        shutil.copy(run / f"{stem}.yaml", run / f"{stem}.resume-2.yaml")
    before = {path.name: path.read_bytes() for path in run.glob("*.yaml")}
    cli = run_cli("fit", "--trainer.max_epochs=2", "--ckpt_path=last")
    assert cli.run_dir == run
    assert {name: (run / name).read_bytes() for name in before} == before
    for stem in ("config", "provenance"):
        assert len(list(run.glob(f"{stem}*.yaml"))) == 3, sorted(p.name for p in run.glob(f"{stem}*.yaml"))


def test_a_model_that_optimizes_by_hand_gets_no_warning_about_scheduler_keys(
    run_cli: RunCLI,
) -> None:
    """A manual-optimization model with the default warmup-cosine schedule trains without Lightning's
    warning that its lr scheduler dict has keys it ignores (the engine's own ``monitor``, which only a
    ReduceLROnPlateau reads): the user set nothing to be warned about."""
    with kept_environ(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = run_cli("fit", "--model=helpers.ManualClassifier")
    assert cli.trainer.global_step == 2
    assert not [str(w.message) for w in caught if "lr scheduler dict contains the key" in str(w.message)]


def test_lr_find_from_weights_sets_a_given_checkpoint_aside(
    fitted: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``lr_find --init_from <best> --ckpt_path <last>``: the tuner trains a new model, so it sets the
    ``--ckpt_path`` aside with its note (as without ``--init_from``) and starts from the ``--init_from``
    weights; the ``--init_from``/``--ckpt_path`` conflict of ``fit`` (a resume) does not apply to it."""
    checkpoints = fitted() / "checkpoints"
    capsys.readouterr()
    main(
        [
            "lr_find",
            *QUICK,
            "--trainer.limit_train_batches=2",
            f"--init_from={checkpoints / 'best.ckpt'}",
            f"--ckpt_path={checkpoints / 'last.ckpt'}",
        ]
    )
    out = capsys.readouterr().out
    assert f"lr_find does not use --ckpt_path={checkpoints / 'last.ckpt'}" in out
    assert "--init_from: " in out and "Use it: " in out


def test_a_refused_resume_adds_no_record_to_the_run(fitted: Callable[..., Path]) -> None:
    """``fit --ckpt_path last`` refused as bad input (an ``EarlyStopping`` monitor the model never logs:
    exit 2, "nothing lost") leaves the continued run's folder as it was: no ``config.resume-1.yaml`` or
    ``provenance.resume-1.yaml`` of a command that never trained (the next resume would take ``-2``)."""
    run = fitted()
    before = sorted(path.name for path in run.iterdir())
    stop = "--trainer.callbacks=[{class_path: EarlyStopping, init_args: {monitor: val/accc}}]"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--trainer.max_epochs=2", "--trainer.limit_train_batches=2", stop, "--ckpt_path=last"])
    assert exit_info.value.code == 2
    assert sorted(path.name for path in run.iterdir()) == before
