"""An S3-compatible endpoint on loopback for tests: moto's server in a process of its own.

``moto.server`` serves the S3 API (buckets, objects, multipart uploads, conditional puts) on
a free port of 127.0.0.1; it is started as a subprocess and stopped by its process id. Each
:class:`S3Server` makes up its own access key and secret, which exist only in memory and in
the environment it hands to the processes that use it (:meth:`S3Server.env`), so no
credential is ever in a file of the repository.

What the jobs need to reach it: the credentials and ``AWS_ENDPOINT_URL`` in their environment
(Hadoop's S3A connector, pyarrow, delta-rs and boto3 read them there), and for Spark the
endpoint in ``spark.hadoop.fs.s3a.*`` settings (:meth:`S3Server.spark_conf`).

Usage::

    with s3_server(tmp_dir) as s3:
        s3.create_bucket("lake")
        env = {**os.environ, **s3.env()}    # for a lakehouse command
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from lakehouse.errors import EnvironmentSetupError
from lakehouse.testing.broker import free_port

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
REGION = "us-east-1"


class S3Server:
    """moto's S3 server on a free loopback port; its log is ``moto.log`` in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory).resolve()
        self.port = free_port()
        self.access_key = f"LH{secrets.token_hex(8).upper()}"
        self.secret_key = secrets.token_urlsafe(30)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's output."""
        return self.directory / "moto.log"

    def env(self) -> dict[str, str]:
        """The environment a process that uses the endpoint needs: credentials, region,
        endpoint (the AWS SDKs' and pyarrow's names; delta-rs: ``AWS_ALLOW_HTTP``)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def spark_conf(self) -> dict[str, str]:
        """Spark settings for ``s3a://`` locations here: the endpoint, path-style addressing,
        plain HTTP. Credentials are not among them: S3A reads them from the environment."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        }

    def start(self) -> str:
        """Start the server and wait until it answers; returns :attr:`endpoint`.

        Raises:
            EnvironmentSetupError: moto is not installed, or the server exits or does not
                answer within ``START_TIMEOUT_S`` (the message quotes its log).
        """
        try:
            import moto.server  # noqa: F401
        except ImportError as e:
            raise EnvironmentSetupError(
                "moto's server is not installed (a dev dependency: pip install -e '.[dev]')"
            ) from e
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env()},
            )
        atexit.register(self.stop)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise EnvironmentSetupError(
                    f"moto's S3 server exited with {self.process.returncode}; its log:\n"
                    f"{self.log_path.read_text(errors='replace')[-2000:]}"
                )
            try:
                with urllib.request.urlopen(f"{self.endpoint}/", timeout=1):
                    return self.endpoint
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise EnvironmentSetupError(
                    f"moto's S3 server did not answer on {self.endpoint} within "
                    f"{START_TIMEOUT_S:.0f} s; its log:\n"
                    f"{self.log_path.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.2)

    def client(self) -> object:
        """A boto3 S3 client of this endpoint (the tests' own look at the objects)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=REGION,
        )

    def create_bucket(self, name: str) -> str:
        """Create a bucket; returns its ``s3a://`` root."""
        self.client().create_bucket(Bucket=name)  # type: ignore[attr-defined]
        return f"s3a://{name}"

    def objects(self, bucket: str) -> Iterator[tuple[str, bytes]]:
        """Every object of the bucket, ``(key, body)``."""
        client = self.client()
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)  # type: ignore[attr-defined]
        for page in pages:
            for item in page.get("Contents", []):
                body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()  # type: ignore[attr-defined]
                yield item["Key"], body

    def stop(self) -> None:
        """Stop the server by its process id: terminate, then kill."""
        atexit.unregister(self.stop)
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def s3_server(directory: Path) -> Iterator[S3Server]:
    """Run an :class:`S3Server` for the ``with`` block; stop it at exit."""
    server = S3Server(directory)
    try:
        server.start()
        yield server
    finally:
        server.stop()
