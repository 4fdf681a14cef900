"""Opens COUNT connections to the Unix socket SOCKET that never speak, prints how many it got,
and holds them until its standard input closes: a local user flooding the daemon (the tests of
per-user connection shares, and `cargo xtask bench --attacks`).

Usage: hold_connections.py SOCKET COUNT
"""

import resource
import socket
import sys
import time

path, count = sys.argv[1], int(sys.argv[2])
# As many descriptors as the hard limit it inherits allows.
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
give_up = time.monotonic() + 20
while len(held) < count and time.monotonic() < give_up:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except BlockingIOError:
        # The listen backlog is full for now: the daemon accepts at its pace.
        s.close()
        time.sleep(0.001)
        continue
    except OSError as e:
        print("connect failed:", e, file=sys.stderr)
        break
    held.append(s)
print(len(held), flush=True)
sys.stdin.read()
