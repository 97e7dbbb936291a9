"""Runs gymnasium's env_checker over environment files through the adapter in python/spade_gym.py.

Usage: python3 envs/check_gym.py [FILE.py ...]   (default: every file under envs/seed)
Prints one line per file and "N passed, N failed"; exit code 1 on any failure.
"""
import glob
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))

from gymnasium.utils.env_checker import check_env  # noqa: E402

from spade_gym import make  # noqa: E402


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
    sys.exit(main(sys.argv[1:]))
