"""Report outputs: formatters that render a :class:`~recommender.core.plan.Plan` as text.

``get_formatter("html")(plan, snapshot)`` returns the report as one string; see
:mod:`recommender.outputs.registry` for registering more formats.
"""

from recommender.outputs.registry import (
    ENTRY_POINT_GROUP,
    PLAN_ONLY,
    DuplicateFormatterError,
    Formatter,
    formatter_names,
    get_companions,
    get_formatter,
    register_formatter,
    unregister_formatter,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLAN_ONLY",
    "DuplicateFormatterError",
    "Formatter",
    "formatter_names",
    "get_companions",
    "get_formatter",
    "register_formatter",
    "unregister_formatter",
]
