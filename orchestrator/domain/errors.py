"""The refusals of the domain rules, one hierarchy for the whole service. Each carries a stable
machine-readable `code`; its kind (the class) decides how the API answers (`api/errors.py`
maps kinds to HTTP statuses), never the code that raises it."""

from __future__ import annotations


class DomainError(Exception):
    """A request the domain rules refuse; `code` is the stable machine-readable name."""

    code = "domain_error"


class NotFound(DomainError):
    """A request names something (a task, a blob) that does not exist."""

    code = "not_found"


class Unprocessable(DomainError):
    """A well-formed request whose content the rules cannot use (a report that contradicts
    its task's plan)."""

    code = "unprocessable"


class Refused(DomainError):
    """A refusal with its own stable code; its kind (the subclass) decides how the API answers.
    A plain `Refused` is a conflict with the current state."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Missing(Refused, NotFound):
    """The thing a request names (a node, a job, a probe) does not exist."""


class Forbidden(Refused):
    """The thing exists but belongs to another principal (a node, a job, an escrow)."""


class Invalid(Refused, Unprocessable):
    """A value the rules cannot take (a sample out of range, an answer that does not parse)."""


class TooLarge(Invalid):
    """A body over the configured size limit."""


class OverQuota(Refused):
    """More than the principal's (or the service's) allowance; it frees up within
    `retry_after_s`."""

    def __init__(self, code: str, message: str, *, retry_after_s: float) -> None:
        super().__init__(code, message)
        self.retry_after_s = retry_after_s


class Unfunded(Refused):
    """The job's escrow on chain is missing, not funded, or empty."""


class Unavailable(Refused):
    """A part the request needs (the database) does not answer; retry later."""


class InvalidTransition(DomainError):
    code = "invalid_transition"

    def __init__(self, kind: str, current: str, target: str) -> None:
        super().__init__(f"{kind} cannot move from '{current}' to '{target}'")
        self.kind = kind
        self.current = current
        self.target = target
