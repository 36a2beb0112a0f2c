"""`r2s2r record --keyboard` in a real terminal (a pseudo-terminal): single key presses start,
discard and save takes, and only the saved take reaches the dataset."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from r2s2r.data import Dataset

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX terminal")


def _read_until(fd: int, text: str, seen: list[str], timeout: float = 120.0) -> None:
    """Read the terminal until ``text`` has appeared (after what was already seen)."""
    start = len("".join(seen))
    end = time.monotonic() + timeout
    while text not in "".join(seen)[start:]:
        if time.monotonic() > end:
            raise AssertionError(f"no {text!r} on the terminal; it showed:\n{''.join(seen)}")
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen.append(os.read(fd, 4096).decode(errors="replace"))
            except OSError:
                break


def test_keys_from_a_terminal_start_discard_and_save(tmp_path: Path) -> None:
    import pty
    import termios

    master, slave = pty.openpty()
    out = tmp_path / "ds"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "r2s2r",
            "record",
            "--rig",
            "twin",
            "--keyboard",
            "--episodes",
            "1",
            "--out",
            str(out),
            "--max-seconds",
            "0.4",
            "--image-size",
            "64",
        ],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    seen: list[str] = []
    try:
        _read_until(master, "press s to start", seen)
        os.write(master, b"s")
        _read_until(master, "take over", seen)
        os.write(master, b"d")  # Discard the first take.
        _read_until(master, "press s to start", seen)
        os.write(master, b"s")
        _read_until(master, "take over", seen)
        os.write(master, b"e")  # Save the second.
        _read_until(master, "saved 1 episodes", seen)
        assert proc.wait(timeout=60) == 0
        # The keys arrived one by one (no Enter), and the terminal got its line mode back.
        assert termios.tcgetattr(master)[3] & termios.ICANON
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert "discarded 1 takes" in "".join(seen)
    assert Dataset(out).num_episodes == 1
