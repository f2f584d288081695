"""``tackroom serve``: a local model behind an OpenAI-compatible API."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tackroom.core.bounds import check_number
from tackroom.core.errors import ConfigError


def serve_cmd(
    model_dir: Annotated[str, typer.Argument(help="A local model directory (save_pretrained).")],
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    api_key: Annotated[str | None, typer.Option(
        envvar="TACKROOM_SERVE_API_KEY", help="Require `Authorization: Bearer KEY`.")] = None,
    adapter: Annotated[list[str] | None, typer.Option(
        help="NAME=DIR: a LoRA adapter served as model NAME. Repeatable.")] = None,
    max_batch: Annotated[int, typer.Option(help="Requests per generate call.")] = 8,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads.")] = None,
    max_body: Annotated[int, typer.Option(
        help="Largest request body in bytes; larger ones get a 413 unread.")] = 8_000_000,
    read_timeout: Annotated[float, typer.Option(
        help="Seconds a connection may send nothing before it is closed.")] = 30.0,
) -> None:
    """Serve a local model over an OpenAI-compatible API (chat completions, tools, streaming,
    log-probs, token ids), so it is evaluated exactly like a vLLM server.

    [bold]Example[/bold]

      tackroom serve models/tiny --port 8000 &

      tackroom eval --suite toy --policy openai:tiny --base-url http://127.0.0.1:8000/v1
    """
    from tackroom.serve import serve_main

    adapters: dict[str, str] = {}
    for item in adapter or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"cannot read {item!r}", "--adapter", "write NAME=DIR")
        adapters[name] = path
    check_number(port, 0, 65535, "port", "--port", integer=True, example="8000")
    check_number(max_batch, 1, 4096, "max_batch", "--max-batch", integer=True, example="8")
    if threads is not None:
        check_number(threads, 1, 4096, "threads", "--threads", integer=True, example="2")
    check_number(max_body, 1, 2**31, "max_body", "--max-body", integer=True,
                 example="8000000")
    check_number(read_timeout, 0.001, 86400, "read_timeout", "--read-timeout", example="30")
    extra: dict[str, Any] = {"max_body": max_body, "read_timeout": read_timeout}
    if threads:
        extra["threads"] = threads
    serve_main(model_dir, host=host, port=port, api_key=api_key, adapters=adapters or None,
               max_batch=max_batch, **extra)
