"""A stable fingerprint of a Python callable: what its code is and what it captured.

``FakeBackend(responder=fn)`` caches ``fn``'s answers under this fingerprint, so two different
responders never share a cache entry (a different body, different closure values, different
``functools.partial`` arguments or a different ``self``) while the same responder, defined the
same way, finds its answers again in a later process. Module-level globals a responder reads
are not part of it: pass ``name=`` to tell such variants apart.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import re
import types
from collections.abc import Callable
from typing import Any

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_DEPTH = 8


class Unstable(Exception):
    """A captured value has no description that survives the process (e.g. a lock)."""


def _code(code: types.CodeType, seen: set[int]) -> Any:
    consts = [_const(c, seen) for c in code.co_consts]
    return {"bytecode": code.co_code.hex(), "consts": consts, "names": list(code.co_names),
            "args": code.co_argcount, "kwonly": code.co_kwonlyargcount}


def _const(value: Any, seen: set[int]) -> Any:
    if isinstance(value, types.CodeType):
        return _code(value, seen)
    if isinstance(value, frozenset):  # iteration order depends on the hash seed
        return sorted(repr(v) for v in value)
    if isinstance(value, tuple):
        return [_const(v, seen) for v in value]
    return repr(value)


def _describe(value: Any, seen: set[int], depth: int) -> Any:
    if depth > _DEPTH:
        raise Unstable("nested too deeply")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if id(value) in seen:
        if isinstance(value, types.FunctionType):
            return {"recursive": value.__qualname__}
        raise Unstable("a value that contains itself")
    seen = seen | {id(value)}
    nested = depth + 1
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [_describe(v, seen, nested) for v in value]}
    if isinstance(value, (set, frozenset)):
        items = [json.dumps(_describe(v, seen, nested), sort_keys=True) for v in value]
        return {"set": sorted(items)}
    if isinstance(value, dict):
        pairs = [[_describe(k, seen, nested), _describe(v, seen, nested)] for k, v in value.items()]
        return {"dict": sorted(pairs, key=lambda p: json.dumps(p, sort_keys=True))}
    if isinstance(value, functools.partial):
        return {"partial": _describe(value.func, seen, nested),
                "args": _describe(value.args, seen, nested),
                "keywords": _describe(value.keywords, seen, nested)}
    if isinstance(value, types.MethodType):
        return {"method": _describe(value.__func__, seen, nested),
                "self": _describe(value.__self__, seen, nested)}
    if isinstance(value, types.FunctionType):
        cells = [_describe(_cell(c), seen, nested) for c in (value.__closure__ or ())]
        return {"function": f"{value.__module__}:{value.__qualname__}",
                "code": _code(value.__code__, seen),
                "defaults": _describe(value.__defaults__, seen, nested),
                "kwdefaults": _describe(value.__kwdefaults__, seen, nested),
                "closure": cells}
    if isinstance(value, (types.BuiltinFunctionType, type, types.ModuleType)):
        qualname = getattr(value, "__qualname__", value.__name__)
        return {"named": f"{getattr(value, '__module__', '')}:{qualname}"}
    if isinstance(value, enum.Enum):
        return {"enum": f"{type(value).__module__}:{type(value).__qualname__}.{value.name}"}
    kind = f"{type(value).__module__}:{type(value).__qualname__}"
    if dataclasses.is_dataclass(value):
        fields = {f.name: _describe(getattr(value, f.name), seen, nested)
                  for f in dataclasses.fields(value)}
        return {"dataclass": kind, "fields": fields}
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict):
        # a callable object: the code of its __call__ answers
        call = next((vars(k)["__call__"] for k in type(value).__mro__ if "__call__" in vars(k)), None)
        return {"object": kind, "state": _describe(state, seen, nested),
                "call": _describe(call, seen, nested) if isinstance(call, types.FunctionType) else None}
    text = repr(value)
    if _ADDRESS.search(text):
        raise Unstable(f"{kind} has no stable description")
    return {"repr": kind, "text": text}


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a closure variable not assigned yet
        return {"empty-cell": True}


def label(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a callable (of the wrapped function for a partial)."""
    inner = fn.func if isinstance(fn, functools.partial) else fn
    module = getattr(inner, "__module__", None) or type(inner).__module__
    qualname = getattr(inner, "__qualname__", None) or type(inner).__qualname__
    return f"{module}:{qualname}"


def fingerprint(fn: Callable[..., Any]) -> str:
    """16 hex digits from ``fn``'s code and captured values; ``Unstable`` when one of those
    cannot be described the same way in another process."""
    text = json.dumps(_describe(fn, set(), 0), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
