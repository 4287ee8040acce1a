"""Make Debian bookworm's torch 1.13 importable on Python 3.11.

Import this module BEFORE torch:

    import torchshim  # noqa: F401  (must come first)
    import torch

Python 3.11 rejects dataclass fields whose default is an unhashable instance
("mutable default <class ...TensorProperties> for field tensor_properties is
not allowed: use default_factory"). torch 1.13's
torch.distributed._shard.sharded_tensor.metadata uses exactly such a default,
so importing torch.distributed._shard (and DCP) fails. We wrap
dataclasses._get_field so that such a default becomes a default_factory that
returns a copy of it, which is what newer torch does anyway. Nothing else in
dataclasses' behaviour changes. Harmless on other Python versions.
"""
import copy
import dataclasses

_orig_get_field = dataclasses._get_field


def _get_field(cls, a_name, a_type, *args, **kwargs):
    default = cls.__dict__.get(a_name, dataclasses.MISSING)
    if isinstance(default, dataclasses.Field):
        value = default.default
        if (value is not dataclasses.MISSING
                and type(value).__hash__ is None
                and not isinstance(value, (list, dict, set))):
            default.default = dataclasses.MISSING
            default.default_factory = lambda d=value: copy.copy(d)
    elif (default is not dataclasses.MISSING
            and type(default).__hash__ is None
            and not isinstance(default, (list, dict, set))):
        setattr(cls, a_name, dataclasses.field(
            default_factory=lambda d=default: copy.copy(d)))
    return _orig_get_field(cls, a_name, a_type, *args, **kwargs)


if not getattr(dataclasses._get_field, "_ckpt_torchshim", False):
    _get_field._ckpt_torchshim = True
    dataclasses._get_field = _get_field
