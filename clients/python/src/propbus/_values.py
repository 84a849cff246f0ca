"""D-Bus values as Python values: what a signature admits, and equality by wire bytes."""

from __future__ import annotations

import struct
from typing import Any, Optional

from dbus_fast import Variant

#: The Python types that stand for each one-letter D-Bus type, for typed properties.
_SCALARS = {
    "y": int, "n": int, "q": int, "i": int, "u": int, "x": int, "t": int,
    "b": bool, "d": float, "s": str, "o": str, "g": str,
}


def python_type_matches(py_type: Any, signature: str) -> bool:
    """Whether values of D-Bus type ``signature`` are instances of ``py_type``.

    ``int`` matches every integer type, ``str`` ``s``/``o``/``g``, ``bytes`` ``ay``, ``list``
    any other array, ``dict`` any dictionary, ``tuple`` any struct, ``Variant`` ``v``.
    """
    if py_type is Any or py_type is object:
        return True
    if py_type is bytes:
        return signature == "ay"
    if py_type is Variant:
        return signature == "v"
    if py_type is dict:
        return signature.startswith("a{")
    if py_type is list:
        return signature.startswith("a") and not signature.startswith("a{") and signature != "ay"
    if py_type is tuple:
        return signature.startswith("(")
    return _SCALARS.get(signature) is py_type


def variant(signature: str, value: Any) -> Variant:
    """``value`` as a Variant of ``signature``; a ValueError/TypeError says what did not fit.

    A struct may be given as a tuple (dbus-fast wants a list).
    """
    return Variant(signature, _listify(signature, value))


def _listify(signature: str, value: Any) -> Any:
    if signature.startswith("(") and isinstance(value, tuple):
        return list(value)
    return value


def same(a: Any, b: Any) -> bool:
    """Whether two decoded values are the same bytes on the wire.

    Floats compare by bit pattern (NaN is NaN, 0.0 is not -0.0); strings by code points, which
    is their UTF-8 bytes (no Unicode normalization); containers element by element, in order.
    """
    if isinstance(a, Variant) or isinstance(b, Variant):
        return (isinstance(a, Variant) and isinstance(b, Variant) and a.signature == b.signature
                and same(a.value, b.value))
    if isinstance(a, float) or isinstance(b, float):
        return (isinstance(a, float) and isinstance(b, float)
                and struct.pack("<d", a) == struct.pack("<d", b))
    if isinstance(a, (list, tuple)):
        return (isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b)))
    if isinstance(a, dict):
        return (isinstance(b, dict) and len(a) == len(b)
                and all(same(ka, kb) and same(va, vb) for (ka, va), (kb, vb) in zip(a.items(), b.items())))
    if type(a) is not type(b):
        return False
    return bool(a == b)


def unwrap(value: Any) -> Optional[Variant]:
    """The Variant a property's value travels in (``Get``'s reply and the signals' entries)."""
    return value if isinstance(value, Variant) else None
