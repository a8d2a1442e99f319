"""Print a free TCP port (a job script exports it as MASTER_PORT before starting its tasks)."""
import socket

with socket.socket() as s:
    s.bind(("", 0))
    print(s.getsockname()[1])
