"""Exceptions raised by pyepp.

libepp reports failures as ``absl::Status`` values; the native module turns a failed status into
one of these classes through a single table (``python/src/shims.cc``):

=====================  ==========================  ===================================
Status code            Exception                   Also a
=====================  ==========================  ===================================
``INVALID_ARGUMENT``   :class:`ConfigError`        :class:`ValueError`
``NOT_FOUND``          :class:`NotFoundError`      :class:`KeyError`
``UNAVAILABLE``        :class:`UnavailableError`
anything else          :class:`EppError`
=====================  ==========================  ===================================

Every class derives from :class:`EppError`. The ``code`` attribute holds the status code's name
(``"INVALID_ARGUMENT"``, ``"DEADLINE_EXCEEDED"``, ...).
"""

from __future__ import annotations

__all__ = ["EppError", "ConfigError", "NotFoundError", "UnavailableError"]


class EppError(Exception):
    """Base class of every error pyepp raises."""

    code: str = "UNKNOWN"


class ConfigError(EppError, ValueError):
    """Invalid input: malformed metrics text, a bad option, spec or header."""

    code = "INVALID_ARGUMENT"


class NotFoundError(EppError, KeyError):
    """Something named does not exist: an unknown engine, or no engine's metrics in a scrape."""

    code = "NOT_FOUND"

    def __str__(self) -> str:
        # KeyError renders its argument with repr(); show the message as written.
        return Exception.__str__(self)


class UnavailableError(EppError):
    """A server could not be reached (connection refused, DNS, TLS)."""

    code = "UNAVAILABLE"
