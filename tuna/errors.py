"""Errors tuna raises for bad input; each message names the problem and the way out."""


class TunaError(Exception):
    """Base class of tuna's errors."""


class TargetError(TunaError, ValueError):
    """An unknown preset, a target kind tuna cannot model, or a malformed target."""


class UnsupportedISAError(TargetError):
    """An instruction set tuna cannot analyse."""


class WorkloadError(TunaError, ValueError):
    """A workload name or file that cannot be turned into a TIR module."""


class AnalysisError(TunaError):
    """A candidate that could not be lowered or analysed."""


class DatabaseError(TunaError, ValueError):
    """A MetaSchedule database that cannot be read or converted; the message names the file and line."""


class ExportError(TunaError):
    """A tuned module that cannot be compiled or written; the message names the file and the target."""
