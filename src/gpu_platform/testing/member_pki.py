"""A throwaway cluster PKI for tests: a CA and member certificates made on the spot.

`MemberPki(directory)` writes `ca.pem`/`ca.key`; `pki.tls(role, name)` issues (once) and returns
the `TlsFiles` of a member certificate (servers get `127.0.0.1` and `localhost` as names),
trusting the CA; `pki.plain(name)` is a certificate from the same CA that binds no member (a
user certificate made by other tooling); `MemberPki(directory, "other")` is another cluster's.
`FakeCallContext` stands in for a gRPC call's context where the member gate reads it.
"""

from __future__ import annotations

from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpu_platform.adapters.cluster_identity import TOKEN_METADATA
from gpu_platform.adapters.member_certs import Member, issue, new_ca, write_pair
from gpu_platform.adapters.tls import TlsFiles

__all__ = ["FakeCallContext", "MemberPki"]


class MemberPki:
    def __init__(self, directory: Path, name: str = "test") -> None:
        self.dir = directory / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = self.dir / "ca.pem"
        cert, key = new_ca(f"{name} cluster CA", days=2)
        write_pair(cert, key, self.ca, self.dir / "ca.key")
        self._ca_cert, self._ca_key = cert, key

    def tls(self, role: str, name: str, *, hosts: tuple[str, ...] | None = None) -> TlsFiles:
        """`hosts` default: `127.0.0.1` and `localhost` for servers, none for the others."""
        stem = self.dir / f"{role}-{name}" if hosts is None else self.dir / f"{role}-{name}-h"
        if not stem.with_suffix(".pem").exists():
            if hosts is None:
                hosts = ("127.0.0.1", "localhost") if role == "server" else ()
            cert, key = issue(self._ca_cert, self._ca_key, Member(role, name), hosts=hosts, days=2)
            write_pair(cert, key, stem.with_suffix(".pem"), stem.with_suffix(".key"))
        return TlsFiles(stem.with_suffix(".pem"), stem.with_suffix(".key"), self.ca)

    def plain(self, name: str) -> TlsFiles:
        """A client-and-server certificate for 127.0.0.1 from this CA that binds no member."""
        stem = self.dir / f"plain-{name}"
        if not stem.with_suffix(".pem").exists():
            ca = x509.load_pem_x509_certificate(self._ca_cert)
            ca_key = serialization.load_pem_private_key(self._ca_key, password=None)
            assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
            key = ec.generate_private_key(ec.SECP256R1())
            cert = (
                x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                .issuer_name(ca.subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(ca.not_valid_before_utc)
                .not_valid_after(ca.not_valid_after_utc)
                .add_extension(
                    x509.ExtendedKeyUsage(
                        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                    ),
                    critical=False,
                )
                .sign(ca_key, hashes.SHA256())
            )
            write_pair(
                cert.public_bytes(serialization.Encoding.PEM),
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                ),
                stem.with_suffix(".pem"),
                stem.with_suffix(".key"),
            )
        return TlsFiles(stem.with_suffix(".pem"), stem.with_suffix(".key"), self.ca)


class FakeCallContext:
    """What `adapters.member_gate` reads of a gRPC call (`peer()`, `auth_context()`,
    `invocation_metadata()`): the peer address, its certificate's URI SANs, the token."""

    def __init__(self, peer: str, uris: tuple[str, ...] = (), token: str | None = None) -> None:
        self._peer = peer
        self._uris = uris
        self._token = token

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> dict[str, list[bytes]]:
        if not self._uris:
            return {}
        return {"peer_uri": [u.encode() for u in self._uris], "x509_pem_cert": [b"PEM"]}

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((TOKEN_METADATA, self._token),) if self._token else ()
