"""A light mutable record for the local Slurm's command path.

``dataclasses`` costs every command about 10 ms before it does anything (it imports ``inspect``,
and building a class runs generated code); a command only needs names, defaults and a dict form.
"""
from __future__ import annotations

from typing import Any


class Record:
    """Fields are the class's annotated attributes, their values the defaults (a list or dict default
    is copied for each instance). Built with keyword arguments only; an unknown one is a TypeError."""

    FIELDS: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.FIELDS = tuple(cls.__dict__.get("__annotations__", {}))

    def __init__(self, **values: Any) -> None:
        unknown = values.keys() - set(self.FIELDS)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown field(s): {', '.join(sorted(unknown))}")
        for name in self.FIELDS:
            setattr(self, name, values[name] if name in values else _copy(getattr(type(self), name)))

    def to_dict(self) -> dict[str, Any]:
        """Every field, lists and dicts copied (as ``dataclasses.asdict``)."""
        return {name: _copy(getattr(self, name)) for name in self.FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """A record from :meth:`to_dict`'s form; keys it does not know (an older version's) are ignored."""
        return cls(**{name: value for name, value in data.items() if name in cls.FIELDS})

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_dict() == other.to_dict()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"{type(self).__name__}({shown})"


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return [_copy(item) for item in value]
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    return value
