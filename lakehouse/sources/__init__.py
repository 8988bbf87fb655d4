"""Streaming sources: Kafka through Spark's own Kafka source, and JSON-lines directories.

Both streams have :data:`RAW_SCHEMA` (Spark's Kafka schema without headers) and keep their
offsets in the query's checkpoint. Kafka is ``spark.readStream.format("kafka")`` with the
options validated and the user's librdkafka settings translated for its Java client
(:mod:`lakehouse.sources.kafka`); the files source is a Spark Python data source
(:mod:`lakehouse.sources.files`). This package is the only part of the library that uses
``confluent_kafka`` (driver-side metadata reads, and :mod:`~lakehouse.sources.kafka_admin` for
tests and the demo); :mod:`lakehouse.testing.broker` asks it whether a test broker is up.

Usage::

    from lakehouse.sources import read_files_stream, read_kafka_stream

    customers = read_kafka_stream(spark, bootstrap_servers="broker:9092",
                                  topics=["dbserver1.inventory.customers"],
                                  options={"kafka.security.protocol": "SASL_SSL",
                                           "kafka.config.file": "/secrets/kafka.properties"})
    orders = read_files_stream(spark, "/data/orders")
"""

from lakehouse.sources.files import FILES_SOURCE_NAME as FILES_SOURCE_NAME
from lakehouse.sources.files import FilesDataSource as FilesDataSource
from lakehouse.sources.kafka import KAFKA_SOURCE_NAME as KAFKA_SOURCE_NAME
from lakehouse.sources.kafka import KafkaSourceOptions as KafkaSourceOptions
from lakehouse.sources.schema import RAW_SCHEMA as RAW_SCHEMA
from lakehouse.sources.schema import RAW_SCHEMA_DDL as RAW_SCHEMA_DDL
from lakehouse.sources.streams import kafka_stream_options as kafka_stream_options
from lakehouse.sources.streams import read_files_stream as read_files_stream
from lakehouse.sources.streams import read_kafka_stream as read_kafka_stream
from lakehouse.sources.streams import register_sources as register_sources

__all__ = [
    "FILES_SOURCE_NAME",
    "KAFKA_SOURCE_NAME",
    "RAW_SCHEMA",
    "RAW_SCHEMA_DDL",
    "FilesDataSource",
    "KafkaSourceOptions",
    "kafka_stream_options",
    "read_files_stream",
    "read_kafka_stream",
    "register_sources",
]
