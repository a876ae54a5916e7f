"""The exec relay's script (``python3 -S -c RELAY SOCKET``): stdin to a Unix socket, the
socket to stdout. Stdlib only, Python >= 3.8. Its own module, so that clients
(skyd.sdk.kubehost) take it without importing the relay machinery (anyio).
"""

# argv: socket path. Long paths (over the 108-byte sun_path limit) are reached through the
# directory's /proc/self/fd entry.
RELAY = r"""
import os, socket, sys, threading
p = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
if len(p.encode()) > 100:
    d, b = os.path.split(p)
    p = "/proc/self/fd/%d/%s" % (os.open(d or ".", os.O_RDONLY), b)
try:
    s.connect(p)
except OSError as e:
    sys.stderr.write("skyd relay: cannot reach the node agent at %s: %s\n" % (sys.argv[1], e))
    sys.exit(2)
def up():
    try:
        while True:
            b = os.read(0, 65536)
            if not b:
                break
            s.sendall(b)
    except OSError:
        pass
    try:
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
threading.Thread(target=up, daemon=True).start()
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        while b:
            b = b[os.write(1, b):]
except OSError:
    pass
"""
