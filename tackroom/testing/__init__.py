"""Test helpers that stand in for real infrastructure (model servers, …).

They are real servers on 127.0.0.1, not mocks, so the code under test runs its
ordinary network path.
"""

from tackroom.testing.openai_server import (
    RecordedRequest,
    Reply,
    ScriptedOpenAIServer,
    error,
    text,
    tool_call,
)

__all__ = ["RecordedRequest", "Reply", "ScriptedOpenAIServer", "error", "text", "tool_call"]
