"""Argument checks shared by formats and ops.

Every check raises before any device work, with a message that names the argument and says
what is wrong, so a bad call never reaches a kernel.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INDEX_DTYPES = (torch.int16, torch.int32, torch.int64)
ACTIVATIONS = ("none", "relu", "gelu")


def tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {value.layout}")
    return value


def ndim(name: str, value: torch.Tensor, allowed: Iterable[int]) -> None:
    allowed = tuple(allowed)
    if value.dim() not in allowed:
        want = " or ".join(str(a) for a in allowed)
        raise ValueError(f"{name} must have {want} dimensions, got shape {tuple(value.shape)}")


def float_dtype(name: str, value: torch.Tensor) -> None:
    if value.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {value.dtype}")


def index_dtype(name: str, value: torch.Tensor) -> None:
    if value.dtype not in INDEX_DTYPES:
        raise TypeError(f"{name} must be int16, int32 or int64, got {value.dtype}")


def same_dtype(names_values: dict[str, torch.Tensor]) -> None:
    dtypes = {n: v.dtype for n, v in names_values.items() if v is not None}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{n} is {d}" for n, d in dtypes.items())
        raise TypeError(f"operands must share one dtype: {listed}")


def same_device(names_values: dict[str, torch.Tensor]) -> None:
    devices = {n: v.device for n, v in names_values.items() if v is not None}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"operands must be on one device: {listed}")


def activation(value: object) -> str:
    name = "none" if value is None else value
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise ValueError(f"activation must be None, 'relu' or 'gelu', got {value!r}")
    return name


# NumPy's scalars (np.int64, np.float32, ...) register with the numbers ABCs, so a count or a
# sparsity read from an array passes; bools (np.bool_ registers with neither) do not.
def is_int(value: object) -> bool:
    """An integer (Python's or NumPy's), not a bool: int(value) is exact."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    """A real number (Python's or NumPy's), not a bool: float(value) takes it."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def positive_int(name: str, value: object, minimum: int = 1) -> int:
    """value as a Python int (a NumPy integer converted), at least `minimum`."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)  # type: ignore[call-overload]
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


SCALE_MOST = 3.4028234663852886e38  # float32's largest finite value


def softmax_scale(name: str, value: object) -> float:
    """finite_number, and finite in float32, where every backend applies it (a Python float
    past float32's range made every probability NaN). Scaled scores past 2.4e38 are the
    Triton kernel's documented limit (README's "Softmax range"), not refused here."""
    number = finite_number(name, value)
    if isinstance(number, float) and abs(number) > SCALE_MOST:
        raise ValueError(f"{name} must be finite in float32 (|scale| <= 3.4e38), got {value!r:.40}")
    return number


def finite_number(name: str, value: object) -> float:
    """value as a float: a real number (not a bool) that float() takes and keeps finite."""
    if not is_real(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    # x - x is 0 only for finite x (inf and NaN give NaN). Unlike math.isfinite this also
    # reads a symbolic float torch.compile traces (dynamic=True: a layer's float attribute,
    # 1 / sqrt(d)), where x - x is 0 as an expression: no guard, checked when it was concrete.
    if not number - number == 0:
        raise ValueError(f"{name} must be finite, got {value!r:.40}")
    return number


def has_data(name: str, value: torch.Tensor) -> None:
    """Data-dependent work (validation, nonzero search) needs values: not a meta tensor."""
    if value.device.type == "meta":
        raise ValueError(f"{name} is on the meta device and holds no data to read")


def device(name: str, value: object) -> torch.device:
    """torch.device(value), its error naming the argument (torch's names only the string)."""
    try:
        return torch.device(value)  # type: ignore[arg-type]
    except (RuntimeError, TypeError, ValueError) as error:
        raise ValueError(f"{name} must be a device (such as 'cpu' or 'cuda:0'): {error}") from None


def shape2d(name: str, value: object) -> tuple[int, int]:
    try:
        rows, cols = value  # type: ignore[misc]
        if isinstance(rows, bool) or isinstance(cols, bool):
            raise TypeError
        # operator.index accepts ints (Python, NumPy, 0-d integer tensors), never 6.5 or "6".
        rows, cols = operator.index(rows), operator.index(cols)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair of ints (rows, cols), got {value!r}") from None
    if rows < 0 or cols < 0:
        raise ValueError(f"{name} must not be negative, got {(rows, cols)}")
    if rows >= 2**62 or cols >= 2**62:  # (int64 index arithmetic must hold every product)
        raise ValueError(f"{name} must be below 2**62 in each dimension, got {(rows, cols)}")
    return rows, cols
