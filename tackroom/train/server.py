"""Rollouts from an inference server: adapter hot-loading, and the async off-policy pipeline.

With ``rollout.backend = "openai"`` the trainer does not generate: a
vLLM-compatible server at ``rollout.base_url`` does (``tackroom serve``
implements the same endpoints). Each weight version ``<run_id>-step-<k>``
is saved as a LoRA adapter under ``OUT/rollout-weights/<version>`` and loaded
into the server with ``POST /v1/load_lora_adapter`` (``lora_name`` = the
version); rollouts then ask for ``"model": <version>``, and each turn records
the adapter the server says answered (the reply's ``model``) in
``Turn.adapter``. Token ids and log-probs come back with every reply
(``return_token_ids``, ``logprobs``): they are π_old.

:class:`RolloutProducer` is ``rollout.max_staleness = s > 0``: a background
thread plays the batches of iteration ``j`` with the weights of iteration
``max(start, j - s)`` — a fixed lag, so a run's rollouts do not depend on
timing — while the learner trains iteration ``j - 1``, ``j - 2``, ….
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from tackroom.core.episode import Episode
from tackroom.core.errors import TackroomError
from tackroom.core.policy import PolicyRequest, PolicyResponse

WHERE = "rollout.base_url"
START_FIX = ("start it (`tackroom serve MODEL_DIR --port 8000`, or `vllm serve MODEL "
             "--enable-lora --max-lora-rank R` with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True) "
             "or fix rollout.base_url")
LORA_FIX = ("start vLLM with --enable-lora, --max-lora-rank >= lora.rank and "
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (or use `tackroom serve`)")


def _message(text: str) -> str:
    """The error message of a server's answer (OpenAI's, vLLM's or FastAPI's shape)."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:300]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        for key in ("message", "detail"):
            if body.get(key):
                return str(body[key])[:300]
    return text.strip()[:300]


class InferenceServer:
    """The admin side of an OpenAI-compatible server: its models, and its LoRA adapters.

    Args:
        base_url: the ``/v1`` root.
        api_key: sent as a bearer token (default ``$OPENAI_API_KEY``).
        timeout: seconds for one request (loading an adapter can take a while).
    """

    def __init__(self, base_url: str, api_key: str | None = None,
                 timeout: float = 300.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout
        self.loaded: list[str] = []

    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or e
            raise TackroomError(f"cannot reach the inference server at {self.base_url} "
                                f"({reason})", WHERE, START_FIX) from None

    def models(self) -> list[str]:
        """The names the server serves (``GET /v1/models``); checks it is up and takes the key."""
        status, text = self._request("GET", "/models")
        if status == 401:
            raise TackroomError(f"the inference server at {self.base_url} refused the API key "
                                f"({_message(text)})", WHERE,
                                "set OPENAI_API_KEY to the key the server was started with")
        if status != 200:
            raise TackroomError(f"GET {self.base_url}/models answered {status} "
                                f"({_message(text)})", WHERE,
                                "rollout.base_url must be the server's /v1 root, e.g. "
                                "http://127.0.0.1:8000/v1")
        try:
            data = json.loads(text)["data"]
            return [str(m["id"]) for m in data]
        except (ValueError, KeyError, TypeError):
            raise TackroomError(f"GET {self.base_url}/models is not an OpenAI model list",
                                WHERE, "point rollout.base_url at an OpenAI-compatible "
                                "server's /v1 root") from None

    def load(self, name: str, path: str) -> None:
        """Serve the adapter at ``path`` as ``name`` (again, if the server already has ``name``)."""
        status, text = self._request("POST", "/load_lora_adapter",
                                     {"lora_name": name, "lora_path": path})
        if status == 400 and "already" in _message(text):
            # Left over from an earlier attempt at this run (a crash, --resume): these
            # weights replace it.
            self.unload(name)
            status, text = self._request("POST", "/load_lora_adapter",
                                         {"lora_name": name, "lora_path": path})
        if status == 200:
            self.loaded.append(name)
            return
        msg = _message(text)
        if status == 404 and "adapter" not in msg.lower():
            raise TackroomError(f"the inference server at {self.base_url} has no "
                                f"/v1/load_lora_adapter endpoint ({status}: {msg})", WHERE,
                                LORA_FIX)
        if status == 404:
            raise TackroomError(f"the inference server at {self.base_url} cannot read the "
                                f"adapter {name!r} at {path} ({msg})", WHERE,
                                "the server must see run.out_dir at the same path (run it on "
                                "this machine, or on a shared file system)")
        raise TackroomError(f"the inference server at {self.base_url} refused to load "
                            f"adapter {name!r} from {path} ({status}: {msg})", WHERE,
                            LORA_FIX + "; the server's base model must be model.path")

    def unload(self, name: str) -> None:
        """Stop serving ``name``; an adapter the server does not have is not an error."""
        status, text = self._request("POST", "/unload_lora_adapter", {"lora_name": name})
        if name in self.loaded:
            self.loaded.remove(name)
        if status not in (200, 404):
            raise TackroomError(f"the inference server at {self.base_url} refused to unload "
                                f"adapter {name!r} ({status}: {_message(text)})", WHERE,
                                LORA_FIX)


class ServedPolicy:
    """The policy of one weight version on the server; its turns name the adapter that answered.

    An :class:`~tackroom.policies.openai_policy.OpenAIPolicy` whose model is the
    version (the adapter's name on the server), asking for token ids and log-probs.
    """

    def __init__(self, version: str, base_url: str, *, concurrency: int,
                 api_key: str | None = None, timeout: float = 600.0) -> None:
        from tackroom.policies.openai_policy import OpenAIPolicy

        self.version = version
        self.id = f"train:{version}"
        self.inner = OpenAIPolicy(version, base_url=base_url, api_key=api_key,
                                  max_concurrency=max(1, concurrency), return_token_ids=True,
                                  timeout=timeout)

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "id": self.id, "version": self.version}

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        response = await self.inner.act(request)
        # The server names the adapter that answered in ``model`` (vLLM: the LoRA's name).
        response.adapter = response.model or None
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class RolloutProducer:
    """Rollout batches played in a background thread, at most ``staleness`` iterations ahead.

    Iteration ``j``'s batches are played by the weights published for iteration
    ``max(start, j - staleness)`` (:meth:`publish`), once those exist and ``j`` is
    below the limit (:meth:`allow`); :meth:`get` hands them to the learner in order.

    Args:
        play: ``(iteration, version) -> batches``, run in the producer's thread.
        start: the first iteration to play.
        staleness: the lag ``s`` (≥ 1).
        limit: iterations below this may be played.
    """

    def __init__(self, play: Callable[[int, str], list[list[Episode]]], *, start: int,
                 staleness: int, limit: int) -> None:
        self._play = play
        self.start = start
        self.staleness = staleness
        self._limit = limit
        self._cond = threading.Condition()
        self._published: dict[int, str] = {}
        self._results: dict[int, tuple[str, list[list[Episode]]]] = {}
        self._error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="tackroom-rollouts",
                                        daemon=True)
        self._thread.start()

    def source(self, iteration: int) -> int:
        """The iteration whose weights play iteration ``iteration``'s rollouts."""
        return max(self.start, iteration - self.staleness)

    def publish(self, iteration: int, version: str) -> None:
        """The weights ``version`` (loaded on the server) are iteration ``iteration``'s."""
        with self._cond:
            self._published[iteration] = version
            self._cond.notify_all()

    def allow(self, limit: int) -> None:
        """Let iterations below ``limit`` be played."""
        with self._cond:
            self._limit = max(self._limit, limit)
            self._cond.notify_all()

    def get(self, iteration: int) -> tuple[str, list[list[Episode]]]:
        """The version that played iteration ``iteration`` and its batches (waits for them)."""
        with self._cond:
            while iteration not in self._results:
                if self._error is not None:
                    raise self._error
                if not self._thread.is_alive():
                    raise TackroomError("the rollout thread stopped", "train",
                                        "see the messages above")
                self._cond.wait(0.5)
            return self._results.pop(iteration)

    def _run(self) -> None:
        j = self.start
        while True:
            with self._cond:
                while not self._stop and not (j < self._limit
                                              and self.source(j) in self._published):
                    self._cond.wait()
                if self._stop:
                    return
                version = self._published[self.source(j)]
            try:
                batches = self._play(j, version)
            except BaseException as e:  # noqa: BLE001 - handed to the learner's thread
                with self._cond:
                    self._error = e
                    self._cond.notify_all()
                return
            with self._cond:
                self._results[j] = (version, batches)
                self._cond.notify_all()
            j += 1

    def close(self, timeout: float = 600.0) -> None:
        """Stop after the batch being played (if any); wait for the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout)
