"""Metrics over TLS with client certificates, and events over CurveZMQ: what
the daemon offers beyond loopback, tried on loopback with real keys."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import zmq
import zmq.auth
from daemonutil import Daemon, free_port, write_trace

from phasewatch.daemon.publish import decode_message


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make test certificates (apt-get install openssl)")
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
            "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    for name, cn in (("server", "127.0.0.1"), ("client", "scraper")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        ext = d / f"{name}.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1\n" if name == "server" else "extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "1", "-extfile", ext.name, "-out", f"{name}.crt", cwd=d)
    return d


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("sec") / "one-cpu.arrow")


def test_metrics_over_tls_require_a_client_certificate(pki, trace, tmp_path):
    port = free_port()
    config = tmp_path / "tls.toml"
    config.write_text(f'[metrics]\nlisten = "127.0.0.1:{port}"\ncertfile = "{pki}/server.crt"\n'
                      f'keyfile = "{pki}/server.key"\nclient_cafile = "{pki}/ca.crt"\n')
    d = Daemon("--config", config, "--replay", trace, metrics_port=port)
    url = f"https://127.0.0.1:{port}/metrics"
    try:
        with_cert = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        with_cert.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
        without = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        deadline, body = time.monotonic() + 60, ""
        while time.monotonic() < deadline and "phasewatch_build_info" not in body:
            try:
                body = urllib.request.urlopen(url, context=with_cert, timeout=5).read().decode()
            except OSError:
                time.sleep(0.2)
        assert "phasewatch_build_info" in body
        silent = socket.create_connection(("127.0.0.1", port))   # connects, never speaks
        body = urllib.request.urlopen(url, context=with_cert, timeout=5).read().decode()
        assert "phasewatch_build_info" in body                     # others are served
        silent.close()
        with pytest.raises((ssl.SSLError, OSError)):
            urllib.request.urlopen(url, context=without, timeout=5).read()
        with pytest.raises(OSError):                                   # plain HTTP
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        body = urllib.request.urlopen(url, context=with_cert, timeout=5).read().decode()
        assert "phasewatch_samples_total" in body                        # still up
    finally:
        code, err = d.stop()
    assert code == 0, err


def test_events_over_curvezmq_reach_only_authorised_clients(trace, tmp_path):
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    keys.mkdir(), allowed.mkdir()
    server_public, server_secret = zmq.auth.create_certificates(str(keys), "server")
    client_public, client_secret = zmq.auth.create_certificates(str(keys), "client")
    stranger_public, stranger_secret = zmq.auth.create_certificates(str(keys), "stranger")
    shutil.copy(client_public, allowed)
    config = tmp_path / "curve.toml"
    config.write_text(f'[zmq]\ncurve_secret_key = "{server_secret}"\n'
                      f'curve_authorized_keys = "{allowed}"\n')
    ctx = zmq.Context()
    subs = []
    for public, secret in ((client_public, client_secret), (stranger_public, stranger_secret)):
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.curve_serverkey = zmq.auth.load_certificate(server_public)[0]
        sub.curve_publickey, sub.curve_secretkey = zmq.auth.load_certificate(secret)
        sub.setsockopt_string(zmq.SUBSCRIBE, "phase.")
        subs.append(sub)
    d = Daemon("--config", config, "--replay", trace, "--replay-speed", "4")
    for sub in subs:
        sub.setsockopt(zmq.RECONNECT_IVL, 10)
        sub.connect(d.zmq)
    try:
        client, stranger = subs
        assert client.poll(60_000), "the authorised client got nothing"
        topic, event = decode_message(client.recv_multipart())
        assert topic == "phase.cpu0" and event["v"] == 1
        d.wait_metric("phasewatch_intervals_total", lambda v: v == 200, target="cpu0")
        assert not stranger.poll(500), "an unknown key got events"
    finally:
        for sub in subs:
            sub.close()
        code, err = d.stop()
        ctx.term()
    assert code == 0, err
