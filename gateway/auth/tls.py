"""The server's TLS context, reloaded in place on SIGHUP (new handshakes get the new
certificate; open connections keep theirs), and the principal of a client certificate."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from gateway.auth.credentials import INTERNAL_PRINCIPAL

PRINCIPAL_SOURCES = ("cn", "san")


class ServerTls:
    """One SSLContext for the server's lifetime: `reload()` loads the files into it again."""

    def __init__(self, cert: Path, key: Path, client_ca: Path | None = None) -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        if client_ca is not None:
            # Optional: clients may still authenticate with a bearer token instead.
            self.context.verify_mode = ssl.CERT_OPTIONAL
        self.reload()

    def reload(self) -> None:
        """Load the certificate chain, key and client CAs again (a CA once trusted stays
        trusted until restart: OpenSSL's store only grows)."""
        self.context.load_cert_chain(self.cert, self.key)
        if self.client_ca is not None:
            self.context.load_verify_locations(self.client_ca)


def certificate_principal(peercert: Any, source: str) -> str | None:
    """The principal named by a verified client certificate (`getpeercert()`'s dict): its
    subject's common name, or its first subject alternative name (e-mail, DNS or URI)."""
    if not isinstance(peercert, dict) or not peercert:
        return None
    name: str | None = None
    if source == "cn":
        for rdn in peercert.get("subject", ()):
            for attribute, value in rdn:
                if attribute == "commonName":
                    name = value
    else:
        sans = dict(reversed(peercert.get("subjectAltName", ())))
        name = next((sans[kind] for kind in ("email", "DNS", "URI") if kind in sans), None)
    if not name or name == INTERNAL_PRINCIPAL:
        return None
    return str(name)
