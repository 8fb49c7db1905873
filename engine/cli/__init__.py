"""The `kraftlog` command: tools, demo, bench, spark and node commands."""
