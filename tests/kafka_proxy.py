"""A TCP proxy in front of a test broker that can hold some Kafka clients off.

Why: the Tansu test broker keeps its log in memory, so a broker "coming back" after an outage
is simulated by starting a new broker on the same port and producing the same records again
(same offsets). A durable broker has its topics the moment it answers; the simulation has a
window in which it answers with no topic yet. The proxy closes that window: while
``hold_off(prefix)`` is set, connections whose first Kafka request carries a client id with
that prefix (the pipeline's clients: ``lakehouse-source``) are closed at once, like a broker
that is down, while the test's own admin and producer clients (client id ``rdkafka``) pass and
restore the log. ``let_in()`` ends the outage for everyone.

The broker must advertise the proxy's address, so that every connection goes through it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _client_id(first: bytes) -> str:
    """The client id of a Kafka request (size, api key, version, correlation id, client id:
    a nullable int16-length string in every request header version)."""
    (length,) = struct.unpack(">h", first[12:14])
    return "" if length < 0 else first[14 : 14 + length].decode(errors="replace")


class KafkaProxy:
    """Forward ``127.0.0.1:port`` to ``backend``; see the module docstring."""

    def __init__(self, backend_port: int) -> None:
        self.backend_port = backend_port
        self._held_prefix: str | None = None
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.refused = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT`` of the proxy (bootstrap servers and advertised listener)."""
        return f"127.0.0.1:{self.port}"

    def hold_off(self, client_id_prefix: str) -> None:
        """Close new connections of clients whose id starts with the prefix, and the open ones."""
        self._held_prefix = client_id_prefix
        with self._lock:
            for s in list(self._sockets):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def let_in(self) -> None:
        """Forward every client again."""
        self._held_prefix = None

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        backend: socket.socket | None = None
        try:
            header = _recv_exact(client, 14)
            (size,) = struct.unpack(">i", header[:4])
            first = header + _recv_exact(client, size + 4 - 14)
            held = self._held_prefix
            if held is not None and _client_id(first).startswith(held):
                self.refused += 1
                return
            backend = socket.create_connection(("127.0.0.1", self.backend_port), timeout=5)
            backend.settimeout(None)
            backend.sendall(first)
            with self._lock:
                if held is None and _client_id(first).startswith("lakehouse"):
                    self._sockets.add(client)
            pump = threading.Thread(target=self._pump, args=(backend, client), daemon=True)
            pump.start()
            self._pump(client, backend)
            pump.join()
        except (OSError, ConnectionError, struct.error):
            pass
        finally:
            with self._lock:
                self._sockets.discard(client)
            for s in (client, backend):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
