"""A loopback address that answers only once the test opens it: a TCP relay to a real server.

A job started before the relay is opened finds nothing listening at the address (a broker not up yet);
once opened, every connection to it is relayed byte for byte to the real server, both ways, until either
side closes. Only the first connection of a Kafka client goes through it (the bootstrap): the broker's
metadata then sends the client to the broker's own address.
"""

from __future__ import annotations

import socket
import threading

from sharelake.testing.kafka_broker import LOOPBACK, free_port


class TcpRelay:
    """A relay from a free loopback port (chosen now, listened on from `open()`) to `target` (host:port)."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.port = free_port()
        self._server: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def open(self) -> None:
        server = socket.create_server((LOOPBACK, self.port))
        self._server = server
        threading.Thread(target=self._accept, args=(server,), name="tcp-relay", daemon=True).start()

    def close(self) -> None:
        """Stop listening and close every relayed connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            s.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:  # closed
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
