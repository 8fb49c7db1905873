"""The segmented log: segments, offset/time indexes, leader-epoch cache, recovery."""
