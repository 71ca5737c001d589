"""Member certificates: X.509 certificates that bind a role and a name (docs/replication.md).

A member certificate carries one URI subject alternative name `gpu-platform://ROLE/NAME`:

* `server` — NAME is its Raft server id (`1`, `2`, ...). Extended key usage serverAuth and
  clientAuth: a server serves every port and dials its peers' Raft ports with the same pair.
  Its DNS/IP names (`hosts`) are where clients, agents and peers reach it.
* `agent` — NAME is the node it runs (`--node`); clientAuth only.
* `client` — NAME is a user (CLI, SDK); clientAuth only.

With mutual TLS, a server admits on its Raft port only `server` certificates naming the sender
id, on its agents' port only `agent` certificates naming the node of the hello, and on its
client API no `server` or `agent` certificate (adapters.member_gate). `new_ca` and `issue` make
such certificates (ECDSA P-256, SHA-256); `gpu-platform certs` is their CLI.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpu_platform.adapters.cluster_identity import ROLES, SCHEME, Member

__all__ = ["ROLES", "SCHEME", "Member", "issue", "new_ca", "write_pair"]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _validity(days: int) -> tuple[datetime.datetime, datetime.datetime]:
    if days < 1:
        raise ValueError(f"days: must be at least 1, not {days}")
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)


def new_ca(
    common_name: str = "gpu-platform cluster CA", *, days: int = 3650
) -> tuple[bytes, bytes]:
    """A self-signed CA: (certificate PEM, private key PEM)."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start, end = _validity(days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def issue(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    member: Member,
    *,
    hosts: tuple[str, ...] = (),
    days: int = 365,
) -> tuple[bytes, bytes]:
    """A certificate for `member` signed by the CA: (certificate PEM, private key PEM).
    `hosts`: DNS names or IP addresses it is reached at (servers need theirs)."""
    try:
        ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
        ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    except ValueError as exc:
        raise ValueError(f"CA: not a PEM certificate and unencrypted key ({exc})") from None
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("CA: its key must be an EC or RSA private key")
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(member.uri)]
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if member.role == "server":
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    key = _key()
    start, end = _validity(days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, member.role),
                    x509.NameAttribute(NameOID.COMMON_NAME, member.name),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def write_pair(cert_pem: bytes, key_pem: bytes, cert_path: Path, key_path: Path) -> None:
    """Write a certificate (0644) and its key (0600, never over an existing file)."""
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    key_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key_pem)
    cert_path.write_bytes(cert_pem)
