"""librdkafka settings to Java Kafka client properties (private to :mod:`lakehouse.sources`).

Users configure Kafka once, with librdkafka names (``[kafka.options]``, ``kafka.config_file``,
``LAKEHOUSE_KAFKA__OPTIONS__SASL_PASSWORD``): confluent-kafka reads them as they are (admin,
the demo's producer, the high-watermark reads of the snapshot signals), and Spark's Kafka
source, which runs the Java client, gets them through :func:`java_client_properties`.

The translation is a fixed table. A setting it does not know is refused with a
:class:`ConfigError` that names it, never dropped: a security setting silently ignored would
make a client connect differently from what the user wrote. Pure Python, no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from lakehouse.errors import ConfigError

_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: SASL mechanisms whose credentials are ``sasl.username``/``sasl.password``, and the Java
#: login module that carries them in ``sasl.jaas.config``.
_LOGIN_MODULES: Final = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

#: Settings with the same name and meaning in both clients.
_SAME: Final = (
    "client.id",
    "client.rack",
    "socket.connection.setup.timeout.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
)

#: Settings the source controls; the reason is the message.
RESERVED: Final = {
    "enable.auto.commit": (
        "the stream's offsets live in Spark's checkpoint and are never committed to Kafka"
    ),
    "auto.offset.reset": (
        "set startingOffsets instead; once a query runs, it fails rather than resetting offsets"
    ),
    "group.id": (
        "Spark's Kafka source makes a consumer group per query (set the source option "
        "'groupIdPrefix' where ACLs need a known prefix)"
    ),
    "enable.partition.eof": "Spark's Kafka source manages its own reads",
    "allow.auto.create.topics": "the source never creates topics",
}

#: Every librdkafka setting :func:`java_client_properties` understands.
TRANSLATED: Final = frozenset(
    {
        "bootstrap.servers",
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "isolation.level",
        "socket.timeout.ms",
        *_SAME,
    }
)

#: Java names users reach for by habit, and the librdkafka setting to use instead.
_JAVA_NAMES: Final = {
    "sasl.jaas.config": "sasl.username and sasl.password (with sasl.mechanism)",
    "ssl.truststore.location": "ssl.ca.location (a PEM file)",
    "ssl.truststore.type": "ssl.ca.location (a PEM file)",
    "ssl.keystore.location": "ssl.certificate.location and ssl.key.location (one PEM file)",
    "ssl.keystore.type": "ssl.certificate.location and ssl.key.location (one PEM file)",
    "request.timeout.ms": "socket.timeout.ms",
    "default.api.timeout.ms": "socket.timeout.ms",
}


def _jaas_quote(value: str, name: str) -> str:
    if any(ord(c) < 0x20 for c in value):
        raise ConfigError(
            f"Kafka setting {name!r} holds a control character (a newline?); it cannot be "
            "written into the Java client's JAAS configuration. Check the value (not shown).",
            setting=f"kafka.{name}",
        )
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _mechanism(config: Mapping[str, str]) -> str | None:
    one, many = config.get("sasl.mechanism"), config.get("sasl.mechanisms")
    if one is not None and many is not None and one.strip().upper() != many.strip().upper():
        raise ConfigError(
            f"Kafka settings 'sasl.mechanism' ({one!r}) and 'sasl.mechanisms' ({many!r}, its "
            "librdkafka alias) disagree; set only 'sasl.mechanism'.",
            setting="kafka.sasl.mechanism",
        )
    value = one if one is not None else many
    return value.strip().upper() if value is not None else None


def java_client_properties(config: Mapping[str, str]) -> dict[str, str]:
    """Translate librdkafka settings (no ``kafka.`` prefix) to Java client properties.

    ============================================  ===========================================
    librdkafka                                    Java client
    ============================================  ===========================================
    ``security.protocol``                         ``security.protocol`` (upper case)
    ``sasl.mechanism`` (``sasl.mechanisms``)      ``sasl.mechanism``: PLAIN, SCRAM-SHA-256,
                                                  SCRAM-SHA-512
    ``sasl.username`` + ``sasl.password``         ``sasl.jaas.config`` (Plain/Scram login
                                                  module)
    ``ssl.ca.location`` (a PEM file)              ``ssl.truststore.type=PEM`` + location
    ``ssl.certificate.location`` +                ``ssl.keystore.type=PEM`` + location (both
    ``ssl.key.location``                          must name one file holding key and chain)
    ``ssl.key.password``                          ``ssl.key.password``
    ``ssl.endpoint.identification.algorithm``     same (``none`` becomes empty: off)
    ``socket.timeout.ms``                         ``request.timeout.ms`` and
                                                  ``default.api.timeout.ms``
    ``isolation.level``                           same (default ``read_committed``, the
                                                  librdkafka default)
    ``bootstrap.servers``, ``client.id``,         same
    ``client.rack``, ``reconnect.backoff.ms``,
    ``reconnect.backoff.max.ms``,
    ``socket.connection.setup.timeout.ms``
    ============================================  ===========================================

    >>> props = java_client_properties({"security.protocol": "sasl_ssl",
    ...     "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
    ...     "sasl.password": "pw", "ssl.ca.location": "/etc/ca.pem"})
    >>> props["security.protocol"], props["sasl.mechanism"], props["ssl.truststore.type"]
    ('SASL_SSL', 'SCRAM-SHA-512', 'PEM')
    >>> props["sasl.jaas.config"].split(" required ")
    ['org.apache.kafka.common.security.scram.ScramLoginModule', 'username="alice" password="pw";']

    Raises:
        ConfigError: a setting has no translation (GSSAPI and OAUTHBEARER credentials, a CA
            directory, a certificate and key in separate files, any other librdkafka
            setting), is reserved by the source, or has an invalid value; the message names
            the settings, never a value that may be secret.
    """
    reserved = sorted(k for k in config if k in RESERVED)
    if reserved:
        key = reserved[0]
        raise ConfigError(
            f"Kafka setting {key!r} (option 'kafka.{key}' or kafka.config_file) cannot be "
            f"set: {RESERVED[key]}.",
            setting=f"kafka.{key}",
        )
    unknown = sorted(k for k in config if k not in TRANSLATED)
    if unknown:
        hints = [f"{k} (use {_JAVA_NAMES[k]})" for k in unknown if k in _JAVA_NAMES]
        raise ConfigError(
            f"Kafka setting(s) {', '.join(repr(k) for k in unknown)} cannot be translated for "
            "Spark's Kafka source, which runs the Java client; give librdkafka settings that "
            f"lakehouse translates: {', '.join(sorted(TRANSLATED))}"
            + (f". Java names: {'; '.join(hints)}" if hints else "")
            + ".",
            setting=f"kafka.{unknown[0]}",
        )
    out: dict[str, str] = {}
    for key in _SAME:
        if key in config:
            out[key] = config[key]
    if "bootstrap.servers" in config:
        out["bootstrap.servers"] = config["bootstrap.servers"]

    protocol = config.get("security.protocol")
    if protocol is not None:
        protocol = protocol.strip().upper()
        if protocol not in _PROTOCOLS:
            raise ConfigError(
                f"Kafka setting 'security.protocol' must be one of {', '.join(_PROTOCOLS)}, "
                f"got {config['security.protocol']!r}.",
                setting="kafka.security.protocol",
            )
        out["security.protocol"] = protocol

    mechanism = _mechanism(config)
    if mechanism is not None:
        if mechanism not in _LOGIN_MODULES:
            raise ConfigError(
                f"SASL mechanism {mechanism!r} (Kafka setting 'sasl.mechanism') cannot be "
                "translated for Spark's Kafka source; lakehouse translates "
                f"{', '.join(_LOGIN_MODULES)} with sasl.username and sasl.password.",
                setting="kafka.sasl.mechanism",
            )
        out["sasl.mechanism"] = mechanism
    username, password = config.get("sasl.username"), config.get("sasl.password")
    if (username is None) != (password is None):
        given, missing = (
            ("sasl.username", "sasl.password")
            if username is not None
            else ("sasl.password", "sasl.username")
        )
        raise ConfigError(
            f"Kafka setting {given!r} is set but {missing!r} is not; give both (credentials "
            "go in kafka.config_file or LAKEHOUSE_KAFKA__OPTIONS__* variables).",
            setting=f"kafka.{missing}",
        )
    if username is not None and password is not None:
        if mechanism is None:
            raise ConfigError(
                "Kafka settings 'sasl.username' and 'sasl.password' need 'sasl.mechanism' "
                f"({', '.join(_LOGIN_MODULES)}): both clients would otherwise default to "
                "GSSAPI, which does not use them.",
                setting="kafka.sasl.mechanism",
            )
        out["sasl.jaas.config"] = (
            f"{_LOGIN_MODULES[mechanism]} required "
            f"username={_jaas_quote(username, 'sasl.username')} "
            f"password={_jaas_quote(password, 'sasl.password')};"
        )

    ca = config.get("ssl.ca.location")
    if ca is not None:
        if ca.strip().lower() == "probe":
            raise ConfigError(
                "Kafka setting 'ssl.ca.location' = 'probe' (librdkafka's search of system CA "
                "paths) cannot be translated; give the path of a PEM file of CA certificates, "
                "or leave it unset to use the JVM's trust store.",
                setting="kafka.ssl.ca.location",
            )
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = ca
    cert, pem_key = config.get("ssl.certificate.location"), config.get("ssl.key.location")
    if cert is not None or pem_key is not None:
        if cert != pem_key:
            missing = "ssl.certificate.location" if cert is None else "ssl.key.location"
            raise ConfigError(
                "Kafka settings 'ssl.certificate.location' and 'ssl.key.location' must name "
                "the same PEM file (the private key followed by the certificate chain) for "
                "Spark's Kafka source, whose Java client reads a PEM key store from one file; "
                "concatenate the two files and give that path to both settings.",
                setting=f"kafka.{missing}",
            )
        assert cert is not None
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.location"] = cert
    if "ssl.key.password" in config:
        out["ssl.key.password"] = config["ssl.key.password"]
    algorithm = config.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        lowered = algorithm.strip().lower()
        if lowered not in ("none", "https"):
            raise ConfigError(
                "Kafka setting 'ssl.endpoint.identification.algorithm' must be 'https' or "
                f"'none', got {algorithm!r}.",
                setting="kafka.ssl.endpoint.identification.algorithm",
            )
        out["ssl.endpoint.identification.algorithm"] = "" if lowered == "none" else "https"

    isolation = config.get("isolation.level", "read_committed").strip().lower()
    if isolation not in ("read_committed", "read_uncommitted"):
        raise ConfigError(
            "Kafka setting 'isolation.level' must be 'read_committed' or 'read_uncommitted', "
            f"got {config['isolation.level']!r}.",
            setting="kafka.isolation.level",
        )
    out["isolation.level"] = isolation
    timeout = config.get("socket.timeout.ms")
    if timeout is not None:
        if not timeout.strip().isdigit() or int(timeout) <= 0:
            raise ConfigError(
                f"Kafka setting 'socket.timeout.ms' must be a positive integer, got {timeout!r}.",
                setting="kafka.socket.timeout.ms",
            )
        out["request.timeout.ms"] = str(int(timeout))
        out["default.api.timeout.ms"] = str(int(timeout))
    return out
