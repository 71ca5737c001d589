"""Member certificates bind one role and name (URI SAN gpu-platform://ROLE/NAME), with the key
usage of the role; `gpu-platform certs` makes them and refuses bad input in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpu_platform.adapters.inbound.cli import CliHooks, build_cli
from gpu_platform.adapters.member_certs import ROLES, Member, issue, new_ca

HOOKS = CliHooks(serve=lambda _: None, topology=lambda *_: "", simulate=lambda *_: None)
NAMES = st.builds(
    str.__add__,
    st.sampled_from("aZ09"),
    st.text(alphabet="abcXYZ019._-", max_size=20),
)


@settings(max_examples=50)
@given(role=st.sampled_from(["agent", "client"]), name=NAMES)
def test_a_member_survives_its_uri(role: str, name: str) -> None:
    member = Member(role, name)
    assert Member.from_uri(member.uri) == member


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("spiffe://server/1", "another scheme"),
        ("gpu-platform://root/1", "an unknown role"),
        ("gpu-platform://server/zero", "a server named by other than its id"),
        ("gpu-platform://agent/a b", "a name that is not a host-like name"),
        ("gpu-platform://agent/", "no name"),
    ],
)
def test_uris_that_name_no_member_give_none(uri: str, why: str) -> None:
    assert Member.from_uri(uri) is None, why


def test_issued_certificates_carry_the_member_and_the_key_usage_of_its_role() -> None:
    ca_cert, ca_key = new_ca(days=1)
    for role, name in zip(ROLES, ("3", "node-a", "alice"), strict=True):
        pem, _ = issue(ca_cert, ca_key, Member(role, name), hosts=("127.0.0.1", "db1"), days=1)
        cert = x509.load_pem_x509_certificate(pem)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert sans.get_values_for_type(x509.UniformResourceIdentifier) == [
            f"gpu-platform://{role}/{name}"
        ]
        assert sans.get_values_for_type(x509.DNSName) == ["db1"]
        usage = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
        serves = ExtendedKeyUsageOID.SERVER_AUTH in usage
        assert serves is (role == "server") and ExtendedKeyUsageOID.CLIENT_AUTH in usage
        assert cert.issuer == x509.load_pem_x509_certificate(ca_cert).subject


def test_the_certs_command_makes_a_ca_and_members_and_shows_what_they_bind(
    tmp_path: Path,
) -> None:
    cli = build_cli(HOOKS)

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["certs", *args])
        return result.exit_code, result.output

    d = str(tmp_path)
    assert run("ca", "--out", d)[0] == 0
    assert (tmp_path / "ca.key").stat().st_mode & 0o777 == 0o600
    code, out = run("issue", "agent", "node-a", "--ca-dir", d, "--out", d)
    assert code == 0 and "gpu-platform://agent/node-a" in out
    assert run("show", str(tmp_path / "agent-node-a.pem")) == (0, "agent node-a\n")
    code, out = run("issue", "agent", "node-a", "--ca-dir", d, "--out", d)
    assert code == 1 and "exists; not writing over a key" in out
    code, out = run("issue", "server", "1", "--ca-dir", d, "--out", d)
    assert code == 2 and "--host" in out
    code, out = run("issue", "admin", "x", "--ca-dir", d)
    assert code == 2 and "role: 'admin' is not one of server, agent, client" in out
    code, out = run("show", str(tmp_path / "ca.pem"))
    assert code == 1 and "binds no gpu-platform member" in out
