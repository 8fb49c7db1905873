"""Raft metrics (KIP-595's table), computed from the injected clock only.

Names follow Kafka's raft-metrics group: current-leader, current-epoch, current-vote,
log-end-offset, log-end-epoch, high-watermark, current-state, election-latency-avg/max,
commit-latency-avg/max, fetch-records-rate, append-records-rate, poll-idle-ratio-avg.
Rates are per second over the last ``window_ms``; averages are over the same window.

Ours beyond Kafka's table (KIP-392 on the metadata log): fetch-source-id (the node this
follower or observer fetches from: the leader, or the voter in its rack the leader named; -1
when it fetches from no one), observer-fetches-served (answers with records a follower sent to
observers), read-replica-fallbacks (times an observer left its read replica on an error).
"""

from __future__ import annotations

from collections import deque


class _Windowed:
    """(time_ms, value) samples kept for ``window_ms``; bounded by ``max_samples``."""

    def __init__(self, window_ms: int, max_samples: int = 4096):
        self.window_ms = window_ms
        self.samples: deque[tuple[int, float]] = deque(maxlen=max_samples)

    def record(self, now_ms: int, value: float) -> None:
        self.samples.append((now_ms, value))

    def _live(self, now_ms: int):
        while self.samples and self.samples[0][0] <= now_ms - self.window_ms:
            self.samples.popleft()
        return [v for _, v in self.samples]

    def avg(self, now_ms: int) -> float:
        live = self._live(now_ms)
        return sum(live) / len(live) if live else 0.0

    def max(self, now_ms: int) -> float:
        live = self._live(now_ms)
        return max(live) if live else 0.0

    def rate_per_s(self, now_ms: int) -> float:
        return sum(self._live(now_ms)) * 1000.0 / self.window_ms


class RaftMetrics:
    def __init__(self, window_ms: int):
        self.election_latency_ms = _Windowed(window_ms)
        self.commit_latency_ms = _Windowed(window_ms)
        self.fetch_records = _Windowed(window_ms)
        self.append_records = _Windowed(window_ms)
        self.poll_idle_ratio = _Windowed(window_ms)
        self.election_started_ms: int | None = None
        self.last_poll_end_ms: int | None = None

    def poll_started(self, now_ms: int) -> None:
        self._poll_start_ms = now_ms

    def poll_finished(self, now_ms: int) -> None:
        # idle = time since the previous poll ended; busy = time inside this poll
        if self.last_poll_end_ms is not None:
            idle = self._poll_start_ms - self.last_poll_end_ms
            busy = now_ms - self._poll_start_ms
            if idle + busy > 0:
                self.poll_idle_ratio.record(now_ms, idle / (idle + busy))
        self.last_poll_end_ms = now_ms

    def snapshot(self, core, now_ms: int) -> dict[str, float | int | str]:
        return {
            "current-leader": core.leader_id,
            "current-epoch": core.epoch,
            "current-vote": core.voted_id,
            "log-end-offset": core.log.end_offset(),
            "log-end-epoch": core.log.last_fetched_epoch(),
            "high-watermark": core.high_watermark,
            "current-state": core.role.value.lower(),
            "election-latency-avg": self.election_latency_ms.avg(now_ms),
            "election-latency-max": self.election_latency_ms.max(now_ms),
            "commit-latency-avg": self.commit_latency_ms.avg(now_ms),
            "commit-latency-max": self.commit_latency_ms.max(now_ms),
            "fetch-records-rate": self.fetch_records.rate_per_s(now_ms),
            "append-records-rate": self.append_records.rate_per_s(now_ms),
            "poll-idle-ratio-avg": self.poll_idle_ratio.avg(now_ms),
            "fetch-source-id": core.fetch_source_id,
            "observer-fetches-served": core.observer_fetches_served,
            "read-replica-fallbacks": core.read_replica_fallbacks,
        }
