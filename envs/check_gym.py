"""Runs gymnasium's env_checker over environment files through the adapter in python/spade_gym.py.

Usage: python3 envs/check_gym.py [FILE.py ...]   (default: every file under envs/seed)
       python3 envs/check_gym.py --pool POOL     (a pool: each id through gymnasium.make("spade/<id>"))
Prints one line per file and "N passed, N failed"; exit code 1 on any failure.
"""
import glob
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))

from gymnasium.utils.env_checker import check_env  # noqa: E402

import gymnasium  # noqa: E402

from spade_gym import make, register_pool  # noqa: E402


def check(name, build):
    """One check_env over `build()`; returns True when it passed, printing the verdict."""
    try:
        with warnings.catch_warnings():
            # A warning is a finding too: fail on it rather than scroll past it.
            warnings.simplefilter("error")
            check_env(build(), skip_render_check=True)
        print(f"OK    {name}")
        return True
    except Exception as e:  # report every environment, not just the first failure
        print(f"FAIL  {name}: {type(e).__name__}: {e}")
        return False


def main_pool(path):
    ids, problems = register_pool(path)
    for p in problems:
        print(f"FAIL  {p}")
    # check_env warns about (and so, here, fails on) the wrappers make() adds; the environment
    # under them is the one registered.
    results = [check(f"spade/{i}", lambda i=i: gymnasium.make(f"spade/{i}").unwrapped) for i in ids]
    passed = sum(results)
    failed = len(results) - passed + len(problems)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not ids else 0


def main(files):
    if not files:
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seed")
        files = sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True))
    passed = failed = 0
    for path in files:
        with open(path) as f:
            source = f.read()
        try:
            with warnings.catch_warnings():
                # A warning is a finding too: fail on it rather than scroll past it.
                warnings.simplefilter("error")
                check_env(make(source), skip_render_check=True)
            passed += 1
            print(f"OK    {path}")
        except Exception as e:  # report every file, not just the first failure
            failed += 1
            print(f"FAIL  {path}: {type(e).__name__}: {e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pool"] and len(sys.argv) == 3:
        sys.exit(main_pool(sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
