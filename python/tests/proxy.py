"""Proxies that lose answers after the server acted — a timeout after the action happened.
``LossyProxy`` forwards TCP and, for the first ``drop`` connections, reads the server's answer
(so the server has committed) and closes the client's connection without passing it on;
``ToolCallDropper`` does the same per HTTP request, for the first ``drop`` MCP tool calls."""

from __future__ import annotations

import socket
import threading


class _Proxy:
    """Listens on 127.0.0.1 (``port``), forwards to ``upstream``, and loses the answers of the
    first ``drop`` of what it counts; each accepted connection goes to ``_connection``."""

    def __init__(self, upstream: tuple[str, int], drop: int) -> None:
        self.upstream = upstream
        self.drop = drop
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

    def _lose_next(self) -> bool:
        """Whether to lose the next answer (the first ``drop`` are lost)."""
        with self._lock:
            lose = self.dropped < self.drop
            if lose:
                self.dropped += 1
            return lose

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._connection(client)

    def _connection(self, client: socket.socket) -> None:
        raise NotImplementedError


class LossyProxy(_Proxy):
    """Loses the answers on the first ``drop`` connections; counts connections."""

    connections = 0

    def _connection(self, client: socket.socket) -> None:
        self.connections += 1
        lose = self._lose_next()
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


class ToolCallDropper(_Proxy):
    """An HTTP/1.1 proxy in front of an MCP server that loses the answers of the first ``drop``
    ``tools/call`` requests: it forwards each request, reads the server's whole answer (the
    tool has run) and closes the client's connection instead of passing it on. Every other
    request — ``initialize``, ``tools/list``, later calls — is passed through."""

    calls = 0

    def _connection(self, client: socket.socket) -> None:
        threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _lose(self, request: bytes) -> bool:
        if b'"method":"tools/call"' not in request:
            return False
        with self._lock:
            self.calls += 1
        return self._lose_next()

    def _serve(self, client: socket.socket) -> None:
        server = socket.create_connection(self.upstream)
        from_client, from_server = _Reader(client), _Reader(server)
        try:
            while (request := from_client.message(is_request=True)) is not None:
                server.sendall(request)
                answer = from_server.message(is_request=False)
                if answer is None or self._lose(request):
                    break
                client.sendall(answer)
        except OSError:
            pass
        finally:
            client.close()
            server.close()


class _Reader:
    """Whole HTTP/1.1 messages from a socket: headers, then a Content-Length or chunked body."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buf += data
        return bool(data)

    def _until(self, marker: bytes) -> int | None:
        while (end := self.buf.find(marker)) < 0:
            if not self._fill():
                return None
        return end + len(marker)

    def _take(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            if not self._fill():
                return None
        taken, self.buf = self.buf[:n], self.buf[n:]
        return taken

    def message(self, is_request: bool) -> bytes | None:
        end = self._until(b"\r\n\r\n")
        if end is None:
            return None
        head = self._take(end)
        assert head is not None
        text = head.decode("latin-1").lower()
        if "transfer-encoding: chunked" in text:
            body = b""
            while True:
                line_end = self._until(b"\r\n")
                if line_end is None:
                    return None
                size_line = self._take(line_end) or b""
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                chunk = self._take(size + 2)
                if chunk is None:
                    return None
                body += size_line + chunk
                if size == 0:
                    return head + body
        length = 0
        for field in text.split("\r\n"):
            if field.startswith("content-length:"):
                length = int(field.split(":", 1)[1])
        status_without_body = not is_request and (" 202 " in text.split("\r\n")[0])
        rest = self._take(0 if status_without_body else length)
        return None if rest is None else head + rest
