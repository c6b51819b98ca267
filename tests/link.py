"""A TCP link between a test's processes and its database server, which the test can cut.

A server shared with other work cannot be restarted by one test. What its clients see
of a restart is what a cut link shows them: every connection dropped at once, and new
ones refused until it is back. ``Link`` relays connections to the server on a port of
its own; ``cut(seconds)`` drops them all and refuses new ones for that long.
"""

import socket
import threading
import time


class Link:
    """Relays ``127.0.0.1:<port>`` to ``(host, port)`` of the server."""

    def __init__(self, host, port):
        self.server = (host, int(port))
        self.port = None
        self._pairs = set()
        self._lock = threading.Lock()
        self._listener = None
        self._open()

    def _open(self):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port or 0))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: cut
            try:
                upstream = socket.create_connection(self.server, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
            for source, target in (pair, pair[::-1]):
                threading.Thread(target=self._pipe, args=(source, target, pair),
                                 daemon=True).start()

    def _pipe(self, source, target, pair):
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        self._drop(pair)

    def _drop(self, pair):
        with self._lock:
            self._pairs.discard(pair)
        for end in pair:
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()

    def connections(self):
        """Return how many connections the link relays now."""
        with self._lock:
            return len(self._pairs)

    def _close_listener(self):
        # A thread blocked in accept() holds the port until it returns: shutting the
        # socket down wakes it (Linux), closing it alone would not.
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()

    def cut(self, seconds):
        """Drop every connection and refuse new ones for ``seconds``, as a restart would."""
        self._close_listener()
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            self._drop(pair)
        time.sleep(seconds)
        self._open()

    def close(self):
        self._close_listener()
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            self._drop(pair)
