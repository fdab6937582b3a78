"""``--compile.*``: ``torch.compile`` of any LightningModule with ``nn.Module.compile``, off by default."""

from __future__ import annotations

import time
import traceback
from typing import Any, Literal

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn

from .. import private
from ..errors import ConfigError, first_line

#: ``torch.compile``'s modes (``None``: its default).
Mode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


def raised_in(error: BaseException, *modules: str) -> bool:
    """Whether ``error`` is of, or was raised through the frames of, one of ``modules`` (or a submodule)."""
    frames = traceback.walk_tb(error.__traceback__)
    names = [type(error).__module__, *(str(frame.f_globals.get("__name__", "")) for frame, _ in frames)]
    return any(name == module or name.startswith(f"{module}.") for name in names for module in modules)


def compile_problem(error: BaseException) -> str | None:
    """One line for an error raised in torch.compile's frames (TorchDynamo tracing, a backend such as
    inductor), naming the cause and the fix; ``None`` for any other error."""
    if not raised_in(error, "torch._dynamo", "torch._inductor"):
        return None
    return (
        f"torch.compile failed: {type(error).__name__}: {first_line(error)}. Run eagerly with "
        "--compile.enabled=false, or try --compile.backend=aot_eager or --compile.fullgraph=false"
    )


class CompileModel(Callback):
    """Compile the LightningModule in place (``LightningModule.compile``) at the start of each stage.

    The module's calls (``self(x)``) run compiled; the steps' own Python (``self.log``, metrics) stays
    eager; ``state_dict`` keys stay the eager module's, so every command loads a compiled run's
    checkpoint uncompiled and a run resumes compiled or not. The first training step's time (mostly
    compiling) is printed once; steps that never call the module get a warning (nothing runs compiled).
    Inductor on CPU without a C++ compiler is refused before the stage runs, naming the backend that
    needs none.

    Args:
        enabled: Compile the module (default off: the model runs eagerly; the CLI adds no callback).
        mode: ``torch.compile``'s ``mode`` (``None``: its default; ``reduce-overhead`` uses CUDA graphs).
        dynamic: ``torch.compile``'s ``dynamic`` (``None``: dynamic shapes once a second shape is seen).
        fullgraph: Fail instead of running Python between graphs at a graph break.
        backend: ``inductor`` (fused kernels; needs a C++ compiler on CPU), ``aot_eager`` or ``eager``.

    Raises:
        ConfigError: ``torch.compile`` rejects the settings (e.g. an unknown backend), or inductor would
            compile CPU code and finds no C++ compiler.
    """

    def __init__(
        self,
        enabled: bool = False,
        mode: Mode | None = None,
        dynamic: bool | None = None,
        fullgraph: bool = False,
        backend: str = "inductor",
    ) -> None:
        self.enabled, self.mode, self.dynamic, self.fullgraph = enabled, mode, dynamic, fullgraph
        self.backend = backend
        self.calls = 0  # calls of the module, counted by a forward pre-hook
        #: The first training step's wall-clock time (mostly compiling); while it runs, minus its start.
        self.first_step_seconds = 0.0
        self._compiled: LightningModule | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Refuse inductor on CPU without a C++ compiler (found as inductor finds it), before the stage
        runs: inductor would fail at the first compiled call, after tracing the model."""
        if not (self.backend == "inductor" and trainer.strategy.root_device.type == "cpu"):
            return
        if (problem := private.cpp_compiler_problem()) is not None:
            raise ConfigError(
                f"--compile.backend=inductor compiles C++ for the CPU and finds no C++ compiler ({problem}): "
                "install one (g++) or point the CXX environment variable at it, or use "
                "--compile.backend=aot_eager (no compiler needed), or --compile.enabled=false"
            )

    def _compile(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._compiled is pl_module:
            return
        self._compiled = pl_module
        try:
            pl_module.compile(
                backend=self.backend, mode=self.mode, dynamic=self.dynamic, fullgraph=self.fullgraph
            )
        except Exception as error:
            raise ConfigError(
                f"--compile: torch.compile rejected the settings: {type(error).__name__}: "
                f"{first_line(error)}. Run eagerly with --compile.enabled=false"
            ) from error
        pl_module.register_forward_pre_hook(lambda *_: setattr(self, "calls", self.calls + 1))

    on_train_start = on_validation_start = on_test_start = on_predict_start = _compile

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        """Time the first training step."""
        if trainer.global_step == 0 and not self.first_step_seconds:
            self.first_step_seconds = -time.perf_counter()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        """After the first training step: its time, or a warning that nothing of it ran compiled."""
        if self.first_step_seconds >= 0:
            return
        self.first_step_seconds += time.perf_counter()
        if not self.calls:
            rank_zero_warn(
                f"--compile: {type(pl_module).__name__}'s steps did not call the module, so nothing ran "
                "compiled: call self(x) in them (a forward), not a submodule such as self.net(x)"
            )
        elif trainer.is_global_zero:
            print(
                f"compile: the first training step took {self.first_step_seconds:.1f} s, mostly compiling "
                f"(backend {self.backend}, mode {self.mode or 'default'})",
                flush=True,
            )
