"""lakehouse: temporal joins against a CDC-fed, versioned Delta dimension on Spark."""

__version__ = "0.1.0"
