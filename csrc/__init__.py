"""kraftlog: an embeddable, Kafka-compatible cluster metadata log.

The root package holds the native modules (built from csrc/*.pyx), their type stubs, the
typed errors every layer shares and the chooser between native code and its pure-Python twins.
Subpackages: kraftlog.engine (storage, snapshots, image, server), kraftlog.raft (consensus),
kraftlog.bench (benchmarks). Importing this package is cheap: it imports no third-party module.
"""

from kraftlog._version import __version__

__all__ = ["__version__"]
