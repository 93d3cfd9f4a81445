"""Classify LLM provider errors with the failover rules engine.

>>> import failover
>>> failover.Engine().classify(message="Rate limit reached", status=429).reason
'rate_limit'
"""

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Optional, Union

__version__: str

StrPath = Union[str, "os.PathLike[str]"]
# A column: a list, a tuple, a pandas or Polars Series, a pyarrow Array or
# ChunkedArray, any iterable; or one value for every row.
Column = Union[Iterable[Any], str, int, float, None]

class RulesError(Exception):
    """Rules that cannot be used: a directory that cannot be read, or rules
    with errors. ``str(e)`` is the rendered diagnostics (as ``failover
    check`` prints them)."""

    diagnostics: list[dict[str, Any]]
    """Each diagnostic: ``code`` (``E002``, …), ``severity``, ``file``,
    ``line``, ``col``. Empty when the rules could not be read."""

class ModelError(Exception):
    """A model file that cannot be used: missing, damaged, or not a failover model."""

class Verdict:
    """The verdict on one error: the fields of a ``failover classify`` line."""

    reason: str
    """``rate_limit``, ``billing``, ``auth``, …; ``unclassified`` when nothing decided."""
    rule: Optional[str]
    """The deciding rule's id; None when no rule decided."""
    decided_by: Literal["rule", "weak rule", "model", "status rule", "none"]
    failover: bool
    """Whether the reason continues the fallback to the next model."""
    probability: Optional[float]
    """The evidence model's probability, when the model decided (three decimals, as the output line)."""
    status: Optional[int]
    """The status used: given, from the body, or from the message text."""
    truncated: bool
    """The message was longer than 1 MiB and was judged on its first 1 MiB."""
    json: str
    """This verdict's ``failover classify`` output line, byte for byte."""
    def to_dict(self) -> dict[str, Any]: ...

class Explanation:
    """How a verdict was reached."""

    verdict: Verdict
    atoms: list[str]
    """The literal strings (atoms) found in the message, in the order they occur."""
    text: str
    """The account ``failover classify --explain`` prints."""

class Engine:
    """A compiled ruleset and the evidence model it consults. Build once,
    share it between threads."""

    def __init__(
        self,
        rules: Optional[Sequence[StrPath]] = None,
        *,
        sources: Optional[Sequence[tuple[str, str]]] = None,
        defaults: bool = True,
        model: Optional[StrPath] = "embedded",
        min_confidence: Optional[float] = None,
    ) -> None:
        """``rules``: directories of operator ``.rules`` files, highest priority
        first, layered over the embedded defaults (``defaults=False`` leaves
        those out). ``sources``: rules files held in memory, as ``(name,
        text)`` pairs. ``model``: ``"embedded"`` (the default), a model file
        from ``failover model train``, or None for the rules alone.
        ``min_confidence``: one probability the model's top reason needs to
        decide, for every reason (None: per-reason thresholds from the cost of
        each mistake, as ``failover classify`` without ``--min-confidence``).

        Raises RulesError (with every diagnostic) and ModelError."""

    @property
    def reasons(self) -> list[str]:
        """The reasons the rules declare, in declaration order."""

    def classify(
        self,
        message: Optional[str] = None,
        *,
        status: Union[int, str, None] = None,
        provider: Optional[str] = None,
        code: Optional[str] = None,
        type: Optional[str] = None,
        body: Union[str, Mapping[str, Any], Sequence[Any], None] = None,
        model: Optional[str] = None,
    ) -> Verdict:
        """Classifies one error. ``status``: 100–599 (an int or a string of
        digits; anything else raises ValueError). ``body``: the response body
        as text, or a parsed JSON body. ``model``: the model the call was for."""

    def explain(
        self,
        message: Optional[str] = None,
        *,
        status: Union[int, str, None] = None,
        provider: Optional[str] = None,
        code: Optional[str] = None,
        type: Optional[str] = None,
        body: Union[str, Mapping[str, Any], Sequence[Any], None] = None,
        model: Optional[str] = None,
    ) -> Explanation:
        """Classifies one error and tells how (``failover classify --explain``)."""

    def classify_many(
        self,
        message: Column = None,
        *,
        status: Column = None,
        provider: Column = None,
        code: Column = None,
        type: Column = None,
        body: Column = None,
        model: Column = None,
        threads: Optional[int] = None,
    ) -> dict[str, list[Any]]:
        """Classifies a batch. Each argument is a column (list, tuple, pandas or
        Polars Series, pyarrow Array, any iterable; missing values are None,
        NaN or pandas.NA) or one value for every row. Returns equally long
        lists under ``reason``, ``rule``, ``decided_by``, ``failover``,
        ``probability``, ``status`` and ``truncated``, ready for
        ``pandas.DataFrame(...)``. The GIL is released while the engine runs,
        on ``threads`` threads (default: the machine's cores, one per 4096
        rows at most). Raises TypeError/ValueError naming the bad row."""

def read_corpus(path: StrPath) -> list[dict[str, Any]]:
    """Reads a labelled corpus file (``tests/field/*.yaml``,
    ``tests/vectors/openclaw.yaml``) with the library's own reader: one dict
    per item (provider, model, status, code, type, message, body, expected,
    line)."""
