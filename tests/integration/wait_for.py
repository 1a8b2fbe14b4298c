"""What the Python integration tests (prometheus_test.py, phubd_ops_test.py) share: a bounded
wait for a condition, and reading a file that may not exist yet."""
import time


def wait_for(what, check, timeout_s):
    """check()'s first truthy value, polled every 0.1 s; exits the test (FAIL) after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"FAIL: {what} not within {timeout_s} s")
        time.sleep(0.1)


def read(path):
    """The file's text ('' while it does not exist)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""
