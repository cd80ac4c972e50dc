"""Parsing: kind detection, decoding, HTML to Markdown, PDF pages, and the errors for what cannot be read."""

from __future__ import annotations

import codecs
import io

import pypdf
import pytest

from mcpbridge.errors import InvalidInput
from mcpbridge.knowledge.chunking import chunk_document
from mcpbridge.knowledge.parsing import parse_document


def make_pdf(pages: list[list[str]]) -> bytes:
    """A minimal valid PDF, written by hand: one Helvetica text line per string, one page per list."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (" ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages))).encode(), len(pages)),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, lines in enumerate(pages):
        ops = [b"BT", b"/F1 12 Tf", b"14 TL", b"72 720 Td"]
        for line in lines:
            escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            ops.append(b"(%s) Tj T*" % escaped.encode("latin-1"))
        ops.append(b"ET")
        content = b"\n".join(ops)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def encrypted(pdf: bytes, *, user_password: str, owner_password: str) -> bytes:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm="AES-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def refused(data: bytes, **kwargs: str) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        parse_document(data, **kwargs)
    return caught.value


# --- Markdown and plain text ----------------------------------------------------------------------------------------


def test_markdown_is_kept_with_bom_dropped_and_line_endings_normalised() -> None:
    data = codecs.BOM_UTF8 + b"## Sub\r\n\r\nText\rmore\r\n\r\n```\r\n# not it\r\n```\r\n# Title\r\n"
    parsed = parse_document(data, content_type="text/markdown; charset=utf-8")
    assert parsed.format == "markdown"
    assert parsed.text == "## Sub\n\nText\nmore\n\n```\n# not it\n```\n# Title\n"
    # The first level-1 heading, not the first heading, and never one inside a fence.
    assert parsed.title == "Title"
    assert parsed.warnings == ()


@pytest.mark.parametrize(
    ("content_type", "filename", "expected"),
    [
        (None, "notes.md", "markdown"),
        (None, "NOTES.MARKDOWN", "markdown"),
        ("text/x-markdown", None, "markdown"),
        ("text/plain", "readme.md", "markdown"),  # text/plain is what many clients send for any text file
        ("text/markdown", "readme.txt", "markdown"),  # a specific content type wins over the extension
        ("application/octet-stream", "notes.txt", "text"),
        (None, "notes.txt", "text"),
        ("text/plain", None, "text"),
        ("text/csv", None, "text"),
        (None, "server.log", "text"),  # unknown extension: the bytes decide, and they are text
        (None, None, "text"),
    ],
)
def test_kind_comes_from_type_then_extension_then_bytes(
    content_type: str | None, filename: str | None, expected: str
) -> None:
    parsed = parse_document(b"# Heading\n\nSome text.\n", content_type=content_type, filename=filename)
    assert parsed.format == expected
    assert parsed.title == ("Heading" if expected == "markdown" else None)


def test_plain_text_has_no_title() -> None:
    assert parse_document(b"# not a title in plain text\n", filename="a.txt").title is None


def test_invalid_utf8_is_refused_naming_the_offset() -> None:
    error = refused(b"caf\xe9 au lait", filename="menu.txt")
    assert error.code == "document_not_utf8"
    assert error.details["offset"] == 3
    assert "UTF-8" in error.message


def test_a_declared_charset_and_a_utf16_bom_are_honoured() -> None:
    assert parse_document(b"caf\xe9", content_type="text/plain; charset=ISO-8859-1").text == "café"
    assert parse_document("héllo\r\nwörld".encode("utf-16"), filename="a.txt").text == "héllo\nwörld"
    unknown = parse_document(b"plain", content_type="text/plain; charset=klingon")
    assert unknown.text == "plain"
    assert unknown.warnings == ("unknown charset 'klingon' ignored; decoded as UTF-8",)


def test_nul_bytes_are_refused() -> None:
    error = refused(b"text\x00with nul", filename="a.txt")
    assert error.code == "unsupported_document_type"
    assert "NUL" in error.message


@pytest.mark.parametrize("data", [b"", b"   \n\t\r\n", codecs.BOM_UTF8 + b"\n \n"])
def test_empty_documents_are_refused(data: bytes) -> None:
    assert refused(data, filename="a.md").code == "document_empty"


@pytest.mark.parametrize(
    ("data", "kwargs", "named"),
    [
        (b"II*\x00" + b"\x00" * 20, {}, "image/tiff"),
        (b"PK\x03\x04" + b"\x00" * 20, {"filename": "report.docx"}, ".docx"),
        (b"PK\x03\x04" + b"\x00" * 20, {"filename": "bundle"}, "application/zip"),
        (b"hello", {"content_type": "image/jpeg"}, "image/jpeg"),
        (b'{"a": 1}', {"content_type": "application/json"}, "application/json"),
        (bytes(range(128, 256)), {}, "unrecognised binary data"),
    ],
)
def test_unsupported_types_are_refused_by_name(data: bytes, kwargs: dict[str, str], named: str) -> None:
    error = refused(data, **kwargs)
    assert error.code == "unsupported_document_type"
    assert error.details["type"] == named
    assert named in error.message


@pytest.mark.parametrize(
    "data",
    [
        b"MZ stands for Mark Zbikowski.\n",
        b"ID3 tags explained\n",
        b"GIF89a is a format.\n",
        b"The header is `%PDF-1.7`.\n",
    ],
)
def test_text_that_starts_like_a_signature_is_still_text(data: bytes) -> None:
    assert parse_document(data).text == data.decode()
    assert parse_document(data, filename="notes.md").text == data.decode()


# --- HTML -----------------------------------------------------------------------------------------------------------

PAGE = b"""<!DOCTYPE html>
<html><head>
<meta charset="utf-8"><title>Caf&eacute; &amp; Co</title>
<style>p { color: red }</style><script>var secret = "do not index";</script>
</head>
<body>
<!-- a comment that must go -->
<nav><a href="/home">Home</a></nav>
<h1>Welcome to <a href="https://example.com">the caf&eacute;</a></h1>
<p>We   serve
   <b>coffee</b> &lt;hot&gt; &amp; tea.
   Read the <a href="https://example.com/menu (new)">menu [pdf]</a>,
   <a href="javascript:alert(1)">click me</a>, <a href=" JaVa&#09;Script:alert(2)">or me</a>,
   or <a href="mailto:hi@example.com">write</a>.</p>
<h2>Opening hours</h2>
<ul>
  <li>Monday<ul><li>8&ndash;12</li></ul></li>
  <li><p>Tuesday</p></li>
</ul>
<ol start="3"><li>third</li><li>fourth</li></ol>
<h3>Recipe</h3>
<pre><code class="language-python">def brew(cups):
    # strength matters
    return "```" * cups
</code></pre>
<p>Use <code>brew(2)</code> daily.<br>Or not.</p>
<table>
  <tr><th>Drink</th><th>Price</th></tr>
  <tr><td>Espresso</td><td>2 &euro;</td></tr>
  <tr><td>Latte</td><td>3<br>&euro;</td></tr>
</table>
<h4>Small print</h4><h5>Smaller</h5><h6>Smallest</h6>
<p># not a heading</p>
<noscript>enable js</noscript><template><p>template text</p></template>
<svg><title>icon title</title><text>svg text</text></svg>
<div>Last words</div>
</body></html>
"""


def test_html_becomes_markdown_like_text() -> None:
    parsed = parse_document(PAGE, content_type="text/html; charset=utf-8")
    assert parsed.format == "markdown"
    assert parsed.title == "Café & Co"
    text = parsed.text
    assert text.startswith("Home\n\n# Welcome to the café\n\n")
    assert "We serve coffee <hot> & tea. Read the [menu \\[pdf\\]](https://example.com/menu%20%28new%29)," in text
    assert "click me, or me, or [write](mailto:hi@example.com)." in text
    assert "javascript" not in text.lower()
    assert "## Opening hours\n\n- Monday\n  - 8–12\n- Tuesday\n\n3. third\n4. fourth\n\n### Recipe" in text
    assert (
        '````python\ndef brew(cups):\n    # strength matters\n    return "```" * cups\n````\n\n'
        "Use `brew(2)` daily.\nOr not.\n\n"
        "Drink | Price\nEspresso | 2 €\nLatte | 3 €\n\n"
        "#### Small print\n\n##### Smaller\n\n###### Smallest\n\n\\# not a heading\n\nLast words\n"
    ) in text
    for dropped in ("secret", "color", "comment", "enable js", "template text", "svg text", "icon title", "/home"):
        assert dropped not in text
    assert text.endswith("Last words\n")


def test_html_headings_become_heading_paths() -> None:
    parsed = parse_document(PAGE, filename="page.html")
    chunks = chunk_document(parsed.text, format=parsed.format, max_chars=120, min_chars=0)
    recipe = next(c for c in chunks if c.text.startswith("### Recipe"))
    assert recipe.heading_path == ("Welcome to the café", "Opening hours", "Recipe")
    # The fenced code fits in one chunk and is not cut, although its lines contain "#".
    fence_start = parsed.text.index("````python")
    fence_end = parsed.text.index("````\n", fence_start + 4) + 4
    assert any(c.start_offset <= fence_start and fence_end <= c.end_offset for c in chunks)


@pytest.mark.parametrize(
    ("data", "kwargs"),
    [
        (b"<html><body><p>Hi</p></body></html>", {}),
        (b"  <!-- x --><!doctype html><p>Hi</p>", {"filename": "page"}),
        (b"<p>Hi</p>", {"content_type": "application/xhtml+xml"}),
        (b"<p>Hi</p>", {"filename": "page.htm"}),
        (codecs.BOM_UTF8 + b"<!DOCTYPE html><p>Hi</p>", {}),
        (b"<p>Hi</p>", {"content_type": "text/plain", "filename": "page.html"}),
    ],
)
def test_html_is_recognised(data: bytes, kwargs: dict[str, str]) -> None:
    assert parse_document(data, **kwargs).text == "Hi\n"


def test_html_without_a_title_uses_its_first_h1_and_untitled_html_has_none() -> None:
    assert parse_document(b"<h2>Sub</h2><h1>Main</h1>", content_type="text/html").title == "Main"
    assert parse_document(b"<p>no heading</p>", content_type="text/html").title is None


def test_html_tolerates_unclosed_tags() -> None:
    parsed = parse_document(
        b"<head><title>T</title><body><p>one<p>two<ul><li>a<li>b</ul><table><tr><td>x<td>y<tr><td>z</table><h2>end",
        content_type="text/html",
    )
    assert parsed.text == "one\n\ntwo\n\n- a\n- b\n\nx | y\nz\n\n## end\n"
    assert parsed.title == "T"


def test_html_with_nothing_readable_is_empty() -> None:
    error = refused(b"<html><head><script>x()</script></head><body><!-- -->  </body></html>", content_type="text/html")
    assert error.code == "document_empty"


# --- PDF ------------------------------------------------------------------------------------------------------------


def test_pdf_pages_become_page_sections() -> None:
    pdf = make_pdf(
        [["Hello from page one.", "Second line (with parens)."], [], ["# Looks like a heading", "Page three."]]
    )
    parsed = parse_document(pdf, content_type="application/pdf")
    assert parsed.format == "markdown"
    assert parsed.title is None
    assert parsed.text == (
        "## Page 1\n\nHello from page one.\nSecond line (with parens).\n\n"
        "## Page 3\n\n\\# Looks like a heading\nPage three.\n"
    )
    chunks = chunk_document(parsed.text, format=parsed.format, max_chars=60, min_chars=0)
    assert [c.heading_path for c in chunks] == [("Page 1",), ("Page 3",)]
    assert (chunks[1].start_line, chunks[1].end_line) == (6, 9)


def test_pdf_is_found_by_extension_and_by_its_signature() -> None:
    pdf = make_pdf([["Signed."]])
    assert parse_document(pdf, filename="scan.PDF").text == "## Page 1\n\nSigned.\n"
    assert parse_document(pdf).text == "## Page 1\n\nSigned.\n"
    # A binary signature beats a textual declaration: no text starts with "%PDF-".
    assert parse_document(pdf, content_type="text/plain").text == "## Page 1\n\nSigned.\n"


def test_password_protected_pdf_is_unreadable() -> None:
    pdf = encrypted(make_pdf([["Secret."]]), user_password="open sesame", owner_password="owner")
    error = refused(pdf, filename="secret.pdf")
    assert error.code == "document_unreadable"
    assert "password" in error.message


def test_pdf_with_only_an_owner_password_is_read() -> None:
    pdf = encrypted(make_pdf([["Restricted but readable."]]), user_password="", owner_password="owner")
    assert parse_document(pdf, filename="restricted.pdf").text == "## Page 1\n\nRestricted but readable.\n"


@pytest.mark.parametrize("data", [b"%PDF-1.7\nthis is not really a pdf\n", b"%PDF-" + bytes(range(256)) * 4])
def test_broken_pdf_is_unreadable(data: bytes) -> None:
    error = refused(data, filename="broken.pdf")
    assert error.code == "document_unreadable"
    assert "damaged" in error.message


def test_pdf_without_text_is_empty() -> None:
    error = refused(make_pdf([[], []]), filename="scan.pdf")
    assert error.code == "document_empty"
    assert "no extractable text" in error.message
