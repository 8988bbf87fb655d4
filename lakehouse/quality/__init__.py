"""Data-quality report of the temporal join's tables: Great Expectations suites on pandas
(local tables, no JVM) or Spark, Data Docs, a JSON summary and a watermark plot.

>>> from lakehouse.quality import CHECKS
>>> list(CHECKS)  # doctest: +NORMALIZE_WHITESPACE
['probe_ids_unique', 'probe_rows_accounted', 'output_matched', 'proctime_build_version',
 'pending_age', 'watermark_monotonic']
"""

from lakehouse.quality.checks import CHECKS as CHECKS
from lakehouse.quality.checks import CheckName as CheckName
from lakehouse.quality.checks import CheckResult as CheckResult
from lakehouse.quality.checks import CheckStatus as CheckStatus
from lakehouse.quality.errors import QualityError as QualityError
from lakehouse.quality.pin import TableVersion as TableVersion
from lakehouse.quality.render import print_report as print_report
from lakehouse.quality.render import report_table as report_table
from lakehouse.quality.report import EngineChoice as EngineChoice
from lakehouse.quality.report import QualityReport as QualityReport
from lakehouse.quality.report import choose_engine as choose_engine
from lakehouse.quality.report import run_quality_report as run_quality_report

__all__ = [
    "CHECKS",
    "CheckName",
    "CheckResult",
    "CheckStatus",
    "EngineChoice",
    "QualityError",
    "QualityReport",
    "TableVersion",
    "choose_engine",
    "print_report",
    "report_table",
    "run_quality_report",
]
