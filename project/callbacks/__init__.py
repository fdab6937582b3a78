"""Callbacks of this project (everything Lightning already has is used from Lightning)."""

from .health import CHECKS, HealthCheck
from .interruption import GracefulInterruption
from .lr_schedule import WarmupCosineSchedule, warmup_cosine_factor
from .memory import MemoryGrowthWarning, MemoryMonitor
from .prediction_writer import CSVPredictionWriter
from .progress import LineProgressBar, default_extra_callbacks
from .reproducibility import ExactResume, epoch_seed
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
    "default_extra_callbacks",
    "epoch_seed",
    "warmup_cosine_factor",
]
