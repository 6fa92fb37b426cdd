"""Throughput with the view against without, designed to tell a 1%
difference from the host's noise (tests/gpu/view.sh, section 3).

  python3 abba.py DIR SECONDS [GPU_STEPS]

Four clients of one device serve blocks of GPU_STEPS small PyTorch steps
(view_probe.py serve ROLE DIR: batch 8 through six 2048x2048 fp16 layers,
synchronized each step; CPU-bound, the launch path being what a library in
the process could slow): two with the view library loaded ("with",
"with2") and two without ("without", "without2"). One block runs at a time, the
others waiting on their FIFOs, all pinned to one core by the caller, so
all see the same CPU, clocks and GPU; a block is ~20 ms, so the host's
drift (the GPU's clocks, other tenants) is alike for the blocks of a
round. Each round runs the three in one of the six orders, in turn (the
ABBA idea for three: each goes first, second and last alike). Rounds run
for SECONDS; the first tenth are dropped as warm-up.

Statistic: per round, the ratio of throughputs with / without (the two
without's time over the two with's), and, as the control, without /
without2; the median over the rounds of each, with its distribution-free
95% confidence interval (order statistics of the binomial: no assumption
of normal noise). The control's two clients differ only by being two
processes: its interval is how finely this host and method tell two
clients apart (noise and a process's own bias, from where its memory
landed, together), and must lie within 1% for the other to decide
anything (two processes a side halve such a bias in it); the with/without
interval's lower bound is what view.sh holds to 0.99.

Prints "key value" lines: rounds; view.median view.lo view.hi;
control.median control.lo control.hi; steps_per_s.ROLE (medians);
view.pair_spread_p10_p90.
"""
import itertools
import math
import os
import statistics
import sys
import time


def ci95(xs):
    """The median of xs and its 95% interval by order statistics: the k-th
    smallest and largest, k the largest with P(Binomial(n, 1/2) <= k - 1)
    <= 0.025 (the binomial's terms in logarithms: n may be thousands)."""
    s = sorted(xs)
    n = len(s)
    k, p = 0, 0.0
    for j in range(n):
        c = math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) - n * math.log(2))
        if p + c > 0.025:
            break
        p += c
        k = j + 1
    k = max(k, 1)
    return statistics.median(s), s[k - 1], s[n - k]


def main(argv):
    d, seconds = argv[1], float(argv[2])
    steps = int(argv[3]) if len(argv) > 3 else 100
    roles = ("with", "with2", "without", "without2")
    orders = list(itertools.permutations(roles))
    cmd = {r: open(os.path.join(d, f"cmd.{r}"), "w") for r in roles}
    res = {r: open(os.path.join(d, f"res.{r}")) for r in roles}

    def block(role):
        cmd[role].write(f"g {steps}\n")
        cmd[role].flush()
        line = res[role].readline()
        if not line:
            sys.exit(f"abba: the {role} client ended")
        return float(line)

    t = {r: [] for r in roles}
    end = time.monotonic() + seconds
    rnd = 0
    while time.monotonic() < end:
        for role in orders[rnd % len(orders)]:
            t[role].append(block(role))
        rnd += 1
    for r in roles:
        cmd[r].write("q\n")
        cmd[r].close()
    skip = rnd // 10
    print("rounds", rnd - skip)
    if rnd - skip < 60:
        print("error too few rounds")
        return
    w = [a + b for a, b in zip(t["with"][skip:], t["with2"][skip:])]
    wo = [a + b for a, b in zip(t["without"][skip:], t["without2"][skip:])]
    control = [a / b for a, b in zip(t["without"][skip:], t["without2"][skip:])]
    for name, xs in (("view", [b / a for a, b in zip(w, wo)]), ("control", control)):
        m, lo, hi = ci95(xs)
        print(f"{name}.median {m:.4f}")
        print(f"{name}.lo {lo:.4f}")
        print(f"{name}.hi {hi:.4f}")
    for r in roles:
        print(f"steps_per_s.{r} {steps / statistics.median(t[r][skip:]):.1f}")
    spread = statistics.quantiles([math.log(b / a) for a, b in zip(w, wo)], n=10)
    print(f"view.pair_spread_p10_p90 {math.exp(spread[0]):.3f} {math.exp(spread[-1]):.3f}")


if __name__ == "__main__":
    main(sys.argv)
