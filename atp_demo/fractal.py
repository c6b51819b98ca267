"""A Mandelbrot set drawn as a PNG, a row at a time: the demo's processing job.

Pure Python (``zlib`` writes the PNG), so the demo installs nothing for it.
"""

import struct
import zlib

#: The part of the complex plane drawn: left, right, bottom, top.
VIEW = (-2.3, 0.8, -1.2, 1.2)


def escape_times(row, width, height, iterations):
    """Return, for each pixel of ``row``, how many steps its point took to escape (or
    ``iterations`` when it did not)."""
    left, right, bottom, top = VIEW
    imaginary = top - (top - bottom) * row / max(height - 1, 1)
    times = []
    for column in range(width):
        point = complex(left + (right - left) * column / max(width - 1, 1), imaginary)
        z, steps = 0j, 0
        while steps < iterations and z.real * z.real + z.imag * z.imag <= 4.0:
            z = z * z + point
            steps += 1
        times.append(steps)
    return times


def colour(steps, iterations):
    """Return the RGB bytes of a pixel that escaped after ``steps``: black inside the set,
    blue through orange to white outside."""
    if steps >= iterations:
        return b"\0\0\0"
    t = steps / iterations
    return bytes((
        int(255 * min(1.0, 9 * (1 - t) * t ** 3 * 4 + t)),
        int(255 * min(1.0, 15 * (1 - t) ** 2 * t ** 2 * 2.5)),
        int(255 * min(1.0, 8.5 * (1 - t) ** 3 * t * 2 + 0.15)),
    ))


def scanline(times, iterations):
    """Return one PNG scanline (filter byte 0, then RGB pixels) of escape ``times``."""
    return b"\0" + b"".join(colour(steps, iterations) for steps in times)


def png(scanlines, width, height):
    """Return a PNG file (8-bit RGB) of the ``scanlines``."""

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(b"".join(scanlines), 6)) + chunk(b"IEND", b""))
