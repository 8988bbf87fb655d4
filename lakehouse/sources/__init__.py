"""Spark streaming sources: Kafka (over confluent-kafka) and JSON-lines directories.

This package is the only part of lakehouse that implements Spark's Python DataSource API
and the only one that imports ``confluent_kafka``. Both sources produce
:data:`RAW_SCHEMA` (Spark's Kafka schema without headers) and keep their offsets in the
query's checkpoint.

Usage::

    from lakehouse.sources import read_kafka_stream, register_sources

    register_sources(spark)  # once per session; the read_* helpers do it for you
    orders = spark.readStream.format("lakehouse-kafka").option(
        "kafka.bootstrap.servers", "broker:9092").option("subscribe", "orders").load()
    customers = read_kafka_stream(spark, bootstrap_servers="broker:9092",
                                  topics=["dbserver1.inventory.customers"])
"""

from lakehouse.sources.files import FILES_SOURCE_NAME as FILES_SOURCE_NAME
from lakehouse.sources.files import FilesDataSource as FilesDataSource
from lakehouse.sources.kafka import KAFKA_SOURCE_NAME as KAFKA_SOURCE_NAME
from lakehouse.sources.kafka import KafkaDataSource as KafkaDataSource
from lakehouse.sources.schema import RAW_SCHEMA as RAW_SCHEMA
from lakehouse.sources.schema import RAW_SCHEMA_DDL as RAW_SCHEMA_DDL
from lakehouse.sources.streams import read_files_stream as read_files_stream
from lakehouse.sources.streams import read_kafka_stream as read_kafka_stream
from lakehouse.sources.streams import register_sources as register_sources

__all__ = [
    "FILES_SOURCE_NAME",
    "KAFKA_SOURCE_NAME",
    "RAW_SCHEMA",
    "RAW_SCHEMA_DDL",
    "FilesDataSource",
    "KafkaDataSource",
    "read_files_stream",
    "read_kafka_stream",
    "register_sources",
]
