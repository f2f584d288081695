"""A recording model gateway: an OpenAI-compatible endpoint in front of any tackroom Policy.

Third-party agent CLIs run unmodified against it; each episode gets its own
bearer token and every model call becomes a :class:`~tackroom.core.episode.Turn`
of that episode. See :mod:`tackroom.gateway.server`.
"""

from tackroom.gateway.server import DEFAULT_MODEL_NAME, ModelGateway, Route

__all__ = ["DEFAULT_MODEL_NAME", "ModelGateway", "Route"]
