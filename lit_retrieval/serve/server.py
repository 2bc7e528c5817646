"""The server process of `lit-retrieval serve`: the listening socket, taken before the model loads
(a busy port fails at once), and uvicorn serving the app with bounded header time and a bounded
shutdown."""

from __future__ import annotations

import socket


def listening_socket(host: str, port: int) -> socket.socket:
    """The bound socket the server will listen on (taken before the model loads: a busy port fails at once)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve_forever(app, sock: socket.socket, header_timeout_s: float, shutdown_timeout_s: float) -> None:
    """Serve `app` on the bound `sock` until SIGTERM/SIGINT: headers bounded by `header_timeout_s`
    (`GuardedH11Protocol`), open requests cut `shutdown_timeout_s` after the signal, log lines
    prefixed with the command's name."""
    import uvicorn

    from lit_retrieval.serve.guards import GuardedH11Protocol
    from lit_retrieval.serve.loading import configure_logging

    GuardedH11Protocol.header_timeout_s = header_timeout_s
    config = uvicorn.Config(
        app, http=GuardedH11Protocol, log_level="warning", timeout_graceful_shutdown=shutdown_timeout_s
    )
    configure_logging()  # after uvicorn's own logging set-up
    uvicorn.Server(config).run(sockets=[sock])
