"""Shared fixtures; tests marked gpu or slow run only when asked for (see README.md)."""

import json
import logging
import os
import shutil
import subprocess
from importlib import resources

import pytest


def pytest_collection_modifyitems(config, items):
    gates = {"gpu": "TUNA_GPU_TESTS", "slow": "TUNA_SLOW_TESTS"}
    for item in items:
        for mark, env in gates.items():
            if mark in item.keywords and os.environ.get(env) != "1":
                item.add_marker(pytest.mark.skip(reason=f"{mark} test: set {env}=1 to run"))


@pytest.fixture(scope="session")
def host():
    """The preset of this machine's CPU, which measurements here time; skips where tuna has none."""
    from tuna import bench

    name = bench.preset_of(bench.machine_info())
    if name is None:
        pytest.skip("tuna has no preset for this CPU: nothing to measure with")
    return name


@pytest.fixture(scope="session")
def gmm_pool():
    """The measured GMM-1 pool shipped with tuna."""
    return json.loads(resources.files("tuna.data").joinpath("pools/GMM-1.json").read_text())


@pytest.fixture(scope="session")
def private_mounts():
    """Run a command in a mount namespace of its own, after a bash script that mounts there.

    Gives ``run(script, argv, **subprocess_run_kwargs)``; a real full or read-only disk for
    any user (root writes through file permissions). Skips the test where namespaces or
    mounts are not allowed (``unshare`` missing, no user namespaces for a non-root user).
    """
    base = ["unshare", "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    probe = "mount -t tmpfs -o size=64k tmpfs /mnt || mount -t tmpfs -o size=64k tmpfs /tmp"
    if shutil.which("unshare") is None or subprocess.run([*base, "bash", "-c", probe], capture_output=True).returncode:
        pytest.skip("no private mount namespace here (unshare --mount, then mount, refused)")

    def run(script: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run([*base, "bash", "-c", f'set -e; {script}; exec "$@"', "_", *argv], **kwargs)

    return run


def _drop_unnamed_metaschedule_handlers() -> None:
    """MetaSchedule's logging set-up formats the name of every handler of its logger and fails on
    unnamed ones; pytest's capture handlers end up on that logger once a tuning run has configured it."""
    log = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in [h for h in log.handlers if h.get_name() is None]:
        log.removeHandler(handler)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before each test's fixtures: module-scoped ones that tune included."""
    _drop_unnamed_metaschedule_handlers()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item):
    """Right before each test body runs."""
    _drop_unnamed_metaschedule_handlers()
    yield
