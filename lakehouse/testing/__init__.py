"""Helpers for testing pipelines built on lakehouse: synthetic Debezium streams."""

from lakehouse.testing.debezium import DebeziumTable as DebeziumTable
from lakehouse.testing.debezium import Message as Message
from lakehouse.testing.debezium import encode_decimal as encode_decimal

__all__ = ["DebeziumTable", "Message", "encode_decimal"]
