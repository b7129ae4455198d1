"""veracity inside inspect_ai: the gamma scorer and the DB-MMLU task (``pip install 'veracity[inspect]'``).

>>> from veracity.inspect import gamma_scorer, db_mmlu
>>> callable(gamma_scorer) and callable(db_mmlu)
True

``inspect eval veracity/db_mmlu --model ...`` and ``inspect eval veracity/gamma_qa --model ...``
find them through the ``inspect_ai`` entry point once the extra is installed.
"""

from __future__ import annotations

try:
    import inspect_ai  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    from veracity.errors import ConfigError

    raise ConfigError(f"veracity.inspect needs inspect_ai: pip install 'veracity[inspect]' ({exc})") from None

from veracity.inspect.db_mmlu import db_mmlu, deception_answer
from veracity.inspect.gamma import gamma_scorer
from veracity.inspect.gamma_qa import gamma_qa

__all__ = ["db_mmlu", "deception_answer", "gamma_qa", "gamma_scorer"]
