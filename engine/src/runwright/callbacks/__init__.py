"""The engine's callbacks: what Lightning's own do not do (each says which of Lightning's it builds on)."""

from .averaging import AverageFromTrainedWeights
from .compile import CompileModel, compile_problem, raised_in
from .evaluation import DistributedEvaluation
from .health import CHECKS, HealthCheck
from .interruption import Interruption
from .memory import MemoryGrowthWarning, MemoryMonitor
from .monitor import TrainingMonitor
from .prediction_writer import CSVPredictionWriter
from .progress import LineProgressBar, console_callbacks

__all__ = [
    "CHECKS",
    "AverageFromTrainedWeights",
    "CSVPredictionWriter",
    "CompileModel",
    "DistributedEvaluation",
    "HealthCheck",
    "Interruption",
    "LineProgressBar",
    "MemoryGrowthWarning",
    "MemoryMonitor",
    "TrainingMonitor",
    "compile_problem",
    "console_callbacks",
    "raised_in",
]
