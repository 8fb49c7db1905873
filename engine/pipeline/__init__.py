"""PySpark data source and jobs over metadata logs and snapshots."""
