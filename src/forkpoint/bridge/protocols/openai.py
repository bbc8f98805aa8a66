"""What the two OpenAI protocols (Responses, Chat Completions) share on the bridge: key, headers, error shape."""

from __future__ import annotations

from typing import ClassVar

from aiohttp import web

from forkpoint.bridge.upstream import DROPPED_REQUEST_HEADERS, HttpUpstream
from forkpoint.core.model import JsonObject

#: credential-scoping headers of the agent's (dummy) identity: the upstream key's owner decides these
DROPPED_OPENAI_REQUEST_HEADERS = DROPPED_REQUEST_HEADERS | {"openai-organization", "openai-project",
                                                            "chatgpt-account-id"}
PASSED_OPENAI_RESPONSE_HEADERS = frozenset({"content-type", "content-encoding", "cache-control", "retry-after",
                                            "x-request-id", "request-id", "x-models-etag", "x-reasoning-included"})
PASSED_OPENAI_RESPONSE_PREFIXES = ("openai-", "x-ratelimit-", "x-codex-")


def openai_error_json(kind: str, message: str, code: str | None = None) -> JsonObject:
    """The OpenAI API error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def openai_error_response(status: int, kind: str, message: str, code: str | None = None) -> web.Response:
    return web.json_response(openai_error_json(kind, message, code), status=status)


class OpenAIUpstream(HttpUpstream):
    """POST the cleaned body to ``<base_url><endpoint>`` with the bridge's key; stream the answer back unbuffered.

    ``base_url`` is an OpenAI-style API root such as ``https://api.openai.com/v1`` or ScriptedModel's
    ``http://127.0.0.1:PORT/v1`` (a base already ending in the endpoint is used as is). Subclasses name the
    endpoint.
    """

    endpoint: ClassVar[str] = ""
    dropped_request_headers: ClassVar[frozenset[str]] = DROPPED_OPENAI_REQUEST_HEADERS
    passed_response_headers: ClassVar[frozenset[str]] = PASSED_OPENAI_RESPONSE_HEADERS
    passed_response_prefixes: ClassVar[tuple[str, ...]] = PASSED_OPENAI_RESPONSE_PREFIXES

    def url_for(self, base: str) -> str:
        return base if base.endswith(self.endpoint) else f"{base}{self.endpoint}"

    def key_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}

    def error(self, status: int, message: str) -> web.Response:
        return openai_error_response(status, "server_error", message, "upstream_unreachable")

    def refusal(self, status: int, message: str) -> web.Response:
        return openai_error_response(status, "invalid_request_error", message, "upstream_failed")


def model_of(body: JsonObject) -> str:
    """The model a request asks for (what a stub echoes)."""
    model = body.get("model")
    return model if isinstance(model, str) else "forkpoint-stub"
