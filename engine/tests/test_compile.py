"""``--compile.enabled=true``: torch.compile for any LightningModule, with checkpoints that are those of
an eager run (README, "torch.compile"). The wiring tests use the ``eager`` backend (TorchDynamo's
tracing without code generation: cheap); the numeric ones use inductor and are ``slow``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from fixture_task import PlainClassifier, TinyClassifier
from support import PLAIN_DATA, PLAIN_MODEL, checkpoint_model, every_step, main, metric_rows
from torch import Tensor

COMPILE = "--compile.enabled=true"
CHEAP = [COMPILE, "--compile.backend=eager"]


def weights(module: torch.nn.Module) -> dict[str, Tensor]:
    return {key: value.detach().clone() for key, value in module.state_dict().items()}


def checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


class GraphBreakClassifier(TinyClassifier):
    """A forward with a Python branch on a tensor's value: a graph break, which ``fullgraph`` refuses."""

    def forward(self, x: Tensor) -> Tensor:
        logits = super().forward(x)
        return logits if float(logits.mean()) < 1e9 else -logits


@pytest.mark.slow
def test_a_compiled_run_checkpoints_the_eager_keys_and_everything_loads_it_uncompiled(
    run_cli: Any, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    eager = run_cli("fit", "--run_name=eager")
    capsys.readouterr()
    compiled = run_cli("fit", "--run_name=compiled", COMPILE)
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if line.startswith("compile: ")]) == 1, out  # shown once
    eager_ckpt = checkpoint(eager.run_dir / "checkpoints/best.ckpt")
    compiled_ckpt = checkpoint(compiled.run_dir / "checkpoints/best.ckpt")
    assert compiled_ckpt.keys() == eager_ckpt.keys()
    assert list(compiled_ckpt["state_dict"]) == list(eager_ckpt["state_dict"])  # no "_orig_mod."
    assert list(compiled_ckpt["callbacks"]) == list(eager_ckpt["callbacks"])

    # an uncompiled model loads it strictly (plain torch and Lightning), and so do test and export
    best = compiled.run_dir / "checkpoints/best.ckpt"
    plain = TinyClassifier()
    plain.load_state_dict(compiled_ckpt["state_dict"])
    model = checkpoint_model(best)
    assert all(
        torch.equal(a, b) for a, b in zip(weights(model).values(), weights(plain).values(), strict=True)
    )
    tested = run_cli("test", f"--ckpt_path={best}")
    assert tested.model._compiled_call_impl is None  # not compiled
    main(["export", f"--ckpt_path={best}", "--format=torchscript", f"--output={workdir / 'model.pt'}"])
    inputs = torch.randn(5, 1, 8, 8)
    assert torch.allclose(torch.jit.load(str(workdir / "model.pt"))(inputs), plain.eval()(inputs), atol=1e-5)


def test_a_plain_lightning_module_compiles(run_cli: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A LightningModule written as Lightning's docs write one, with no argument of ours."""
    cli = run_cli(
        "fit", f"--model={PLAIN_MODEL}", f"--data={PLAIN_DATA}", "--checkpoint.monitor=val_acc", *CHEAP
    )
    (callback,) = [cb for cb in cli.trainer.callbacks if type(cb).__name__ == "CompileModel"]
    assert callback.calls >= 3  # the module's calls in training and validation steps went through it
    assert cli.model._compiled_call_impl is not None  # they ran compiled
    out = capsys.readouterr().out
    assert (
        len([line for line in out.splitlines() if line.startswith("compile: the first training step took")])
        == 1
    )
    keys = list(checkpoint(cli.run_dir / "checkpoints/last.ckpt")["state_dict"])
    assert keys == ["net.1.weight", "net.1.bias", "net.3.weight", "net.3.bias"]


@pytest.mark.slow
def test_compiled_training_matches_eager_and_resumes_across_compile(run_cli: Any, workdir: Path) -> None:
    """3 epochs of 12 batches without dropout, SGD: the compiled run's train and val losses match
    eager within 1e-5 (relative) at every logged step; a run resumed with compiling from an eager run's
    epoch-1 checkpoint, and the other way round, end with the uninterrupted runs' weights within 1e-5.

    Why without dropout: compiled dropout draws its masks from inductor's own random stream, so
    compiled and eager runs with dropout differ beyond rounding (each is reproducible on its own: see
    the exact-resume test). Why SGD: the fixture's conv bias before BatchNorm has a true gradient of
    0, and Adam's normalisation turns the rounding noise of that gradient into full-size steps, which
    moves BatchNorm's running mean and so the val loss (5e-4 apart after 3 epochs with AdamW, while
    the train losses still match within 1e-6)."""
    run = [
        "--model.backbone=fixture_task.TinyCNN", "--model.backbone.dropout=0",
        "--model.optimizer=torch.optim.SGD", "--model.optimizer.lr=0.05", "--model.optimizer.weight_decay=0",
        "--trainer.max_epochs=3", "--trainer.limit_train_batches=12", "--trainer.limit_val_batches=3",
    ]  # fmt: skip
    eager = run_cli("fit", *run, "--run_name=eager")
    compiled = run_cli("fit", *run, "--run_name=compiled", COMPILE)
    for key in ("train/loss", "val/loss"):
        expected, got = metric_rows(eager.run_dir, key), metric_rows(compiled.run_dir, key)
        assert [row[:2] for row in got] == [row[:2] for row in expected] and len(got) >= 3
        assert all(g[2] == pytest.approx(e[2], rel=1e-5) for g, e in zip(got, expected, strict=True)), key
    stop = "--trainer.callbacks+=helpers.StopAfterEpoch"
    for first, then, reference in (([], [COMPILE], eager), ([COMPILE], [], compiled)):
        name = "from_compiled" if first else "from_eager"
        part = run_cli("fit", *run, *first, f"--run_name={name}", stop)
        assert part.trainer.global_step == 12
        resumed = run_cli("fit", *run, *then, f"--ckpt_path={part.run_dir}/checkpoints/last.ckpt")
        assert resumed.run_dir == part.run_dir and resumed.trainer.global_step == 36
        for key, value in weights(resumed.model).items():
            torch.testing.assert_close(value, weights(reference.model)[key], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_exact_resume_holds_with_compile(run_cli: Any, workdir: Path) -> None:
    """Dropout, augmentation and shuffling on, compiled: resumed mid-epoch (step 6 of 12) the run ends
    with the uninterrupted compiled run's weights, bit for bit."""
    run = ["--trainer.max_epochs=3", "--trainer.limit_train_batches=4", COMPILE]
    full = run_cli("fit", *run, "--run_name=full", *every_step(workdir / "steps"))
    resumed = run_cli("fit", *run, "--run_name=resumed", f"--ckpt_path={workdir}/steps/step=6.ckpt")
    assert resumed.trainer.global_step == full.trainer.global_step == 12
    different = [k for k, v in weights(full.model).items() if not torch.equal(v, weights(resumed.model)[k])]
    assert not different


def exits(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    """Run ``fit`` of one step with ``args``, which must stop; its exit code and ``error:`` lines."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as caught:
        main(["fit", "--trainer.max_epochs=1", "--trainer.limit_train_batches=1", *args])
    return int(caught.value.code or 0), [
        e for e in capsys.readouterr().err.splitlines() if e.startswith("error:")
    ]


def test_a_model_that_fails_to_compile_stops_with_one_error_line(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, errors = exits(
        capsys, "--model=test_compile.GraphBreakClassifier", *CHEAP, "--compile.fullgraph=true"
    )
    assert code == 2 and len(errors) == 1, errors
    assert errors[0].startswith("error: torch.compile failed: ")
    assert errors[0].endswith(
        "Run eagerly with --compile.enabled=false, or try --compile.backend=aot_eager or "
        "--compile.fullgraph=false"
    )
    code, errors = exits(capsys, COMPILE, "--compile.backend=no_such_backend")
    assert code == 2 and len(errors) == 1 and "no_such_backend" in errors[0], errors
    assert not (workdir / "logs").exists()  # no run folder left behind


def test_inductor_on_cpu_without_a_cpp_compiler_stops_before_the_run_and_names_aot_eager(
    run_cli: Any, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The compiler inductor runs (``torch._inductor.config.cpp.cxx``: ``$CXX``, else ``g++``) missing:
    one line before the stage runs (nothing traced), no run folder; the backend it names trains without
    one."""
    missing = str(workdir / "no-such-g++")
    with torch._inductor.config.patch({"cpp.cxx": (None, missing)}):
        code, errors = exits(capsys, COMPILE)
        assert not (workdir / "logs").exists()
        fixed = run_cli("fit", COMPILE, "--compile.backend=aot_eager", "--trainer.limit_val_batches=0")
    assert code == 2 and len(errors) == 1, errors
    assert errors[0].startswith(
        "error: --compile.backend=inductor compiles C++ for the CPU and finds no C++ compiler ("
    )
    assert missing in errors[0]
    assert errors[0].endswith(
        "install one (g++) or point the CXX environment variable at it, or use --compile.backend=aot_eager "
        "(no compiler needed), or --compile.enabled=false"
    )
    assert fixed.trainer.global_step == 2


class DirectClassifier(PlainClassifier):
    """Steps that call the network (``self.net``) instead of the module: nothing of it is compiled."""

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(dim=1) == y).float().mean())


def test_steps_that_bypass_the_module_get_a_warning(run_cli: Any) -> None:
    with pytest.warns(UserWarning, match="DirectClassifier's steps did not call the module"):
        run_cli("fit", "--model=test_compile.DirectClassifier", "--checkpoint.monitor=val_acc", *CHEAP)
