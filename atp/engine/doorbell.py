"""Waking the daemons of a database without notifications at once: a Unix datagram
socket per daemon.

SQLite has no LISTEN/NOTIFY and no server to carry one; MariaDB and MySQL have none
either. Each atpd binds a datagram socket in the database's doorbell directory
(``Database.doorbell_directory``: next to a SQLite file, ``<file>.atpd/<random>.sock``;
for a MariaDB database, in this host's temporary files, named after the server and the
database); whatever makes tasks runnable there sends one byte to every socket in that
directory once its transaction has committed. A datagram that
finds no reader (a daemon that died without removing its socket) is dropped and the
socket file removed; a full socket buffer means the daemon already has a wake-up
waiting. Nothing of it is needed for correctness: a daemon also polls.

Only processes of the same host (and of the same filesystem view) can ring: daemons on
other hosts cannot share a SQLite file safely anyway, and a server database's daemons
on other hosts find new tasks at their next poll (``ATP_POLL_INTERVAL_SECONDS``).
"""

import errno
import logging
import os
import secrets
import socket
from pathlib import Path

logger = logging.getLogger(__name__)

#: The directory of a database file's doorbell is the file's name and this
#: (``Database.doorbell_directory``).
SUFFIX = ".atpd"
#: What a ring sends; the content does not matter.
RING = b"!"


def ring(path):
    """Send a wake-up to every daemon socket in ``path``; return how many got it."""
    try:
        names = os.listdir(path)
    except OSError:
        return 0  # no daemon ever bound one here
    sent = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for name in names:
            if not name.endswith(".sock"):
                continue
            target = os.path.join(path, name)
            try:
                sender.sendto(RING, target)
                sent += 1
            except BlockingIOError:
                sent += 1  # its buffer is full: a wake-up is waiting there already
            except OSError as exc:
                if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                    _remove_stale(target)
                else:
                    logger.debug("cannot wake the daemon at %s: %s", target, exc)
    return sent


def _remove_stale(target):
    # Nobody reads it: its daemon is gone. Another enqueue may remove it first.
    try:
        os.unlink(target)
    except OSError:
        pass


class Doorbell:
    """The socket a daemon is woken through; ``fileno()`` for ``select``/``wait``."""

    def __init__(self, path):
        """Bind a new socket in directory ``path``; raise ``OSError`` if that cannot be done
        (a path longer than a socket address takes, say)."""
        path = Path(path)
        path.mkdir(exist_ok=True)
        self.path = path / f"{secrets.token_hex(4)}.sock"
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.socket.setblocking(False)
            self.socket.bind(os.fspath(self.path))
        except OSError:
            self.socket.close()
            raise

    def fileno(self):
        return self.socket.fileno()

    def drain(self):
        """Read every waiting wake-up; return whether there was one."""
        rang = False
        while True:
            try:
                self.socket.recv(64)
            except (BlockingIOError, InterruptedError):
                return rang
            except OSError:
                return rang
            rang = True

    def close(self):
        self.socket.close()
        _remove_stale(self.path)
