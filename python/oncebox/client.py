"""The HTTP client of ``oncebox serve`` (httpx), sync and async.

``submit`` retries transport failures, 5xx and 429 answers (honouring ``Retry-After``) with the
**same** ``Idempotency-Key`` and the **same bytes**, so a lost answer never becomes a second
intent. Refusals raise ``ApiError`` with the status, the detail and the field, and are never
retried.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

import httpx

from . import _native
from ._errors import ApiError, InvalidIntent, TransportError
from ._intake import arguments_json
from ._model import Intent, Status, Submitted

#: The clients' defaults, from the core (the same in Rust, Python and TypeScript).
_DEFAULTS = _native.CLIENT_DEFAULTS

#: The longest single long-poll the server allows, in seconds.
MAX_WAIT_SECONDS = _DEFAULTS.max_wait


@dataclass(frozen=True)
class RetryConfig:
    """How transport failures, 5xx and 429 answers are retried."""

    max_attempts: int = _DEFAULTS.attempts
    """Tries in all, the first included; at least 1."""
    min_delay: float = _DEFAULTS.min_delay
    """The first backoff in seconds, doubled for each further one, with full jitter."""
    max_delay: float = _DEFAULTS.max_delay
    """The largest backoff, and the most a server's ``Retry-After`` is waited for."""

    def delays(self) -> Iterator[float]:
        """The waits before the 2nd, 3rd… tries."""
        for n in range(max(self.max_attempts, 1) - 1):
            cap = min(self.max_delay, self.min_delay * 2**n)
            yield random.uniform(self.min_delay, max(cap, self.min_delay))


#: A call's answer: the HTTP status and the intent.
_Answer = tuple[int, Intent]


class _Shared:
    """What the sync and async clients share: URLs, request bytes, answers."""

    def __init__(
        self, base_url: str, token: str, retry: RetryConfig | None, timeout: float
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise InvalidIntent("base_url", f"{base_url!r} is not an http(s) URL")
        token = token.strip()
        if not token or not all(33 <= ord(c) <= 126 for c in token):
            raise InvalidIntent("token", "a token is non-empty printable ASCII")
        self.base = base_url.rstrip("/")
        self.headers = {"authorization": f"Bearer {token}"}
        self.retry = retry or RetryConfig()
        self.timeout = timeout

    def url(self, *segments: str) -> str:
        return self.base + "".join("/" + quote(s, safe="") for s in segments)

    def submit_request(
        self,
        key: str,
        action: str,
        arguments: Mapping[str, Any],
        business_ref: str | None,
        run_id: str | None,
        step: str | None,
        deadline: datetime | None,
        ordering_key: str | None = None,
    ) -> tuple[str, dict[str, str], bytes]:
        _native.validate_key(key)
        body: dict[str, Any] = {"action": action, "arguments": arguments}
        for name, value in (
            ("business_ref", business_ref),
            ("run_id", run_id),
            ("step", step),
            ("ordering_key", ordering_key),
        ):
            if value is not None:
                body[name] = value
        if deadline is not None:
            if deadline.utcoffset() is None:
                raise InvalidIntent("deadline", "must be timezone-aware")
            body["deadline"] = deadline.astimezone(timezone.utc).isoformat()
        headers = {
            **self.headers,
            "idempotency-key": _sf_string(key),
            "content-type": "application/json",
        }
        # Serialised once: every retry sends these very bytes.
        return self.url("v1", "intents"), headers, arguments_json(body).encode()

    def verdict(self, response: httpx.Response) -> Intent | _Retry | ApiError:
        """The intent, a retryable failure, or a refusal."""
        if response.is_success:
            try:
                return Intent.from_api(response.json())
            except (ValueError, KeyError) as e:
                return _unexpected(response, f"not an intent: {e}")
        problem = _problem(response)
        if response.status_code >= 500 or response.status_code == 429:
            return _Retry(problem, _retry_after(response))
        return problem

    def pause(self, delay: float, failure: _Retry | None) -> float:
        if failure is None or failure.after is None:
            return delay
        return min(max(failure.after, delay), max(self.retry.max_delay, delay))

    def plan(self, url: str) -> Generator[float, httpx.Response | httpx.TransportError, _Answer]:
        """One logical call's retries, for both clients: send it each try's response (read) or
        transport error; it yields how long to wait before the next try, returns the answer,
        or raises ``ApiError`` (a refusal, or the last failure) or ``TransportError``."""
        delays = self.retry.delays()
        attempts = 0
        got = yield 0.0
        while True:
            attempts += 1
            failure: _Retry | None = None
            if isinstance(got, httpx.TransportError):
                cause: BaseException = got
            else:
                verdict = self.verdict(got)
                if isinstance(verdict, Intent):
                    return got.status_code, verdict
                if isinstance(verdict, ApiError):
                    raise verdict
                failure, cause = verdict, verdict.error
            delay = next(delays, None)
            if delay is None:
                if failure is not None:
                    raise failure.error
                raise TransportError(url, attempts, cause) from cause
            got = yield self.pause(delay, failure)


@dataclass
class _Retry:
    error: ApiError
    after: float | None


class Client(_Shared):
    """A client of one oncebox API with one bearer token (sync, httpx).

    ``transport`` is httpx's (tests, proxies). Use as a context manager, or call ``close``.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        retry: RetryConfig | None = None,
        timeout: float = _DEFAULTS.timeout,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, retry, timeout)
        self._http = httpx.Client(transport=transport, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections."""
        self._http.close()

    def submit(
        self,
        key: str,
        action: str,
        arguments: Mapping[str, Any],
        *,
        business_ref: str | None = None,
        run_id: str | None = None,
        step: str | None = None,
        deadline: datetime | None = None,
        ordering_key: str | None = None,
    ) -> Submitted:
        """Submits ``action`` with ``arguments`` under ``key``; see the module for retries.

        Raises ``ApiError`` for a refusal (400 bad input naming the field, 401, 413, 422 unknown
        action or the key already used with another request) and ``TransportError`` when no
        answer came after every retry — the intent may or may not exist: submit again with the
        same key.
        """
        url, headers, body = self.submit_request(
            key, action, arguments, business_ref, run_id, step, deadline, ordering_key
        )
        status, intent = self._call("POST", url, headers, body, self.timeout)
        return Submitted(intent, created=status == 202)

    def get(self, key: str) -> Intent:
        """The intent under ``key`` as it is now (``ApiError`` 404 when there is none)."""
        _native.validate_key(key)
        return self._call("GET", self.url("v1", "intents", key), self.headers, None, self.timeout)[
            1
        ]

    def wait(self, key: str, timeout: float) -> Intent:
        """Waits until the intent is settled (terminal or waiting for a person) or ``timeout``
        seconds have passed, long-polling the server; returns it as last seen."""
        _native.validate_key(key)
        deadline = time.monotonic() + timeout
        while True:
            secs = int(min(max(deadline - time.monotonic(), 0), MAX_WAIT_SECONDS))
            url = self.url("v1", "intents", key) + f"?wait={secs}"
            intent = self._call("GET", url, self.headers, None, self.timeout + secs)[1]
            if intent.is_settled or secs == 0 or time.monotonic() >= deadline:
                return intent

    def cancel(self, key: str) -> Intent:
        """Cancels the intent before it is dispatched; a retried cancel whose first answer was
        lost finds it cancelled and returns it. ``ApiError`` 409 when it may be dispatched."""
        _native.validate_key(key)
        url = self.url("v1", "intents", key, "cancel")
        try:
            return self._call("POST", url, self.headers, None, self.timeout)[1]
        except ApiError as e:
            if e.status == 409:
                current = self.get(key)
                if current.status is Status.CANCELLED:
                    return current
            raise

    def _call(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float
    ) -> _Answer:
        plan = self.plan(url)
        next(plan)
        while True:
            got: httpx.Response | httpx.TransportError
            try:
                got = self._http.request(
                    method, url, headers=headers, content=body, timeout=timeout
                )
                got.read()
            except httpx.TransportError as e:
                got = e
            try:
                pause = plan.send(got)
            except StopIteration as done:
                answer: _Answer = done.value
                return answer
            time.sleep(pause)


class AsyncClient(_Shared):
    """The async twin of ``Client`` (httpx.AsyncClient). Use with ``async with``, or call
    ``aclose``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        retry: RetryConfig | None = None,
        timeout: float = _DEFAULTS.timeout,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, retry, timeout)
        self._http = httpx.AsyncClient(transport=transport, timeout=timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connections."""
        await self._http.aclose()

    async def submit(
        self,
        key: str,
        action: str,
        arguments: Mapping[str, Any],
        *,
        business_ref: str | None = None,
        run_id: str | None = None,
        step: str | None = None,
        deadline: datetime | None = None,
        ordering_key: str | None = None,
    ) -> Submitted:
        """As ``Client.submit``."""
        url, headers, body = self.submit_request(
            key, action, arguments, business_ref, run_id, step, deadline, ordering_key
        )
        status, intent = await self._call("POST", url, headers, body, self.timeout)
        return Submitted(intent, created=status == 202)

    async def get(self, key: str) -> Intent:
        """As ``Client.get``."""
        _native.validate_key(key)
        url = self.url("v1", "intents", key)
        return (await self._call("GET", url, self.headers, None, self.timeout))[1]

    async def wait(self, key: str, timeout: float) -> Intent:
        """As ``Client.wait``."""
        _native.validate_key(key)
        deadline = time.monotonic() + timeout
        while True:
            secs = int(min(max(deadline - time.monotonic(), 0), MAX_WAIT_SECONDS))
            url = self.url("v1", "intents", key) + f"?wait={secs}"
            intent = (await self._call("GET", url, self.headers, None, self.timeout + secs))[1]
            if intent.is_settled or secs == 0 or time.monotonic() >= deadline:
                return intent

    async def cancel(self, key: str) -> Intent:
        """As ``Client.cancel``."""
        _native.validate_key(key)
        url = self.url("v1", "intents", key, "cancel")
        try:
            return (await self._call("POST", url, self.headers, None, self.timeout))[1]
        except ApiError as e:
            if e.status == 409:
                current = await self.get(key)
                if current.status is Status.CANCELLED:
                    return current
            raise

    async def _call(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float
    ) -> _Answer:
        plan = self.plan(url)
        next(plan)
        while True:
            got: httpx.Response | httpx.TransportError
            try:
                got = await self._http.request(
                    method, url, headers=headers, content=body, timeout=timeout
                )
                await got.aread()
            except httpx.TransportError as e:
                got = e
            try:
                pause = plan.send(got)
            except StopIteration as done:
                answer: _Answer = done.value
                return answer
            await asyncio.sleep(pause)


def _problem(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
        return ApiError(
            int(body.get("status", response.status_code)),
            str(body.get("title", response.reason_phrase)),
            str(body["detail"]),
            body.get("field"),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return _unexpected(response, response.text[:512])


def _unexpected(response: httpx.Response, detail: str) -> ApiError:
    return ApiError(response.status_code, "unexpected answer", detail)


def _retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), if the server sent one."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - datetime.now(timezone.utc)).total_seconds(), 0.0)


def _sf_string(key: str) -> str:
    """The key as an RFC 8941 sf-string, as the Rust client sends it."""
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


__all__ = ["AsyncClient", "Client", "RetryConfig"]
