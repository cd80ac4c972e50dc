"""Reading sealed secrets where an unreadable one means "not configured" rather than an error."""

from __future__ import annotations

import logging

from mcpbridge.domain.secrets import SecretContext, SecretUnreadable
from mcpbridge.ports import SecretBox

logger = logging.getLogger("mcpbridge.sealing")


def open_secret_or_none(box: SecretBox, sealed: str | None, context: SecretContext) -> str | None:
    """The plaintext, or None when nothing is stored or the stored value cannot be opened.

    An unreadable value (tampered, moved to another row, sealed under a lost key) is logged and treated as absent
    so the owner can set it again. ``errors.Unavailable`` propagates: a KMS outage is not a missing secret.
    """
    if not sealed:
        return None
    try:
        return box.open(sealed, context)
    except SecretUnreadable:
        # Kind and item id locate the row; the workspace id, the sealed text and the reason stay out of logs.
        logger.warning("sealed secret for %s %s is unreadable; treating it as not set", context.kind, context.item_id)
        return None
