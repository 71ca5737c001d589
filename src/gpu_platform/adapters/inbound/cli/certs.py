"""`gpu-platform certs`: make a cluster CA and member certificates (adapters.member_certs).

    gpu-platform certs ca [--out DIR]                      DIR/ca.pem, DIR/ca.key (0600)
    gpu-platform certs issue ROLE NAME [--host H]... [--ca-dir DIR] [--out DIR] [--days N]
                                                          DIR/ROLE-NAME.pem, .key (0600)
    gpu-platform certs show FILE                           the role and name a certificate binds

ROLE is `server` (NAME: its server id; give its `--host` names), `agent` (NAME: its node) or
`client` (NAME: a user). Keys are never written over an existing file. Runs locally: no server.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console

from gpu_platform.adapters.inbound.cli.session import fail

__all__ = ["register_certs"]

T = TypeVar("T")
DirOpt = Annotated[Path, typer.Option("--out", help="Directory to write into.")]


def register_certs(app: typer.Typer, out: Console) -> None:
    certs = typer.Typer(
        help="Make a cluster CA and member certificates that bind a role (server, agent, "
        "client) and a name, for mutual TLS between servers, agents and clients.",
        no_args_is_help=True,
    )
    app.add_typer(certs, name="certs")

    @certs.command("ca")
    def ca(
        out_dir: DirOpt = Path("."),
        days: Annotated[int, typer.Option(help="Validity in days.")] = 3650,
    ) -> None:
        """Create a CA: ca.pem (give it to every server, agent and client) and ca.key."""
        from gpu_platform.adapters.member_certs import new_ca

        cert, key = _or_fail(lambda: new_ca(days=days))
        _write(cert, key, out_dir / "ca.pem", out_dir / "ca.key")
        out.print(f"wrote {out_dir / 'ca.pem'} and {out_dir / 'ca.key'}")

    @certs.command("issue")
    def issue(
        role: Annotated[str, typer.Argument(help="server, agent or client.")],
        name: Annotated[str, typer.Argument(help="Server id, node name or user name.")],
        host: Annotated[
            list[str] | None,
            typer.Option("--host", help="DNS name or IP it is reached at (repeatable; servers)."),
        ] = None,
        ca_dir: Annotated[
            Path, typer.Option("--ca-dir", help="Directory with ca.pem and ca.key.")
        ] = Path("."),
        out_dir: DirOpt = Path("."),
        days: Annotated[int, typer.Option(help="Validity in days.")] = 365,
    ) -> None:
        """Issue a certificate binding ROLE and NAME (URI SAN gpu-platform://ROLE/NAME)."""
        from gpu_platform.adapters.cluster_identity import Member
        from gpu_platform.adapters.member_certs import issue as issue_cert

        member = _or_fail(lambda: Member(role, name))
        try:
            ca_cert, ca_key = (ca_dir / "ca.pem").read_bytes(), (ca_dir / "ca.key").read_bytes()
        except OSError as exc:
            raise fail(f"--ca-dir: cannot read {exc.filename}: {exc.strerror}", 2) from None
        hosts = tuple(host or ())
        if role == "server" and not hosts:
            raise fail("--host: a server certificate needs the names it is reached at", 2)
        cert, key = _or_fail(lambda: issue_cert(ca_cert, ca_key, member, hosts=hosts, days=days))
        stem = out_dir / f"{role}-{name}"
        _write(cert, key, stem.with_suffix(".pem"), stem.with_suffix(".key"))
        out.print(f"wrote {stem}.pem and {stem}.key ({member.uri})")

    @certs.command("show")
    def show(
        file: Annotated[Path, typer.Argument(help="A PEM certificate.")],
    ) -> None:
        """Print the member (role and name) a certificate binds, or say it binds none."""
        from cryptography import x509

        from gpu_platform.adapters.cluster_identity import Member

        try:
            cert = x509.load_pem_x509_certificate(file.read_bytes())
        except OSError as exc:
            raise fail(f"{file}: {exc.strerror}", 2) from None
        except ValueError:
            raise fail(f"{file}: not a PEM certificate", 2) from None
        try:
            sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            uris = sans.get_values_for_type(x509.UniformResourceIdentifier)
        except x509.ExtensionNotFound:
            uris = []
        members = [m for u in uris if (m := Member.from_uri(u)) is not None]
        if len(members) != 1:
            raise fail(f"{file}: binds no gpu-platform member (no single gpu-platform:// URI)")
        out.print(f"{members[0].role} {members[0].name}")


def _or_fail(make: Callable[[], T]) -> T:
    try:
        return make()
    except ValueError as exc:
        raise fail(str(exc), 2) from None


def _write(cert: bytes, key: bytes, cert_path: Path, key_path: Path) -> None:
    from gpu_platform.adapters.member_certs import write_pair

    try:
        write_pair(cert, key, cert_path, key_path)
    except FileExistsError:
        raise fail(f"{key_path} exists; not writing over a key", 1) from None
    except OSError as exc:
        raise fail(f"cannot write {exc.filename}: {exc.strerror}", 1) from None
