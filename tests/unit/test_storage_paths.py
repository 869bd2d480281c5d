"""The storage layer's local shortcuts (`exists`, `is_dir`, `names`, `read_text` on a plain path: os calls, no
fsspec) answer as fsspec's local filesystem does for the same path, written as a plain path, relative to the
working folder, under `~`, or as a file:// URL (which goes through fsspec)."""
from __future__ import annotations

import os
import posixpath

import pytest
from fsspec.implementations.local import LocalFileSystem

from stateops.storage import exists, is_dir, names, read_text

pytestmark = pytest.mark.unit

FS = LocalFileSystem()


def _fsspec(path: str) -> tuple:
    p = FS._strip_protocol(path)
    listed = sorted(posixpath.basename(e) for e in FS.ls(p, detail=False)) if FS.isdir(p) else None
    text = FS.cat_file(p).decode() if FS.isfile(p) else None
    return FS.exists(p), FS.isdir(p), listed, text


def _ours(path: str) -> tuple:
    listed = names(path)
    try:
        text = read_text(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        text = None
    return exists(path), is_dir(path), sorted(listed) if listed is not None else None, text


def test_the_local_shortcuts_answer_as_fsspec(tmp_path, monkeypatch):
    (tmp_path / "cp" / "commits").mkdir(parents=True)
    for name in ("0", "1", "10", ".1.crc"):
        (tmp_path / "cp" / "commits" / name).write_text(f"v1\n{{\"batch\": \"{name}\"}}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    forms = []
    for rel in ("cp", "cp/commits", "cp/commits/10", "cp/commits/.1.crc", "cp/absent", "cp/commits/10/x"):
        forms += [str(tmp_path / rel), rel, f"./{rel}", f"~/{rel}", f"file://{tmp_path / rel}"]
    for path in forms:
        assert _ours(path) == _fsspec(path), path
    assert sorted(names("cp/commits")) == [".1.crc", "0", "1", "10"]
    assert names(os.path.join(str(tmp_path), "cp", "absent")) is None


@pytest.mark.parametrize("text,url", [("s3://b/k", True), ("S3A://b/k", True), ("file:///tmp/x", True),
                                      ("memory://x", True), ("/tmp/x", False), ("relative/x", False),
                                      ("/tmp/a://b", False), ("", False), ("://x", False)])
def test_url_or_path_is_one_test(text, url):
    """The one test of "URL or path" (storage.is_url); `absolute` keeps a URL and makes a path absolute."""
    from stateops.storage import absolute, is_url

    assert is_url(text) is url
    if text:
        assert absolute(text) == (text if url else os.path.abspath(text))


def test_the_layer_writes_whole_files_appends_and_removes(tmp_path):
    """write_text makes the folder and replaces a file whole (`replace`: no `.tmp` left), write_bytes writes bytes,
    append_text appends, remove says whether a file was there; checked with the file system's own reads."""
    from stateops.storage import append_text, makedirs, remove, write_bytes, write_text

    target = tmp_path / "a" / "b" / "doc.json"
    write_text(str(target), "one")
    write_text(str(target), '{"two": 2}', replace=True)
    assert target.read_text() == '{"two": 2}' and sorted(os.listdir(target.parent)) == ["doc.json"]
    write_bytes(f"file://{tmp_path}/c/chart.png", b"\x89PNG")
    assert (tmp_path / "c" / "chart.png").read_bytes() == b"\x89PNG"
    append_text(str(tmp_path / "log" / "run.log"), "a\n")
    append_text(str(tmp_path / "log" / "run.log"), "b\n")
    assert (tmp_path / "log" / "run.log").read_text() == "a\nb\n"
    assert remove(str(target)) is True and not target.exists() and remove(str(target)) is False
    makedirs(str(tmp_path / "x" / "y"))
    assert (tmp_path / "x" / "y").is_dir()


def test_the_layer_lists_reads_heads_moves_and_removes_in_bulk(tmp_path):
    """names filtered to folders or files (the plain path's scandir and the file:// URL's fsspec listing agree),
    files_under by relative path with sizes (hidden files included), read_bytes with a limit, move_file into a new
    folder, remove_all of several files in one call; checked with the file system's own reads."""
    from stateops.storage import files_under, move_file, names, read_bytes, remove_all

    (tmp_path / "t" / "sub" / "deep").mkdir(parents=True)
    (tmp_path / "t" / "a.txt").write_text("abcdef")
    (tmp_path / "t" / ".a.crc").write_text("x")
    (tmp_path / "t" / "sub" / "deep" / "b").write_text("bb")
    for form in (str(tmp_path / "t"), f"file://{tmp_path}/t"):
        assert sorted(names(form, folders=True)) == ["sub"], form
        assert sorted(names(form, folders=False)) == [".a.crc", "a.txt"], form
        assert sorted(names(form)) == [".a.crc", "a.txt", "sub"], form
    assert names(str(tmp_path / "absent"), folders=True) is None
    found = files_under(str(tmp_path / "t"))
    assert {rel: info["size"] for rel, info in found.items()} == {"a.txt": 6, ".a.crc": 1, "sub/deep/b": 2}
    assert files_under(str(tmp_path / "absent")) == {}
    assert read_bytes(str(tmp_path / "t" / "a.txt"), 3) == b"abc"
    assert read_bytes(f"file://{tmp_path}/t/a.txt") == b"abcdef"
    move_file(str(tmp_path / "t" / "a.txt"), str(tmp_path / "moved" / "in" / "a.txt"))
    assert not (tmp_path / "t" / "a.txt").exists() and (tmp_path / "moved" / "in" / "a.txt").read_text() == "abcdef"
    remove_all([str(tmp_path / "t" / ".a.crc"), str(tmp_path / "t" / "sub" / "deep" / "b")])
    assert sorted(p.name for p in (tmp_path / "t").rglob("*") if p.is_file()) == []
    remove_all([])
