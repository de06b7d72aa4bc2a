"""The `backend` group: one section per backend, validated by the model its backend registers."""

from typing import Any

from pydantic import ConfigDict, model_validator

from tilesweep.errors import ConfigError
from tilesweep.settings.strict import Section, check

# Each backend's section model by its config key (backend.<name>), filled as backends register,
# with the backend's listing order (Backend.order).
_MODELS: dict[str, tuple[int, type[Section]]] = {}


def register_section(name: str, model: type[Section], order: int) -> None:
    """Register the model of section backend.<name>; it must say whether the backend is on."""
    if "enabled" not in model.model_fields:
        raise ValueError(f"backend.{name}: its model {model.__name__} has no `enabled` field")
    _MODELS[name] = (order, model)


def unregister_section(name: str) -> None:
    """Remove a section model (a toy backend's, in tests)."""
    _MODELS.pop(name, None)


class BackendSections(Section):
    """backend: each registered backend's section as its model, by attribute; no section: off."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _sections(cls, value: Any) -> Any:
        """Return each section validated by its backend's model; refuse an unknown backend."""
        if isinstance(value, BackendSections) or not isinstance(value, dict):
            return value  # a mapping is refused below in the messages' own words
        if not _MODELS:
            raise ConfigError("backend: no backend registered (import tilesweep.backends first)")
        out = {}
        for name, section in value.items():
            if name not in _MODELS:
                allowed = ", ".join(sorted(_MODELS, key=lambda n: (_MODELS[n][0], n)))
                raise ConfigError(f"backend.{name}: unknown backend; allowed: {allowed}")
            out[name] = check(_MODELS[name][1], section, f"backend.{name}")
        return out

    def section(self, name: str) -> Section | None:
        """Return backend.<name> as its model, or None where the config has no such section."""
        return (self.__pydantic_extra__ or {}).get(name)

    def enabled(self, name: str) -> bool:
        """Return whether backend.<name> is present and turned on."""
        found = self.section(name)
        return bool(found is not None and found.enabled)
