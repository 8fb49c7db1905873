"""Kafka's listener settings, split as Kafka splits them: which sockets a node opens, what each
one serves, what it advertises, and whether it speaks TLS.

    listeners                        NAME://HOST:PORT,...  (an empty HOST binds every interface)
    advertised.listeners             NAME://HOST:PORT,...  what the node registers (Metadata answers
                                     it to clients); a name not given advertises its ``listeners``
                                     entry
    controller.listener.names        the controller listener(s); every other listener is a broker one
    listener.security.protocol.map   NAME:PROTOCOL,...  PLAINTEXT or SSL (SASL_* is refused: kraftlog
                                     does no SASL). Not given: a listener named after a protocol
                                     speaks it, a controller listener PLAINTEXT (Kafka's KRaft rule)
    inter.broker.listener.name       the broker listener registered first: the endpoint given to
                                     anyone asking on a listener the broker does not have (brokers
                                     replicate nothing among themselves, so nothing else uses it)

Which sockets: a controller opens the first of its controller listeners; a broker opens every
broker listener; a combined node both, so clients and the quorum never share a socket (Kafka
requires the same). What each serves (``kind``, engine/node/node.py has the tables): a controller
listener Raft and the controller RPCs, a broker listener the client APIs.

The advertised host, one rule: the advertised.listeners entry of that name, else the listener's
own host; a wildcard (empty, 0.0.0.0, ::) becomes this machine's fully qualified name
(``socket.getfqdn()``, Kafka's canonical host name), since 0.0.0.0 reaches nobody. An advertised
port 0 is the port actually bound. 0.0.0.0 written in advertised.listeners is an error, as in Kafka.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from kraftlog.errors import KraftlogError

PLAINTEXT, SSL = "PLAINTEXT", "SSL"
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
KIND_CONTROLLER, KIND_BROKER, KIND_BOTH = "controller", "broker", "broker,controller"
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


class ListenerConfigError(KraftlogError):
    """The listener settings cannot work together (one line naming the setting and the fix)."""


@dataclass(frozen=True)
class NodeListener:
    """One socket a node opens. ``host`` "" binds every interface; ``advertised_port`` 0 means the
    bound port (known only once bound)."""

    name: str
    kind: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int
    tls: bool

    @property
    def bind_address(self) -> str:
        """HOST:PORT to bind (every interface for an empty host)."""
        return f"{self.host or '0.0.0.0'}:{self.port}"

    def advertised(self, bound_port: int) -> tuple[str, int]:
        return self.advertised_host, self.advertised_port or bound_port


@dataclass(frozen=True)
class ListenerPlan:
    """The sockets to open (``opened[0]`` is the main one: the voters' address on a controller) and
    whether the links to the controllers speak TLS."""

    opened: tuple[NodeListener, ...]
    controller_tls: bool


def advertised_host(host: str) -> str:
    """The host a listener bound to ``host`` advertises (see the module docstring)."""
    return socket.getfqdn() if host in WILDCARD_HOSTS else host


def parse_endpoints(key: str, text: str) -> dict[str, tuple[str, int]]:
    """``NAME://HOST:PORT,...`` -> {NAME: (HOST, PORT)} in order; a repeated name is an error."""
    out: dict[str, tuple[str, int]] = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, sep, address = item.partition("://")
        host, colon, port_text = address.rpartition(":")
        if not sep or not name.strip() or not colon:
            raise ListenerConfigError(f"{key}={text}: {item!r} is not NAME://HOST:PORT")
        if not port_text.isdigit() or int(port_text) > 65535:
            raise ListenerConfigError(f"{key}={text}: {item!r}: the port {port_text!r} is not a number 0..65535")
        name = name.strip().upper()
        if name in out:
            raise ListenerConfigError(f"{key}={text}: the listener name {name} appears twice")
        out[name] = (host.strip("[]"), int(port_text))
    if not out:
        raise ListenerConfigError(f"{key}={text}: no listener given")
    return out


def _names(text: str | None) -> list[str]:
    return [n.strip().upper() for n in (text or "").split(",") if n.strip()]


def parse_protocol_map(text: str | None, controller_names: list[str]) -> dict[str, str]:
    """listener.security.protocol.map -> {NAME: PROTOCOL}; not given, Kafka's default: every
    protocol name maps to itself and a controller listener to PLAINTEXT."""
    if text is None:
        defaults = {p: p for p in (PLAINTEXT, SSL, *SASL_PROTOCOLS)}
        return {**{n: PLAINTEXT for n in controller_names}, **defaults}
    out = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, sep, protocol = item.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ListenerConfigError(f"listener.security.protocol.map={text}: {item!r} is not NAME:PROTOCOL")
        out[name.strip().upper()] = protocol.strip().upper()
    return out


def _protocol(name: str, protocols: dict[str, str]) -> str:
    protocol = protocols.get(name)
    if protocol is None:
        raise ListenerConfigError(f"listener {name} has no security protocol: add {name}:PLAINTEXT (or {name}:SSL) "
                                  "to listener.security.protocol.map")
    if protocol in SASL_PROTOCOLS:
        raise ListenerConfigError(f"listener {name} is {protocol}: kraftlog does no SASL; map it to PLAINTEXT or SSL "
                                  "in listener.security.protocol.map")
    if protocol not in (PLAINTEXT, SSL):
        raise ListenerConfigError(f"listener {name}: unknown security protocol {protocol!r} "
                                  "(PLAINTEXT or SSL)")
    return protocol


def plan(*, listeners: str, roles: set[str], controller_names: str | None = None, advertised: str | None = None,
         protocol_map: str | None = None, inter_broker: str | None = None, tls_given: bool = False) -> ListenerPlan:
    """The sockets a node with ``roles`` opens from Kafka's listener settings (module docstring);
    ListenerConfigError names what cannot work."""
    bound = parse_endpoints("listeners", listeners)
    controllers = _names(controller_names)
    protocols = parse_protocol_map(protocol_map, controllers)
    tls = {name: _protocol(name, protocols) == SSL for name in bound}
    shown = parse_endpoints("advertised.listeners", advertised) if advertised is not None else {}
    for name, (host, _) in shown.items():
        if name not in bound:
            raise ListenerConfigError(f"advertised.listeners names {name}, which is not in listeners={listeners}")
        if host in ("0.0.0.0", "::"):
            raise ListenerConfigError(f"advertised.listeners: {name} advertises {host}, which reaches nobody; "
                                      "give a host clients can dial (or leave it out to advertise this machine's name)")

    def listener(name: str, kind: str) -> NodeListener:
        host, port = bound[name]
        shown_host, shown_port = shown.get(name, (host, port))
        return NodeListener(name, kind, host, port, advertised_host(shown_host), shown_port, tls[name])

    if not controllers:  # no controller.listener.names: one socket, the first listener, serving every role
        first = next(iter(bound))
        kind = KIND_BOTH if roles >= {"controller", "broker"} else next(iter(roles))
        return _checked((listener(first, kind),), tls[first], tls_given)
    opened_controllers = [n for n in controllers if n in bound]
    brokers = [n for n in bound if n not in controllers]
    if inter_broker is not None:
        inter = inter_broker.strip().upper()
        if inter not in brokers:
            raise ListenerConfigError(f"inter.broker.listener.name={inter_broker} is not a broker listener of "
                                      f"listeners={listeners} (controller.listener.names={controller_names})")
        brokers.remove(inter)
        brokers.insert(0, inter)
    opened = []
    if "controller" in roles:
        if not opened_controllers:
            raise ListenerConfigError(f"listeners={listeners} has no controller listener "
                                      f"(controller.listener.names={controller_names})")
        opened.append(listener(opened_controllers[0], KIND_CONTROLLER))
    if "broker" in roles:
        if not brokers:
            raise ListenerConfigError(f"listeners={listeners} has no broker listener: every listener is in "
                                      f"controller.listener.names={controller_names}")
        opened.extend(listener(n, KIND_BROKER) for n in brokers)
    return _checked(tuple(opened), _protocol(controllers[0], protocols) == SSL, tls_given)


def _checked(opened: tuple[NodeListener, ...], controller_tls: bool, tls_given: bool) -> ListenerPlan:
    """The plan, once the TLS flags fit it: an SSL listener needs them; flags that no listener
    (not even the controllers', which this node dials) would use are a mistake, not ignored."""
    ssl_names = [li.name for li in opened if li.tls]
    if ssl_names and not tls_given:
        raise ListenerConfigError(f"listener {', '.join(ssl_names)} is SSL: give --tls-cert, --tls-key and --tls-ca")
    if tls_given and not ssl_names and not controller_tls:
        raise ListenerConfigError("--tls-cert/--tls-key/--tls-ca given, but no listener is SSL "
                                  "(listener.security.protocol.map), not even the controllers'")
    return ListenerPlan(opened, controller_tls)
