"""TLS material for the dev cluster, made locally with ``openssl`` and ``keytool``.

Nothing is downloaded: a throwaway CA signs one certificate for the brokers
(``CN=broker``, valid for 127.0.0.1 and localhost, server and client use, so the
controllers authenticate each other with it) and one client certificate
(``CN=client``) for clients that want mutual TLS. The brokers read PKCS12
stores; clients read the PEM files.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from streamremat.dev.exceptions import BrokerStartError
from streamremat.dev.jars import require_tool

__all__ = ["TlsFiles", "make_ca", "make_tls_files"]

_DAYS = "30"


@dataclass(frozen=True)
class TlsFiles:
    """Where the certificates and stores are; ``store_password`` opens the stores."""

    ca_cert: Path
    keystore: Path
    truststore: Path
    client_cert: Path
    client_key: Path
    store_password: str = field(repr=False)


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shown = " ".join(a for a in cmd if not a.startswith("pass:"))
        raise BrokerStartError(f"{shown} failed (exit {done.returncode}):\n{done.stderr}")


def make_ca(directory: Path, name: str = "streamremat-dev-ca") -> tuple[Path, Path]:
    """A self-signed CA: (certificate, key). Also what tests use as a *wrong* CA."""
    openssl = require_tool("openssl", "to make the dev cluster's TLS certificates")
    directory.mkdir(parents=True, exist_ok=True)
    key, cert = directory / f"{name}.key", directory / f"{name}.crt"
    _run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
          "-out", str(cert), "-days", _DAYS, "-subj", f"/CN={name}",
          "-addext", "basicConstraints=critical,CA:TRUE",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign"])  # fmt: skip
    key.chmod(0o600)
    return cert, key


def _signed(directory: Path, name: str, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    openssl = require_tool("openssl", "to make the dev cluster's TLS certificates")
    key, csr, cert = (directory / f"{name}{ext}" for ext in (".key", ".csr", ".crt"))
    ext = directory / f"{name}.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
    )
    _run([openssl, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
          "-subj", f"/CN={name}"])  # fmt: skip
    _run([openssl, "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
          "-CAcreateserial", "-out", str(cert), "-days", _DAYS, "-extfile", str(ext)])  # fmt: skip
    key.chmod(0o600)
    return cert, key


def make_tls_files(directory: Path) -> TlsFiles:
    """CA, broker keystore + truststore (PKCS12), client certificate; reused if present."""
    password_file = directory / "store.password"
    done = directory / ".complete"
    if done.is_file():
        password = password_file.read_text().strip()
    else:
        openssl = require_tool("openssl", "to make the dev cluster's TLS certificates")
        keytool = require_tool("keytool", "to make the dev cluster's trust store")
        directory.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(16)
        password_file.write_text(password + "\n")
        password_file.chmod(0o600)
        ca = make_ca(directory)
        broker_cert, broker_key = _signed(directory, "broker", ca)
        _signed(directory, "client", ca)
        _run([openssl, "pkcs12", "-export", "-in", str(broker_cert), "-inkey", str(broker_key),
              "-certfile", str(ca[0]), "-name", "broker", "-out", str(directory / "broker.p12"),
              "-passout", f"pass:{password}"])  # fmt: skip
        (directory / "truststore.p12").unlink(missing_ok=True)
        _run([keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca[0]),
              "-keystore", str(directory / "truststore.p12"), "-storetype", "PKCS12",
              "-storepass", password])  # fmt: skip
        done.write_text("ok\n")
    return TlsFiles(
        ca_cert=directory / "streamremat-dev-ca.crt",
        keystore=directory / "broker.p12",
        truststore=directory / "truststore.p12",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
        store_password=password,
    )
