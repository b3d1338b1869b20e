"""A delay proxy in front of one task: the lab's slow link (LINK, make chaos SCENARIO=slow-link).

    TFLAB_LINK_TO=worker-1:2222 TFLAB_LINK_CONTROL=/lab/links/worker-1.json python -m tflab.linkproxy

It listens on port 2222 as `<task>-link`, the address TF_CONFIG gives the task when its link is
shaped, and forwards every connection to the task itself. Each chunk of bytes, in both
directions, waits until `latency_ms` after it arrived, then takes len * 8 / rate to "send", so
a connection behaves like a link of that latency and rate (each connection and direction has its
own rate: it is no shared bottleneck). The profile is read from the control file, polled, so the
lab can slow a link mid-run; no file means no delay. Packet loss is not offered: a TCP proxy
cannot drop packets (it sees a stream), and this machine's kernel has no netem to do it properly.

Why a proxy and not `tc`: it needs no privilege, no kernel module and no helper image, so it
runs the same on every machine the lab runs on. It shapes every connection *to* the task (and
their replies), not the task's own outgoing connections. Standard library only: it runs in the
trainer image without TensorFlow.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from tflab.core.task import LinkProfile as Profile

LISTEN_PORT = 2222
POLL_SECONDS = 0.2
CHUNK = 64 * 1024


class Link:
    def __init__(self, control: Path):
        self.control = control
        self.profile = Profile()
        self._seen: int | None = None  # the control file's mtime, as last read

    async def watch(self) -> None:
        while True:
            try:
                stamp = self.control.stat().st_mtime_ns
                if stamp != self._seen:
                    self._seen = stamp
                    self.profile = Profile(**json.loads(self.control.read_text()))
                    print(f"[link] now {self.profile}", flush=True)
            except FileNotFoundError:
                self.profile = Profile()
            except (ValueError, TypeError):
                pass  # a control file being written: read it on the next poll
            await asyncio.sleep(POLL_SECONDS)

    async def pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        async def receive():
            while data := await reader.read(CHUNK):
                await queue.put((loop.time(), data))
            await queue.put(None)

        async def send():
            while (item := await queue.get()) is not None:
                arrived, data = item
                profile = self.profile
                wait = arrived + profile.latency_ms / 1000 - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
                if profile.mbit:
                    await asyncio.sleep(len(data) * 8 / (profile.mbit * 1e6))
            writer.close()

        try:
            await asyncio.gather(receive(), send())
        except (ConnectionError, OSError):
            writer.close()


async def serve(target: str, control: Path) -> None:
    host, _, port = target.rpartition(":")
    link = Link(control)

    async def connected(client_reader, client_writer):
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()  # the task is not up (yet): the caller retries, as with the task itself
            return
        await asyncio.gather(link.pipe(client_reader, upstream_writer), link.pipe(upstream_reader, client_writer))

    server = await asyncio.start_server(connected, "0.0.0.0", LISTEN_PORT)
    print(f"[link] forwarding :{LISTEN_PORT} -> {target}, profile from {control}", flush=True)
    await asyncio.gather(server.serve_forever(), link.watch())


def main() -> int:
    target = os.environ["TFLAB_LINK_TO"]
    control = Path(os.environ["TFLAB_LINK_CONTROL"])
    try:
        asyncio.run(serve(target, control))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
