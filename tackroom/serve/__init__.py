"""``tackroom serve MODEL_DIR``: an OpenAI-compatible HTTP server over the ``hf`` backend.

:mod:`tackroom.serve.server` serves (on the :mod:`tackroom.wire` stack, the
gateway's too); :mod:`tackroom.serve.engine` batches the requests on one event
loop and turns the model's tokens into replies. The request reading and the
reply shapes are the wire package's, re-exported here for the users of
``tackroom.serve``.
"""

from tackroom.serve.engine import _Engine, _Gate, _Vocab, build_completion
from tackroom.serve.server import ModelServer, ServerThread, serve_main
from tackroom.wire import (
    DEFAULT_MAX_TOKENS,
    MAX_BODY,
    READ_TIMEOUT,
    ApiError,
    ChatRequest,
    Completion,
    completion_body,
    parse_chat_request,
    split_reply,
    stream_chunks,
)

__all__ = [
    "DEFAULT_MAX_TOKENS", "MAX_BODY", "READ_TIMEOUT", "ApiError", "ChatRequest", "Completion",
    "ModelServer", "ServerThread", "_Engine", "_Gate", "_Vocab", "build_completion",
    "completion_body", "parse_chat_request", "serve_main", "split_reply", "stream_chunks",
]
