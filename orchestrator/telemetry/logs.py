"""Structured (JSON lines) logs for the service. Secrets never reach a log call: tokens,
signatures and keys are not passed to loggers anywhere; as a second line of defence, any
extra field whose name looks secret is masked."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

SECRET_HINTS = ("key", "secret", "token", "signature", "password", "authorization")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3), "level": record.levelname.lower(),
            "logger": record.name, "msg": record.getMessage()}
        for name, value in vars(record).items():
            if name not in _STANDARD:
                secret = any(hint in name.lower() for hint in SECRET_HINTS)
                entry[name] = "***" if secret else value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: int = logging.INFO) -> None:
    """JSON lines on stderr for the orchestrator's loggers (uvicorn keeps its own)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("orchestrator")
    logger.handlers = [handler]
    logger.setLevel(level)
    logger.propagate = False
    logging.Formatter.converter = time.gmtime
