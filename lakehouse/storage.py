"""Files lakehouse opens itself, beside Spark: how pyarrow reaches a location.

Locations are local paths, ``file:`` URIs or object-store URIs (``s3://``, ``gs://``,
``abfs://``, ``hdfs://``). Spark's Hadoop connector names S3 ``s3a://`` (``s3n://`` in old
configurations); pyarrow names the same objects ``s3://``, so those schemes are opened as S3.
pyarrow takes credentials, region and endpoint from the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL`` for an S3-compatible store), as
the AWS SDKs and delta-rs do; nothing here reads or logs them.

The writer leases (:mod:`lakehouse.lease`), the checkpoint's offsets log
(:mod:`lakehouse.checkpoint`) and the row-time join's narrow path (build files read in the
Python workers, :mod:`lakehouse.join.asof`) open their files through :func:`filesystem`.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    import pyarrow.fs as pafs

#: Where Databricks mounts DBFS on the driver and the workers.
DBFS_MOUNT = "/dbfs"
#: Hadoop's names of S3, which pyarrow opens as ``s3``.
HADOOP_S3_SCHEMES = ("s3a", "s3n")
#: Object stores whose filesystem is made once per bucket (making one resolves credentials).
_CACHED_SCHEMES = ("s3", "gs", "gcs")
_FILESYSTEMS: dict[str, pafs.FileSystem] = {}
_LOCK = threading.Lock()


def local_path(location: str, dbfs_mount: str = DBFS_MOUNT) -> str | None:
    """The local path of ``location``, or None when it is not on this machine's filesystem.

    Plain paths and ``file:`` URIs (percent-decoded, as Spark encodes them) are local;
    ``dbfs:/`` is local where Databricks mounts DBFS (``/dbfs``), so the driver reads the same
    files Spark does; every other scheme is remote.

    >>> [local_path(x) for x in ("/data/t", "file:///data/t", "file:/data/a%20b", "s3a://l/t")]
    ['/data/t', '/data/t', '/data/a b', None]
    >>> local_path("dbfs:/tables/t", dbfs_mount="/nonexistent"), local_path("dbfs:/t", "/tmp")
    (None, '/tmp/t')
    """
    scheme, sep, _ = location.partition(":")
    if not sep or "/" in scheme or len(scheme) < 2:  # a plain path (a colon in a file name)
        return location
    if scheme == "file":
        return unquote(urlparse(location).path)
    if scheme == "dbfs" and os.path.isdir(dbfs_mount):
        return f"{dbfs_mount}/{urlparse(location).path.lstrip('/')}"
    return None


def is_remote(location: str) -> bool:
    """Whether ``location`` is reached through an object store's (or HDFS') filesystem.

    >>> [is_remote(x) for x in ("/data/t", "file:///data/t", "s3a://lake/t", "gs://b/t")]
    [False, False, True, True]
    """
    return local_path(location) is None


def pyarrow_uri(location: str) -> str:
    """The URI pyarrow opens for ``location``: Hadoop's ``s3a://``/``s3n://`` as ``s3://``.

    >>> pyarrow_uri("s3a://lake/tables/rates"), pyarrow_uri("/data/t")
    ('s3://lake/tables/rates', '/data/t')
    """
    scheme, sep, rest = location.partition("://")
    return f"s3://{rest}" if sep and scheme in HADOOP_S3_SCHEMES else location


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of ``location`` and the path to give it.

    Local locations (:func:`local_path`) open on the local filesystem; an object store's
    filesystem is made once per bucket and kept.

    Raises:
        pyarrow.ArrowInvalid: pyarrow does not know the URI's scheme (``dbfs:/``).
    """
    import pyarrow.fs as pafs

    local = local_path(location)
    if local is not None:
        return pafs.LocalFileSystem(), local
    uri = pyarrow_uri(location)
    parsed = urlparse(uri)
    root = f"{parsed.scheme}://{parsed.netloc}"
    with _LOCK:
        fs = _FILESYSTEMS.get(root)
    if fs is None or parsed.scheme not in _CACHED_SCHEMES:
        fs, path = pafs.FileSystem.from_uri(uri)
        if parsed.scheme in _CACHED_SCHEMES:
            with _LOCK:
                _FILESYSTEMS[root] = fs
        return fs, path
    return fs, unquote(parsed.netloc + parsed.path)  # bucket/key, as from_uri gives it
