"""numpy's OpenBLAS runs one thread in phasewatch's own processes, and the
watched command's environment is the user's (phasewatch.cli.blas)."""

import os
import subprocess
import sys

import pytest

PHASEWATCH = [sys.executable, "-m", "phasewatch.cli"]

SHOW = "echo ${OPENBLAS_NUM_THREADS-unset}"


def blas_threads(env: dict) -> str:
    code = ("from phasewatch.cli.blas import load_numpy; load_numpy(); import threadpoolctl; "
            "print([p['num_threads'] for p in threadpoolctl.threadpool_info() "
            "if p['internal_api'] == 'openblas'])")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()


def without_variable() -> dict:
    return {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}


def test_numpy_loads_with_one_blas_thread():
    if os.cpu_count() < 2:
        pytest.skip("one CPU: OpenBLAS would start one thread anyway")
    assert blas_threads(without_variable()) == "[1]"


def test_a_number_of_threads_the_user_chose_is_kept():
    assert blas_threads(without_variable() | {"OPENBLAS_NUM_THREADS": "2"}) == "[2]"


@pytest.mark.parametrize("given, seen", [(None, "unset"), ("3", "3")])
def test_the_command_sees_the_users_environment(given, seen):
    env = without_variable() | ({} if given is None else {"OPENBLAS_NUM_THREADS": given})
    proc = subprocess.run([*PHASEWATCH, "run", "-q", "--", "sh", "-c", SHOW], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{seen}\n"
