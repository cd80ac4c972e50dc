"""Blobs in an S3 bucket."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from mcpbridge.errors import Unavailable
from mcpbridge.ports import UploadTarget

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

    def size(self, key: str) -> int | None:
        try:
            head = self._client.head_object(Bucket=self._bucket, Key=self.key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise Unavailable(f"S3 head failed ({_code(exc)})", code="blobs_unavailable") from exc
        except BotoCoreError as exc:
            raise Unavailable(f"S3 cannot be reached ({type(exc).__name__})", code="blobs_unavailable") from exc
        return int(head["ContentLength"])

    def copy(self, source: str, destination: str) -> None:
        # The managed copy: one CopyObject, or a multipart copy for objects over its 5 GB limit.
        origin: Any = {"Bucket": self._bucket, "Key": self.key(source)}
        self._call(lambda: self._client.copy(origin, self._bucket, self.key(destination)))

    def upload_target(self, key: str, *, content_type: str, max_bytes: int, expires_in: int) -> UploadTarget:
        """A presigned POST: S3 refuses a file over ``max_bytes`` or of another type, and any other key."""
        try:
            post = self._client.generate_presigned_post(
                Bucket=self._bucket,
                Key=self.key(key),
                Fields={"Content-Type": content_type},
                Conditions=[{"Content-Type": content_type}, ["content-length-range", 1, max_bytes]],
                ExpiresIn=expires_in,
            )
        except BotoCoreError as exc:  # no credentials to sign with
            raise Unavailable("cannot sign an upload now", code="blobs_unavailable") from exc
        return UploadTarget(url=str(post["url"]), fields={str(k): str(v) for k, v in post["fields"].items()})

    def download_url(self, key: str, *, expires_in: int, content_type: str) -> str:
        """A presigned GET of the blob, answered with ``content_type`` (``ports.BlobLinks``)."""
        try:
            return str(
                self._client.generate_presigned_url(
                    "get_object",
                    Params={"Bucket": self._bucket, "Key": self.key(key), "ResponseContentType": content_type},
                    ExpiresIn=expires_in,
                )
            )
        except BotoCoreError as exc:
            raise Unavailable("cannot sign a download now", code="blobs_unavailable") from exc

    def _call(self, call: Any) -> None:
        try:
            call()
        except ClientError as exc:
            raise Unavailable(f"S3 request failed ({_code(exc)})", code="blobs_unavailable") from exc
        except BotoCoreError as exc:
            raise Unavailable(f"S3 cannot be reached ({type(exc).__name__})", code="blobs_unavailable") from exc


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "Unknown"))
