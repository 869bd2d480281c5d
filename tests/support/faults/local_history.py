"""For a home on local disk, the history the bucket's versions give on S3 (tests/support/faults/history.py): every
time a file name appeared in the tree, recorded as it happened, so a test can assert each commit point was created
exactly once.

A local file system keeps no versions: once a second writer renames its `offsets/7` over the first's, nothing on
disk says it happened. The kernel does: Linux inotify reports each name created in a watched directory. How the
writes of interest show:
- a create-once commit (write a temp file, then `link(temp, final)`, which fails if `final` exists): one IN_CREATE
  of `final`, and a refused second attempt shows nothing;
- a rename-over commit (`rename(temp, final)`, Spark's default on a local file system when it does not check, or
  a writer that checked and lost the race): IN_MOVED_TO of `final` every time, so an overwrite counts twice;
- plain `open(final, "w")`: IN_CREATE when the name is new only (rewriting an existing file creates no name).

The watch is recursive: a new directory is watched as soon as its creation is read, then listed, so files made in
it before its watch existed are counted too ("found"); a file whose inode the listing already saw is not counted
again when its own event arrives. Left: a name created between a new directory's watch and its listing and
replaced before its first event is read may count once too often (never too few). Reads run in a background
thread (inotify through ctypes: no dependency); `flush()`, called by every query, waits until every event the
kernel has queued so far is processed, so a query right after a write sees it. If the kernel's queue overflows
(IN_Q_OVERFLOW), queries raise rather than return a history with holes.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import select
import struct
import termios
import threading
import time
from dataclasses import dataclass

IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE = 0x40, 0x80, 0x100
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_ONLYDIR, IN_DONT_FOLLOW = 0x01000000, 0x02000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
WATCH_MASK = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR | IN_DONT_FOLLOW
EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then `len` bytes of name)
CREATE, MOVED_TO, FOUND = "create", "moved_to", "found"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)


@dataclass(frozen=True)
class Creation:
    """A name that appeared: `path` relative to the watched root, how (create, moved_to, or found by listing a
    directory new to the watch), whether it is a directory, and when it was read (time.monotonic())."""

    path: str
    kind: str
    is_dir: bool
    t: float


class CreationWatcher:
    """Records every creation of a file name under `root` (which must exist) from `start()` to `stop()`."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self._lock = threading.Lock()  # held while a batch of events is read and processed
        self._creations: list[Creation] = []
        self._dirs: dict[int, str] = {}  # watch descriptor -> directory (relative; "" = root)
        self._found: dict[str, int] = {}  # path found by listing a new directory -> its inode
        self._overflowed = False
        self._error: BaseException | None = None
        self._fd = -1
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None

    # --- life cycle ---

    def start(self) -> "CreationWatcher":
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"{self.root} is not a directory: create the home before watching it")
        self._fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        self._wake_r, self._wake_w = os.pipe()
        with self._lock:
            self._watch_tree("", record=False)  # what exists already is not a creation
        self._thread = threading.Thread(target=self._run, name=f"creation-watcher {self.root}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        self.flush()
        os.write(self._wake_w, b"x")
        self._thread.join(5)
        for fd in (self._fd, self._wake_r, self._wake_w):
            os.close(fd)
        self._thread = None

    def __enter__(self) -> "CreationWatcher":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- queries ---

    def flush(self, timeout: float = 5.0) -> None:
        """Waits until every event the kernel has queued so far is processed."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if self._error is not None:
                    raise RuntimeError(f"the watcher of {self.root} failed") from self._error
                pending = bytearray(4)
                fcntl.ioctl(self._fd, termios.FIONREAD, pending)
                if int.from_bytes(pending, "little") == 0:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the watcher of {self.root} is behind by {int.from_bytes(pending, 'little')} B")
            time.sleep(0.005)

    def events(self) -> list[Creation]:
        """Every creation so far, in the order read."""
        self.flush()
        with self._lock:
            if self._overflowed:
                raise RuntimeError(f"inotify's queue overflowed while watching {self.root}: creations were lost")
            return list(self._creations)

    def creations(self, path_regex: str = "", dirs: bool = False) -> dict[str, int]:
        """{path relative to the root: times created} of the files (and directories too if `dirs`) whose path
        matches `path_regex` (re.search)."""
        pattern = re.compile(path_regex)
        counts: dict[str, int] = {}
        for creation in self.events():
            if (dirs or not creation.is_dir) and pattern.search(creation.path):
                counts[creation.path] = counts.get(creation.path, 0) + 1
        return counts

    # --- the watching thread ---

    def _run(self) -> None:
        try:
            while True:
                ready, _, _ = select.select([self._fd, self._wake_r], [], [])
                if self._wake_r in ready:
                    return
                with self._lock:
                    self._drain()
        except BaseException as exc:  # noqa: BLE001 - reported by the next query
            self._error = exc

    def _drain(self) -> None:
        """Read and process every queued event (the lock is held)."""
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return
            now, offset, moved_dirs = time.monotonic(), 0, {}
            while offset < len(data):
                wd, mask, cookie, length = EVENT.unpack_from(data, offset)
                name = data[offset + EVENT.size:offset + EVENT.size + length].split(b"\0", 1)[0]
                offset += EVENT.size + length
                self._event(wd, mask, cookie, os.fsdecode(name), now, moved_dirs)
            for old in moved_dirs.values():  # moved out of the tree: stop following it
                self._forget_tree(old, remove=True)

    def _event(self, wd: int, mask: int, cookie: int, name: str, now: float, moved_dirs: dict[int, str]) -> None:
        if mask & IN_Q_OVERFLOW:
            self._overflowed = True
            return
        if mask & IN_IGNORED:
            self._dirs.pop(wd, None)
            return
        parent = self._dirs.get(wd)
        if parent is None:
            return
        path = os.path.join(parent, name) if parent else name
        is_dir = bool(mask & IN_ISDIR)
        if mask & IN_MOVED_FROM:
            if is_dir:
                moved_dirs[cookie] = path
            return
        if not mask & (IN_CREATE | IN_MOVED_TO):
            return
        found = self._found.pop(path, None)
        if found is not None and found == self._inode(path):
            return  # the listing of its new directory already counted this very file
        self._creations.append(Creation(path, CREATE if mask & IN_CREATE else MOVED_TO, is_dir, now))
        if is_dir:
            old = moved_dirs.pop(cookie, None) if mask & IN_MOVED_TO else None
            if old is not None:  # moved within the tree: its watches stay, under the new name
                self._forget_tree(old, remove=False, renamed_to=path)
                self._record_tree(path, MOVED_TO, now)
            else:
                self._watch_tree(path, record=True)

    def _inode(self, path: str) -> int | None:
        try:
            return os.lstat(os.path.join(self.root, path)).st_ino
        except OSError:
            return None

    def _watch(self, path: str) -> bool:
        wd = _libc.inotify_add_watch(self._fd, os.fsencode(os.path.join(self.root, path)), WATCH_MASK)
        if wd < 0:
            code = ctypes.get_errno()
            if code in (errno.ENOENT, errno.ENOTDIR):
                return False  # gone already
            raise OSError(code, f"inotify_add_watch {path}: {os.strerror(code)}"
                          + (" (raise fs.inotify.max_user_watches)" if code == errno.ENOSPC else ""))
        self._dirs[wd] = path
        return True

    def _watch_tree(self, path: str, record: bool) -> None:
        """Watch `path` and every directory below, then list them (after the watch: nothing falls between)."""
        if not self._watch(path):
            return
        try:
            entries = list(os.scandir(os.path.join(self.root, path)))
        except OSError:
            return
        for entry in entries:
            child = os.path.join(path, entry.name) if path else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if record:
                try:
                    self._found[child] = entry.inode()
                except OSError:
                    pass
                self._creations.append(Creation(child, FOUND, is_dir, time.monotonic()))
            if is_dir:
                self._watch_tree(child, record)

    def _record_tree(self, path: str, kind: str, now: float) -> None:
        for where, dirs, files in os.walk(os.path.join(self.root, path)):
            rel = os.path.relpath(where, self.root)
            for name in dirs:
                self._creations.append(Creation(os.path.join(rel, name), kind, True, now))
            for name in files:
                self._creations.append(Creation(os.path.join(rel, name), kind, False, now))

    def _forget_tree(self, old: str, remove: bool, renamed_to: str | None = None) -> None:
        for wd, path in list(self._dirs.items()):
            if path == old or path.startswith(old + os.sep):
                if remove:
                    _libc.inotify_rm_watch(self._fd, wd)
                    self._dirs.pop(wd, None)
                else:
                    self._dirs[wd] = renamed_to + path[len(old):]
