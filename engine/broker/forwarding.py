"""A broker forwards the controller's client APIs to the active controller (KIP-590).

Kafka's clients send CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders and UpdateFeatures to the node a
Metadata answer names as ControllerId, and in KRaft that is a random live broker (the controllers
are not on the clients' listeners). So a broker takes these requests, asks the active controller
the same request at the same version over its ControllerChannel (the connection its lifecycle uses
for registration and heartbeats: NOT_CONTROLLER, a lost connection or a timeout moves on to the
next controller), and answers with the controller's answer unchanged. DescribeQuorum is forwarded
the same way (`kraftlog quorum describe --bootstrap-server <broker>`).

Kafka wraps forwarded requests in an Envelope carrying the client's principal; without ACLs there
is nothing to carry, so the request goes as it is.

The request has the longer of the broker's request timeout and its own ``timeout`` field (a
CreateTopics of many topics may take longer than one heartbeat's bound). While no controller takes
it (an election under way: the voters answer NOT_CONTROLLER or are gone) it is asked again, backing
off, until then; an attempt on a controller that stops leading ends as soon as the metadata log
names the next one (ControllerChannel). When no controller answered in time, every topic (feature)
gets REQUEST_TIMED_OUT naming why, which Kafka clients retry. A retried CreateTopics that did
commit the first time answers TOPIC_ALREADY_EXISTS, as it would in Kafka.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from kraftlog.engine.protocol.apis import (
    API_CREATE_PARTITIONS,
    API_CREATE_TOPICS,
    API_DELETE_TOPICS,
    API_ELECT_LEADERS,
    API_UPDATE_FEATURES,
)
from kraftlog.engine.protocol.controller_channel import ControllerChannel, Retry
from kraftlog.engine.protocol.responses import refusal
from kraftlog.raft import wire
from kraftlog.raft.messages import DescribeQuorumRequest

RETRY_BACKOFF_S, RETRY_BACKOFF_MAX_S = 0.05, 0.5  # between rounds over the controllers, while none takes it
FORWARDED_APIS = frozenset({API_CREATE_TOPICS, API_DELETE_TOPICS, API_CREATE_PARTITIONS, API_UPDATE_FEATURES,
                            API_ELECT_LEADERS})


class Forwarder:
    """What a broker's transport calls for the requests it does not answer itself."""

    def __init__(self, channel: ControllerChannel):
        self.channel = channel

    async def describe_quorum(self):
        api = wire.APIS[DescribeQuorumRequest]
        return await self.channel.ask(api.key, api.version, wire.request_to_kio(DescribeQuorumRequest()), api.response)

    async def request(self, api_key: int, version: int, body, response_type):
        """The active controller's answer to ``body`` (a kio request of a FORWARDED_APIS key).
        While no controller takes it (an election under way: every voter answers NOT_CONTROLLER
        or is gone) it is asked again, backing off, until its deadline."""
        loop = asyncio.get_running_loop()
        budget_ms = max(self.channel.request_timeout_ms, _request_timeout_ms(body))
        deadline = loop.time() + budget_ms / 1000
        backoff_s = RETRY_BACKOFF_S
        while True:
            remaining_ms = int((deadline - loop.time()) * 1000)
            try:
                return await self.channel.ask(api_key, version, body, response_type,
                                              timeout_ms=max(1, remaining_ms))
            except Retry as exc:
                last = str(exc)
            if loop.time() + backoff_s >= deadline:
                break
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, RETRY_BACKOFF_MAX_S)
        why = f"no active controller answered within {budget_ms} ms (last: {last})"
        return refusal(api_key, body, ErrorCode.request_timed_out, why)


def _request_timeout_ms(body) -> int:
    timeout = getattr(body, "timeout", None)  # CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders, UpdateFeatures
    return max(0, int(timeout.total_seconds() * 1000)) if timeout is not None else 0
