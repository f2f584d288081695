"""Episodes to table rows in a process of their own, so that recording does not share the run's GIL.

Turning a finished episode into rows (:func:`~tackroom.records.rows.episode_row`,
:func:`~tackroom.records.rows.turn_rows`: every message scrubbed and JSON-encoded)
is pure Python: about 0.35 ms for a five-turn episode. On the runner's writer
thread it is off the event loop but not off the interpreter lock, so with a
thousand episodes in flight that end together the model replies queue behind
it (``bench/concurrency.py``: 0.16 ms of the run's 0.48 ms of CPU per model
call). A :class:`RowConverter` is a child interpreter that does that work: the
parent pickles a batch of episodes (about 0.04 ms each, in C) and gets back
the batch's two Arrow tables in Arrow's IPC format, ready for
:meth:`RecordStore.append_tables <tackroom.records.store.RecordStore.append_tables>`.

The child is ``python -m tackroom.records.converter BLOB_DIR`` with pipes on
stdin and stdout (not :mod:`multiprocessing`, whose start methods other than
``fork`` import the caller's ``__main__`` again, and ``fork`` copies a process
whose DuckDB and asyncio threads are mid-flight). Secrets registered in the
parent (:func:`~tackroom.core.secrets.register_secret`) travel with every
batch. The child writes a batch's images to the store's blob directory before
it answers, as the in-process path does before its commit.

Nothing is lost when the child is: :meth:`RowConverter.convert` raises
:class:`ConverterLost` and the caller still holds the batch, to convert in its
own thread (the runner's writer does, for the rest of the run).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from tackroom.core.episode import Episode
from tackroom.core.secrets import live_secrets, set_live_secrets
from tackroom.records.blobs import BlobStore
from tackroom.records.rows import arrow_table, episode_row, turn_rows
from tackroom.records.schema import EPISODE_SCHEMA, TURN_SCHEMA

__all__ = ["ConverterLost", "RowConverter", "convert_batch"]

_LEN = struct.Struct("!Q")
#: Seconds the child gets to exit after its stdin closes, before it is killed.
_EXIT_S = 5.0


class ConverterLost(Exception):
    """The converter process is gone (or never started); the batch was not converted."""


def convert_batch(episodes: list[Episode], now: float, blobs: BlobStore | None
                  ) -> tuple[pa.Table, pa.Table]:
    """The ``episodes`` and ``turns`` tables of a batch (validated, scrubbed).

    An episode id that occurs twice keeps its last version, as a store's queue does.
    """
    rows: dict[tuple[str, str], tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for ep in episodes:
        key = (ep.run_id, ep.episode_id)
        rows.pop(key, None)
        rows[key] = (episode_row(ep, now), turn_rows(ep, blobs))
    return (arrow_table([e for e, _ in rows.values()], EPISODE_SCHEMA),
            arrow_table([t for _, ts in rows.values() for t in ts], TURN_SCHEMA))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _table(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _send(out: IO[bytes], data: bytes) -> None:
    out.write(_LEN.pack(len(data)))
    out.write(data)
    out.flush()


def _receive(inp: IO[bytes]) -> bytes:
    """One frame's bytes (``EOFError`` when the stream ends)."""
    head = inp.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError
    (size,) = _LEN.unpack(head)
    data = inp.read(size)
    if len(data) < size:
        raise EOFError
    return data


def _dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


class RowConverter:
    """A child process that converts batches of episodes to Arrow tables.

    One caller thread at a time (the runner's writer thread); :meth:`close` ends it.

    Args:
        blob_root: the store's blob directory (``RecordStore.blobs.root``), where
            the child writes the images of the messages.
    """

    def __init__(self, blob_root: str | Path) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parents[2]),
                        os.environ.get("PYTHONPATH", "")) if p)}
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-m", "tackroom.records.converter", str(blob_root)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=env, close_fds=True)
        except OSError as e:
            raise ConverterLost(f"could not start the row converter: {e}") from None
        self._lock = threading.Lock()

    def convert(self, episodes: list[Episode], now: float) -> tuple[pa.Table, pa.Table]:
        """The batch's ``(episodes, turns)`` tables, as :func:`convert_batch` makes them.

        Raises :class:`ConverterLost` when the child died, and ``ValueError`` with
        the child's message when an episode could not be converted (bad data).
        """
        try:
            data = _dumps((live_secrets(), now, episodes))
        except Exception as e:  # noqa: BLE001 - an object pickle cannot take: not the child's fault
            raise ValueError(f"cannot hand the batch to the row converter: {e}") from None
        with self._lock:
            proc = self._proc
            if proc is None or proc.stdin is None or proc.stdout is None:
                raise ConverterLost("the row converter is closed")
            try:
                _send(proc.stdin, data)
                del data
                reply = pickle.loads(_receive(proc.stdout))
            except (OSError, EOFError, pickle.UnpicklingError) as e:
                self._kill()
                raise ConverterLost(f"the row converter died: {type(e).__name__}") from None
        if reply[0] == "error":
            raise ValueError(reply[1])
        return _table(reply[1]), _table(reply[2])

    def close(self) -> None:
        """End the child (it exits when its stdin closes). Safe to call twice."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(_EXIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._kill()


def _serve(blob_root: str) -> None:
    """The child's loop: a batch in, its tables (or why not) out, until stdin closes."""
    # Ctrl-C reaches the whole process group: the parent decides when this ends (its
    # stdin closing), so that a run being interrupted can still hand over its last batch.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    blobs = BlobStore(blob_root)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    # Nothing else may write to the reply stream.
    sys.stdout = sys.stderr
    while True:
        try:
            frame = _receive(inp)
        except EOFError:
            return
        try:
            live, now, episodes = pickle.loads(frame)
            del frame
            set_live_secrets(live)
            eps, turns = convert_batch(episodes, now, blobs)
            del episodes
            reply: tuple[Any, ...] = ("ok", _ipc(eps), _ipc(turns))
        except Exception as e:  # noqa: BLE001 - reported to the parent, which converts again
            reply = ("error", f"{type(e).__name__}: {e}")
        _send(out, _dumps(reply))


if __name__ == "__main__":
    _serve(sys.argv[1])
