"""The field types and base classes every API body is built from: names, labels, amounts as
text, bounded strings, and the request (`_In`: unknown keys refused) and response (`_Out`:
unknown keys ignored) bases."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from gpupool.api import limits
from gpupool.units import MAX_QUOTA

NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
Name = Annotated[
    str,
    Field(
        min_length=1,
        max_length=limits.NAME_MAX,
        pattern=NAME_PATTERN,
        description="lower-case letters, digits, '.', '_' and '-'; starts and ends alphanumeric",
    ),
]
LabelKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=limits.LABEL_KEY_MAX,
        pattern=r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$",
        description="a node label key as Kubernetes writes them: name or prefix/name, like "
        "zone or nvidia.com/gpu.product",
    ),
]
LabelValue = Annotated[
    str,
    Field(
        max_length=limits.LABEL_VALUE_MAX,
        pattern=r"^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$",
        description="a node label value: letters, digits, '.', '_' and '-', at most 63",
    ),
]
NonNeg = Annotated[int, Field(ge=0, le=2**31 - 1)]
Pos = Annotated[int, Field(ge=1, le=2**31 - 1)]
QuotaAmount = Annotated[int, Field(ge=0, le=MAX_QUOTA)]
"""A quota's or limit's amount (millicores): 64-bit in the database, see `units.MAX_QUOTA`."""
Priority = Annotated[int, Field(ge=-1_000_000, le=1_000_000)]
Quantity = Annotated[str, Field(max_length=limits.QUANTITY_MAX)]
"""An amount written as text (`0.5`, `80G`); parsed by the field's own validator."""


_NoControl = AfterValidator(limits.plain_text)
ModelText = Annotated[str, Field(max_length=limits.MODEL_MAX), _NoControl]
NodeLabelValue = Annotated[str, Field(max_length=limits.LABEL_VALUE_MAX), _NoControl]
WorkingDir = Annotated[str, Field(max_length=limits.WORKING_DIR_MAX), _NoControl]
TokenLabel = Annotated[str, Field(max_length=limits.TOKEN_LABEL_MAX), _NoControl]
CommandArg = Annotated[
    str, Field(max_length=limits.COMMAND_ARG_MAX), AfterValidator(limits.script_text)
]
EnvKey = Annotated[
    str, Field(min_length=1, max_length=limits.ENV_KEY_MAX, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
]
EnvValue = Annotated[
    str, Field(max_length=limits.ENV_VALUE_MAX), AfterValidator(limits.script_text)
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")
