"""The quality report's error (its root is :class:`lakehouse.errors.LakehouseError`)."""

from __future__ import annotations

from lakehouse.errors import LakehouseError


class QualityError(LakehouseError):
    """Raised when the quality report cannot be produced: Great Expectations failed (the
    original exception is chained as ``__cause__``), a suite file is missing or invalid, or
    the tables' commit metadata cannot be read.

    A *failing check* is not an error: it is a result in the report.

    Attributes:
        stage: what the report was doing (``"loading suite 'pending_age'"``, ...).
    """

    def __init__(self, message: str, *, stage: str) -> None:
        super().__init__(message)
        self.stage = stage
