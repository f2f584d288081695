"""One wire package: the HTTP/1.1 stack and the API shapes every tackroom server speaks.

``tackroom serve``, the recording gateway and the scripted test server are
built on it, so a rule about what a client may send, or about how a reply is
shaped, is written once:

* :mod:`~tackroom.wire.http11` — one connection: strict framing, limits on
  heads, bodies and time, back-pressure on request-body memory;
* :mod:`~tackroom.wire.server` — the listener and admission: who may hold a
  connection (per peer, unauthenticated, per client), and waiting instead of
  refusing at the ceiling;
* :mod:`~tackroom.wire.errors` — :class:`ApiError`, OpenAI's error shape, and
  the JSON a body may hold;
* :mod:`~tackroom.wire.chat` / :mod:`~tackroom.wire.replies` — chat-completions
  requests read (leniently for the gateway, strictly for ``serve``) and replies
  shaped, whole or streamed;
* :mod:`~tackroom.wire.toolcalls` — the one reader of ``<tool_call>`` blocks.

It stands on :mod:`tackroom.core` only.
"""

from tackroom.wire.chat import (
    DEFAULT_MAX_TOKENS,
    ChatCall,
    ChatRequest,
    message_role,
    parse_chat,
    parse_chat_request,
)
from tackroom.wire.errors import ApiError, dumps, first_line, loads
from tackroom.wire.http11 import Handler, HttpConnection, Reply, Request, error_reply
from tackroom.wire.replies import (
    Completion,
    Shape,
    completion_body,
    fixed_calls,
    from_response,
    sse_events,
    stream_chunks,
)
from tackroom.wire.server import HttpServer, Limits
from tackroom.wire.toolcalls import parse_tool_calls, split_reply

#: The largest request body accepted by default (bytes; ``max_body``).
MAX_BODY = 8 * 2**20
#: Seconds a connection may stay silent while a server waits for a request's head
#: or body, or for the next request on a kept-alive connection (``read_timeout``).
READ_TIMEOUT = 30.0

__all__ = [
    "DEFAULT_MAX_TOKENS", "MAX_BODY", "READ_TIMEOUT", "ApiError", "ChatCall", "ChatRequest",
    "Completion", "Handler", "HttpConnection", "HttpServer", "Limits", "Reply", "Request",
    "Shape", "completion_body", "dumps", "error_reply", "first_line", "fixed_calls",
    "from_response", "loads", "message_role", "parse_chat", "parse_chat_request",
    "parse_tool_calls", "split_reply", "sse_events", "stream_chunks",
]
