"""Callbacks of this project (everything Lightning already has is used from Lightning)."""

from .health import CHECKS, HealthCheck, hidden_modules
from .interruption import GracefulInterruption
from .lr_schedule import WarmupCosineSchedule, warmup_cosine_factor
from .memory import MemoryGrowthWarning, MemoryMonitor, memory_stats_mib
from .prediction_writer import CSVPredictionWriter
from .progress import LineProgressBar, default_extra_callbacks
from .reproducibility import (
    ExactResume,
    collect_rng_states,
    epoch_seed,
    set_rng_states,
)
from .training_monitor import TrainingMonitor

__all__ = [
    "CHECKS",
    "CSVPredictionWriter",
    "ExactResume",
    "GracefulInterruption",
    "HealthCheck",
    "LineProgressBar",
    "MemoryGrowthWarning",
    "MemoryMonitor",
    "TrainingMonitor",
    "WarmupCosineSchedule",
    "collect_rng_states",
    "default_extra_callbacks",
    "epoch_seed",
    "hidden_modules",
    "memory_stats_mib",
    "set_rng_states",
    "warmup_cosine_factor",
]
