"""Controllers register themselves (KIP-919): ControllerRegistration (API 70) -> RegisterControllerRecord.

Every controller tells the active one its incarnation, listeners and supported feature ranges, so
feature changes (features.py) can check every controller, not only the active one, and
`kraftlog features describe` / the image show which controller supports what. Kafka's rules:

    - the record exists from metadata.version 3.7-IV0 (CONTROLLER_REGISTRATION): below it the
      active controller answers UNSUPPORTED_VERSION and the registrar tries again later (after an
      upgrade it succeeds);
    - a controller whose supported metadata.version range does not hold the finalized level is
      refused with UNSUPPORTED_VERSION (it could not read the log);
    - a registration identical to the one in the image (same incarnation, listeners, features) is
      answered at once without a write.

``ControllerRegistrar`` runs on every controller: it registers once the image has a
metadata.version, and again whenever the image stops holding its current registration (a new
incarnation after a restart, or an image reloaded from a snapshot written before it registered).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid

from kio.schema.controller_registration.v0 import request as kreg_req
from kio.schema.controller_registration.v0 import response as kreg_resp
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, u16

from kraftlog.engine.controller.writes import ControllerResult
from kraftlog.engine.image import versions
from kraftlog.engine.image.image import METADATA_VERSION, ControllerRegistration, Endpoint
from kraftlog.engine.protocol.apis import API_CONTROLLER_REGISTRATION
from kraftlog.engine.protocol.controller_channel import ControllerChannel, Listener, Retry, stop_task
from kraftlog.engine.records import metadata as codec

log = logging.getLogger("kraftlog.controller")



def _response(code: ErrorCode, message: str | None = None) -> kreg_resp.ControllerRegistrationResponse:
    return kreg_resp.ControllerRegistrationResponse(throttle_time=datetime.timedelta(0), error_code=code,
                                                    error_message=message)


def _registration_of(req) -> ControllerRegistration:
    return ControllerRegistration(
        controller_id=int(req.controller_id), incarnation_id=req.incarnation_id,
        zk_migration_ready=bool(req.zk_migration_ready),
        endpoints=tuple(Endpoint(li.name, li.host, int(li.port), int(li.security_protocol)) for li in req.listeners),
        supported_features=tuple((f.name, int(f.min_supported_version), int(f.max_supported_version))
                                 for f in req.features))


async def handle_controller_registration(controller, req) -> kreg_resp.ControllerRegistrationResponse:
    """ControllerRegistration v0 on ``controller`` (controller.py's Controller), written by its
    write executor (writes.py)."""
    return await controller.executor.run(lambda image: plan_controller_registration(image, req),
                                         refuse=_response, what="registration")


def plan_controller_registration(image, req) -> ControllerResult:
    """Kafka's ClusterControlManager.registerController: a RegisterControllerRecord unless the
    metadata.version predates controller registrations or the controller cannot run at it; nothing
    when the image already holds this very registration."""
    level = image.features.metadata_version
    if level < versions.CONTROLLER_REGISTRATION:
        return ControllerResult(response=_response(
            ErrorCode.unsupported_version, f"metadata.version {versions.name(level)} is below "
            f"{versions.name(versions.CONTROLLER_REGISTRATION)}, the first with controller registrations"))
    wanted = _registration_of(req)
    if not wanted.supports(METADATA_VERSION, level):
        return ControllerResult(response=_response(ErrorCode.unsupported_version, f"controller {wanted.controller_id} "
                                                   f"does not support the finalized metadata.version {versions.name(level)}"))
    if image.cluster.controllers.get(wanted.controller_id) == wanted:
        return ControllerResult(response=_response(ErrorCode.none))
    record = codec.encode_record("RegisterControllerRecord", 0, {
        "ControllerId": wanted.controller_id, "IncarnationId": wanted.incarnation_id,
        "ZkMigrationReady": wanted.zk_migration_ready,
        "EndPoints": [{"Name": e.name, "Host": e.host, "Port": e.port, "SecurityProtocol": e.security_protocol}
                      for e in wanted.endpoints],
        "Features": [{"Name": n, "MinSupportedVersion": lo, "MaxSupportedVersion": hi}
                     for n, lo, hi in wanted.supported_features]})

    def registered(_image) -> kreg_resp.ControllerRegistrationResponse:
        log.info("registered controller %d (incarnation %s)", wanted.controller_id, wanted.incarnation_id)
        return _response(ErrorCode.none)

    return ControllerResult([record], after=registered)


class ControllerRegistrar:
    """Keeps this controller's registration in the image (see the module docstring)."""

    def __init__(self, node_id: int, publisher, voters: dict[int, tuple[str, int]], *, listener: Listener,
                 features: list[tuple[str, int, int]], check_interval_ms: int = 500, request_timeout_ms: int = 2000,
                 ssl_context=None):
        self.node_id = node_id
        self.publisher = publisher
        self.channel = ControllerChannel(voters, publisher, request_timeout_ms, ssl_context=ssl_context)
        self.incarnation_id = uuid.uuid4()
        self.request = kreg_req.ControllerRegistrationRequest(
            controller_id=i32(node_id), incarnation_id=self.incarnation_id, zk_migration_ready=False,
            listeners=(kreg_req.Listener(name=listener.name, host=listener.host, port=u16(listener.port),
                                         security_protocol=i16(listener.security_protocol)),),
            features=tuple(kreg_req.Feature(name=n, min_supported_version=i16(lo), max_supported_version=i16(hi))
                           for n, lo, hi in features))
        self.wanted = _registration_of(self.request)
        self.check_interval_ms = check_interval_ms
        self.registrations = 0
        self._task: asyncio.Task | None = None

    @property
    def registered(self) -> bool:
        return self.publisher.image.cluster.controllers.get(self.node_id) == self.wanted

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        refused = None
        while True:
            await asyncio.sleep(self.check_interval_ms / 1000)
            if self.registered or not self.publisher.image.features.metadata_version:
                continue
            try:
                resp = await self.channel.ask(API_CONTROLLER_REGISTRATION, 0, self.request,
                                              kreg_resp.ControllerRegistrationResponse)
            except Retry as exc:
                log.debug("controller registration not sent: %s", exc)
                continue
            if resp.error_code is ErrorCode.none:
                self.registrations += 1
                refused = None
            elif resp.error_message != refused:  # log each distinct refusal once
                refused = resp.error_message
                log.info("controller registration refused (%s): %s", resp.error_code.name, resp.error_message)

    async def stop(self) -> None:
        await stop_task(self._task)
        await self.channel.close()
