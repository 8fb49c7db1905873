"""Proves the broker lifecycle's timing after a registration: the first heartbeat goes at once
(Kafka's BrokerLifecycleManager), not a heartbeat interval later, so a restarted broker learns it
caught up (and starts answering client Metadata) one round trip after it registered."""

from __future__ import annotations

import asyncio
import types

from kio.schema.broker_heartbeat.v1 import request as kheartbeat_req
from kio.schema.broker_heartbeat.v1 import response as kheartbeat_resp
from kio.schema.broker_registration.v4 import response as kregister_resp
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from kraftlog.engine.broker.lifecycle import BrokerConfig, BrokerLifecycle
from kraftlog.engine.protocol.apis import API_BROKER_HEARTBEAT, API_BROKER_REGISTRATION

HEARTBEAT_INTERVAL_MS = 60_000  # a heartbeat waiting out (a fraction of) this would time the test out


class FakeChannel:
    """Answers registration and heartbeats at once (caught up, unfenced); records the asks."""

    controller_id = 1

    def __init__(self):
        self.asks: list[int] = []
        self.heartbeated = asyncio.Event()

    async def ask(self, api_key, version, body, response_type):
        self.asks.append(api_key)
        if api_key == API_BROKER_REGISTRATION:
            return kregister_resp.BrokerRegistrationResponse(throttle_time=i32(0), error_code=ErrorCode.none,
                                                             broker_epoch=i64(7))
        self.heartbeated.set()
        return kheartbeat_resp.BrokerHeartbeatResponse(throttle_time=i32(0), error_code=ErrorCode.none,
                                                       is_caught_up=True, is_fenced=False, should_shut_down=False)

    async def close(self):
        pass


def test_the_first_heartbeat_follows_the_registration_at_once():
    async def run():
        publisher = types.SimpleNamespace(next_offset=10)
        lifecycle = BrokerLifecycle(5, "cluster", publisher, {1: ("127.0.0.1", 1)}, listeners=[], features=[],
                                    rack=None, config=BrokerConfig(heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS))
        channel = lifecycle.channel = FakeChannel()
        lifecycle.start()
        try:
            # the heartbeat's own wait is far beyond this timeout: only an immediate one passes
            await asyncio.wait_for(channel.heartbeated.wait(), 5)
            await asyncio.wait_for(lifecycle.initial_catch_up.wait(), 5)
        finally:
            await lifecycle.stop()
        assert channel.asks[:2] == [API_BROKER_REGISTRATION, API_BROKER_HEARTBEAT]
        assert lifecycle.broker_epoch == 7 and not lifecycle.fenced

    asyncio.run(run())


def test_a_request_given_up_at_shutdown_leaves_no_unretrieved_error_behind():
    """A node stopping cancels its broker's task mid-request; closing the channel then must not
    leave a failed request future behind, which asyncio reports at collection time as "Future
    exception was never retrieved" (it was a node's last stderr line after its one error line)."""
    import gc

    from kraftlog.engine.protocol.controller_channel import ControllerChannel

    async def run() -> list[str]:
        reported: list[str] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: reported.append(ctx["message"]))
        asked = asyncio.Event()

        async def silent(reader, writer):  # reads the request, never answers
            await reader.read(1)
            asked.set()
            await reader.read()
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        channel = ControllerChannel({1: ("127.0.0.1", port)}, types.SimpleNamespace(leader=(1, 1)), 60_000)
        body = kheartbeat_req.BrokerHeartbeatRequest(broker_id=i32(2), broker_epoch=i64(7),
                                                     current_metadata_offset=i64(0), want_fence=False,
                                                     want_shut_down=False)
        task = asyncio.create_task(channel.ask(API_BROKER_HEARTBEAT, 1, body, kheartbeat_resp.BrokerHeartbeatResponse))
        await asked.wait()
        task.cancel()
        await asyncio.wait({task})
        await channel.close()
        server.close()
        await server.wait_closed()
        del task
        gc.collect()
        await asyncio.sleep(0)
        return reported

    assert asyncio.run(run()) == []
