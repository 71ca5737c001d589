"""TLS material shared by the servers and clients (REST, gRPC, the Raft transport).

`TlsFiles(cert, key, ca)`: PEM files. `cert`/`key` identify this side; `ca`, when given,
is the bundle the *other* side's certificate must chain to — on a server that means client
certificates are required (mTLS), on a client it replaces the system roots.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

__all__ = ["TlsFiles"]


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path
    key: Path
    ca: Path | None = None

    def _read(self) -> tuple[bytes, bytes, bytes | None]:
        try:
            return (
                self.cert.read_bytes(),
                self.key.read_bytes(),
                None if self.ca is None else self.ca.read_bytes(),
            )
        except OSError as exc:
            raise ValueError(f"TLS file {exc.filename}: {exc.strerror}") from None

    def grpc_server_credentials(self) -> grpc.ServerCredentials:
        cert, key, ca = self._read()
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
        )

    def grpc_channel_credentials(self) -> grpc.ChannelCredentials:
        """Client side: present our certificate, trust `ca` (system roots when None)."""
        cert, key, ca = self._read()
        return grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key, certificate_chain=cert
        )

    def uvicorn_options(self) -> dict[str, object]:
        import ssl

        self._read()  # fail early with the file's name
        options: dict[str, object] = {
            "ssl_certfile": str(self.cert),
            "ssl_keyfile": str(self.key),
        }
        if self.ca is not None:
            options["ssl_ca_certs"] = str(self.ca)
            options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        return options
