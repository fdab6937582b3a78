"""For a project's own tests of the engine's commands on its task: settings that make a run take a
second (``FAST``), used by the engine's tests too."""

from __future__ import annotations

#: Overrides that make a ``fit`` (and ``validate``, ``test``, ``predict``) of any task short: one epoch of
#: two training batches, one batch of every evaluation split, a metrics row every step, no progress bar
#: or model summary. Put a test's own arguments after them (later arguments win).
FAST = [
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.limit_test_batches=1",
    "--trainer.limit_predict_batches=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.log_every_n_steps=1",
]
