"""``--compile.*``: ``torch.compile`` for any LightningModule, one switch in the config (off by default)."""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable
from typing import Any, Literal

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from ..errors import ConfigError, first_line

_COMPILER_MODULES = ("torch._dynamo", "torch._inductor")
#: ``torch.compile``'s modes (``None``: its default).
Mode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


def is_compile_error(error: BaseException) -> bool:
    """Whether ``error`` comes from torch.compile (TorchDynamo tracing or a backend such as inductor):
    its class is theirs, or they raised it (e.g. a ``RuntimeError`` of ``fullgraph``)."""
    if type(error).__module__.startswith(_COMPILER_MODULES):
        return True
    traceback = error.__traceback__
    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    module = traceback.tb_frame.f_globals.get("__name__", "") if traceback is not None else ""
    return str(module).startswith(_COMPILER_MODULES)


class CompileModel(Callback):
    """Compile the LightningModule with ``torch.compile`` when a fit, validate, test or predict sets it
    up (``--compile.enabled=true``); any LightningModule, with no argument of its own.

    The module's ``forward`` (the whole network, whatever submodules it has) is replaced on the module
    itself by ``torch.compile(forward)``, so the module, its ``state_dict`` keys and its checkpoints are
    those of the eager module (compiling a submodule, ``self.net = torch.compile(self.net)``, would add
    ``_orig_mod.`` to its keys). The steps' own Python (``self.log``, metric updates) stays eager:
    compiled, as ``trainer.fit(torch.compile(model))`` does, it breaks the graph at every ``self.log``
    and recompiles for every logged name. So a step must call the module (``self(x)``) for its network
    to run compiled; one that calls ``self.encoder(x)`` directly gets a warning after the first
    training batch. Nothing about compiling is saved in checkpoints: ``test``, ``predict``, ``export``
    and ``report`` load a compiled run's checkpoint without compiling, and a run resumes with or
    without compiling whatever its checkpoint's run did.

    The compiled ``forward`` runs inside the steps of the loops (between the ``on_*_batch_start`` and
    ``on_*_batch_end`` hooks); called anywhere else (the model summary's FLOP count, your own code) it
    runs eagerly. Compilation is lazy: ``forward`` compiles at its first call in a training step and at
    its first in an evaluation step (and again for a new input shape). The time of those first calls is
    printed once, after the first batch that is not a sanity check (``compile: ...``). A ``forward``
    that fails to compile (e.g. a graph break with ``fullgraph``, a backend that fails) stops the run
    with a :class:`ConfigError` naming the cause and ``--compile.enabled=false``.

    Args:
        enabled: Compile the module (default off: the model runs eagerly).
        mode: ``torch.compile``'s ``mode``: ``None`` (its ``default``), ``reduce-overhead`` (CUDA
            graphs), ``max-autotune``, ``max-autotune-no-cudagraphs``.
        dynamic: ``torch.compile``'s ``dynamic``: ``None`` (recompile with dynamic shapes when a second
            shape is seen), ``True``, ``False`` (one compiled graph per shape).
        fullgraph: Fail instead of running Python between graphs at a graph break in ``forward``.
        backend: ``torch.compile``'s ``backend``: ``inductor`` (fused kernels; needs a C++ compiler
            on CPU), ``aot_eager`` or ``eager`` (to debug).

    Raises:
        ConfigError: ``torch.compile`` rejects the settings, or ``forward`` fails to compile.
    """

    def __init__(
        self,
        enabled: bool = False,
        mode: Mode | None = None,
        dynamic: bool | None = None,
        fullgraph: bool = False,
        backend: str = "inductor",
    ) -> None:
        self.enabled = enabled
        self.mode = mode
        self.dynamic = dynamic
        self.fullgraph = fullgraph
        self.backend = backend
        #: Seconds of the first call of the compiled ``forward`` in each mode (``train``, ``eval``),
        #: compilation included.
        self.first_calls: dict[str, float] = {}
        self._compiled: weakref.WeakSet[LightningModule] = weakref.WeakSet()
        self._shown = False
        self._in_step = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Compile ``pl_module.forward`` in place (once, whatever the number of stages run with it)."""
        if not self.enabled or pl_module in self._compiled:
            return
        options = {"mode": self.mode, "dynamic": self.dynamic, "fullgraph": self.fullgraph}
        try:
            compiled = torch.compile(pl_module.forward, backend=self.backend, **options)  # type: ignore[arg-type]
        except Exception as error:  # e.g. an unknown backend
            raise ConfigError(
                f"--compile: torch.compile rejected the settings: {self._cause(error)}"
            ) from error
        pl_module.forward = self._guard(pl_module, pl_module.forward, compiled)  # type: ignore[method-assign]
        self._compiled.add(pl_module)

    def _cause(self, error: BaseException) -> str:
        return f"{type(error).__name__}: {first_line(error)}. Run eagerly with --compile.enabled=false"

    def _guard(
        self, pl_module: LightningModule, eager: Callable[..., Any], forward: Callable[..., Any]
    ) -> Callable[..., Any]:
        """``forward`` (compiled) inside a step, else ``eager``; timing the first compiled call per mode
        and turning a compilation failure into a :class:`ConfigError`."""

        @functools.wraps(eager)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not self._in_step:
                return eager(*args, **kwargs)
            start = time.perf_counter()
            try:
                result = forward(*args, **kwargs)
            except Exception as error:
                if not is_compile_error(error):
                    raise
                hint = " (or allow graph breaks with --compile.fullgraph=false)" if self.fullgraph else ""
                raise ConfigError(
                    f"torch.compile failed on {type(pl_module).__name__}.forward: {self._cause(error)}{hint}"
                ) from error
            self.first_calls.setdefault(
                "train" if pl_module.training else "eval", time.perf_counter() - start
            )
            return result

        return call

    def _show(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Print the first calls' time, once, after the first batch outside the sanity check."""
        if self._shown or not self.enabled or trainer.sanity_checking:
            return
        self._shown = True
        name = type(pl_module).__name__
        if not self.first_calls:
            rank_zero_warn(
                f"--compile.enabled=true, but {name}'s steps did not call the module (self(x), its forward), "
                "so nothing ran compiled; call self(x) in the steps, or compile the submodules they call"
            )
        elif trainer.is_global_zero:
            parts = ", ".join(f"{mode} {seconds:.1f} s" for mode, seconds in self.first_calls.items())
            print(
                f"compile: {name}.forward's first calls took {sum(self.first_calls.values()):.1f} s, mostly "
                f"compiling ({parts}; backend {self.backend}, mode {self.mode or 'default'})",
                flush=True,
            )

    def _start(self) -> None:
        self._in_step = self.enabled

    def _end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._in_step = False
        self._show(trainer, pl_module)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self._start()

    def on_validation_batch_start(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self._start()

    def on_test_batch_start(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self._start()

    def on_predict_batch_start(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self._start()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self._end(trainer, pl_module)

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self._end(trainer, pl_module)

    def on_test_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self._end(trainer, pl_module)

    def on_predict_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self._end(trainer, pl_module)
