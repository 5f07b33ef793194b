"""Drives `wick chat` on a pseudo-terminal (so its line editor is on): types several lines in
one write, as a paste or lines typed ahead arrive, and prints everything the chat wrote.

usage: chat_pty.py WICK URL LINE...
"""
import os
import pty
import select
import sys
import time

wick, url, lines = sys.argv[1], sys.argv[2], sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(wick, [wick, "chat", "--model", "m", "--url", url])

out = b""


def read_for(seconds):
    global out
    end = time.time() + seconds
    while time.time() < end:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return False
            if not chunk:
                return False
            out += chunk
    return True


def wait_for(text, seconds):
    end = time.time() + seconds
    while text.encode() not in out and time.time() < end:
        if not read_for(0.1):
            break


wait_for(">>> ", 20)
# Every line in one write: the line editor reads them all at once.
os.write(fd, "".join(line + "\r" for line in lines).encode())
for line in lines:
    wait_for("You said: " + line, 20)
os.write(fd, b"/exit\r")
read_for(2)
os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
