"""Start a test sandbox's emulated internet; print the shell exports that trust it.

Runs as root inside the sandbox (its own network namespace, only loopback), with the
interpreter of the service environment the build made beside this file (httpbin, gunicorn):

- the names given resolve to 127.0.0.1 (/etc/hosts), where a name's recorded site, or else
  httpbin as httpbin.org runs it (``emulated_sites.py``), answers (gunicorn with gevent workers)
  on port 80 and, with a certificate for every name signed by the build's CA (``ca.pem``), on
  port 443;
- every other name fails to resolve at once (the resolver asks 127.0.0.1, where nothing listens);
- every other address drops packets: a default route through loopback sends them where nothing
  forwards them, so a connection times out as it does behind a firewall, instead of failing
  with "network unreachable" (a suite's connect-timeout tests expect the timeout);
- the build's CA is trusted through REQUESTS_CA_BUNDLE and SSL_CERT_FILE, and by the bundles of
  public roots Python loads (``trust/sitecustomize.py`` on PYTHONPATH, emulated_trust.py).

Usage: ``eval "$(python emulated_internet.py NAME...)"``. Python 3.6 syntax: the service
environment has the suite's interpreter. The servers log to /tmp.
"""

import ctypes
import fcntl
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LOG = "/tmp/sweflow-emulated-internet.log"
SIOCADDRT = 0x890B
RTF_UP = 0x1
PORTS = (80, 443)


class _SockaddrIn(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_ushort),
        ("port", ctypes.c_uint16),
        ("addr", ctypes.c_uint32),
        ("zero", ctypes.c_char * 8),
    ]


class _RtEntry(ctypes.Structure):  # struct rtentry, <linux/route.h>
    _fields_ = [
        ("pad1", ctypes.c_ulong),
        ("dst", _SockaddrIn),
        ("gateway", _SockaddrIn),
        ("genmask", _SockaddrIn),
        ("flags", ctypes.c_ushort),
        ("pad2", ctypes.c_short),
        ("pad3", ctypes.c_ulong),
        ("pad4", ctypes.c_void_p),
        ("metric", ctypes.c_short),
        ("dev", ctypes.c_char_p),
        ("mtu", ctypes.c_ulong),
        ("window", ctypes.c_ulong),
        ("irtt", ctypes.c_ushort),
    ]


def route_everything_through_loopback():
    """``ip route add default dev lo``, without iproute2 (the base images lack it)."""
    any_ipv4 = _SockaddrIn(family=socket.AF_INET)
    entry = _RtEntry(dst=any_ipv4, genmask=any_ipv4, flags=RTF_UP, dev=b"lo")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            fcntl.ioctl(sock.fileno(), SIOCADDRT, bytes(entry))
        except FileExistsError:  # a second start in the same sandbox
            pass


def resolve_locally(names):
    with open("/etc/hosts") as f:
        known = f.read()
    with open("/etc/hosts", "a") as f:
        for name in names:
            if f" {name}\n" not in known:
                f.write(f"127.0.0.1 {name}\n")
    with open("/etc/resolv.conf", "w") as f:
        f.write("nameserver 127.0.0.1\n")


def serve():
    """The recorded sites and httpbin as httpbin.org runs it (gunicorn, gevent workers:
    keep-alive, chunked uploads), once over HTTP and once over HTTPS, as daemons."""
    gunicorn = os.path.join(os.path.dirname(sys.executable), "gunicorn")
    common = [
        gunicorn,
        "--daemon",
        "--worker-class",
        "gevent",
        "--error-logfile",
        LOG,
        "--pythonpath",
        HERE,
    ]
    tls = [
        "--certfile",
        os.path.join(HERE, "server.pem"),
        "--keyfile",
        os.path.join(HERE, "server.key"),
    ]
    subprocess.check_call([*common, "--bind", "127.0.0.1:80", "emulated_sites:app"])
    subprocess.check_call([*common, *tls, "--bind", "127.0.0.1:443", "emulated_sites:app"])


def wait_for_ports(deadline_s=30.0):
    end = time.monotonic() + deadline_s
    for port in PORTS:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > end:
                    sys.exit(f"emulated internet: nothing listens on port {port} (see {LOG})")
                time.sleep(0.05)


def main(names):
    if not names:
        sys.exit("usage: emulated_internet.py NAME...")
    route_everything_through_loopback()
    resolve_locally(names)
    serve()
    wait_for_ports()
    ca = os.path.join(HERE, "ca.pem")
    trust = os.path.join(HERE, "trust")  # its sitecustomize: bundles of public roots trust ca
    print(
        f"export REQUESTS_CA_BUNDLE={ca} SSL_CERT_FILE={ca} "
        f"PYTHONPATH={trust}${{PYTHONPATH:+:$PYTHONPATH}}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
