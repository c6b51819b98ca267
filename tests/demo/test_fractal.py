import struct
import zlib

from atp_demo import fractal


def test_the_fractal_is_a_png_of_the_size_asked_with_the_set_black_in_its_middle():
    width, height, iterations = 31, 21, 50
    rows = [fractal.scanline(fractal.escape_times(row, width, height, iterations), iterations)
            for row in range(height)]
    image = fractal.png(rows, width, height)
    assert image.startswith(b"\x89PNG\r\n\x1a\n")
    assert struct.unpack(">II", image[16:24]) == (width, height)
    length = struct.unpack(">I", image[33:37])[0]
    assert image[37:41] == b"IDAT"
    pixels = zlib.decompress(image[41:41 + length])
    assert len(pixels) == height * (1 + 3 * width)
    middle = pixels[(height // 2) * (1 + 3 * width):][1:][3 * 23:3 * 24]  # (0.08, 0): in the set
    corner = pixels[1:4]  # (-2.3, 1.2): escapes at once
    assert middle == b"\0\0\0" and corner != b"\0\0\0"
