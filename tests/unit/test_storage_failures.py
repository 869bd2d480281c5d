"""One storage failure, one line (stateops.storage.failures): an object store's filesystem fails each of its calls
once, in turn, and every failure is a StorageFailure naming the path and the cause (exit code 1, an OSError too),
while the store's answers (a missing file, ...) and programming errors pass as they are. The same rule end to end,
each CLI command cut off from moto's S3 at several moments: tests/e2e/test_s3_cutoff.py."""
from __future__ import annotations

import io

import pytest
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError

from stateops.errors import StateOpsError
from stateops.storage import StorageFailure
from stateops.storage.failures import Guarded

pytestmark = pytest.mark.unit

FAILURES = [EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), ConnectTimeoutError(endpoint_url="http://x"),
            ConnectionResetError(104, "Connection reset by peer"), PermissionError("Access Denied"),
            TimeoutError("read timed out")]


class FlakyStore:
    """A file system whose call number `fail_at` (0-based, counting every call and every file read) raises
    `error`; the rest answer."""

    def __init__(self, fail_at: int, error: BaseException):
        self.calls, self.fail_at, self.error = 0, fail_at, error

    def _tick(self) -> None:
        self.calls += 1
        if self.calls - 1 == self.fail_at:
            raise self.error

    def ls(self, path, detail=False):
        self._tick()
        return [f"{path}/a", f"{path}/b"]

    def info(self, path):
        self._tick()
        if path.endswith("missing"):
            raise FileNotFoundError(path)
        return {"name": path, "size": 3, "type": "file"}

    def open(self, path, mode="rb"):
        self._tick()
        store = self

        class Handle(io.BytesIO):
            def read(self, *args):
                store._tick()
                return super().read(*args)

        return Handle(b"abc")


def _every_call(fs) -> list:
    """What a command does with a store: a listing, an info, a file read through a context manager."""
    return [fs.ls("bucket/p"), fs.info("bucket/p/a"), _read(fs, "bucket/p/a")]


def _read(fs, path):
    with fs.open(path, "rb") as handle:
        return handle.read()


@pytest.mark.parametrize("error", FAILURES, ids=lambda e: type(e).__name__)
def test_each_call_failing_once_is_one_line_naming_the_path_and_the_cause(error):
    whole = FlakyStore(-1, error)
    assert _every_call(Guarded(whole, "s3://bucket/p")) == [["bucket/p/a", "bucket/p/b"],
                                                             {"name": "bucket/p/a", "size": 3, "type": "file"}, b"abc"]
    for fail_at in range(whole.calls):
        fs = Guarded(FlakyStore(fail_at, error), "s3://bucket/p")
        with pytest.raises(StorageFailure) as caught:
            _every_call(fs)
        line = str(caught.value)
        assert "\n" not in line and line.startswith("bucket/p") and "failed (" in line and "Fix: " in line
        assert isinstance(caught.value, StateOpsError) and caught.value.exit_code == 1
        assert isinstance(caught.value, OSError), "code that takes a store's OSError for an unreadable file still does"


def test_the_stores_answers_and_programming_errors_pass_as_they_are():
    fs = Guarded(FlakyStore(-1, None), "s3://bucket/p")
    with pytest.raises(FileNotFoundError):
        fs.info("bucket/p/missing")
    with pytest.raises(TypeError):
        fs.ls()  # a call the code got wrong is the code's error, not the store's


def test_a_library_clients_store_failure_is_one_line_with_its_root_cause():
    """delta-rs reaches the store with its own client (object_store): its failures are OSError or DeltaError of many
    lines, the root cause last; the CLI prints them as one line (stateops.cli.main)."""
    from deltalake.exceptions import DeltaError

    from stateops.storage.failures import library_failure

    reset = OSError("Kernel error -> Generic S3 error\n  \x1b[31m↳\x1b[0m Error performing GET http://h/k in 1.7s\n"
                    "   \x1b[31m↳\x1b[0m Connection reset by peer (os error 104)\n")
    line = library_failure(reset)
    assert line.startswith("Kernel error -> Generic S3 error (Connection reset by peer (os error 104)). Fix: ")
    assert "\n" not in line and "\x1b" not in line
    assert library_failure(DeltaError("Generic S3 error: error sending request")).startswith("Generic S3 error")
    assert library_failure(ValueError("a bug")) is None, "not a store's failure: the traceback stays"
