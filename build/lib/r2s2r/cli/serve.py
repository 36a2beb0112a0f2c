"""``r2s2r serve``: a trained policy behind openpi's websocket policy protocol."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from r2s2r.policy.base import Policy
    from r2s2r.policy.serve import PolicyServer


def serve_policy(
    policy: Policy,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    on_listening: Callable[[PolicyServer], None] | None = None,
) -> None:
    """Serve ``policy`` until Ctrl-C (or ``close()`` on the server ``on_listening`` receives),
    printing the address and the metadata once listening."""
    # Imported here so that the CLI starts without the policy extra.
    from r2s2r.policy.serve import PolicyServer, metadata_message

    server = PolicyServer(policy, host=host, port=port, token=token)
    try:
        server.start()
        typer.echo(f"serving on {server.url} (health: http://{host}:{server.port}/healthz)")
        for key, value in metadata_message(server.metadata).items():
            typer.echo(f"  {key}: {value}")
        auth = ", api_key=TOKEN" if token is not None else ""
        typer.echo(
            "openpi client: WebsocketClientPolicy(host="
            f"{host!r}, port={server.port}{auth}); r2s2r: RemotePolicy({host!r}, {server.port}"
            f"{', token=TOKEN' if token is not None else ''}); Ctrl-C stops"
        )
        if on_listening is not None:
            on_listening(server)
        server.wait()
    except KeyboardInterrupt:
        typer.echo("stopping")
    finally:
        server.close()


def serve(
    policy: Annotated[Path, typer.Option("--policy", help="the training run folder to serve")],
    host: Annotated[
        str,
        typer.Option("--host", help="interface to bind; other than loopback needs --token"),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="R2S2R_SERVE_TOKEN",
            help="required from clients as 'Authorization: Api-Key TOKEN' (openpi: api_key=)",
        ),
    ] = None,
) -> None:
    """Serve a trained policy over openpi's websocket protocol (openpi-client or RemotePolicy)."""
    from r2s2r.policy.serve import check_binding

    # A refused binding is said before the (slow) policy load.
    check_binding(host, token)
    from r2s2r.policy.learned import load_policy

    serve_policy(load_policy(policy), host=host, port=port, token=token)
