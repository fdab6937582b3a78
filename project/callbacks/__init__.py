"""Callbacks of this project (everything Lightning already has is used from Lightning)."""

from project.callbacks.health import CHECKS, HealthCheck, hidden_modules
from project.callbacks.interruption import GracefulInterruption
from project.callbacks.lr_schedule import WarmupCosineSchedule, warmup_cosine_factor
from project.callbacks.memory import MemoryGrowthWarning, MemoryMonitor, memory_stats_mib
from project.callbacks.prediction_writer import CSVPredictionWriter
from project.callbacks.progress import LineProgressBar
from project.callbacks.reproducibility import (
    ExactResume,
    collect_rng_states,
    epoch_seed,
    set_rng_states,
)
from project.callbacks.training_monitor import TrainingMonitor

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
    "epoch_seed",
    "hidden_modules",
    "memory_stats_mib",
    "set_rng_states",
    "warmup_cosine_factor",
]
