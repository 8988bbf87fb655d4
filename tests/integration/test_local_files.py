"""lakehouse's local file systems (``dev.lakehouse.fs``) against Hadoop's own, side by side.

A session lakehouse starts on a local master reads and writes local files through them
(``lakehouse.spark.LOCAL_FILES_CONF``); they do with ``java.nio`` what Hadoop's run as
``chmod`` and ``readlink`` processes. Every answer is compared with Hadoop's classes over the
same paths: regular files, directories, symbolic links (to a file, to a directory, dangling),
missing paths, the permissions of each mode, and the renames Delta's log store commits by.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

pytestmark = pytest.mark.spark

HADOOP_RAW = "org.apache.hadoop.fs.RawLocalFileSystem"
OURS_RAW = "dev.lakehouse.fs.RawLocalFileSystem"
HADOOP_FS = "org.apache.hadoop.fs.local.LocalFs"
OURS_FS = "dev.lakehouse.fs.LocalFs"


def _conf(spark: Any) -> Any:
    return spark.sparkContext._jsc.hadoopConfiguration()


def _raw(spark: Any, name: str) -> Any:
    jvm = spark._jvm
    cls = jvm
    for part in name.split("."):
        cls = getattr(cls, part)
    fs = cls()
    fs.initialize(jvm.java.net.URI("file:///"), _conf(spark))
    return fs


def _context(spark: Any, name: str) -> Any:
    jvm = spark._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration(_conf(spark))
    conf.set("fs.AbstractFileSystem.file.impl", name)
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(
        jvm.java.net.URI("file:///"), conf
    )
    assert context.getDefaultFileSystem().getClass().getName() == name
    return context


def _status(spark: Any, fs: Any, path: Path) -> tuple[Any, ...]:
    try:
        st = fs.getFileLinkStatus(spark._jvm.org.apache.hadoop.fs.Path(str(path)))
    except Py4JJavaError as e:
        return ("raised", e.java_exception.getClass().getName())
    link = st.getSymlink().toString() if st.isSymlink() else None
    return (
        st.isFile(),
        st.isDirectory(),
        st.isSymlink(),
        st.getLen(),
        link,
        st.getPath().toString(),
        st.getPermission().toString(),
        st.getOwner(),
        st.getModificationTime(),
    )


def _tree(root: Path) -> dict[str, Path]:
    root.mkdir()
    (root / "file").write_text("twelve bytes")
    (root / "dir").mkdir()
    (root / "link-to-file").symlink_to(root / "file")
    (root / "link-to-dir").symlink_to(root / "dir")
    (root / "dangling").symlink_to(root / "gone")
    (root / "relative").symlink_to("file")
    names = ["file", "dir", "link-to-file", "link-to-dir", "dangling", "relative", "missing"]
    return {n: root / n for n in names}


def test_a_local_session_uses_lakehouses_file_systems(spark):
    jvm = spark._jvm
    conf = _conf(spark)
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
    assert fs.getClass().getName() == "dev.lakehouse.fs.LocalFileSystem"
    assert fs.getRaw().getClass().getName() == OURS_RAW
    context = jvm.org.apache.hadoop.fs.FileContext.getLocalFSFileContext(conf)
    assert context.getDefaultFileSystem().getClass().getName() == OURS_FS


def test_link_statuses_are_hadoops(spark, tmp_path):
    paths = _tree(tmp_path / "t")
    hadoop, ours = _raw(spark, HADOOP_RAW), _raw(spark, OURS_RAW)
    for name, path in paths.items():
        assert _status(spark, ours, path) == _status(spark, hadoop, path), name
    assert _status(spark, ours, paths["missing"])[0] == "raised"
    assert _status(spark, ours, paths["link-to-file"])[2] is True
    for name in ("file", "dir", "link-to-dir", "missing"):  # through FileContext
        h = _status(spark, _context(spark, HADOOP_FS), paths[name])
        assert _status(spark, _context(spark, OURS_FS), paths[name]) == h, name


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_permissions_are_set_as_hadoops_chmod_sets_them(spark, tmp_path, kind):
    jvm = spark._jvm
    fs_perm = jvm.org.apache.hadoop.fs.permission.FsPermission
    modes = [0o644, 0o600, 0o755, 0o000, 0o777, 0o640, 0o111]
    if kind == "dir":
        modes += [0o1777, 0o1755]  # the sticky bit goes to Hadoop's chmod
    got: dict[str, list[int]] = {}
    for name in (HADOOP_RAW, OURS_RAW):
        fs = _raw(spark, name)
        path = tmp_path / name.split(".")[0] / kind
        path.parent.mkdir()
        path.mkdir() if kind == "dir" else path.write_text("x")
        link = path.parent / "link"
        link.symlink_to(path)
        seen = []
        for mode in modes:
            for target in (path, link):  # a link: its target's permissions, as chmod does
                fs.setPermission(jvm.org.apache.hadoop.fs.Path(str(target)), fs_perm(mode))
                seen.append(stat.S_IMODE(os.stat(path).st_mode))
        got[name] = seen
        os.chmod(path, 0o700)
    assert got[OURS_RAW] == got[HADOOP_RAW]
    assert got[OURS_RAW][::2] == modes


def test_renames_refuse_an_existing_destination_as_hadoops_do(spark, tmp_path):
    """Delta's ``HDFSLogStore`` commits a version by creating a temporary file through
    ``FileContext`` and renaming it with ``Rename.NONE``: a version another writer committed
    first must make the rename fail, and the checksum files go with their files."""
    jvm, gateway = spark._jvm, spark.sparkContext._gateway
    fs = jvm.org.apache.hadoop.fs
    outcome: dict[str, list[Any]] = {}
    for name in (HADOOP_FS, OURS_FS):
        context = _context(spark, name)
        root = tmp_path / name.split(".")[0] / "_delta_log"
        root.mkdir(parents=True)
        seen: list[Any] = []
        for temp, target in (("a.tmp", "000.json"), ("b.tmp", "000.json"), ("c.tmp", "001.json")):
            flags = jvm.java.util.EnumSet.of(fs.CreateFlag.CREATE)
            out = context.create(
                fs.Path(str(root / temp)), flags, gateway.new_array(fs.Options.CreateOpts, 0)
            )
            out.write(temp.encode())
            out.close()
            renames = gateway.new_array(fs.Options.Rename, 1)
            renames[0] = fs.Options.Rename.NONE
            try:
                context.rename(fs.Path(str(root / temp)), fs.Path(str(root / target)), renames)
                seen.append("renamed")
            except Py4JJavaError as e:
                seen.append(e.java_exception.getClass().getName())
        seen.append(sorted(p.name for p in root.iterdir()))
        seen.append((root / "000.json").read_text())
        seen.append(sorted(stat.S_IMODE(p.stat().st_mode) for p in root.iterdir()))
        outcome[name] = seen
    assert outcome[OURS_FS] == outcome[HADOOP_FS]
    assert outcome[OURS_FS][:3] == [
        "renamed",
        "org.apache.hadoop.fs.FileAlreadyExistsException",
        "renamed",
    ]
    assert ".000.json.crc" in outcome[OURS_FS][3]
