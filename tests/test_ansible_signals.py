"""A playbook run for a caller that gave no cancel callback (the library's sweep, the gate's
live checks) leaves the process's SIGTERM/SIGINT handlers as it found them, and a SIGTERM
during the run cancels the playbook, then reaches the caller's own handler. Real
ansible-playbook, local connection."""

from __future__ import annotations

import os
import signal
import threading

from stetho.fleet.ansible import run_playbook

PLAY = """- hosts: all
  gather_facts: false
  tasks:
    - name: wait
      ansible.builtin.pause:
        seconds: {seconds}
"""


def _play(tmp_path, seconds):
    (tmp_path / "play.yml").write_text(PLAY.format(seconds=seconds))
    (tmp_path / "hosts").write_text("localhost ansible_connection=local\n")
    return run_playbook(playbook=tmp_path / "play.yml", inventory=tmp_path / "hosts",
                        private_data_dir=tmp_path / "pdd", ident="sig", forks=1,
                        timeout_s=120)


def test_handlers_come_back_after_a_run(tmp_path):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    run = _play(tmp_path, 0)
    assert run.status == "successful", run
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_sigterm_cancels_the_run_then_reaches_the_callers_handler(tmp_path):
    got: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda sig, _frame: got.append(sig))
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        run = _play(tmp_path, 300)
        assert run.status == "canceled", run  # cut short: the pause is 300 s
        assert got == [signal.SIGTERM]  # delivered once, to the handler the caller had
        assert signal.getsignal(signal.SIGTERM) is not None
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, old)
