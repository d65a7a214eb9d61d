"""Output files the user names (`-o`, `--output`, `--html`): a regular file is replaced only with `--force`, and
atomically; a stream is written into as a shell's redirection would, and a link keeps pointing at its file.

Before, every output was an atomic rename onto the name itself: `-o /dev/stdout` was refused as "already exists",
and with `--force` the rename put a regular file where the device or the link had been (as root, `/dev/full`
itself)."""

from __future__ import annotations

import os
import stat
import subprocess
import threading

import pytest

from compaction_bench.atomic import OutputExists, WriteFailed, is_stream, write_output
from tests.conftest import BENCH, CORPORA, bench_cli

#: A short Claude Code session (7 responses), from which `probes mine` mines a few probes.
SESSION = CORPORA / "claude-code-jsonl" / "d-kimuson__claude-code-viewer" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"


@pytest.fixture(scope="module")
def mined(tmp_path_factory) -> str:
    """`bench probes mine` of the session written to a new regular file: what every other output must hold."""
    path = tmp_path_factory.mktemp("mined") / "probes.yaml"
    proc = bench_cli("probes", "mine", str(SESSION), "-o", str(path))
    assert proc.returncode == 0, proc.stderr
    text = path.read_text(encoding="utf-8")
    assert text.startswith("- id: ")
    return text


def test_dev_stdout_on_a_pipe_gets_the_output_without_force(mined):
    proc = bench_cli("probes", "mine", str(SESSION), "-o", "/dev/stdout")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(mined)


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1"])
def test_dev_stdout_sent_to_a_file_is_written_into_and_appended_to(mined, tmp_path, name):
    """`bench … -o /dev/stdout >> log`: the file the shell opened keeps what it held, the probes follow."""
    log = tmp_path / "log.txt"
    log.write_text("earlier line\n")
    with open(log, "a", encoding="utf-8") as stdout:
        proc = subprocess.run([*BENCH, "probes", "mine", str(SESSION), "-o", name], stdout=stdout, stderr=subprocess.PIPE, text=True,
                              timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text(encoding="utf-8").startswith("earlier line\n" + mined)


def test_a_named_pipe_is_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "probes.fifo"
    os.mkfifo(fifo)
    assert is_stream(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text(encoding="utf-8")))
    reader.start()
    assert write_output(fifo, "through the pipe\n", replace=True) == fifo
    reader.join(timeout=30)
    assert received == ["through the pipe\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the pipe


def test_a_link_to_a_file_is_refused_without_force_and_keeps_pointing_at_its_file_with_it(tmp_path):
    target = tmp_path / "kept" / "probes.yaml"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    assert not is_stream(link)
    with pytest.raises(OutputExists, match="link.yaml: already exists"):
        write_output(link, "new\n")
    assert target.read_text() == "old\n"
    write_output(link, "new\n", replace=True)
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert target.read_text() == "new\n"


def test_a_new_or_regular_file_is_still_written_atomically_and_a_folder_is_not_a_stream(tmp_path):
    path = tmp_path / "out.md"
    write_output(path, "one\n")
    with pytest.raises(OutputExists):
        write_output(path, "two\n")
    write_output(path, "two\n", replace=True)
    assert path.read_text() == "two\n" and not is_stream(path)
    folder = tmp_path / "folder"
    folder.mkdir()
    assert not is_stream(folder) and not is_stream(tmp_path / "absent")
    with pytest.raises(WriteFailed, match="folder: cannot write"):
        write_output(folder, "x\n", replace=True)
    assert folder.is_dir()
