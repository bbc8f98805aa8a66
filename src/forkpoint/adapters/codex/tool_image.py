"""Codex's ``view_image``, re-run with the output the real binaries write (pure apart from one confined read).

Measured on 0.149.0 and 0.171.0 driven by a scripted model (fixture ``tests/fixtures/codex/<v>/view_image``):

- the path is joined to the session cwd (an absolute path is used as is); the output is the list
  ``[{"type": "input_image", "image_url": "data:<mime>;base64,<file bytes>", "detail": D}]`` with D ``"high"``
  on 0.149 and ``"original"`` on 0.171. A PNG or JPEG within 2048x768 px is sent BYTE FOR BYTE (no re-encoding;
  standard base64 with padding), the MIME type from the content;
- errors are plain strings: ``unable to locate image at `<abs>`: <io error>`` (missing), ``image path `<abs>` is
  not a file`` (a directory), ``unable to process image: invalid or unsupported image data`` (not an image).

What forkpoint cannot reproduce is refused before any effect (the call stays stale): a larger image (0.149
resizes to 2048 px wide and re-encodes it as RGBA PNG with its own encoder; 0.171 sent a 2100x40 PNG unchanged,
but larger sizes are unmeasured), image formats other than PNG/JPEG, a file whose extension disagrees with its
content, a damaged PNG/JPEG (Codex's decoder error text is unmeasured) and files over ``MAX_IMAGE_BYTES``.

The file is read through ``core.fs.read_regular_file``: confined to the workspace (a link leading out is refused,
never followed), never a FIFO or device, bounded.
"""

from __future__ import annotations

import base64
import errno
import os
import stat
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkpoint.adapters.codex.tool_patch import join_path
from forkpoint.adapters.codex.tool_text import io_error
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import ConfinementError, NotRegularFileError, ReadResult, read_regular_file

#: the largest image Codex was measured to pass through unchanged on every verified version
MAX_WIDTH = 2048
MAX_HEIGHT = 768
#: bound of the read (a 2048x768 RGBA PNG stored uncompressed is ~6.3 MB)
MAX_IMAGE_BYTES = 8 * 1024 * 1024
DETAIL = {"0.149.0": "high", "0.171.0": "original"}
INVALID = "unable to process image: invalid or unsupported image data"

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8\xff"
#: magic numbers of the other formats Codex's image decoder accepts: unmeasured, so refused (stale)
_OTHER_IMAGES = (b"GIF8", b"RIFF", b"BM", b"II*\x00", b"MM\x00*", b"\x00\x00\x01\x00", b"#?RADIANCE", b"qoif",
                 b"farbfeld", b"DDS ", b"8BPS", b"\x76\x2f\x31\x01")
_EXTENSIONS = {"image/png": (".png",), "image/jpeg": (".jpg", ".jpeg")}


class Unreproducible(Exception):
    """Codex's answer for this file is not one forkpoint can reproduce exactly."""


@dataclass(frozen=True)
class Image:
    mime: str
    width: int
    height: int


def sniff(data: bytes, name: str) -> Image | None:
    """The image Codex would send, ``None`` for content Codex rejects as not an image; raises ``Unreproducible``."""
    if data.startswith(_PNG):
        image = Image("image/png", *_png_size(data))
    elif data.startswith(_JPEG):
        image = Image("image/jpeg", *_jpeg_size(data))
    elif data.startswith(_OTHER_IMAGES) or (len(data) > 12 and data[4:8] == b"ftyp"):
        raise Unreproducible("an image format other than PNG/JPEG (unmeasured)")
    elif len(data) >= 2 and data[0:1] == b"P" and data[1:2] in b"1234567":
        raise Unreproducible("a PNM image header (unmeasured)")
    else:
        return None
    if not name.lower().endswith(_EXTENSIONS[image.mime]):
        raise Unreproducible(f"the file name does not match its {image.mime} content (unmeasured)")
    if image.width > MAX_WIDTH or image.height > MAX_HEIGHT:
        raise Unreproducible(f"{image.width}x{image.height} px is over {MAX_WIDTH}x{MAX_HEIGHT}: Codex may resize "
                             "and re-encode it with its own image library")
    return image


def _png_size(data: bytes) -> tuple[int, int]:
    """IHDR's size after checking every chunk's CRC and that IDAT inflates to exactly the pixel rows."""
    offset = len(_PNG)
    header: bytes | None = None
    idat = bytearray()
    while True:
        if offset + 12 > len(data):
            raise Unreproducible("a damaged PNG (Codex's decoder error is unmeasured)")
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        body = data[offset + 8:offset + 8 + length]
        crc = data[offset + 8 + length:offset + 12 + length]
        if len(body) != length or len(crc) != 4 or struct.unpack(">I", crc)[0] != zlib.crc32(kind + body):
            raise Unreproducible("a damaged PNG (Codex's decoder error is unmeasured)")
        offset += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if header is None or len(header) != 13:
        raise Unreproducible("a PNG without a valid IHDR (unmeasured)")
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(colour)
    if channels is None or interlace != 0 or width == 0 or height == 0:
        raise Unreproducible("a PNG colour type or interlacing forkpoint does not check (unmeasured)")
    if width > MAX_WIDTH or height > MAX_HEIGHT:
        return width, height
    expected = height * (1 + (width * channels * depth + 7) // 8)
    inflater = zlib.decompressobj()
    try:
        pixels = inflater.decompress(bytes(idat), expected + 1)
    except zlib.error as error:
        raise Unreproducible("a PNG whose pixel data does not inflate (unmeasured)") from error
    if len(pixels) != expected or not inflater.eof:
        raise Unreproducible("a PNG whose pixel data has the wrong size (unmeasured)")
    return width, height


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """The frame size of a JPEG whose segments are well formed up to the scan and which ends with EOI."""
    offset = 2
    size: tuple[int, int] | None = None
    while offset + 4 <= len(data) and data[offset] == 0xFF:
        marker = data[offset + 1]
        length = struct.unpack(">H", data[offset + 2:offset + 4])[0]
        if length < 2 or offset + 2 + length > len(data):
            break
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and length >= 7:
            height, width = struct.unpack(">HH", data[offset + 5:offset + 9])
            size = (width, height)
        if marker == 0xDA:
            if size is not None and size[0] > 0 and size[1] > 0 and data.endswith(b"\xff\xd9"):
                return size
            break
        offset += 2 + length
    raise Unreproducible("a damaged JPEG (Codex's decoder error is unmeasured)")


def _refuse(message: str) -> ReplayError:
    return ReplayError(ErrorKind.EXECUTOR, f"{message}; --allow-stale-observations reuses the recorded observation",
                       before_effect=True, stale_fallback=True)


def _read_confined(root: Path, host: str | Path, absolute: str, aliases: tuple[str, ...]) -> ReadResult:
    """The image file read within the workspace (bounded, no link followed); a path leading out is refused."""
    try:
        return read_regular_file(root, host, max_bytes=MAX_IMAGE_BYTES, aliases=aliases)
    except ConfinementError as error:
        raise _refuse(f"view_image path {absolute!r} leads outside the workspace; forkpoint does not read it") \
            from error


def view_image(arguments: dict[str, Any], cwd: str, root: Path, aliases: tuple[str, ...],
               host_path: Any, version: str) -> str | list[dict[str, str]]:
    """Codex's output for one view_image call. ``cwd`` is the session cwd the tools see, ``host_path`` maps a
    tools path to the host (the sandbox's), ``root``/``aliases`` confine the read to the workspace."""
    path = arguments.get("path")
    if not isinstance(path, str) or not path:
        raise _refuse("view_image without a path string: Codex's answer is unmeasured")
    absolute = join_path(cwd, path)
    try:
        result = _read_confined(root, host_path(absolute), absolute, aliases)
    except NotRegularFileError:
        return f"image path `{absolute}` is not a file"
    except OSError as error:
        code = error.errno if error.errno is not None else errno.EIO
        if code == errno.ENOENT:
            return f"unable to locate image at `{absolute}`: {io_error(code)}"
        raise _refuse(f"view_image {absolute!r}: {io_error(code)} (Codex's text for it is unmeasured)") from error
    if result.truncated:
        raise _refuse(f"view_image {absolute!r} is over {MAX_IMAGE_BYTES} bytes")
    try:
        image = sniff(result.data, absolute)
    except Unreproducible as error:
        raise _refuse(f"view_image {absolute!r}: {error}") from error
    if image is None:
        return INVALID
    url = f"data:{image.mime};base64,{base64.b64encode(result.data).decode('ascii')}"
    return [{"type": "input_image", "image_url": url, "detail": DETAIL[version]}]


#: Codex 0.40's view_image output, whatever the file (fixture ``view_image_040``)
ATTACHED_040 = "attached local image path"
#: 0.40 names the data URL's MIME type after the EXTENSION (``mime_guess``): the ones measured, lowercase; any other
#: extension is refused (stale) rather than guessed
MIME_040 = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".txt": "text/plain"}


def view_image_040(arguments: dict[str, Any], cwd: str, root: Path, aliases: tuple[str, ...],
                   host_path: Any) -> list[dict[str, str]]:
    """The content of the user message Codex 0.40 sends after a view_image call (its output is ``ATTACHED_040``):
    one ``input_image`` with ``data:<MIME from the extension>;base64,<the file's bytes>`` (no decoding, no resizing:
    a text file and a 2100-px PNG were sent as they are), or ``[]`` for a missing file or a directory."""
    path = arguments.get("path")
    if not isinstance(path, str) or not path:
        raise _refuse("view_image without a path string: Codex 0.40's answer is unmeasured")
    absolute = join_path(cwd, path)
    mime = MIME_040.get(Path(absolute).suffix)
    try:
        result = _read_confined(root, host_path(absolute), absolute, aliases)
    except NotRegularFileError:
        if _is_directory(host_path(absolute)):
            return []  # measured: a directory sends nothing
        raise _refuse(f"view_image {absolute!r} is not a regular file (Codex 0.40 would read it; unmeasured)") \
            from None
    except OSError as error:
        if error.errno == errno.ENOENT:
            return []  # measured: a missing file sends nothing
        code = error.errno if error.errno is not None else errno.EIO
        raise _refuse(f"view_image {absolute!r}: {io_error(code)} (Codex 0.40's answer is unmeasured)") from error
    if result.truncated:
        raise _refuse(f"view_image {absolute!r} is over {MAX_IMAGE_BYTES} bytes")
    if mime is None:
        raise _refuse(f"view_image {absolute!r}: Codex 0.40 names the MIME type after the extension; "
                      f"{Path(absolute).suffix or '(none)'!r} is unmeasured")
    return [{"type": "input_image", "image_url": f"data:{mime};base64,{base64.b64encode(result.data).decode()}"}]


def _is_directory(path: str) -> bool:
    """lstat only: a link is not followed (the confined read already refused one leading out)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
