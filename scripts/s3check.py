"""The harness of the boto3 check scripts run by scripts/s3-clients.sh
(s3_features.py, s3_versions.py): a registry of test functions, the S3
error code of a call, and a run that reports every test and exits 1 when
one failed."""

import sys
import traceback

from botocore.exceptions import ClientError

TESTS = []


def test(f):
    """Registers f as a test, run by run() in the order registered."""
    TESTS.append(f)
    return f


def code(fn, *a, **kw):
    """The S3 error code fn answers (None: it succeeded)."""
    try:
        fn(*a, **kw)
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def run(name):
    """Runs every registered test, prints PASS/FAIL each and a summary
    line, and exits 1 when one failed."""
    failed = []
    for t in TESTS:
        try:
            t()
            print(f"PASS {t.__name__}")
        except Exception:  # noqa: BLE001 - every failure is reported
            failed.append(t.__name__)
            print(f"FAIL {t.__name__}")
            traceback.print_exc()
    print(f"{name}: {len(TESTS) - len(failed)}/{len(TESTS)} passed" + (f"; failed: {' '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)
