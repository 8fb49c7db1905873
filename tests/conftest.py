"""Suite-wide guard: refuse to run silently on the slow path.

Unless KRAFTLOG_NO_EXTENSIONS=1 is set, every native module listed in kraftlog._accel must import,
and at the end of the session every choice the chooser made must have been the native one. With
the variable set, every choice must have been the pure twin. Either violation fails the run.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from kraftlog import _accel

# Hypothesis's per-example deadline (200 ms) fails tests at random on a shared 2-core machine
# under load; every property test still has its example budget, and the CI run its time limit.
settings.register_profile("kraftlog", deadline=None)
settings.load_profile("kraftlog")


def pytest_configure(config: pytest.Config) -> None:
    if _accel.FORCE_PURE:
        return
    missing = {name: status for name, status in _accel.load_all_native().items() if status != "native"}
    if missing:
        lines = "; ".join(f"{name}: {status}" for name, status in missing.items())
        raise pytest.UsageError(
            f"native extension did not load ({lines}). Build it (make install) or run the twins "
            "with KRAFTLOG_NO_EXTENSIONS=1."
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    expected = "pure" if _accel.FORCE_PURE else "native"
    wrong = {name: why for name, why in _accel.choices().items() if not why.startswith(expected)}
    if wrong:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nkraftlog: expected every hot path to be {expected}, but: {wrong}")


@pytest.fixture(scope="module")
def spark(request):
    """A local[2] Spark session per test module (the Spark tests), stopped when the module ends."""
    from kraftlog.engine.pipeline.session import spark_session

    module = request.module.__name__.rsplit(".", 1)[-1]
    session = spark_session("local[2]", app_name=f"kraftlog-{module}",
                            conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    yield session
    session.stop()
