"""Streaming sources: Kafka through Spark's own Kafka source, JSON-lines directories, and
Delta tables' appends (the join's probe side).

All streams have :data:`RAW_SCHEMA` (Spark's Kafka schema without headers) and keep their
offsets in the query's checkpoint. Kafka is ``spark.readStream.format("kafka")`` with the
options validated and the user's librdkafka settings translated for its Java client
(:mod:`lakehouse.sources.kafka`); the files source is a Spark Python data source
(:mod:`lakehouse.sources.files`); a Delta table is Delta's own streaming source with each row
as a JSON record (:mod:`lakehouse.sources.delta`). This package is the only part of the
library that uses ``confluent_kafka`` (driver-side metadata reads, and
:mod:`~lakehouse.sources.kafka_admin` for tests and the demo); :mod:`lakehouse.testing.broker`
asks it whether a test broker is up.

Usage::

    from lakehouse.sources import read_delta_stream, read_files_stream, read_kafka_stream

    customers = read_kafka_stream(spark, bootstrap_servers="broker:9092",
                                  topics=["dbserver1.inventory.customers"],
                                  options={"kafka.security.protocol": "SASL_SSL",
                                           "kafka.config.file": "/secrets/kafka.properties"})
    orders = read_files_stream(spark, "/data/orders")
    bronze = read_delta_stream(spark, "bronze.orders", max_files_per_trigger=100)
"""

from lakehouse.sources.delta import DELTA_SOURCE_NAME as DELTA_SOURCE_NAME
from lakehouse.sources.delta import DeltaSourceOptions as DeltaSourceOptions
from lakehouse.sources.delta import rows_as_records as rows_as_records
from lakehouse.sources.files import FILES_SOURCE_NAME as FILES_SOURCE_NAME
from lakehouse.sources.files import FilesDataSource as FilesDataSource
from lakehouse.sources.kafka import KAFKA_SOURCE_NAME as KAFKA_SOURCE_NAME
from lakehouse.sources.kafka import KafkaSourceOptions as KafkaSourceOptions
from lakehouse.sources.schema import RAW_SCHEMA as RAW_SCHEMA
from lakehouse.sources.schema import RAW_SCHEMA_DDL as RAW_SCHEMA_DDL
from lakehouse.sources.streams import kafka_stream_options as kafka_stream_options
from lakehouse.sources.streams import read_delta_stream as read_delta_stream
from lakehouse.sources.streams import read_files_stream as read_files_stream
from lakehouse.sources.streams import read_kafka_stream as read_kafka_stream
from lakehouse.sources.streams import register_sources as register_sources

__all__ = [
    "DELTA_SOURCE_NAME",
    "FILES_SOURCE_NAME",
    "KAFKA_SOURCE_NAME",
    "RAW_SCHEMA",
    "RAW_SCHEMA_DDL",
    "DeltaSourceOptions",
    "FilesDataSource",
    "KafkaSourceOptions",
    "kafka_stream_options",
    "read_delta_stream",
    "read_files_stream",
    "read_kafka_stream",
    "register_sources",
    "rows_as_records",
]
