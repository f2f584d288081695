"""Inside a sandbox: 127.0.0.1:PORT relayed to the model gateway's Unix socket, then a command.

A sandbox has a network namespace of its own (only its loopback), so an agent
CLI in it cannot reach the gateway's TCP port on the host. The gateway's Unix
socket is bound into the sandbox instead, and this script — run by the
sandbox's own Python, standard library only — listens on the sandbox's
``127.0.0.1:PORT``, relays every connection to that socket, and runs the
agent's command::

    python3 forward.py --port 4000 --socket /run/tackroom/gateway.sock -- aider --yes ...

The listener is bound *before* the command starts (no race with its first
request); the script exits with the command's status once the command ends,
and the command sees ``OPENAI_BASE_URL`` pointing at the relay. Nothing else
of the host is reachable: the relay forwards to the one socket it was given.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys

_CHUNK = 1 << 16


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then pass the end on (a half-close, as TCP does)."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                 socket_path: str) -> None:
    try:
        up_r, up_w = await asyncio.open_unix_connection(socket_path)
    except OSError:
        client_w.close()  # the gateway is gone: the client sees a closed connection
        return
    try:
        await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))
    finally:
        for w in (up_w, client_w):
            with contextlib.suppress(Exception):
                w.close()


async def _main(port: int, socket_path: str, command: list[str]) -> int:
    server = await asyncio.start_server(
        lambda r, w: _relay(r, w, socket_path), "127.0.0.1", port)
    if not command:  # relay only (tests, debugging)
        async with server:
            await server.serve_forever()
        return 0
    env = dict(os.environ)
    env.setdefault("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    proc = await asyncio.create_subprocess_exec(*command, env=env)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # pass a stop on to the agent
        loop.add_signal_handler(sig, proc.send_signal, sig)
    try:
        return await proc.wait()
    finally:
        server.close()


def main(argv: list[str] | None = None) -> int:
    """Parse ``--port P --socket PATH [-- COMMAND ...]`` and run; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, command = args[:cut], args[cut + 1:]
    parser = argparse.ArgumentParser(prog="forward.py", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--socket", required=True)
    opts = parser.parse_args(args)
    try:
        return asyncio.run(_main(opts.port, opts.socket, command))
    except FileNotFoundError as e:  # the command itself does not exist
        print(f"forward.py: cannot run {command[0]!r}: {e.strerror}", file=sys.stderr)
        return 127
    except OSError as e:  # the port is taken
        print(f"forward.py: cannot listen on 127.0.0.1:{opts.port}: {e.strerror}",
              file=sys.stderr)
        return 126


if __name__ == "__main__":
    sys.exit(main())
