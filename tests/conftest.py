"""Shared fixtures; tests marked gpu or slow run only when asked for (see README.md)."""

import json
import logging
import os
from importlib import resources

import pytest


def pytest_collection_modifyitems(config, items):
    gates = {"gpu": "TUNA_GPU_TESTS", "slow": "TUNA_SLOW_TESTS"}
    for item in items:
        for mark, env in gates.items():
            if mark in item.keywords and os.environ.get(env) != "1":
                item.add_marker(pytest.mark.skip(reason=f"{mark} test: set {env}=1 to run"))


@pytest.fixture(scope="session")
def gmm_pool():
    """The measured GMM-1 pool shipped with tuna."""
    return json.loads(resources.files("tuna.data").joinpath("pools/GMM-1.json").read_text())


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
