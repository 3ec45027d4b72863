"""Certificates for the TLS tests: a CA of their own, a server and a client certificate.

:func:`make_certificates` writes them with ``openssl`` (RSA 2048, PEM, valid 2 days)
into a directory: ``ca.crt``/``ca.key``, ``server.crt``/``server.key`` (for 127.0.0.1:
``subjectAltName=IP:127.0.0.1``) and ``client.crt``/``client.key`` (``extendedKeyUsage
=clientAuth``), each signed by the CA. Calling it on a second directory makes a second,
unrelated CA: the "wrong CA" of the tests that check a server is refused.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from .programs import find_program

__all__ = ["Certificates", "make_certificates"]

#: (name, the extension its certificate carries)
_SIGNED = (
    ("server", "subjectAltName=IP:127.0.0.1"),
    ("client", "extendedKeyUsage=clientAuth"),
)


@dataclass(frozen=True)
class Certificates:
    """The PEM files :func:`make_certificates` wrote."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(
        [find_program("openssl"), *args], cwd=cwd, check=True, capture_output=True, timeout=60
    )


def make_certificates(directory: Path) -> Certificates:
    """A new CA, and a server and a client certificate it signed, in ``directory``
    (created if missing). Keys are unencrypted PKCS#8 (``BEGIN PRIVATE KEY``)."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=sr-test-ca", "-keyout", "ca.key", "-out", "ca.crt",
        cwd=directory,
    )  # fmt: skip
    for name, extension in _SIGNED:
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr",
            cwd=directory,
        )  # fmt: skip
        (directory / f"{name}.ext").write_text(extension + "\n")
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
            cwd=directory,
        )  # fmt: skip
    return Certificates(directory)
