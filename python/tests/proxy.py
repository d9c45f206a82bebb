"""A TCP proxy that loses answers: it forwards each request to the server and, for the first
``drop`` connections, reads the server's answer (so the server has committed) and closes the
client's connection without passing it on — a timeout after the action happened."""

from __future__ import annotations

import socket
import threading


class LossyProxy:
    """Listens on 127.0.0.1 (``port``); forwards to ``upstream``; counts what it saw."""

    def __init__(self, upstream: tuple[str, int], drop: int) -> None:
        self.upstream = upstream
        self.drop = drop
        self.connections = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                lose = self.dropped < self.drop
                if lose:
                    self.dropped += 1
            threading.Thread(target=self._serve, args=(client, lose), daemon=True).start()

    def _serve(self, client: socket.socket, lose: bool) -> None:
        server = socket.create_connection(self.upstream)

        def upstream() -> None:
            try:
                while data := client.recv(65536):
                    server.sendall(data)
            except OSError:
                pass

        threading.Thread(target=upstream, daemon=True).start()
        try:
            while data := server.recv(65536):
                if lose:
                    # The server answered, so it committed: lose the answer on the way back.
                    client.shutdown(socket.SHUT_RDWR)
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            client.close()
            server.close()
