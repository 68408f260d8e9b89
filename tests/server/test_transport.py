"""Transport (issue 14): plain HTTP only on loopback unless `--insecure`; HTTPS with
`--tls-cert/--tls-key`, served for real with a certificate made by openssl."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.server.process import free_port
from gpupool.server.serve import is_loopback, transport_problem
from gpupool.server.settings import ServerSettings
from liveserver import wait_for


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False),
     ("gpu-box.example.com", False)],
)  # fmt: skip
def test_only_loopback_counts_as_this_machine(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_plain_http_beyond_loopback_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["server", "--host", "0.0.0.0", "--data-dir", str(tmp_path / "d")]
    )
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "--host 0.0.0.0 would serve plain HTTP to other machines" in said
    assert "--tls-cert" in said and "--insecure" in said
    assert not (tmp_path / "d").exists()  # refused before anything was created


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({"host": "0.0.0.0", "insecure": True}, None),
        ({"host": "127.0.0.1"}, None),
        ({"host": "0.0.0.0", "tls_cert": Path("/nonexistent.pem")}, "both --tls-cert and"),
        ({"host": "0.0.0.0", "tls_cert": Path("/no.pem"), "tls_key": Path("/no.key")},
         "is not a readable file"),
    ],
)  # fmt: skip
def test_transport_settings(tmp_path: Path, given: dict[str, object], problem: str | None) -> None:
    found = transport_problem(ServerSettings(data_dir=tmp_path, **given))  # type: ignore[arg-type]
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_https_with_a_certificate(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    port = free_port()
    data = tmp_path / "data"
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "gpupool", "server", "--data-dir", str(data), "--port", str(port),
         "--tls-cert", str(cert), "--tls-key", str(key), "--simulated-nodes", "1x1"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:

        def answers() -> bool:
            try:
                got = httpx.get(f"https://127.0.0.1:{port}/health", verify=str(cert), timeout=2)
            except httpx.HTTPError:
                return False
            return got.status_code == 200

        wait_for(answers, 60, "the server to answer over HTTPS")
        with pytest.raises(httpx.HTTPError):  # no plain HTTP on the same port
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
