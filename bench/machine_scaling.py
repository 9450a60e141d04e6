"""How much faster this machine does two processes' CPU work than one's, at the time it is measured: what the
machine itself allows a 1 -> 2 workers ratio measured beside it.

Why: issue 14 asks for 1 -> 2 workers >= 1.8x end to end, and on the 2-core development VM the same code gave
1.68-2.04x from round to round. A VM's two vCPUs are not always two cores' worth (SMT siblings, a busy host), and
then no code reaches 2x. This measures that in the same run as the benchmark, with a fixed CPU workload (Python
bytecode, str and dict work, CRC32 and numpy over a few MB: the mix of an ingest unit) on two worker processes
that stay up: phases of one worker alone and of both at once alternate, ~0.5 s each, and each pair of adjacent
phases shares the machine's state of that second, which a few long runs did not (this VM's speed moves by tens
of % within minutes; three runs of 3 s alone and 3 s together gave 1.39x, 1.88x and 2.05x). `scaling` is
2 x (all phases alone) / (all phases both): two free cores give 2.0.

    .venv/bin/python bench/machine_scaling.py      # prints it; bench/ingest_scale_bench.py records it
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
import zlib

PAIRS = 30
ITERATIONS = 3  # workload iterations per phase: ~0.5 s on the development VM


def _work(iterations: int) -> None:
    import numpy as np

    words = [f"w{i % 5003}x{i % 17}" for i in range(200_000)]
    data = np.arange(1 << 20, dtype=np.uint64)
    for _ in range(iterations):
        counts: dict[str, int] = {}
        for w in words:
            counts[w] = counts.get(w, 0) + 1
        crc = sum(map(zlib.crc32, " ".join(words).encode().split(b" ")))
        data = (data * np.uint64(0x9E3779B1) + np.uint64(crc & 0xFFFF)) >> np.uint64(3)


def _worker(conn) -> None:
    _work(1)  # imports and first-touch pages outside the phases
    conn.send("ready")
    while (iterations := conn.recv()) is not None:
        _work(iterations)
        conn.send("done")


def _phase(conns: list, iterations: int) -> float:
    t0 = time.perf_counter()
    for c in conns:
        c.send(iterations)
    for c in conns:
        c.recv()
    return time.perf_counter() - t0


def machine_scaling(pairs: int = PAIRS, iterations: int = ITERATIONS) -> dict:
    ctx = mp.get_context("spawn")
    ends = [ctx.Pipe() for _ in range(2)]
    procs = [ctx.Process(target=_worker, args=(child,), daemon=True) for _, child in ends]
    for p in procs:
        p.start()
    conns = [parent for parent, _ in ends]
    try:
        for c in conns:
            c.recv()
        one, both = [], []
        for _ in range(pairs):
            one.append(_phase(conns[:1], iterations))
            both.append(_phase(conns, iterations))
    finally:
        for c in conns:
            c.send(None)
        for p in procs:
            p.join(timeout=10)
    q = statistics.quantiles([2 * a / b for a, b in zip(one, both)], n=4)
    return {"scaling": 2 * sum(one) / sum(both), "pair_quartiles": [q[0], q[2]], "one_s": sum(one),
            "both_s": sum(both), "pairs": pairs}


def describe(m: dict) -> str:
    return (f"this machine: two processes at once did {m['scaling']:.2f}x the work of one ({m['pairs']} alternating "
            f"phases of a fixed CPU workload, {m['one_s']:.1f} s alone and {m['both_s']:.1f} s both in all; the "
            f"pairs' quartiles {m['pair_quartiles'][0]:.2f}-{m['pair_quartiles'][1]:.2f}; 2.00 on two free cores)")


if __name__ == "__main__":
    print(describe(machine_scaling()))
