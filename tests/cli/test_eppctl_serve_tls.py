"""`eppctl serve`'s TLS on the ext_proc port (#41 items 3 and 6): client certificates verified
against --client-ca, and --cert-path / --client-ca re-read when they change. The built binary on
loopback with real gRPC clients; every key and certificate is made by the `openssl` command in
the test's tmp dir (EC P-256, quick). Every wait is bounded; serve is stopped by its fixture.
"""
import os
import ssl
import subprocess
import time

import pytest

import extproc_wire as wire
from test_eppctl_serve import POOL, chat_body, destination, pick, pool, serve, server_certificate  # noqa: F401  (fixtures)

grpc = pytest.importorskip("grpc")

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
RELOAD_WAIT_S = 15  # serve looks every second and applies a change once it has settled


def openssl(*args):
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def make_ca(directory, name):
    """A CA: DIR/NAME.crt and DIR/NAME.key."""
    directory.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", *EC, "-keyout", directory / (name + ".key"), "-out", directory / (name + ".crt"),
            "-subj", "/CN=" + name, "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return directory / (name + ".crt"), directory / (name + ".key")


def issue(directory, name, ca, usage):
    """A certificate CA signed for 127.0.0.1 and localhost: DIR/NAME.crt, DIR/NAME.key."""
    ca_crt, ca_key = ca
    directory.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", *EC, "-keyout", directory / (name + ".key"), "-out", directory / (name + ".crt"),
            "-subj", "/CN=" + name, "-CA", ca_crt, "-CAkey", ca_key, "-addext", "basicConstraints=CA:FALSE",
            "-addext", "extendedKeyUsage=" + usage, "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    return directory / (name + ".crt"), directory / (name + ".key")


def secret_dir(root, version, crt, key):
    """A kubernetes.io/tls Secret volume: tls.crt -> ..data/tls.crt, ..data -> ..VERSION, swapped
    atomically as the kubelet does."""
    root.mkdir(exist_ok=True)
    target = root / ("..%s" % version)
    target.mkdir()
    (target / "tls.crt").write_bytes(crt.read_bytes())
    (target / "tls.key").write_bytes(key.read_bytes())
    os.symlink(target.name, root / "..data_tmp")
    os.replace(root / "..data_tmp", root / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (root / name).is_symlink():
            os.symlink("..data/" + name, root / name)
    return root


def replace_file(path, data):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def served_der(port):
    """The certificate a new TLS connection to the ext_proc port is served (DER)."""
    return ssl.PEM_cert_to_DER_cert(server_certificate(port).decode())


def der(crt):
    return ssl.PEM_cert_to_DER_cert(crt.read_text())


def credentials(root_crt, client=None):
    if client is None:
        return grpc.ssl_channel_credentials(root_certificates=root_crt.read_bytes())
    crt, key = client
    return grpc.ssl_channel_credentials(root_certificates=root_crt.read_bytes(), private_key=key.read_bytes(),
                                        certificate_chain=crt.read_bytes())


def try_pick(s, creds):
    """grpc's status of one whole request on a connection of its own (no shared subchannel)."""
    try:
        first, _ = pick(s.channel(creds, options=[("grpc.use_local_subchannel_pool", 1)]), chat_body())
        assert destination(first) in POOL
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def wait_until(pred, what, s):
    deadline = time.monotonic() + RELOAD_WAIT_S
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("%s: not after %d s\n%s" % (what, RELOAD_WAIT_S, s.log()))
        time.sleep(0.2)


@pytest.fixture
def pki(tmp_path):
    """Two CAs; a server certificate and a client certificate from the first, a client
    certificate from the second."""
    d = tmp_path / "pki"
    ca1, ca2 = make_ca(d, "ca1"), make_ca(d, "ca2")
    return {"ca1": ca1, "ca2": ca2, "server": issue(d, "server", ca1, "serverAuth"),
            "client1": issue(d, "client1", ca1, "clientAuth"), "client2": issue(d, "client2", ca2, "clientAuth")}


def test_client_ca_requires_a_certificate_the_ca_signed(serve, pool, pki, tmp_path):
    certs = secret_dir(tmp_path / "tls", "v1", *pki["server"])
    s = serve("--endpoints", pool, "--cert-path", certs, "--client-ca", pki["ca1"][0], tls=True)
    assert "TLS, certificate from %s, reloaded when it changes, client certificates required (CA %s)" % (
        certs, pki["ca1"][0]) in s.log()
    root = pki["ca1"][0]
    assert try_pick(s, credentials(root, pki["client1"])) == grpc.StatusCode.OK
    # No client certificate, or one another CA signed: refused in the handshake.
    assert try_pick(s, credentials(root)) == grpc.StatusCode.UNAVAILABLE
    assert try_pick(s, credentials(root, pki["client2"])) == grpc.StatusCode.UNAVAILABLE
    assert s.health("readiness") == wire.SERVING  # the health port stays plaintext


def test_client_ca_with_the_self_signed_certificate(serve, pool, pki):
    s = serve("--endpoints", pool, "--client-ca", pki["ca1"][0], tls=True)
    assert "TLS, self-signed certificate, new at every start, client certificates required" in s.log()
    pem = ssl.DER_cert_to_PEM_cert(served_der(s.grpc_port)).encode()
    crt, key = pki["client1"]
    ok = grpc.ssl_channel_credentials(root_certificates=pem, private_key=key.read_bytes(),
                                      certificate_chain=crt.read_bytes())
    assert try_pick(s, ok) == grpc.StatusCode.OK
    assert try_pick(s, grpc.ssl_channel_credentials(root_certificates=pem)) == grpc.StatusCode.UNAVAILABLE


def test_client_ca_and_certificate_errors_are_exit_2(eppctl, pool, pki, tmp_path):
    ports = ["--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0", "--listen-address", "127.0.0.1"]
    ca = pki["ca1"][0]
    r = eppctl("serve", "--endpoints", pool, *ports, "--client-ca", ca, "--secure-serving=false", timeout=30)
    assert r.returncode == 2, r.stderr
    assert "--client-ca: client certificates are checked in the TLS handshake, and --secure-serving is off" in r.stderr
    not_pem = tmp_path / "not-a-ca.pem"
    not_pem.write_text("hello\n")
    r = eppctl("serve", "--endpoints", pool, *ports, "--client-ca", not_pem, timeout=30)
    assert r.returncode == 2 and "--client-ca: %s: no PEM certificate in it" % not_pem in r.stderr, r.stderr
    r = eppctl("serve", "--endpoints", pool, *ports, "--client-ca", tmp_path / "missing.pem", timeout=30)
    assert r.returncode == 2 and "--client-ca: cannot read" in r.stderr, r.stderr
    # A key that is not the certificate's.
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "tls.crt").write_bytes(pki["server"][0].read_bytes())
    (mixed / "tls.key").write_bytes(pki["client1"][1].read_bytes())
    r = eppctl("serve", "--endpoints", pool, *ports, "--cert-path", mixed, timeout=30)
    assert r.returncode == 2, r.stderr
    assert "--cert-path: %s (tls.crt, tls.key): the private key does not match the certificate" % mixed in r.stderr


def test_rotated_certificate_is_served_to_new_connections(serve, pool, pki, tmp_path):
    d = tmp_path / "pki"
    a, b, c = (issue(d, name, pki["ca1"], "serverAuth") for name in ("a", "b", "c"))
    certs = secret_dir(tmp_path / "tls", "v1", *a)
    s = serve("--endpoints", pool, "--cert-path", certs, tls=True)
    assert served_der(s.grpc_port) == der(a[0])
    # A connection made before the rotation keeps working (its handshake is done).
    before = s.channel(credentials(pki["ca1"][0]), options=[("grpc.use_local_subchannel_pool", 1)])
    first, _ = pick(before, chat_body())
    assert destination(first) in POOL

    secret_dir(certs, "v2", *b)  # the kubelet's swap of a rotated Secret
    wait_until(lambda: served_der(s.grpc_port) == der(b[0]), "the rotated certificate is served", s)
    assert "ext_proc TLS: a new certificate from --cert-path %s in use for new connections" % certs in s.log()
    assert try_pick(s, credentials(pki["ca1"][0])) == grpc.StatusCode.OK
    first, _ = pick(before, chat_body())
    assert destination(first) in POOL

    # A key that does not match (here: rewritten in place, certificate untouched): the previous
    # certificate stays, with a warning.
    replace_file(certs / "..v2" / "tls.key", a[1].read_bytes())
    wait_until(lambda: "is not used: the private key does not match the certificate" in s.log(), "a warning", s)
    assert served_der(s.grpc_port) == der(b[0])
    assert try_pick(s, credentials(pki["ca1"][0])) == grpc.StatusCode.OK

    secret_dir(certs, "v3", *c)
    wait_until(lambda: served_der(s.grpc_port) == der(c[0]), "the next rotation is served", s)
    # Counted: v2 and v3 applied (the unchanged first look is not a reload), the bad key failed.
    assert s.metric("epp_tls_reloads_total", result="applied") == 2
    assert s.metric("epp_tls_reloads_total", result="failed") >= 1


def test_client_ca_file_is_reloaded(serve, pool, pki, tmp_path):
    certs = secret_dir(tmp_path / "tls", "v1", *pki["server"])
    ca_file = tmp_path / "client-ca.pem"
    ca_file.write_bytes(pki["ca1"][0].read_bytes())
    s = serve("--endpoints", pool, "--cert-path", certs, "--client-ca", ca_file, tls=True)
    root = pki["ca1"][0]
    assert try_pick(s, credentials(root, pki["client1"])) == grpc.StatusCode.OK
    assert try_pick(s, credentials(root, pki["client2"])) == grpc.StatusCode.UNAVAILABLE
    replace_file(ca_file, pki["ca2"][0].read_bytes())
    wait_until(lambda: "a new client CA bundle from --client-ca %s" % ca_file in s.log(), "the CA reload", s)
    assert try_pick(s, credentials(root, pki["client2"])) == grpc.StatusCode.OK
    assert try_pick(s, credentials(root, pki["client1"])) == grpc.StatusCode.UNAVAILABLE
    # A bundle that does not parse leaves the previous one in use.
    replace_file(ca_file, b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    wait_until(lambda: "the client CA bundle: certificate 1 of the bundle does not parse" in s.log(), "a warning", s)
    assert try_pick(s, credentials(root, pki["client2"])) == grpc.StatusCode.OK


def test_enable_cert_reload_false_reads_the_certificate_once(serve, pool, pki, tmp_path):
    d = tmp_path / "pki"
    a, b = (issue(d, name, pki["ca1"], "serverAuth") for name in ("a", "b"))
    certs = secret_dir(tmp_path / "tls", "v1", *a)
    s = serve("--endpoints", pool, "--cert-path", certs, "--enable-cert-reload=false", tls=True)
    assert "TLS, certificate from %s)" % certs in s.log()
    secret_dir(certs, "v2", *b)
    time.sleep(3)  # three looks of the reloading default
    assert served_der(s.grpc_port) == der(a[0])
    assert "ext_proc TLS:" not in s.log()
