"""The demo: the product end to end on generated data (``lakehouse demo``)."""

from lakehouse.demo.run import run_demo as run_demo

__all__ = ["run_demo"]
