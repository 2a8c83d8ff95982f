"""Sums a SQUEEZEBERT_TEST_COMPILE_LOG file (tests/conftest.py) by test: `python tests/compile_log.py FILE [N]`."""
import collections
import sys


def main(path: str, top: int = 40) -> None:
    by_test = collections.defaultdict(lambda: collections.Counter())
    for line in open(path):
        test, event, _fun, secs = line.rstrip("\n").split("\t")
        by_test[test][event] += float(secs)
        by_test[test]["n_" + event] += 1
    total = collections.Counter()
    for c in by_test.values():
        total.update(c)
    print(f"all tests: trace {total['trace']:.0f} s, lower {total['lower']:.0f} s, compile {total['compile']:.0f} s "
          f"({total['n_compile']:.0f} compiles)")
    rows = sorted(by_test.items(), key=lambda kv: -(kv[1]["trace"] + kv[1]["lower"] + kv[1]["compile"]))
    for test, c in rows[:top]:
        print(f"{c['trace'] + c['lower'] + c['compile']:7.1f} s  compile {c['compile']:6.1f} s "
              f"({c['n_compile']:4.0f})  trace+lower {c['trace'] + c['lower']:5.1f} s  {test}")


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
