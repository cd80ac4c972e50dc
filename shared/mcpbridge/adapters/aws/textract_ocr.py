"""``ports.Ocr`` with Amazon Textract's ``DetectDocumentText`` (synchronous, one image per call, PNG or JPEG up to
10 MB), called by the indexer function."""

from __future__ import annotations

from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from mcpbridge.errors import InvalidInput, RateLimited, Unavailable, UpstreamError

MAX_BYTES: Final = 10 * 1024 * 1024
_REFUSED = frozenset({"InvalidParameterException", "UnsupportedDocumentException", "BadDocumentException"})
_THROTTLED = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException"})


class TextractOcr:
    def __init__(self, client: Any) -> None:
        self._client = client

    @property
    def name(self) -> str:
        return "textract"

    def recognise(self, image: bytes) -> str:
        if len(image) > MAX_BYTES:
            raise InvalidInput("the image is larger than Textract accepts (10 MB)", code="image_too_large")
        try:
            answer = self._client.detect_document_text(Document={"Bytes": image})
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "Unknown"))
            if code in _REFUSED:
                raise InvalidInput(f"Textract refused the image ({code})", code="image_unreadable") from exc
            if code in _THROTTLED:
                raise RateLimited(f"Textract is throttling ({code})", code="ocr_throttled") from exc
            raise UpstreamError(f"Textract failed ({code})", code="ocr_failed") from exc
        except BotoCoreError as exc:
            raise Unavailable(f"Textract cannot be reached ({type(exc).__name__})", code="ocr_unavailable") from exc
        return lines_of(answer)


def lines_of(answer: dict[str, Any]) -> str:
    """The text of a DetectDocumentText answer: its LINE blocks, in the order Textract gives (reading order)."""
    return "\n".join(
        str(block.get("Text", "")) for block in answer.get("Blocks", []) if block.get("BlockType") == "LINE"
    )
