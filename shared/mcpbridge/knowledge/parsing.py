"""Turning uploaded bytes (Markdown, plain text, HTML, PDF, images) into the canonical text mcpbridge stores and
chunks, and the images it holds.

The kind of a document is decided from its content type, then its file name's extension, then its first bytes.
Two refinements: ``text/plain`` gives way to a ``.md``/``.html`` name (many clients send ``text/plain`` for every text
file), and a binary signature (PDF, image, archive) beats a textual declaration, since no text starts with one.

* Markdown and plain text are kept as they are, apart from decoding and line endings.
* HTML becomes Markdown-like text (headings, lists, links, fenced code, flattened tables) through the standard
  library's ``html.parser``.
* PDF becomes one ``## Page N`` section per page with text, so every chunk carries its page in its heading path.
* Images: an uploaded PNG, JPEG, GIF or WebP is a document with no text of its own and one image; the images
  embedded in a PDF's pages and those inline in HTML (``data:`` URIs only: a remote image is never fetched) come
  with the document's text. Their text is recognised when the document is indexed (``knowledge.images``).

Text is decoded as UTF-8 (a BOM is dropped; a UTF-16 BOM or a ``charset`` parameter is honoured). Bytes that are not
valid in that encoding are refused with ``document_not_utf8`` rather than replaced: the stored text is what chunks,
citations and line numbers refer to, and silently swapping characters would make them cite text the author never
wrote. Line endings become ``\\n``; NUL characters are refused (they mean binary data).
"""

# Over 400 lines: the HTML, PDF and text parsers and the cleanup they share.

from __future__ import annotations

import base64
import binascii
import codecs
import io
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Literal

from mcpbridge.domain.knowledge import DocumentFormat, ParsedDocument, ParsedImage
from mcpbridge.errors import InvalidInput
from mcpbridge.knowledge.chunking import markdown_outline

__all__ = ["parse_document"]

_Kind = Literal["markdown", "text", "html", "pdf", "image"]

_TYPE_KINDS: dict[str, _Kind] = {
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/plain": "text",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/pdf": "pdf",
    "application/x-pdf": "pdf",
    "image/png": "image",
    "image/jpeg": "image",
    "image/jpg": "image",
    "image/gif": "image",
    "image/webp": "image",
}
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image formats mcpbridge reads (by their signature, whatever the declared type)."""
MAX_IMAGES = 50
"""Images kept per document (in order); the rest are left out, with a warning."""
# Content types that say nothing about the content: the extension and the bytes decide instead.
_GENERIC_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/unknown"})
_EXTENSION_KINDS: dict[str, _Kind] = {
    "md": "markdown",
    "markdown": "markdown",
    "txt": "text",
    "text": "text",
    "html": "html",
    "htm": "html",
    "xhtml": "html",
    "pdf": "pdf",
    "png": "image",
    "jpg": "image",
    "jpeg": "image",
    "gif": "image",
    "webp": "image",
}
KNOWN_EXTENSIONS = frozenset(extension for extension, kind in _EXTENSION_KINDS.items() if kind != "image")
"""The file-name extensions that name a kind of text document (a folder imported by the CLI contributes these files;
its images, mostly logos and icons, are left out unless named one by one)."""
_BINARY_EXTENSIONS = frozenset(
    {
        "bmp",
        "tif",
        "tiff",
        "ico",
        "heic",
        "svg",
        "zip",
        "gz",
        "tgz",
        "bz2",
        "xz",
        "7z",
        "rar",
        "tar",
        "doc",
        "docx",
        "xls",
        "xlsx",
        "ppt",
        "pptx",
        "odt",
        "ods",
        "odp",
        "epub",
        "exe",
        "dll",
        "so",
        "dylib",
        "bin",
        "mp3",
        "mp4",
        "m4a",
        "mov",
        "avi",
        "mkv",
        "wav",
        "flac",
        "ogg",
        "webm",
    }
)
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x1f\x8b", "application/gzip"),
    (b"BZh", "application/x-bzip2"),
    (b"\xfd7zXZ\x00", "application/x-xz"),
    (b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed"),
    (b"Rar!\x1a\x07", "application/vnd.rar"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "application/x-ole-storage"),
    (b"\x7fELF", "application/x-executable"),
    (b"MZ", "application/x-msdownload"),
    (b"OggS", "audio/ogg"),
    (b"fLaC", "audio/flac"),
    (b"ID3", "audio/mpeg"),
)
_HTML_START = re.compile(
    rb"\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*(?:<!doctype\s+html|<html|<head|<body|<title|<meta|<div|<p[\s>])",
    re.IGNORECASE | re.DOTALL,
)
# Lines a Markdown reader would take for structure (ATX heading, code fence, setext underline). Converted text gets
# a backslash in front so that text extracted from a PDF or written in HTML is not read as a heading or a fence.
_MARKDOWN_SIGNIFICANT = re.compile(r"^([ \t]*)(?=#{1,6}(?:[ \t]|$)|`{3}|~{3}|=+[ \t]*$|-+[ \t]*$)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def parse_document(data: bytes, *, content_type: str | None = None, filename: str | None = None) -> ParsedDocument:
    """Turn an uploaded document into the text mcpbridge stores: Markdown and plain text as is, HTML and PDF as
    Markdown-like text.

    Raises ``InvalidInput`` with code ``unsupported_document_type`` (images, archives, binary data, unknown types),
    ``document_not_utf8`` (text that does not decode), ``document_unreadable`` (an encrypted or damaged PDF) or
    ``document_empty`` (nothing but whitespace, or a PDF without extractable text).
    """
    mime, charset = _split_content_type(content_type)
    extension = _extension(filename)
    if not data.strip():
        raise InvalidInput("The document is empty.", code="document_empty")
    kind, declared = _decide_kind(data, mime, extension)
    warnings: list[str] = []
    title: str | None = None
    images: list[ParsedImage] = []
    fmt: DocumentFormat = "markdown"
    if kind == "image":
        text = ""
        images.append(ParsedImage(_readable_image(data), _signature(data) or mime))
    elif kind == "pdf":
        text = _pdf_text(data, warnings, images)
    else:
        text = _decode(data, charset, declared=declared, warnings=warnings)
        if kind == "html":
            text, title = _html_to_markdown(text, images)
        else:
            fmt = "markdown" if kind == "markdown" else "text"
    if len(images) > MAX_IMAGES:
        warnings.append(f"{len(images)} images: only the first {MAX_IMAGES} are kept")
        del images[MAX_IMAGES:]
    if not text.strip() and not images:
        raise InvalidInput("The document has no text.", code="document_empty")
    if title is None and fmt == "markdown":
        title = next((heading.title for heading in markdown_outline(text) if heading.level == 1), None)
    return ParsedDocument(text=text, format=fmt, title=title or None, warnings=tuple(warnings), images=tuple(images))


# --- deciding the kind -------------------------------------------------------------------------------------------


def _split_content_type(content_type: str | None) -> tuple[str, str | None]:
    if not content_type:
        return "", None
    mime, *params = content_type.split(";")
    charset = None
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip("\"'") or None
    return mime.strip().lower(), charset


def _extension(filename: str | None) -> str:
    if not filename:
        return ""
    name = re.split(r"[\\/]", filename)[-1]
    stem, dot, suffix = name.rpartition(".")
    return suffix.lower() if dot and stem else ""


def _unsupported(what: str) -> InvalidInput:
    what = what[:100]  # the content type comes from the client; keep the message bounded
    return InvalidInput(
        f"Documents of type {what} are not supported: upload Markdown, plain text, HTML, PDF or an image (PNG, "
        "JPEG, GIF, WebP).",
        code="unsupported_document_type",
        details={"type": what},
    )


def _signature(data: bytes) -> str | None:
    """The type named by a binary signature at the start of ``data`` ("pdf" for a PDF), or None.

    Several signatures are plain ASCII ("MZ", "ID3", "GIF89a"), and a text may well start with them; so apart from
    the unmistakable "%PDF-" header they count only when the first bytes are not text (a NUL, or not UTF-8).
    """
    if data[:1024].lstrip().startswith(b"%PDF-"):
        return "pdf"
    head = data[:4096]
    if not _looks_binary(head):
        return None
    for magic, name in _SIGNATURES:
        if head.startswith(magic):
            return name
    if head[4:8] == b"ftyp":
        return "video/mp4"
    riff_kinds = {b"WEBP": "image/webp", b"WAVE": "audio/wav", b"AVI ": "video/x-msvideo"}
    if head.startswith(b"RIFF") and head[8:12] in riff_kinds:
        return riff_kinds[head[8:12]]
    return None


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    try:
        # Incremental, so that a character cut at the end of the sample is not taken for invalid UTF-8.
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return True
    return False


def _decide_kind(data: bytes, mime: str, extension: str) -> tuple[_Kind, bool]:
    """The kind of document and whether it was declared (by type or extension) rather than guessed from bytes."""
    signature = _signature(data)
    kind: _Kind | None
    if mime not in _GENERIC_TYPES:
        kind = _TYPE_KINDS.get(mime)
        if kind is None and mime.startswith("text/"):
            kind = "text"
        if kind is None:
            raise _unsupported(mime)
        if mime == "text/plain" and _EXTENSION_KINDS.get(extension) in ("markdown", "html"):
            kind = _EXTENSION_KINDS[extension]
    elif extension in _EXTENSION_KINDS:
        kind = _EXTENSION_KINDS[extension]
    elif extension in _BINARY_EXTENSIONS:
        raise _unsupported(f".{extension}")
    else:
        if signature == "pdf":
            return "pdf", False
        if signature in IMAGE_TYPES:
            return "image", False
        if signature is not None:
            raise _unsupported(signature)
        return ("html" if _HTML_START.match(data[:2048].removeprefix(codecs.BOM_UTF8)) else "text"), False
    if kind == "image":
        if signature not in IMAGE_TYPES:
            what = (mime or f".{extension}")[:100]
            raise InvalidInput(
                f"The file is declared {what} but is not a PNG, JPEG, GIF or WebP image.",
                code="unsupported_document_type",
                details={"type": what},
            )
        return kind, True
    if kind != "pdf" and signature is not None:
        if signature == "pdf":
            return "pdf", True
        if signature in IMAGE_TYPES:
            return "image", True
        raise _unsupported(signature)
    return kind, True


# --- text --------------------------------------------------------------------------------------------------------


def _decode(data: bytes, charset: str | None, *, declared: bool, warnings: list[str]) -> str:
    encoding = "utf-8"
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"  # the codec reads the byte order from the BOM and drops it
    elif data.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    elif charset:
        try:
            encoding = codecs.lookup(charset).name
        except LookupError:
            warnings.append(f"unknown charset {charset[:40]!r} ignored; decoded as UTF-8")
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        if not declared:
            raise _unsupported("unrecognised binary data") from exc
        name = "UTF-8" if encoding.startswith("utf-8") else encoding
        raise InvalidInput(
            f"The document is not valid {name} text (first bad byte at offset {exc.start}). Save it as UTF-8, "
            "or name its encoding in the content type's charset.",
            code="document_not_utf8",
            details={"offset": exc.start, "encoding": name},
        ) from exc
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\x00" in text:
        raise _unsupported("binary data (the text contains NUL characters)")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _neutralise_line(line: str) -> str:
    return _MARKDOWN_SIGNIFICANT.sub(r"\1\\", line, count=1)


# --- PDF ---------------------------------------------------------------------------------------------------------


def _pdf_text(data: bytes, warnings: list[str], images: list[ParsedImage]) -> str:
    try:
        import pypdf  # only PDFs pay for importing it (a tenth of a second at every cold start otherwise)

        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # A PDF with only an owner password (print/copy restrictions) opens with the empty user password.
            try:
                opened = reader.decrypt("")
            except Exception:  # pypdf raises assorted errors for unsupported or broken encryption
                opened = pypdf.PasswordType.NOT_DECRYPTED
            if opened == pypdf.PasswordType.NOT_DECRYPTED:
                raise InvalidInput(
                    "The PDF is password-protected: remove the password and upload it again.",
                    code="document_unreadable",
                )
        pages = list(reader.pages)
    except InvalidInput:
        raise
    except Exception as exc:  # pypdf signals damaged input with many exception types, not one
        raise InvalidInput(
            "The PDF could not be read: the file is damaged or not a PDF.", code="document_unreadable"
        ) from exc
    sections: list[str] = []
    for number, page in enumerate(pages, start=1):
        try:
            raw = page.extract_text()
        except Exception:  # one bad page should not cost the others
            warnings.append(f"page {number}: text could not be extracted")
            continue
        body = _clean_pdf_page(raw)
        if body:
            sections.append(f"## Page {number}\n\n{body}")
        if len(images) <= MAX_IMAGES:
            images.extend(_pdf_page_images(page, number, warnings))
    if not sections and not images:
        raise InvalidInput("The PDF has no extractable text and no images.", code="document_empty")
    return "\n\n".join(sections) + "\n" if sections else ""


def _readable_image(data: bytes) -> bytes:
    """``data``, once Pillow has read its header and checked its structure (a damaged image fails the document)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
    except Exception as exc:  # Pillow signals damaged images with several exception types
        raise InvalidInput(
            "The image could not be read: the file is damaged or not an image.", code="document_unreadable"
        ) from exc
    return data


def _pdf_page_images(page: object, number: int, warnings: list[str]) -> list[ParsedImage]:
    """The images drawn on a PDF page, as PNG (or the JPEG they already are); pypdf decodes them with Pillow."""
    found: list[ParsedImage] = []
    try:
        for image in page.images:  # type: ignore[attr-defined]
            if image.data[:3] == b"\xff\xd8\xff":
                found.append(ParsedImage(image.data, "image/jpeg", page=number))
                continue
            picture = image.image
            if picture is None:
                continue
            out = io.BytesIO()
            picture.save(out, format="PNG")
            found.append(ParsedImage(out.getvalue(), "image/png", page=number))
    except ImportError:
        warnings.append("images in the PDF were left out: Pillow is not installed")
    except Exception:  # pypdf and Pillow raise assorted errors for image formats they cannot decode
        warnings.append(f"page {number}: an image could not be read")
    return found


def _clean_pdf_page(raw: str) -> str:
    text = _CONTROL.sub("", raw.replace("\r\n", "\n").replace("\r", "\n"))
    lines = [_neutralise_line(line.rstrip()) for line in text.split("\n")]
    # Runs of blank lines carry no meaning in extracted text; one is enough to separate paragraphs.
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


# --- HTML --------------------------------------------------------------------------------------------------------

_SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "svg", "math", "iframe", "object"})
_HEAD_TAGS = frozenset({"title", "meta", "link", "base", "style", "script", "noscript", "template"})
_HEADING_LEVELS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCK_TAGS = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "body",
        "caption",
        "center",
        "dd",
        "details",
        "dialog",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "header",
        "hgroup",
        "hr",
        "legend",
        "main",
        "nav",
        "p",
        "section",
        "summary",
    }
)
_LINK_SCHEMES = ("http://", "https://", "mailto:")
_WHITESPACE = re.compile(r"\s+")
_LANGUAGE_CLASS = re.compile(r"(?:language|lang)-([\w+#.-]+)")


@dataclass
class _Capture:
    """Inline content collected for an element that is written out only when it ends (heading, link, cell...)."""

    kind: Literal["title", "heading", "link", "code", "cell", "pre"]
    parts: list[str] = field(default_factory=list)
    level: int = 0
    href: str = ""
    language: str = ""


class _Writer:
    """Lines of Markdown-like output: inline text joins the current line, blocks ask for line breaks before the next."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.current: list[str] = []
        self.breaks = 0  # line breaks owed before the next text: 1 = new line, 2 = blank line
        self.prefix = ""  # list marker waiting for the first text of its item

    def request_break(self, breaks: int) -> None:
        self.breaks = max(self.breaks, breaks)

    def line_break(self) -> None:
        # Two <br> in a row read as a paragraph break.
        if self.current:
            self.breaks = min(2, self.breaks + 1)

    def text(self, text: str) -> None:
        if not text:
            return
        if text.isspace():
            if self.current and not self.breaks and not self.current[-1].endswith(" "):
                self.current.append(" ")
            return
        self._settle_breaks()
        if not self.current:
            text = text.lstrip()
            if self.prefix:
                self.current.append(self.prefix)
                self.prefix = ""
        elif self.current[-1].endswith(" ") and text.startswith(" "):
            text = text.lstrip()
        self.current.append(text)

    def block(self, lines: list[str]) -> None:
        """Raw lines (a heading, a code fence) on their own, kept exactly as given."""
        self._settle_breaks()
        self._end_line()
        self.prefix = ""
        self.lines.extend(lines)
        self.breaks = 2

    def finish(self) -> str:
        self._end_line()
        while self.lines and not self.lines[-1]:
            self.lines.pop()
        return "\n".join(self.lines)

    def _settle_breaks(self) -> None:
        if self.breaks:
            self._end_line()
            if self.breaks == 2 and self.lines and self.lines[-1]:
                self.lines.append("")
            self.breaks = 0

    def _end_line(self) -> None:
        if self.current:
            line = "".join(self.current).rstrip()
            self.current = []
            if line:
                self.lines.append(_neutralise_line(line))


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _safe_href(href: str | None) -> str | None:
    """The href if it is an absolute http(s) or mailto link, made safe inside Markdown's ``(...)``; else None."""
    if not href:
        return None
    # Browsers ignore ASCII whitespace and control characters inside a scheme ("java\tscript:"), so judge without.
    compact = re.sub(r"[\x00-\x20\x7f]", "", href)
    if not compact.lower().startswith(_LINK_SCHEMES):
        return None
    cleaned = href.strip()
    for char, escaped in ((" ", "%20"), ("(", "%28"), (")", "%29"), ("<", "%3C"), (">", "%3E")):
        cleaned = cleaned.replace(char, escaped)
    return re.sub(r"[\x00-\x1f\x7f]", "", cleaned)


class _HTMLConverter(HTMLParser):
    """HTML to Markdown-like text: structure kept as Markdown, everything not meant to be read dropped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.writer = _Writer()
        self.title: str | None = None
        self.captures: list[_Capture] = []
        self.skipping = ""  # name of the skipped element we are inside, "" when none
        self.skip_depth = 0
        self.in_head = False
        self.lists: list[list[int]] = []  # per open list: [ordered (0/1), next number]
        self.links: list[bool] = []  # per open <a>: whether it opened a link capture
        self.table_depth = 0
        self.row: list[str] | None = None
        self.images: list[ParsedImage] = []

    # -- parser callbacks --

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skipping:
            if tag == self.skipping:
                self.skip_depth += 1
            return
        if tag in _SKIPPED_TAGS:
            self.skipping, self.skip_depth = tag, 1
            return
        if tag == "title":
            self.captures.append(_Capture("title"))
            return
        if self.in_head:
            if tag in _HEAD_TAGS:
                return
            self.in_head = False  # content with no </head> or <body> before it
        if tag == "head":
            self.in_head = True
            return
        top = self.captures[-1] if self.captures else None
        if top is not None and top.kind == "pre":
            if tag == "br":
                top.parts.append("\n")
            elif tag == "code" and not top.language:
                top.language = _language(attrs)
            return
        if top is not None and top.kind == "title":
            return
        if tag in ("table", "tr", "td", "th"):
            self._table_start(tag)
        elif tag in _HEADING_LEVELS:
            if self.captures:
                self._block_break(2)
            else:
                self.captures.append(_Capture("heading", level=_HEADING_LEVELS[tag]))
        elif tag == "a":
            href = _safe_href(dict(attrs).get("href"))
            opened = href is not None and not any(c.kind == "link" for c in self.captures)
            if opened:
                self.captures.append(_Capture("link", href=href or ""))
            self.links.append(opened)
        elif tag == "code":
            self.captures.append(_Capture("code"))
        elif tag == "pre":
            if self.captures:
                self._block_break(2)
            else:
                self.writer.request_break(1 if self.lists else 2)
                self.captures.append(_Capture("pre", language=_language(attrs)))
        elif tag == "br":
            if self.captures:
                self.captures[-1].parts.append(" ")
            else:
                self.writer.line_break()
        elif tag == "img":
            self._image(dict(attrs))
        elif tag in ("ul", "ol"):
            self._list_start(tag, attrs)
        elif tag == "li":
            self._item_start()
        elif tag in _BLOCK_TAGS:
            self._block_break(2)

    def handle_endtag(self, tag: str) -> None:
        if self.skipping:
            if tag == self.skipping:
                self.skip_depth -= 1
                if not self.skip_depth:
                    self.skipping = ""
            return
        if tag == "title":
            self._close("title")
            return
        if tag == "head":
            self.in_head = False
            return
        if self.captures and self.captures[-1].kind == "pre" and tag != "pre":
            return
        if tag in ("table", "tr", "td", "th"):
            self._table_end(tag)
        elif tag in _HEADING_LEVELS:
            if not self._close("heading"):
                self._block_break(2)
        elif tag == "a":
            if self.links and self.links.pop():
                self._close("link")
        elif tag == "code":
            self._close("code")
        elif tag == "pre":
            self._close("pre")
        elif tag in ("ul", "ol"):
            if self.lists:
                self.lists.pop()
            self._block_break(2)
        elif tag == "li":
            self.writer.prefix = ""
            self._block_break(1)
        elif tag in _BLOCK_TAGS:
            self._block_break(2)

    def handle_data(self, data: str) -> None:
        if self.skipping:
            return
        top = self.captures[-1] if self.captures else None
        if top is not None:
            top.parts.append(data)
        elif not self.in_head:
            self.writer.text(_WHITESPACE.sub(" ", data))

    def convert(self, html: str) -> tuple[str, str | None]:
        self.feed(html)
        self.close()
        while self.captures:
            self._finish(self.captures.pop())
        self._end_row()
        return self.writer.finish(), self.title

    # -- structure --

    def _image(self, attrs: dict[str, str | None]) -> None:
        alt = attrs.get("alt")
        if alt and alt.strip():
            self._inline(_collapse(alt))
        # Inline images only: a remote one is never fetched (it could point anywhere, the network included).
        inline = _data_uri_image(attrs.get("src"))
        if inline is not None:
            self.images.append(ParsedImage(inline[1], inline[0], alt=_collapse(alt or "")))

    def _inline(self, text: str) -> None:
        if self.captures:
            self.captures[-1].parts.append(text)
        else:
            self.writer.text(text)

    def _block_break(self, breaks: int) -> None:
        if self.captures:
            # Inside a heading, link or cell everything stays on one line.
            if self.captures[-1].kind != "pre":
                self.captures[-1].parts.append(" ")
        else:
            self.writer.request_break(1 if self.lists else breaks)

    def _list_start(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._block_break(2)
        start = dict(attrs).get("start") or "1"
        self.lists.append([int(tag == "ol"), int(start) if start.strip().isdigit() else 1])

    def _item_start(self) -> None:
        if self.captures:
            self._block_break(1)
            return
        self.writer.request_break(1)
        depth = max(len(self.lists), 1)
        marker = "- "
        if self.lists and self.lists[-1][0]:
            marker = f"{self.lists[-1][1]}. "
            self.lists[-1][1] += 1
        self.writer.prefix = "  " * (depth - 1) + marker

    def _table_start(self, tag: str) -> None:
        if tag == "table":
            self.table_depth += 1
            if self.table_depth == 1 and not self.captures:
                self.writer.request_break(2)
                self.row = None
            else:
                self._block_break(1)
        elif self.table_depth > 1 or (self.table_depth == 1 and self._capture_outside_cell()):
            # A nested table, or a table opened inside a heading or link: flatten to words.
            self._block_break(1)
        elif tag == "tr":
            self._end_row()
            self.row = []
        else:
            self._close("cell")
            if self.row is None:
                self.row = []
            self.captures.append(_Capture("cell"))

    def _table_end(self, tag: str) -> None:
        if self.table_depth > 1 or (self.table_depth == 1 and self._capture_outside_cell()):
            if tag == "table":
                self.table_depth -= 1
            self._block_break(1)
            return
        if tag in ("td", "th"):
            self._close("cell")
        elif tag == "tr":
            self._end_row()
        elif self.table_depth == 1:
            self._end_row()
            self.table_depth = 0
            self.writer.request_break(2)

    def _capture_outside_cell(self) -> bool:
        return any(c.kind != "cell" for c in self.captures) and not any(c.kind == "cell" for c in self.captures)

    def _end_row(self) -> None:
        self._close("cell")
        if self.row is not None and any(self.row):
            self.writer.request_break(1)
            self.writer.text(" | ".join(self.row))
            self.writer.request_break(1)
        self.row = None

    def _close(self, kind: str) -> bool:
        """Finish the innermost capture of ``kind`` and any left open inside it; False if there is none."""
        for index in range(len(self.captures) - 1, -1, -1):
            if self.captures[index].kind == kind:
                while len(self.captures) > index:
                    self._finish(self.captures.pop())
                return True
        return False

    def _finish(self, capture: _Capture) -> None:
        if capture.kind == "pre":
            self._finish_pre(capture)
            return
        text = _collapse("".join(capture.parts))
        if capture.kind == "title":
            if self.title is None and text:
                self.title = text
        elif capture.kind == "heading":
            if text:
                self.writer.request_break(2)
                self.writer.block(["#" * capture.level + " " + text])
        elif capture.kind == "link":
            if text:
                # Inside a heading a link is just its words: headings become heading paths, which want no URLs.
                in_heading = any(c.kind == "heading" for c in self.captures)
                label = text.replace("[", "\\[").replace("]", "\\]")
                self._inline(text if in_heading else f"[{label}]({capture.href})")
        elif capture.kind == "code":
            if text:
                ticks = "`" * (_longest_run(text, "`") + 1)
                pad = " " if text.startswith("`") or text.endswith("`") else ""
                self._inline(f"{ticks}{pad}{text}{pad}{ticks}")
        elif self.row is not None:
            self.row.append(text)

    def _finish_pre(self, capture: _Capture) -> None:
        content = "".join(capture.parts)
        # As in browsers, a newline right after <pre> is not content; trailing blank lines are not either.
        content = re.sub(r"\A(?:[ \t]*\n)+", "", content).rstrip()
        if not content:
            return
        fence = "`" * max(3, _longest_run(content, "`") + 1)
        self.writer.request_break(1 if self.lists else 2)
        self.writer.block([fence + capture.language, *content.split("\n"), fence])


def _language(attrs: list[tuple[str, str | None]]) -> str:
    match = _LANGUAGE_CLASS.search(dict(attrs).get("class") or "")
    return match.group(1) if match else ""


def _longest_run(text: str, char: str) -> int:
    runs = re.findall(re.escape(char) + "+", text)
    return max((len(run) for run in runs), default=0)


def _html_to_markdown(html: str, images: list[ParsedImage] | None = None) -> tuple[str, str | None]:
    """HTML as Markdown-like text, with its <title> (None if it has none); its inline images go to ``images``."""
    converter = _HTMLConverter()
    text, title = converter.convert(html)
    if images is not None:
        images.extend(converter.images)
    return (text + "\n" if text else ""), title


_DATA_URI = re.compile(r"data:(image/[a-z0-9.+-]+)(?:;[^,;]*)*;base64,", re.IGNORECASE)


def _data_uri_image(src: str | None) -> tuple[str, bytes] | None:
    """(type, bytes) of a ``data:image/...;base64,`` URI holding a PNG, JPEG, GIF or WebP image; None otherwise."""
    if not src:
        return None
    src = src.strip()
    match = _DATA_URI.match(src)
    if match is None:
        return None
    try:
        data = base64.b64decode("".join(src[match.end() :].split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    kind = _signature(data)
    return (kind, data) if kind in IMAGE_TYPES else None
