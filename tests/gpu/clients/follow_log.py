# Follows an MPS control daemon's control.log the way the daemon's own
# follower does (from its end, complete lines only), for the escape probe
# (tests/gpu/probe-escape.sh): when does a NEW CLIENT line become readable,
# and is a client killed at that moment stopped before it allocates?
#   python3 follow_log.py LOG OUT SECONDS [NAME=VALUE]
# Polls LOG every millisecond for SECONDS; each NEW CLIENT line read is
# written to OUT as "seen <time> <line>". With NAME=VALUE, a client whose
# initial environment (/proc/<pid>/environ) holds that entry is sent
# SIGKILL at once, its start time read before and after (never a reused
# PID): "killed <time> <pid>". The first line, "ready <time>", says it
# follows. Times are time.time().
import os
import re
import signal
import sys
import time

NEW_CLIENT = re.compile(rb"\] NEW CLIENT (\d+) from user")


def start_ticks(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[19]


def follow(path, stopped):
    """Yields, until stopped() says so, each complete line (bytes, no
    newline) written to path from now on, as the daemon's follower reads
    (from the file's end, once it exists; polled every millisecond); None
    first, once the file is open and its end found."""
    while not os.path.exists(path):
        if stopped():
            return
        time.sleep(0.001)
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        yield None
        rest = b""
        while not stopped():
            chunk = f.read(65536)
            if not chunk:
                time.sleep(0.001)
                continue
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            yield from lines


def main(argv):
    log, out, seconds = argv[1], argv[2], float(argv[3])
    kill = argv[4].encode() if len(argv) > 4 else None
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    with open(out, "w", buffering=1) as o:
        seen = set()
        until = time.time() + seconds
        for line in follow(log, lambda: stop[0] or time.time() >= until):
            if line is None:
                o.write("ready %.6f\n" % time.time())
                continue
            m = NEW_CLIENT.search(line)
            if not m:
                continue
            t = time.time()
            o.write("seen %.6f %s\n" % (t, line.decode(errors="replace")))
            pid = int(m.group(1))
            if kill is None or pid in seen:
                continue
            seen.add(pid)
            try:
                before = start_ticks(pid)
                with open("/proc/%d/environ" % pid, "rb") as e:
                    env = e.read().split(b"\0")
                if kill in env and start_ticks(pid) == before:
                    os.kill(pid, signal.SIGKILL)
                    o.write("killed %.6f %d\n" % (time.time(), pid))
            except OSError as err:
                o.write("gone %.6f %d %s\n" % (time.time(), pid, err))


if __name__ == "__main__":
    main(sys.argv)
