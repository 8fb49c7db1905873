"""Mutual TLS for nodes and tools: flags, and the ``ssl.SSLContext`` values built from them.

Every connection of a TLS cluster is mutually authenticated: each side presents a certificate
signed by the cluster's CA (``--tls-ca``) and refuses a peer that presents none or one from
another CA. A node uses one certificate for both directions (it listens, and it connects to the
other voters), so node certificates must allow both uses: either no extendedKeyUsage at all, or
both serverAuth and clientAuth. The transport (raft/aio/transport.py) takes the contexts built
here and nothing else.

    --tls-cert FILE         this side's certificate chain (PEM; leaf first)
    --tls-key FILE          its private key (PEM, unencrypted: protect it with file permissions)
    --tls-ca FILE           the CA certificate(s) (PEM) a peer's certificate must chain to
    --tls-server-name NAME  check that every server's certificate names NAME (subjectAltName DNS)

Decision, host names: nodes are usually addressed by IP (``1@10.0.0.5:9093``), and node
certificates rarely list their IPs, so by default a client does NOT check the server's name:
any certificate signed by the cluster CA is a cluster member. That makes the CA the membership
list: give the cluster a CA of its own, used for nothing else. With ``--tls-server-name NAME``
a client also checks that the server's certificate carries NAME (one name shared by every node's
certificate, e.g. ``kraftlog-controller``, whatever address was dialled). The server always
requires a client certificate (``CERT_REQUIRED``) and checks only its chain: Kafka's brokers do
the same with ``ssl.client.auth=required``.

TLS 1.2 is the floor. All three files are checked when the context is built (exist, readable,
parse, key matches certificate); a problem raises TlsConfigError naming the flag and the file.
"""

from __future__ import annotations

import argparse
import os
import ssl
from dataclasses import dataclass

from kraftlog.errors import KraftlogError

MIN_TLS_VERSION = ssl.TLSVersion.TLSv1_2


class TlsConfigError(KraftlogError):
    """The TLS settings cannot make a context: a file missing, unreadable, not PEM, a key that
    does not belong to its certificate, or flags given only in part."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where one side's TLS material lives, and the server name it checks (None: chain only)."""

    cert_path: str
    key_path: str
    ca_path: str
    server_name: str | None = None


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--tls-cert/--tls-key/--tls-ca/--tls-server-name`` to ``parser`` (all default None)."""
    group = parser.add_argument_group(
        "TLS", "mutual TLS: give --tls-cert, --tls-key and --tls-ca together; every peer must present a "
               "certificate signed by the CA")
    group.add_argument("--tls-cert", default=None, metavar="FILE", help="this side's certificate chain (PEM)")
    group.add_argument("--tls-key", default=None, metavar="FILE", help="its private key (PEM, unencrypted)")
    group.add_argument("--tls-ca", default=None, metavar="FILE",
                       help="CA certificate(s) (PEM) that every peer's certificate must chain to")
    group.add_argument("--tls-server-name", default=None, metavar="NAME",
                       help="also require every server's certificate to name NAME (default: chain only, "
                            "because nodes are usually addressed by IP)")


def tls_files(args) -> TlsFiles | None:
    """The TLS settings of parsed ``args`` (attributes tls_cert, tls_key, tls_ca, tls_server_name;
    missing attributes count as not given), or None when TLS is off. Half a configuration is an
    error, not plain text: a node that was meant to be TLS-only must not quietly listen in the clear."""
    cert, key, ca = (getattr(args, name, None) for name in ("tls_cert", "tls_key", "tls_ca"))
    server_name = getattr(args, "tls_server_name", None)
    given = {"--tls-cert": cert, "--tls-key": key, "--tls-ca": ca}
    if not any(given.values()):
        if server_name:
            raise TlsConfigError("--tls-server-name needs --tls-cert, --tls-key and --tls-ca")
        return None
    missing = [flag for flag, value in given.items() if not value]
    if missing:
        raise TlsConfigError(f"TLS needs --tls-cert, --tls-key and --tls-ca together; missing {', '.join(missing)}")
    return TlsFiles(cert, key, ca, server_name or None)


def server_context(args) -> ssl.SSLContext | None:
    """The listener's context from ``args`` (None when TLS is off): presents --tls-cert, requires a
    client certificate that chains to --tls-ca."""
    files = tls_files(args)
    return None if files is None else make_server_context(files)


def client_context(args) -> ssl.SSLContext | None:
    """The context for outbound connections from ``args`` (None when TLS is off): presents
    --tls-cert, requires a server certificate that chains to --tls-ca (and names
    --tls-server-name when given)."""
    files = tls_files(args)
    return None if files is None else make_client_context(files)


def make_server_context(files: TlsFiles) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(ctx, files)
    ctx.verify_mode = ssl.CERT_REQUIRED  # no certificate, no connection
    return ctx


def make_client_context(files: TlsFiles) -> ssl.SSLContext:
    if files.server_name:
        ctx: ssl.SSLContext = _NamedServerContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.expected_server_name = files.server_name
        ctx.check_hostname = True
    else:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False  # chain only: see the module docstring
    _configure(ctx, files)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class _NamedServerContext(ssl.SSLContext):
    """A client context that checks every server against one fixed name, whatever host or IP was
    dialled: asyncio passes the dialled host as ``server_hostname``; this replaces it (it is also
    the SNI sent). Callers keep passing a plain SSLContext around."""

    expected_server_name: str = ""

    def wrap_bio(self, incoming, outgoing, server_side=False, server_hostname=None, session=None):
        name = None if server_side else self.expected_server_name
        return super().wrap_bio(incoming, outgoing, server_side, name, session)

    def wrap_socket(self, sock, server_side=False, do_handshake_on_connect=True, suppress_ragged_eofs=True,
                    server_hostname=None, session=None):
        name = None if server_side else self.expected_server_name
        return super().wrap_socket(sock, server_side, do_handshake_on_connect, suppress_ragged_eofs, name, session)


def _configure(ctx: ssl.SSLContext, files: TlsFiles) -> None:
    ctx.minimum_version = MIN_TLS_VERSION
    for flag, path in (("--tls-cert", files.cert_path), ("--tls-key", files.key_path), ("--tls-ca", files.ca_path)):
        _check_readable(flag, path)
    try:
        ctx.load_verify_locations(cafile=files.ca_path)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsConfigError(f"--tls-ca {files.ca_path}: no PEM CA certificate in it ({_reason(exc)})") from None
    try:
        # password: an encrypted key must fail here, not stop at OpenSSL's terminal prompt
        ctx.load_cert_chain(files.cert_path, files.key_path, password=_refuse_password)
    except _EncryptedKey:
        raise TlsConfigError(f"--tls-key {files.key_path}: the key is encrypted; kraftlog reads unencrypted "
                             f"PEM keys only") from None
    except ssl.SSLError as exc:
        raise TlsConfigError(f"--tls-cert {files.cert_path} / --tls-key {files.key_path}: not a PEM certificate "
                             f"and the private key that belongs to it ({_reason(exc)})") from None


class _EncryptedKey(Exception):
    pass


def _refuse_password():
    raise _EncryptedKey


def _check_readable(flag: str, path: str) -> None:
    if not os.path.exists(path):
        raise TlsConfigError(f"{flag} {path}: no such file")
    if os.path.isdir(path):
        raise TlsConfigError(f"{flag} {path}: is a directory, not a PEM file")
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise TlsConfigError(f"{flag} {path}: cannot be read ({exc.strerror or exc})") from None


def _reason(exc: Exception) -> str:
    return getattr(exc, "reason", None) or str(exc)
