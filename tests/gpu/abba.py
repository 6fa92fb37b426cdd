"""Throughput with the view against without, where the unit of comparison
is the process (tests/gpu/view.sh, section 3; issue 46).

  python3 abba.py DIR SECONDS K [GPU_STEPS]

Why processes: two PyTorch processes doing the same work on the same core
differ by a fixed amount each (where the loader and the allocator put their
memory, ASLR, their MPS client slot): on the H200 two clients without the
view differed by 1.1% over 1,045 rounds whose own interval was +-0.2%
(docs/gpu-runs/gpu-view-2026-11-29.md), and the standard deviation between
12 processes of a kind was 0.5-2.3% (gpu-view-2026-11-29-b.md to -d.md). Rounds cannot average away a bias
that a process keeps for its life; only more processes can. So K fresh
processes a side are the samples, and the rounds only serve to know each
process's own speed well.

The clients: 2K serve clients of one device (view_probe.py serve ROLE DIR
CPU), K with the view library loaded (roles with.1 .. with.K) and K without
(without.1 .. without.K), started in parallel and pinned to one core only
once ready. Each answers "g N" on its FIFO DIR/cmd.ROLE with the seconds N
small PyTorch steps took on DIR/res.ROLE (batch 8 through six 2048x2048
fp16 layers, synchronized each step: CPU-bound, the launch path being what
a library in the process could slow). One block (~15 ms) runs at a time,
the others waiting on their FIFOs, so all see the same core, clocks and
GPU.

Rounds: a round asks each process for one block. The order is a random
sequence of the 2K processes (seeded, so a run can be repeated), rotated
by one place each round for 2K rounds (every process in every place once:
early and late alike), then a new random sequence (the neighbours change,
so no process always follows the same one). Rounds run for SECONDS; the
first tenth are dropped as warm-up (the caches of a newly pinned core).

Statistic:
  1. Per process, its relative block time: per round, the log of its
     block's time less the mean of the round's 2K logs (the host's drift,
     alike for all in a round ~0.3 s long, drops out); the median of that
     over the rounds (robust to a block that a host hiccup slowed). Its
     distribution-free 95% interval (order statistics) is how well the
     process's own speed is known: "process.precision" is the median over
     the processes of its half-width (0.6-0.7% on the H200's runs of
     11-29, docs/gpu-runs/gpu-view-2026-11-29-b.md to -d.md: a part of the
     spread between processes, not only their biases).
  2. Each process's log throughput is minus its relative block time. The
     ratio with / without is exp of the Hodges-Lehmann estimate of the
     shift between the two kinds' log throughputs: the median of the K*K
     differences, one process of each kind a pair.
  3. Its 95% interval: the distribution-free one that goes with it (Mann-
     Whitney: the c-th smallest and largest of those differences, c from
     the exact distribution of U for K and K). The spread between
     processes, each process's bias included, is what the interval is made
     of; the rounds cannot narrow it. It is a rank method because a
     process now and then runs several % slow for its whole life (on the
     H200, 11-29 10:00 UTC, one of twelve each side at -5% and -7%):
     Welch's t on the means, used first, widened to +-1.6% on those two
     and decided nothing; the ranks give them no more weight than any
     other process. Welch's ratio and interval are still printed
     (view.welch_*).
  4. The control: the interval's half-width, exp((hi - lo) / 2) - 1 in
     logs. At most 1% means the comparison can tell 1% on this host, the
     process-to-process spread counted; wider, and the comparison decides
     nothing (more processes, K, narrow it, about as 1/sqrt(K)). "spread.with" and
     "spread.without" are the standard deviations of the kinds' log
     throughputs (in %): the per-process bias the interval had to absorb.

ASLR stays on for every client: a process's layout is then a random draw,
its effect a random per-process bias the interval accounts for. With it
off (setarch -R) every process of a kind would share one layout, and the
preloaded library shifts the layout of the "with" kind: a fixed offset
between the kinds that no number of processes would average away and the
interval would not show.

Prints "key value" lines: processes K; rounds; view.ratio view.lo view.hi;
view.welch_ratio view.welch_lo view.welch_hi view.welch_df; control.halfwidth (relative, e.g. 0.0062 for 0.62%);
spread.with spread.without process.precision (in %);
steps_per_s.with steps_per_s.without (geometric means of the processes'
median block rates) and steps_per_s.ROLE for each process; on error one
"error REASON" line.
"""
import math
import os
import random
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


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b), by its continued
    fraction (modified Lentz), on the side of x where it converges fast."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - betainc(b, a, 1.0 - x)
    front = math.exp(a * math.log(x) + b * math.log1p(-x) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))) / a
    tiny = 1e-300
    f, c, d = 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1.0 - c * d) < 1e-14:
            break
    return front * (f - 1.0)


def t_cdf(t, df):
    """P(T <= t) for Student's t with df (not necessarily whole) degrees of freedom."""
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p, df):
    """The t with P(T <= t) = p, 0.5 <= p < 1, by bisection on t_cdf."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def welch(a, b):
    """mean(a) - mean(b), its standard error and Welch-Satterthwaite degrees
    of freedom (each sample at least two values)."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return statistics.fmean(a) - statistics.fmean(b), 0.0, float(len(a) + len(b) - 2)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    return statistics.fmean(a) - statistics.fmean(b), se, df


def mann_whitney_c(n, m):
    """The largest c with P(U <= c - 1) <= 0.025 for samples of n and m
    with no difference (U's exact distribution, by counting): the
    Hodges-Lehmann interval runs from the c-th smallest to the c-th
    largest of the n*m differences (1 when none is that rare)."""
    ways = _qbinom(n, m)
    total = sum(ways)
    c, cum = 0, 0
    for u, w in enumerate(ways):
        if (cum + w) / total > 0.025:
            break
        cum += w
        c = u + 1
    return max(c, 1)


def _qbinom(n, m):
    """Counts of U = 0..n*m over the C(n+m, n) orderings of two samples."""
    # prev[j][u]: over i - 1 values of the first and j of the second;
    # the largest of all is the first's (U grows by j) or the second's.
    prev = [[1] for _ in range(m + 1)]  # i = 0: U = 0 whatever j
    for i in range(1, n + 1):
        cur = [[1]]  # j = 0: U = 0
        for j in range(1, m + 1):
            a, b = prev[j], cur[j - 1]
            row = [0] * (i * j + 1)
            for u, w in enumerate(a):
                row[u + j] += w
            for u, w in enumerate(b):
                row[u] += w
            cur.append(row)
        prev = cur
    return prev[m]


def hodges_lehmann(a, b):
    """Hodges-Lehmann estimate of the shift a - b (the median of all
    pairwise differences) and its distribution-free 95% interval."""
    d = sorted(x - y for x in a for y in b)
    c = mann_whitney_c(len(a), len(b))
    return statistics.median(d), d[c - 1], d[len(d) - c]


def schedule(roles, rounds, seed):
    """The order of each round: a random sequence of roles, rotated one place
    a round for len(roles) rounds, then a fresh sequence."""
    rng = random.Random(seed)
    n = len(roles)
    seq = []
    for r in range(rounds):
        if r % n == 0:
            seq = list(roles)
            rng.shuffle(seq)
        k = r % n
        yield seq[k:] + seq[:k]


def relative_times(times):
    """times: role -> block seconds, one a round, every role the same rounds.
    Per role: (median over the rounds of log(its time) less the round's mean
    log, that median's 95% half-width)."""
    roles = list(times)
    n = len(times[roles[0]])
    g = [statistics.fmean(math.log(times[r][i]) for r in roles) for i in range(n)]
    out = {}
    for r in roles:
        m, lo, hi = ci95([math.log(t) - g[i] for i, t in enumerate(times[r])])
        out[r] = (m, (hi - lo) / 2)
    return out


def compare(times, with_roles, without_roles):
    """The with / without throughput ratio of the processes (Hodges-Lehmann),
    its 95% interval, Welch's beside it, and the numbers behind them (see
    the docstring)."""
    rel = relative_times({r: times[r] for r in list(with_roles) + list(without_roles)})
    yw = [-rel[r][0] for r in with_roles]
    yo = [-rel[r][0] for r in without_roles]
    est, lo, hi = hodges_lehmann(yw, yo)
    d, se, df = welch(yw, yo)
    t = t_quantile(0.975, df) if se > 0 else 0.0
    return {
        "ratio": math.exp(est),
        "lo": math.exp(lo),
        "hi": math.exp(hi),
        "halfwidth": math.exp((hi - lo) / 2) - 1,
        "welch_ratio": math.exp(d),
        "welch_lo": math.exp(d - t * se),
        "welch_hi": math.exp(d + t * se),
        "df": df,
        "spread_with": 100 * statistics.stdev(yw),
        "spread_without": 100 * statistics.stdev(yo),
        "precision": 100 * statistics.median(h for _, h in rel.values()),
    }


def main(argv):
    if len(argv) < 4:
        sys.exit("usage: abba.py DIR SECONDS K [GPU_STEPS]")
    d, seconds, k = argv[1], float(argv[2]), int(argv[3])
    steps = int(argv[4]) if len(argv) > 4 else 100
    if k < 2:
        sys.exit("abba: K must be at least 2 (a spread needs two processes a side)")
    with_roles = [f"with.{i}" for i in range(1, k + 1)]
    without_roles = [f"without.{i}" for i in range(1, k + 1)]
    roles = with_roles + without_roles
    cmd = {r: open(os.path.join(d, f"cmd.{r}"), "w") for r in roles}
    res = {r: open(os.path.join(d, f"res.{r}")) for r in roles}

    def block(role):
        try:
            cmd[role].write(f"g {steps}\n")
            cmd[role].flush()
        except BrokenPipeError:
            print(f"error the {role} client ended")
            sys.exit(1)
        line = res[role].readline()
        if not line:
            print(f"error the {role} client ended")
            sys.exit(1)
        return float(line)

    t = {r: [] for r in roles}
    end = time.monotonic() + seconds
    rnd = 0
    for order in schedule(roles, 1 << 30, 46):
        if time.monotonic() >= end:
            break
        for role in order:
            t[role].append(block(role))
        rnd += 1
    for r in roles:
        cmd[r].write("q\n")
        cmd[r].close()
    skip = rnd // 10
    print("processes", k)
    print("rounds", rnd - skip)
    if rnd - skip < 30:
        print("error too few rounds")
        return
    c = compare({r: t[r][skip:] for r in roles}, with_roles, without_roles)
    print(f"view.ratio {c['ratio']:.4f}")
    print(f"view.lo {c['lo']:.4f}")
    print(f"view.hi {c['hi']:.4f}")
    print(f"view.welch_ratio {c['welch_ratio']:.4f}")
    print(f"view.welch_lo {c['welch_lo']:.4f}")
    print(f"view.welch_hi {c['welch_hi']:.4f}")
    print(f"view.welch_df {c['df']:.1f}")
    print(f"control.halfwidth {c['halfwidth']:.4f}")
    print(f"spread.with {c['spread_with']:.3f}")
    print(f"spread.without {c['spread_without']:.3f}")
    print(f"process.precision {c['precision']:.3f}")
    rate = {r: steps / statistics.median(t[r][skip:]) for r in roles}
    for kind, rs in (("with", with_roles), ("without", without_roles)):
        print(f"steps_per_s.{kind} {statistics.geometric_mean(rate[r] for r in rs):.1f}")
    for r in roles:
        print(f"steps_per_s.{r} {rate[r]:.1f}")


if __name__ == "__main__":
    main(sys.argv)
