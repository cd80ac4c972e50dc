"""Images with text drawn in them (Pillow), and a PDF that embeds one beside a line of text, made in the test."""

from __future__ import annotations

import io

from PIL import Image, ImageDraw, ImageFont


def text_image(
    lines: list[str], *, size: tuple[int, int] = (1000, 260), fmt: str = "PNG", frame: bool = False
) -> bytes:
    """Black text on white, large enough for any OCR engine; ``frame`` draws boxes and an arrow (a diagram)."""
    font = ImageFont.load_default(size=36)
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    if frame:
        draw.rectangle((8, 8, size[0] - 8, size[1] - 8), outline="black", width=3)
        draw.line((size[0] - 180, size[1] // 2, size[0] - 40, size[1] // 2), fill="black", width=4)
    for number, line in enumerate(lines):
        draw.text((30, 30 + number * 70), line, fill="black", font=font)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def pdf_with_image(text: str, jpeg: bytes | None, width: int = 0, height: int = 0) -> bytes:
    """A one-page PDF: ``text`` in Helvetica at the top, the JPEG drawn below it (a DCTDecode image XObject); the
    same page without the image when ``jpeg`` is None."""
    safe = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    lines = "".join(f"({line}) Tj 0 -18 Td " for line in safe.split("\n"))
    drawn = " q 500 0 0 130 50 400 cm /Im1 Do Q" if jpeg is not None else ""
    content = f"BT /F1 14 Tf 50 780 Td {lines}ET{drawn}".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >>"
        + (b" /XObject << /Im1 6 0 R >>" if jpeg is not None else b"")
        + b" >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    if jpeg is not None:
        objects.append(
            b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB /BitsPerComponent 8 "
            b"/Filter /DCTDecode /Length %d >>\nstream\n" % (width, height, len(jpeg)) + jpeg + b"\nendstream"
        )
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)
