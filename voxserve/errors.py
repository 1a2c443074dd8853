"""Typed errors. Anything a client did wrong is a `ClientError` (4xx); the HTTP layer
renders every `VoxError` in one place, in the OpenAI error shape."""

from __future__ import annotations

__all__ = [
    "ClientClosed",
    "ClientError",
    "HeadersTooLarge",
    "InvalidRequest",
    "MisdirectedRequest",
    "NotFound",
    "Overloaded",
    "PayloadTooLarge",
    "ReplicaLost",
    "RequestTimeout",
    "ServerError",
    "TimedOut",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "VoxError",
]


class VoxError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class ClientError(VoxError):
    status = 400
    type = "invalid_request_error"


class InvalidRequest(ClientError):
    code = "invalid_value"


class Unauthorized(ClientError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class NotFound(ClientError):
    status = 404
    code = "not_found"


class Forbidden(ClientError):
    """The request comes from a web page whose origin may not use this server
    (`allowed_origins`)."""

    status = 403
    code = "origin_not_allowed"


class PayloadTooLarge(ClientError):
    status = 413
    code = "payload_too_large"


class HeadersTooLarge(ClientError):
    """The request line and headers pass the server's limit on their size or count."""

    status = 431
    code = "headers_too_large"


class UnsupportedMediaType(ClientError):
    """The body is not in the media type the endpoint reads (JSON endpoints need
    `Content-Type: application/json`)."""

    status = 415
    code = "unsupported_media_type"


class MisdirectedRequest(ClientError):
    """The `Host` header names a host this server does not answer for (`allowed_hosts`)."""

    status = 421
    code = "invalid_host"


class Overloaded(ClientError):
    status = 429
    type = "rate_limit_error"
    code = "server_overloaded"

    def __init__(self, message: str, retry_after: float = 1.0):
        super().__init__(message)
        self.retry_after = retry_after


class ClientClosed(ClientError):
    """The client went away before a response could start (nginx's 499)."""

    status = 499
    code = "client_closed_request"


class RequestTimeout(ClientError):
    """The client did not finish sending its request within the request timeout."""

    status = 408
    code = "request_timeout"


class ServerError(VoxError):
    status = 500
    type = "server_error"
    code = "internal_error"


class ReplicaLost(ServerError):
    """The engine replica that held a session (or served a request) died; a session on it
    cannot go on, and a new one goes to a live replica."""

    code = "replica_lost"


class Unavailable(VoxError):
    status = 503
    type = "server_error"
    code = "unavailable"


class TimedOut(VoxError):
    """The server could not finish a request within the request timeout."""

    status = 504
    type = "server_error"
    code = "request_timeout"
