"""A SparkSession for kraftlog jobs: the same interpreter everywhere, Python filter pushdown on,
the ``kraftlog`` data source registered.

The executors' Python workers must import kraftlog (with its native modules) and pyarrow, so they
run the driver's interpreter: PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON default to sys.executable
(a value the user already exported wins: on a cluster it names the interpreter there).
"""

from __future__ import annotations

import os
import sys

DEFAULT_MASTER = "local[*]"


def python_environment() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def spark_session(master: str | None = None, *, app_name: str = "kraftlog", conf: dict | None = None):
    """getOrCreate a session (``master`` default: local[*]) with kraftlog's data source registered."""
    python_environment()
    from pyspark.sql import SparkSession

    from kraftlog.engine.pipeline.source import register

    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit (it starts the driver with PYSPARK_GATEWAY_PORT set) --master decides.
    if master is not None or "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or DEFAULT_MASTER)
    settings = {
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
