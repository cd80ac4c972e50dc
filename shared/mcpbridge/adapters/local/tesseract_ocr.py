"""``ports.Ocr`` with Tesseract (Debian's ``tesseract-ocr`` and its language packages) through pytesseract.

Tesseract runs as a subprocess per image, offline, with its models in the system's tessdata; one thread per image
(``OMP_THREAD_LIMIT=1``), so an indexing job does not take every core of a small machine.
"""

from __future__ import annotations

import io
import os
import shutil
from typing import Final

from mcpbridge.errors import InvalidInput, Unavailable

TIMEOUT_SECONDS: Final = 60
MAX_PIXELS: Final = 40_000_000


def tesseract_unavailable() -> str | None:
    """Why Tesseract cannot be used here, or None when it can."""
    if shutil.which("tesseract") is None:
        return "Tesseract is not installed (Debian: apt-get install tesseract-ocr tesseract-ocr-eng)"
    try:
        import pytesseract  # noqa: F401
        from PIL import Image  # noqa: F401
    except ImportError:
        return "pytesseract and Pillow are not installed"
    return None


def installed_languages() -> list[str]:
    import pytesseract

    try:
        return [str(lang) for lang in pytesseract.get_languages(config="")]
    except (OSError, pytesseract.TesseractError, pytesseract.TesseractNotFoundError):
        return []


class TesseractOcr:
    def __init__(self, languages: str = "eng") -> None:
        wanted = [lang for lang in languages.split("+") if lang]
        installed = set(installed_languages())
        chosen = [lang for lang in wanted if lang in installed] or sorted(installed - {"osd"})[:1]
        if not chosen:
            raise Unavailable("Tesseract has no language data installed", code="ocr_unavailable")
        self._languages = "+".join(chosen)
        # Read by each tesseract process this one starts (they inherit the environment): one thread each.
        os.environ.setdefault("OMP_THREAD_LIMIT", "1")

    @property
    def name(self) -> str:
        return f"tesseract:{self._languages}"

    def recognise(self, image: bytes) -> str:
        import pytesseract
        from PIL import Image

        try:
            with Image.open(io.BytesIO(image)) as opened:
                if opened.width * opened.height > MAX_PIXELS:
                    raise InvalidInput("the image is too large to recognise text in", code="image_too_large")
                picture = opened.convert("RGB") if opened.mode not in ("RGB", "L") else opened.copy()
        except InvalidInput:
            raise
        except Exception as exc:  # Pillow signals unreadable images with several exception types
            raise InvalidInput("the image could not be read", code="image_unreadable") from exc
        try:
            text: str = pytesseract.image_to_string(picture, lang=self._languages, timeout=TIMEOUT_SECONDS)
        except RuntimeError as exc:  # pytesseract's timeout
            raise Unavailable("text recognition took too long", code="ocr_timeout") from exc
        except pytesseract.TesseractError as exc:
            raise Unavailable(f"Tesseract failed (status {exc.status})", code="ocr_failed") from exc
        return text
