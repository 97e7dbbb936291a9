# The namespace every environment starts from: the common standard-library modules, numpy and
# math_verify's parse/verify are available without imports, as the reference prompts assume.
# Executed once per runner, before isolation; each loaded environment gets a copy of the result.
import bisect
import collections
import copy
import dataclasses
import decimal
import enum
import fractions
import functools
import heapq
import itertools
import json
import math
import operator
import random
import re
import statistics
import string
import textwrap
import typing
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
from fractions import Fraction
from typing import Any, Dict, List, Optional, Set, Tuple

import importlib as _importlib
import types as _types


class _LazyModule(_types.ModuleType):
    """A module imported on first attribute access: numpy costs ~0.2 s to import and most
    environments never touch it, while a runner is started for every environment."""

    def __init__(self, name):
        super().__init__(name)
        self.__dict__["_spade_target"] = None

    def __getattr__(self, attr):
        target = self.__dict__["_spade_target"]
        if target is None:
            target = _importlib.import_module(self.__name__)
            self.__dict__["_spade_target"] = target
        return getattr(target, attr)

    def __dir__(self):
        return dir(self.__getattr__("__dict__") and _importlib.import_module(self.__name__))


numpy = _LazyModule("numpy")
np = numpy


def parse(*args, **kwargs):
    """math_verify.parse, imported on first use (it pulls in sympy, which is slow to import)."""
    from math_verify import parse as _parse

    return _parse(*args, **kwargs)


def verify(*args, **kwargs):
    """math_verify.verify, imported on first use."""
    from math_verify import verify as _verify

    return _verify(*args, **kwargs)
