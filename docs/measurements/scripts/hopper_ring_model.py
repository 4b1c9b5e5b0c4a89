"""A random-interleaving model of the barrier protocol of solutions/gemm/hopper.cu's persistent ring (and of its
cluster-of-2 and ping-pong variants), on the CPU: python3 docs/measurements/scripts/hopper_ring_model.py (exit 1 on a
failure).

Processes: per block one producer thread and 8 consumer warps; TMA copies land as separate events
at random later times. mbarrier: pending count, tx-count, phase number; try_wait.parity(p) passes
iff the current (incomplete) phase's parity differs from p. Checks: no deadlock, every wgmma reads
the slot contents of the use it expects (each part of the slot), and no copy lands in a slot while
a warp's wgmma group still reads it. Ping-pong: warps 0-3 are one consumer warpgroup, 4-7 the other; each
computes every other tile of its block, and its main loop waits on a named barrier (NamedBar) the other arrives on
after issuing the previous tile's main loop.
"""
import random
import sys


class Bar:
    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _check(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self):
        self.pending -= 1
        assert self.pending >= 0
        self._check()

    def expect_tx(self, b):  # mbarrier.arrive.expect_tx
        self.tx += b
        self.arrive()

    def complete_tx(self, b):
        self.tx -= b
        self._check()

    def done(self, parity):
        return (self.phase & 1) != parity


class NamedBar:
    """bar.arrive / bar.sync on one hardware barrier, per warp: a generation completes when `count` warps arrived."""

    def __init__(self, count):
        self.count, self.pending, self.generation = count, count, 0

    def arrive(self):
        self.pending -= 1
        if self.pending == 0:
            self.generation += 1
            self.pending = self.count


def run(seed, stages, inflight, kt_n, tiles_per_block, cluster, end_release=True, running_count=True,
        early_release=False, one_cta_release=False, pingpong=False, turns=True, readers_per_use=None):
    rng = random.Random(seed)
    warps = 8
    parts = cluster  # B tile in `cluster` parts; A is part "A"
    if readers_per_use is None:  # the warps that read one use of a slot and release it
        readers_per_use = 4 if pingpong else warps
    full = [[Bar(1) for _ in range(stages)] for _ in range(cluster)]
    empty = [[Bar((1 if one_cta_release else cluster) * readers_per_use) for _ in range(stages)]
             for _ in range(cluster)]
    # Ping-pong: barrier g = "warpgroup g may start its main loop", 4 warps arrive and 4 wait.
    turn = [[NamedBar(8) for _ in range(2)] for _ in range(cluster)]
    content = [[{} for _ in range(stages)] for _ in range(cluster)]  # slot -> part -> use written
    readers = [[set() for _ in range(stages)] for _ in range(cluster)]  # (warp) reading the slot
    events = []  # pending copies: (cta, slot, part, use)

    def use_of(tile, kt):
        return tile * kt_n + kt if running_count else kt

    def producer(c):
        for tile in range(tiles_per_block):
            for kt in range(kt_n):
                u = use_of(tile, kt)
                s = u % stages
                while not empty[c][s].done(((u // stages) & 1) ^ 1):
                    yield "blocked"
                full[c][s].expect_tx(1 + parts)  # A + every part of B
                events.append((c, s, "A", (tile, kt)))
                for dst in range(cluster):  # this block's part of B, into every block of the cluster
                    events.append((dst, s, c, (tile, kt)))
                yield "ran"

    def consumer(c, w):
        issued = []  # uses whose wgmma group is in flight

        def release(u):
            for dst in ([c] if one_cta_release else range(cluster)):
                empty[dst][u % stages].arrive()

        group = w // 4
        for tile in range(tiles_per_block):
            if pingpong and tile % 2 != group:
                continue
            if pingpong and turns and tile > 0:  # bar.sync: arrive, then wait for the generation to complete
                bar = turn[c][group]
                generation = bar.generation
                bar.arrive()
                while bar.generation == generation:
                    yield "blocked"
            for kt in range(kt_n):
                u = use_of(tile, kt)
                s = u % stages
                while not full[c][s].done((u // stages) & 1):
                    yield "blocked"
                want = {"A": (tile, kt), **{p: (tile, kt) for p in range(parts)}}
                assert content[c][s] == want, f"block {c} warp {w} use {u}: slot {s} holds {content[c][s]}"
                readers[c][s].add(w)
                issued.append(u)
                yield "ran"
                while len(issued) > inflight:  # wgmma_wait<INFLIGHT>: the oldest groups complete
                    done = issued.pop(0)
                    readers[c][done % stages].discard(w)
                if early_release:
                    release(u)
                elif kt >= inflight:
                    release(u - inflight)
                yield "ran"
            if pingpong and turns and tile + 1 < tiles_per_block:  # bar.arrive: the other warpgroup's turn
                turn[c][1 - group].arrive()
                yield "ran"
            for done in issued:  # wgmma_wait<0>
                readers[c][done % stages].discard(w)
            issued.clear()
            if end_release:
                for r in range(min(inflight, kt_n), 0, -1):
                    release(use_of(tile, kt_n - r))
            yield "ran"  # epilogue

    procs = [producer(c) for c in range(cluster)] + [consumer(c, w) for c in range(cluster) for w in range(warps)]
    alive = list(range(len(procs)))
    steps = 0
    while alive or events:
        steps += 1
        if steps > 10_000_000:
            return "too long"
        progressed = False
        order = alive[:]
        rng.shuffle(order)
        # land some copies first, at random
        if events and rng.random() < 0.5:
            i = rng.randrange(len(events))
            c, s, part, use = events.pop(i)
            assert not readers[c][s], f"copy lands in block {c} slot {s} while warps {readers[c][s]} read it"
            content[c][s][part] = use
            full[c][s].complete_tx(1)
            continue
        for p in order:
            try:
                r = next(procs[p])
            except StopIteration:
                alive.remove(p)
                progressed = True
                break
            if r == "ran":
                progressed = True
                break
        if not progressed:
            if events:
                i = rng.randrange(len(events))
                c, s, part, use = events.pop(i)
                assert not readers[c][s], f"copy lands in block {c} slot {s} while warps {readers[c][s]} read it"
                content[c][s][part] = use
                full[c][s].complete_tx(1)
                continue
            return "DEADLOCK"
    return "ok"


def main():
    configs = [(st, inf, kt, tiles, cl, False) for st in (3, 4) for inf in (0, 1, 2) if inf < st
               for kt in (4, 5, 7, 64) for tiles in (1, 2, 4) for cl in (1, 2)]
    # Ping-pong (no clusters), with the ring depths it is built with (6, 7) and shallower ones; 3 and 5 tiles
    # per block leave one warpgroup a tile more than the other.
    configs += [(st, inf, kt, tiles, 1, True) for st in (2, 3, 4, 6, 7) for inf in (0, 1, 2) if inf < st
                for kt in (3, 5, 7, 64) for tiles in (1, 2, 3, 5)]
    bad = 0
    for st, inf, kt, tiles, cl, pp in configs:
        seeds = 3 if kt == 64 else 20
        for seed in range(seeds):
            try:
                got = run(seed, st, inf, kt, tiles, cl, pingpong=pp)
            except AssertionError as e:
                got = f"FAIL {e}"
            if got != "ok":
                bad += 1
                print(st, inf, kt, tiles, cl, pp, seed, got)
    print(f"{len(configs)} configurations, {bad} failures")
    # The model must catch the mistakes the kernel avoids, or its passing says nothing.
    mistakes = {
        "no release of a tile's last INFLIGHT uses": (4, 1, 64, 2, 1, {"end_release": False}),
        "the use count restarting at each tile (KT = 5)": (4, 1, 5, 3, 1, {"running_count": False}),
        "a slot released before its wgmma wait": (4, 1, 64, 2, 1, {"early_release": True, "end_release": False}),
        "cluster: each block's slots released by its own consumers only": (4, 1, 64, 2, 2, {"one_cta_release": True}),
        # Without the turns, warpgroup 1 waits for use KT while the slot's barrier is 2 phases behind: the parity
        # aliases and it reads the previous tile's data.
        "ping-pong without the named-barrier turns": (4, 1, 64, 4, 1, {"pingpong": True, "turns": False}),
        "ping-pong with each use's release counted for both warpgroups (8 warps)":
            (4, 1, 64, 4, 1, {"pingpong": True, "readers_per_use": 8}),
    }
    for name, (st, inf, kt, tiles, cl, kw) in mistakes.items():
        outs = set()
        for seed in range(20):
            try:
                outs.add(run(seed, st, inf, kt, tiles, cl, **kw))
            except AssertionError as e:
                outs.add("FAIL " + str(e).split(":")[0])
        caught = "ok" not in outs
        bad += not caught
        print(f"{name}: {'caught' if caught else 'NOT CAUGHT'} ({sorted(outs)[0]})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
