"""Derives the hard settings of the reasoning-gym suites from the installed package's curricula.

Run with the project venv's Python (`.deps/venv/bin/python3 crates/eval/python/derive_rg_hard.py`);
it prints the JSON that `crates/eval/src/rg_hard.json` holds. The rule, per dataset of the
algorithmic, arithmetic, cognition and logic categories that has a curriculum:

* every curriculum attribute at its highest level L_top, ranges at their upper segment only
  (`RangeAttributeMode.UPPER_BOUND`);
* if that fails to generate (some top levels violate their own config checks), takes over 2 s
  per item, or writes questions longer than 4,000 characters (so that a model with a 4,096-token
  context can still read them), every attribute is capped at L_top - 1, then L_top - 2, ...;
* datasets that meet no level, or only one below half of L_top (`level < L_top // 2`: not hard),
  are left out and listed under "excluded" with the reason.

Generation is seeded, but the 2 s criterion depends on the machine's speed and load, so the
committed `rg_hard.json` (not a rerun) defines the suite; rerun this script only to revise it.
"""

import json
import signal
import sys
import time

from importlib.metadata import version

import reasoning_gym
from reasoning_gym.coaching.base_curriculum import DefaultCurriculumContext, RangeAttributeMode
from reasoning_gym.factory import CURRICULA, DATASETS, create_curriculum

CATEGORIES = ["algorithmic", "arithmetic", "cognition", "logic"]
MAX_QUESTION_CHARS = 4000
MAX_SECONDS_PER_ITEM = 2.0
PROBE_ITEMS = 8


class _Slow(Exception):
    pass


def _alarm(*_):
    raise _Slow()


def fields(curriculum, config):
    out = {}
    for attr in curriculum.attributes.values():
        names = [attr.field_name] if hasattr(attr, "field_name") else [attr.lower_field_name, attr.upper_field_name]
        for n in names:
            v = getattr(config, n)
            out[n] = list(v) if isinstance(v, tuple) else v
    return out


def probe(name, kwargs):
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(MAX_SECONDS_PER_ITEM * PROBE_ITEMS) + 1)
    try:
        start = time.time()
        ds = reasoning_gym.create_dataset(name, **kwargs, seed=1, size=PROBE_ITEMS)
        items = [ds[i] for i in range(PROBE_ITEMS)]
        per_item = (time.time() - start) / PROBE_ITEMS
    except _Slow:
        return f"over {MAX_SECONDS_PER_ITEM} s per item"
    except Exception as e:  # the curricula's own top levels can violate their configs' checks
        return f"{type(e).__name__}: {e}"
    finally:
        signal.alarm(0)
    if per_item > MAX_SECONDS_PER_ITEM:
        return f"{per_item:.1f} s per item"
    longest = max(len(x["question"]) for x in items)
    if longest > MAX_QUESTION_CHARS:
        return f"questions of {longest} characters"
    return None


def main():
    out = {"reasoning_gym": version("reasoning-gym"), "categories": {}, "excluded": {}}
    for category in CATEGORIES:
        chosen = {}
        for name, (cls, _) in sorted(DATASETS.items()):
            if cls.__module__.split(".")[1] != category:
                continue
            if name not in CURRICULA:
                out["excluded"][name] = "no curriculum to define its difficulty"
                continue
            curriculum = create_curriculum(name)
            top = max(len(a.levels) for a in curriculum.attributes.values()) - 1
            reason = None
            for cap in range(top, -1, -1):
                for a, attr in curriculum.attributes.items():
                    curriculum.set_attr_level(a, min(cap, len(attr.levels) - 1))
                ctx = DefaultCurriculumContext(mode=RangeAttributeMode.UPPER_BOUND)
                try:
                    kwargs = fields(curriculum, curriculum.generate_configuration(context=ctx))
                except Exception as e:
                    reason = f"{type(e).__name__}: {e}"
                    continue
                reason = probe(name, kwargs)
                if reason is None and cap < top // 2:
                    reason = f"only level {cap} of {top} fits the limits"
                    break
                if reason is None:
                    chosen[name] = {"level": cap, "top_level": top, "config": kwargs}
                    break
                print(f"{name} level {cap}: {reason}", file=sys.stderr)
            if name not in chosen:
                out["excluded"][name] = reason or "no level generates"
        out["categories"][category] = chosen
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
