"""Which CURVE keys a host uses (CurveClientKeys.from_dir), and keygen's bad input: one line each."""

from __future__ import annotations

import subprocess
import sys

import pytest
import zmq.auth

from hostctl.errors import ConfigError
from hostctl.policy.switchclient import CurveClientKeys


def _pair(d, name):
    d.mkdir(exist_ok=True)
    pub, _ = zmq.auth.load_certificate(zmq.auth.create_certificates(str(d), name)[1])
    return pub


def test_a_host_folder_with_one_key_and_the_servers_public_key(tmp_path):
    spub = _pair(tmp_path / "sw", "server")
    host = tmp_path / "h"
    mine = _pair(host, "h017")
    (host / "server.key").write_bytes((tmp_path / "sw" / "server.key").read_bytes())
    k = CurveClientKeys.from_dir(str(host))
    assert (k.public, k.server_public) == (mine, spub)
    assert CurveClientKeys.from_dir(str(host / "h017.key_secret")).public == mine  # the file's path
    other = _pair(host, "h018")
    with pytest.raises(ConfigError, match=r"several client keys \(h017, h018\): give the file"):
        CurveClientKeys.from_dir(str(host))
    assert CurveClientKeys.from_dir(str(host / "h018.key_secret")).public == other
    assert CurveClientKeys.from_dir(str(host), client="h017").public == mine
    lab = _pair(host, "client")  # switchemu keygen's default name is taken first (one lab folder)
    assert CurveClientKeys.from_dir(str(host)).public == lab


@pytest.mark.parametrize("setup, fragment", [
    (lambda d: None, "no such folder"),
    (lambda d: d.mkdir(), "no client key (NAME.key_secret) there"),
    (lambda d: (_pair(d, "h1"),), "needs h1.key_secret and the switch's server.key"),
    (lambda d: (_pair(d, "server"), d.joinpath("server.key_secret").rename(d / "h1.key_secret"),
                d.joinpath("h1.key_secret").write_text("garbage")), "needs h1.key_secret"),
])
def test_bad_key_folders_are_one_clear_error(tmp_path, setup, fragment):
    d = tmp_path / "keys"
    setup(d)
    with pytest.raises(ConfigError) as e:
        CurveClientKeys.from_dir(str(d))
    assert fragment in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("args, fragment", [
    (["--client", "server"], "that name is the switch's keypair"),
    (["--client", "a b"], "use letters, digits, - and _ only"),
    (["--client", "../x"], "use letters, digits, - and _ only"),
])
def test_keygen_bad_names_are_one_line(tmp_path, args, fragment):
    r = subprocess.run([sys.executable, "-m", "switchemu.cli", "keygen", str(tmp_path / "k"), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and fragment in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr
