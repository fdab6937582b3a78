"""The engine's callbacks (everything Lightning already has is used from Lightning)."""

from .compile import CompileModel
from .evaluation import DistributedEvaluation
from .health import CHECKS, HealthCheck
from .interruption import GracefulInterruption
from .memory import MemoryGrowthWarning, MemoryMonitor
from .prediction_writer import CSVPredictionWriter
from .progress import LineProgressBar, default_extra_callbacks
from .training_monitor import TrainingMonitor

__all__ = [
    "CHECKS",
    "CSVPredictionWriter",
    "CompileModel",
    "DistributedEvaluation",
    "GracefulInterruption",
    "HealthCheck",
    "LineProgressBar",
    "MemoryGrowthWarning",
    "MemoryMonitor",
    "TrainingMonitor",
    "default_extra_callbacks",
]
