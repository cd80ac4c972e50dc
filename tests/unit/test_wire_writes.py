"""A connection's writes are held until its answer is read: a request leaves in one write to the socket, however
many pieces httpcore2 writes it in (:mod:`mcpbridge.outbound.wire`)."""

from __future__ import annotations

import asyncio

from mcpbridge.outbound.wire import COALESCE_BYTES, AsyncioBackend


async def _exchange(pieces: tuple[bytes, ...]) -> tuple[list[bytes], bytes, list[bytes]]:
    """``pieces`` written to a local server that answers once it has them all: (what went out before the answer
    was read, the answer, what went out in all)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(sum(map(len, pieces)))
        writer.write(b"answer")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=30)
        transport = stream._wire.transport  # type: ignore[attr-defined]
        sent: list[bytes] = []
        write = transport.write

        def counted(data: bytes) -> None:
            sent.append(bytes(data))
            write(data)

        transport.write = counted
        for piece in pieces:
            await stream.write(piece)
        held = list(sent)  # nothing has gone out before the answer is read
        answer = await stream.read(1024, timeout=30)
        await stream.aclose()
    return held, answer, sent


def test_a_request_written_in_pieces_leaves_in_one_write_once_its_answer_is_read() -> None:
    held, answer, sent = asyncio.run(_exchange((b"head;", b"body;", b"", b"end")))
    assert held == []
    assert sent == [b"head;body;end"]
    assert answer == b"answer"


def test_a_large_body_goes_out_as_it_comes() -> None:
    large = b"x" * (COALESCE_BYTES + 1)
    held, answer, sent = asyncio.run(_exchange((b"head;", large, b"end")))
    assert held == [b"head;" + large]  # held no longer than its limit, before any answer
    assert sent == [b"head;" + large, b"end"]
    assert answer == b"answer"
