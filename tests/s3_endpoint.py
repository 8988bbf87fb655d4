"""An S3-compatible endpoint for the tests (moto's server, see tests/s3_server.py).

``s3`` (module) starts one server on a free loopback port and gives the test session's Spark
its endpoint and credentials, on its Hadoop configuration at run time and never in a file;
they are taken away again when the module is done. The server is stopped by its process id.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from s3_server import S3Server, s3_server


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory, spark) -> Iterator[S3Server]:
    """moto's S3 server; the test session's Spark reaches it."""
    with s3_server(tmp_path_factory.mktemp("s3")) as server:
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        for key, value in server.spark_conf().items():
            hadoop.set(key.removeprefix("spark.hadoop."), value)
        hadoop.set("fs.s3a.access.key", server.access_key)
        hadoop.set("fs.s3a.secret.key", server.secret_key)
        try:
            yield server
        finally:
            for key in ("fs.s3a.access.key", "fs.s3a.secret.key"):
                hadoop.unset(key)
