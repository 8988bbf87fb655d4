"""lakehouse: temporal joins against a CDC-fed, versioned Delta dimension on Spark.

The Python API (:mod:`lakehouse.api`): a streaming DataFrame in, Spark's own
``DataStreamWriter`` out::

    import lakehouse

    spark = lakehouse.get_spark()
    orders = lakehouse.read_files_stream(spark, "landing/orders")
    query = (
        lakehouse.temporal_join(orders, lakehouse.JoinOptions(...))
        .option("checkpointLocation", "state/join-orders")
        .trigger(availableNow=True)
        .start()
    )

Names are imported when first used, so ``import lakehouse`` starts no Spark and needs no
pyspark (the command line and the Spark-free quality report rely on that).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from lakehouse.api import PipelineWriter, ingest_cdc, temporal_join
    from lakehouse.config import IngestOptions, IngestTableConfig, Settings, load_settings
    from lakehouse.dimension import BatchReport
    from lakehouse.errors import ConfigError, LakehouseError
    from lakehouse.join import JoinBatchReport, JoinOptions
    from lakehouse.sources import (
        kafka_stream_options,
        read_delta_stream,
        read_files_stream,
        read_kafka_stream,
        rows_as_records,
    )
    from lakehouse.spark import get_spark

#: Each public name and the module that defines it.
_EXPORTS = {
    "PipelineWriter": "lakehouse.api",
    "ingest_cdc": "lakehouse.api",
    "temporal_join": "lakehouse.api",
    "IngestOptions": "lakehouse.config",
    "IngestTableConfig": "lakehouse.config",
    "Settings": "lakehouse.config",
    "load_settings": "lakehouse.config",
    "BatchReport": "lakehouse.dimension",
    "ConfigError": "lakehouse.errors",
    "LakehouseError": "lakehouse.errors",
    "JoinBatchReport": "lakehouse.join",
    "JoinOptions": "lakehouse.join",
    "kafka_stream_options": "lakehouse.sources",
    "read_delta_stream": "lakehouse.sources",
    "read_files_stream": "lakehouse.sources",
    "read_kafka_stream": "lakehouse.sources",
    "rows_as_records": "lakehouse.sources",
    "get_spark": "lakehouse.spark",
}

__all__ = [
    "BatchReport",
    "ConfigError",
    "IngestOptions",
    "IngestTableConfig",
    "JoinBatchReport",
    "JoinOptions",
    "LakehouseError",
    "PipelineWriter",
    "Settings",
    "get_spark",
    "ingest_cdc",
    "kafka_stream_options",
    "load_settings",
    "read_delta_stream",
    "read_files_stream",
    "read_kafka_stream",
    "rows_as_records",
    "temporal_join",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lakehouse' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access skips this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
