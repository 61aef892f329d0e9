"""tests/install_chromium.sh, the README test command's browser step: apt-get only when Chromium is missing.

The script is run with stand-ins for ``apt-get`` and ``sudo`` first on PATH that log their arguments.
"Missing" is made real in a private mount namespace (``unshare -m``, root only), where an empty,
non-executable file is bind-mounted over /usr/bin/chromium; the stand-in ``apt-get install`` "installs"
Chromium by unmounting it.  Nothing outside the namespace changes, and no package is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "install_chromium.sh"
CHROMIUM = Path("/usr/bin/chromium")
#: Absolute paths: some tests run the script with a PATH that holds no system tools.
UNSHARE, MOUNT, SETPRIV = (shutil.which(t) for t in ("unshare", "mount", "setpriv"))

APT_GET = """#!/bin/sh
echo "apt-get $* (DEBIAN_FRONTEND=$DEBIAN_FRONTEND, uid $(id -u))" >> "{log}"
case "$1" in install) {install} ;; esac
"""
SUDO = """#!/bin/sh
echo "sudo $*" >> "{log}"
exec "$@"
"""


def _can_hide_chromium() -> bool:
    if not CHROMIUM.exists() or UNSHARE is None or MOUNT is None or os.geteuid() != 0:
        return False
    return subprocess.run([UNSHARE, "-m", "true"], check=False, capture_output=True).returncode == 0


needs_namespace = pytest.mark.skipif(not _can_hide_chromium(),
                                     reason="hiding /usr/bin/chromium needs root, unshare and an existing chromium")


def _fake_bin(tmp: Path, *, installs: bool, sudo: bool = False) -> tuple[Path, Path]:
    """A folder of stand-ins for apt-get (and sudo), and the log they append to."""
    bindir, log = tmp / "bin", tmp / "log"
    bindir.mkdir()
    log.touch()
    (bindir / "apt-get").write_text(APT_GET.format(log=log, install="umount /usr/bin/chromium" if installs else ":"))
    if sudo:
        (bindir / "sudo").write_text(SUDO.format(log=log))
    for f in bindir.iterdir():
        f.chmod(0o755)
    return bindir, log


def _run(tmp: Path, bindir: Path, *, hide: bool, path_tail: str = "/usr/bin:/bin",
         user: str | None = None) -> subprocess.CompletedProcess:
    script = tmp / "install_chromium.sh"
    shutil.copy(SCRIPT, script)
    cmd = ["/bin/sh", str(script)]
    if user:
        cmd = [str(SETPRIV), f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    if hide:
        empty = tmp / "not-chromium"
        empty.write_text("")
        empty.chmod(0o644)
        cmd = [str(UNSHARE), "-m", "/bin/sh", "-c", f'{MOUNT} --bind "{empty}" {CHROMIUM} && exec "$@"', "sh", *cmd]
    env = {"PATH": f"{bindir}:{path_tail}", "HOME": str(tmp)}
    return subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=60)


def test_does_nothing_when_chromium_is_there(tmp_path):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip("/usr/bin/chromium is not installed here")
    bindir, log = _fake_bin(tmp_path, installs=True, sudo=True)
    r = _run(tmp_path, bindir, hide=False)
    assert (r.returncode, r.stderr, log.read_text()) == (0, "", "")


@needs_namespace
def test_installs_debians_chromium_when_missing(tmp_path):
    bindir, log = _fake_bin(tmp_path, installs=True)
    r = _run(tmp_path, bindir, hide=True)
    assert r.returncode == 0, r.stderr
    assert log.read_text().splitlines() == ["apt-get update -qq (DEBIAN_FRONTEND=noninteractive, uid 0)",
                                           "apt-get install -y -qq chromium (DEBIAN_FRONTEND=noninteractive, uid 0)"]
    assert "/usr/bin/chromium is missing; installing Debian's chromium package" in r.stderr
    assert CHROMIUM.stat().st_size > 0  # the real one, untouched outside the namespace


@needs_namespace
def test_fails_when_apt_get_brings_no_chromium(tmp_path):
    bindir, log = _fake_bin(tmp_path, installs=False)
    r = _run(tmp_path, bindir, hide=True)
    assert r.returncode == 1
    assert "apt-get installed chromium but /usr/bin/chromium is still missing" in r.stderr
    assert len(log.read_text().splitlines()) == 2


@needs_namespace
def test_fails_clearly_without_apt_get(tmp_path):
    bindir, _ = _fake_bin(tmp_path, installs=True)
    (bindir / "apt-get").unlink()
    r = _run(tmp_path, bindir, hide=True, path_tail="/nonexistent")
    assert r.returncode == 1
    assert "/usr/bin/chromium is missing and there is no apt-get (not Debian)" in r.stderr


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temporary folder another user may read and write (pytest's own are private to root)."""
    d = Path(tempfile.mkdtemp(prefix="dspsim-chromium-"))
    try:
        yield d
    finally:
        shutil.rmtree(d)


@needs_namespace
@pytest.mark.skipif(SETPRIV is None, reason="setpriv runs the script as a user")
def test_a_user_installs_through_sudo(shared_tmp):
    bindir, log = _fake_bin(shared_tmp, installs=False, sudo=True)  # the stand-in sudo keeps the user's uid
    for p in (shared_tmp, bindir, log):
        p.chmod(0o777)
    r = _run(shared_tmp, bindir, hide=True, user="65534")
    assert r.returncode == 1, r.stderr  # nothing was really installed
    assert log.read_text().splitlines() == [
        "sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        "apt-get update -qq (DEBIAN_FRONTEND=noninteractive, uid 65534)",
        "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium",
        "apt-get install -y -qq chromium (DEBIAN_FRONTEND=noninteractive, uid 65534)"]
