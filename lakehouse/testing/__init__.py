"""Synthetic Debezium streams for testing pipelines built on lakehouse, and the local servers
the demo runs (a Kafka broker, PostgreSQL, a Kafka Connect worker with Debezium). The test
suite's own harnesses (an S3 endpoint, a Spark cluster, the class-data archive, job counting)
live in ``tests/`` and are not shipped."""

from lakehouse.testing.debezium import DebeziumTable as DebeziumTable
from lakehouse.testing.debezium import Message as Message
from lakehouse.testing.debezium import encode_decimal as encode_decimal

__all__ = ["DebeziumTable", "Message", "encode_decimal"]
