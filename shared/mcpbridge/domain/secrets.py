"""What a sealed secret is bound to, and how an unreadable one is reported."""

from __future__ import annotations

from dataclasses import dataclass

SEALED_PREFIX = "enc:v1:"


@dataclass(frozen=True)
class SecretContext:
    """Binds a ciphertext to the row it belongs to; opening it under any other context fails."""

    workspace_id: str
    kind: str
    item_id: str

    def as_dict(self) -> dict[str, str]:
        return {"workspace_id": self.workspace_id, "kind": self.kind, "item_id": self.item_id}

    def canonical(self) -> bytes:
        """A stable byte form, used as AES-GCM associated data."""
        return f"mcpbridge/v1\x1f{self.workspace_id}\x1f{self.kind}\x1f{self.item_id}".encode()


class SecretUnreadable(Exception):
    """A sealed value could not be opened: wrong context, tampered bytes, unknown format or lost key.

    The message never contains the value, sealed or not.
    """
