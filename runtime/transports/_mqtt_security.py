"""MQTT security: TLS, credentials, and telling a refusal from an outage.

Whoever can publish on ``forethought/<agent>/events/#`` can make a robot act, so production
brokers require TLS and authentication and enforce per-client ACLs. :class:`MqttSecurity`
holds what a connection needs -- a verified TLS context (hostname checked by default; mutual
TLS with a client certificate), a username and a password kept as a ``SecretStr`` (never
logged, never in a ``repr``) -- and :func:`refusal` sorts connection failures:

* a **refusal** (wrong credentials, not authorised, an untrusted / expired / wrong-host
  certificate, TLS spoken to a plain port) will fail the same way on every retry: the bus
  stops with one clear error naming the cause instead of hammering the broker;
* anything else (refused connection, reset, timeout) is an **outage**: retried with backoff.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import aiomqtt
from pydantic import SecretStr

from forethought.policies import ConfigError

__all__ = ["MqttSecurity", "parse_broker_url", "refusal"]

log = logging.getLogger("forethought.mqtt")

# MQTT 5 CONNACK reason codes (and their MQTT 3.1.1 return codes) that no retry can fix.
_REFUSED_CODES = {
    4: "bad username or password",
    5: "not authorised (a wrong username or password, or a user that may not connect)",
    134: "bad username or password",
    135: "not authorised (a wrong username or password, or a user that may not connect)",
    138: "banned",
    140: "bad authentication method",
}


def parse_broker_url(url: str) -> tuple[str, int, bool]:
    """``mqtt://host:port`` or ``mqtts://host:port`` -> (host, port, tls).

    Ports default to 1883 (plain) and 8883 (TLS).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "tcp", "mqtts", "ssl") or not parts.hostname:
        raise ConfigError("mqtt", url, "expected mqtt://host[:port] or mqtts://host[:port]")
    if parts.username or parts.password:
        raise ConfigError(
            "mqtt",
            f"{parts.scheme}://{parts.hostname}",
            "credentials do not go in the URL (use mqtt.username and the password file or "
            "FORETHOUGHT_MQTT__PASSWORD)",
        )
    tls = parts.scheme in ("mqtts", "ssl")
    try:
        port = parts.port or (8883 if tls else 1883)
    except ValueError:
        raise ConfigError("mqtt", url, "the port is not a number") from None
    return parts.hostname, port, tls


@dataclass(frozen=True, slots=True)
class MqttSecurity:
    """What a broker connection presents and verifies.

    Args:
        username: the MQTT username (None: anonymous).
        password: the password, a secret (never in logs, reports or reprs).
        ca_file: the CA bundle that signs the broker's certificate (None: the system's).
        cert_file, key_file: this client's certificate and key (mutual TLS).
        insecure: skip certificate and hostname verification (loudly warned about).

    """

    username: str | None = None
    password: SecretStr | None = field(default=None, repr=False)
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError(
                "mqtt.cert_file", str(self.cert_file), "give cert_file and key_file together"
            )
        if self.password is not None and self.username is None:
            raise ConfigError("mqtt.username", None, "a password needs a username")
        for name in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"mqtt.{name}", str(path), "no such file")

    def tls_context(self) -> ssl.SSLContext:
        """A client TLS context: the broker's certificate and hostname verified by default."""
        try:
            ctx = ssl.create_default_context(
                cafile=str(self.ca_file) if self.ca_file is not None else None
            )
            if self.cert_file is not None and self.key_file is not None:
                ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError("mqtt.ca_file", str(self.ca_file), f"unusable: {exc}") from None
        if self.insecure:
            log.warning(
                "mqtt.insecure is set: the broker's certificate and hostname are NOT verified; "
                "anyone on the path can impersonate the broker"
            )
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def client_options(self, tls: bool) -> dict[str, object]:
        """Keyword arguments for ``aiomqtt.Client``."""
        out: dict[str, object] = {}
        if self.username is not None:
            out["username"] = self.username
            if self.password is not None:
                out["password"] = self.password.get_secret_value()
        if tls:
            out["tls_context"] = self.tls_context()
        return out


def refusal(exc: aiomqtt.MqttError) -> str | None:
    """Why the broker (or its certificate) refuses us for good, or None for an outage."""
    if isinstance(exc, aiomqtt.MqttCodeError):
        rc = exc.rc
        code = rc if isinstance(rc, int) else int(getattr(rc, "value", 0) or 0)
        if code in _REFUSED_CODES:
            return f"the broker refused the connection: {_REFUSED_CODES[code]}"
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        detail = text.split("certificate verify failed:", 1)[-1].split("(_ssl", 1)[0].strip(" ()")
        return f"the broker's TLS certificate was not accepted: {detail or text}"
    if "WRONG_VERSION_NUMBER" in text or "record layer failure" in text:
        return "TLS handshake failed: is this port speaking plain MQTT (use mqtt://)?"
    if "SSL" in text or "TLSV1_ALERT" in text:
        return f"TLS handshake failed: {text}"
    return None
