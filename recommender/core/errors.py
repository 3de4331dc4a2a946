"""Errors that end a run with one clear line (the CLI prints ``error: <message>`` and exits non-zero)."""

from __future__ import annotations


class RightsizerError(Exception):
    """Base of every error we expect and explain; anything else is a bug."""


class SourceError(RightsizerError):
    """A data source (Prometheus, Kubernetes, a file) could not be read."""


class PrometheusError(SourceError):
    """Prometheus was unreachable, refused us, or rejected a query."""


class KubernetesError(SourceError):
    """The Kubernetes API was unreachable or refused us."""


class ConfigError(RightsizerError):
    """Settings or a catalogue/override file are invalid."""


class NoWorkloadsError(RightsizerError):
    """The selection holds no GPU workloads (e.g. an empty namespace)."""
