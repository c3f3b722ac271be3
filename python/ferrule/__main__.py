"""``ferrule`` / ``python -m ferrule``: the command line.

Until the HTTP server lands, the one command is ``demo``: it hands a few thousand coroutines of
each kind to the bridge and prints what the bridge counted and how long a relay took.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from ferrule._bridge import drive
from ferrule._ferrule import Bridge


async def _completes_inline() -> int:
    return 1


async def _awaits_asyncio_future() -> int:
    await asyncio.sleep(0)
    return 1


async def _creates_a_task() -> int:
    return await asyncio.get_running_loop().create_task(_completes_inline())


KINDS = {
    "inline": _completes_inline,
    "sleep0": _awaits_asyncio_future,
    "task": _creates_a_task,
}


async def _demo(bridge: Bridge, count: int) -> None:
    print(f"bridge mode: {bridge.mode}, budget {bridge.budget}")
    for name, factory in KINDS.items():
        bridge.reset_counters()
        started = time.perf_counter()
        results = await asyncio.gather(*(bridge.spawn(factory()) for _ in range(count)))
        elapsed = time.perf_counter() - started
        assert sum(results) == count
        counters = bridge.counters()
        per = counters["gil_acquisitions"] / count
        print(
            f"{name:>7}: {count} coroutines in {elapsed * 1000:.1f} ms "
            f"({elapsed / count * 1e6:.2f} us each), {per:.2f} GIL acquisitions each, "
            f"collisions {counters['collisions']}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ferrule", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="drive coroutines through the bridge and report")
    demo.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="asyncio")
    demo.add_argument("--count", type=int, default=5000)
    args = parser.parse_args(argv)
    drive(lambda bridge: _demo(bridge, args.count), loop=args.loop)


if __name__ == "__main__":
    main()
