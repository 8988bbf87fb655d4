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

import threading
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    import pyarrow.fs as pafs

#: Hadoop's names of S3, which pyarrow opens as ``s3``.
HADOOP_S3_SCHEMES = ("s3a", "s3n")
#: Object stores whose filesystem is made once per bucket (making one resolves credentials).
_CACHED_SCHEMES = ("s3", "gs", "gcs")
_FILESYSTEMS: dict[str, pafs.FileSystem] = {}
_LOCK = threading.Lock()


def is_remote(location: str) -> bool:
    """Whether ``location`` is an object-store or HDFS URI (not a local path or ``file:``).

    >>> [is_remote(x) for x in ("/data/t", "file:///data/t", "s3a://lake/t", "gs://b/t")]
    [False, False, True, True]
    """
    scheme = urlparse(location).scheme
    return bool(scheme) and scheme != "file" and "://" in location


def pyarrow_uri(location: str) -> str:
    """The URI pyarrow opens for ``location``: Hadoop's ``s3a://``/``s3n://`` as ``s3://``.

    >>> pyarrow_uri("s3a://lake/tables/rates"), pyarrow_uri("/data/t")
    ('s3://lake/tables/rates', '/data/t')
    """
    scheme, sep, rest = location.partition("://")
    return f"s3://{rest}" if sep and scheme in HADOOP_S3_SCHEMES else location


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of ``location`` and the path to give it.

    Local paths and ``file:`` URIs (percent-decoded, as Spark encodes them) open on the local
    filesystem; an object store's filesystem is made once per bucket and kept.

    Raises:
        pyarrow.ArrowInvalid: pyarrow does not know the URI's scheme (``dbfs:/``).
    """
    import pyarrow.fs as pafs

    uri = pyarrow_uri(location)
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file") or "://" not in uri:
        return pafs.LocalFileSystem(), unquote(parsed.path) if parsed.scheme else uri
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
