"""The base of the generated dataclasses: to and from the wire's JSON."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Tuple, Type, TypeVar

T = TypeVar("T", bound="Model")


class Model:
    """A message of the node's API. Subclasses (in `models`) list their fields in
    `_wire` as (attribute, wire name, converter)."""

    _wire: ClassVar[Tuple[Tuple[str, str, str], ...]] = ()
    extra: Dict[str, Any]

    def to_json(self) -> Dict[str, Any]:
        """The wire form: camelCase keys, unset (None) fields left out."""
        out: Dict[str, Any] = {}
        for attribute, wire, _ in self._wire:
            value = getattr(self, attribute)
            if value is not None:
                out[wire] = _to_json(value)
        return out

    @classmethod
    def from_json(cls: Type[T], data: Any) -> T:
        """Reads the wire form; keys this version does not know go to `extra`."""
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__} expects a JSON object, got {type(data).__name__}")
        rest = dict(data)
        known: Dict[str, Any] = {}
        for attribute, wire, converter in cls._wire:
            if wire in rest:
                known[attribute] = _from_json(rest.pop(wire), converter)
        return cls(**known, extra=rest)  # type: ignore[call-arg]


def _to_json(value: Any) -> Any:
    if isinstance(value, Model):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_to_json(item) for item in value]
    if isinstance(value, dict):
        return {key: _to_json(item) for key, item in value.items()}
    return value


def _from_json(value: Any, converter: str) -> Any:
    if not converter or value is None:
        return value
    from .models import MODELS  # the generated module imports this one

    kind, name = converter.split(":", 1)
    model = MODELS[name]
    if kind == "M" and isinstance(value, dict):
        return model.from_json(value)
    if kind == "L" and isinstance(value, list):
        return [model.from_json(item) if isinstance(item, dict) else item for item in value]
    if kind == "D" and isinstance(value, dict):
        return {key: model.from_json(item) if isinstance(item, dict) else item for key, item in value.items()}
    return value
