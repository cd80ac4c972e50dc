"""Blobs in an S3 bucket."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from mcpbridge.errors import Unavailable

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class S3Blobs:
    """``ports.Blobs`` on one bucket, under an optional key prefix."""

    def __init__(self, client: S3Client, bucket: str, prefix: str = "") -> None:
        self._client = client
        self._bucket = bucket
        self._prefix = prefix

    @property
    def client(self) -> S3Client:
        return self._client

    @property
    def bucket(self) -> str:
        return self._bucket

    def key(self, key: str) -> str:
        return self._prefix + key

    def put(self, key: str, data: bytes, *, content_type: str = "application/octet-stream") -> None:
        self._call(
            lambda: self._client.put_object(Bucket=self._bucket, Key=self.key(key), Body=data, ContentType=content_type)
        )

    def get(self, key: str) -> bytes | None:
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=self.key(key))
            body: bytes = response["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise Unavailable(f"S3 get failed ({_code(exc)})", code="blobs_unavailable") from exc
        except BotoCoreError as exc:
            raise Unavailable(f"S3 cannot be reached ({type(exc).__name__})", code="blobs_unavailable") from exc
        return body

    def delete(self, key: str) -> None:
        self._call(lambda: self._client.delete_object(Bucket=self._bucket, Key=self.key(key)))

    def _call(self, call: Any) -> None:
        try:
            call()
        except ClientError as exc:
            raise Unavailable(f"S3 request failed ({_code(exc)})", code="blobs_unavailable") from exc
        except BotoCoreError as exc:
            raise Unavailable(f"S3 cannot be reached ({type(exc).__name__})", code="blobs_unavailable") from exc


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "Unknown"))
