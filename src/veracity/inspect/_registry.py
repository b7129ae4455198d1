"""The ``inspect_ai`` entry point: importing this registers veracity's tasks, scorers and metrics."""

from veracity.inspect import db_mmlu, deception_answer, gamma_qa, gamma_scorer

__all__ = ["db_mmlu", "deception_answer", "gamma_qa", "gamma_scorer"]
